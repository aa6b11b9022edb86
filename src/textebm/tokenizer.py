"""Train a BPE or WordPiece tokenizer on a corpus, for models trained from scratch.

The result is a plain `PreTrainedTokenizerFast` that `AutoTokenizer.from_pretrained(dir)` loads
back. It carries textebm's six special tokens (ids 0-5, in this order):

    <pad> <unk> <s> (bos) </s> (eos) <mask> <sep>

and adds none of them when encoding: `textebm.lm.format` lays out `[bos] x [eos]`, infill
contexts etc. itself, so `tokenizer(text).input_ids` is the text alone.

- `bpe`: byte-level BPE as in GPT-2 (no unknown characters; `decode(encode(x)) == x` exactly,
  up to NFC normalisation and lowercasing).
- `wordpiece`: BERT-style WordPiece (splits on whitespace and punctuation; decoding re-joins words
  with single spaces and removes the space before punctuation).

Training is deterministic: the same texts in the same order give the same tokenizer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from textebm.errors import InputError, TextebmError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger(__name__)

KINDS = ("bpe", "wordpiece")
SPECIAL_TOKENS = {
    "pad_token": "<pad>",
    "unk_token": "<unk>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "mask_token": "<mask>",
    "sep_token": "<sep>",
}


def train_tokenizer(texts: Iterable[str], vocab_size: int, kind: str = "bpe",
                    lowercase: bool = False) -> "PreTrainedTokenizerFast":
    """Train a `kind` tokenizer with at most `vocab_size` entries (special tokens included)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(SPECIAL_TOKENS.values())
    if kind == "bpe":
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        if vocab_size < len(specials) + len(alphabet):
            raise TextebmError(f"--vocab-size {vocab_size} is too small for byte-level BPE: it needs "
                               f"at least {len(specials) + len(alphabet)} (256 bytes + 6 special tokens)")
        tok = Tokenizer(models.BPE())
        tok.normalizer = _normalizer(normalizers.NFC(), lowercase)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                      initial_alphabet=alphabet, show_progress=False)
    elif kind == "wordpiece":
        if vocab_size <= len(specials):
            raise TextebmError(f"--vocab-size {vocab_size} leaves no room beside the {len(specials)} special tokens")
        tok = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk_token"], continuing_subword_prefix="##"))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=None, lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials,
                                            continuing_subword_prefix="##", show_progress=False)
    else:
        raise TextebmError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")

    counted = _Counter(texts)
    tok.train_from_iterator(counted, trainer=trainer)
    if counted.n == 0:
        raise TextebmError("no texts to train the tokenizer on")
    # No post-processor: encoding adds no bos/eos; textebm.lm.format places them itself.
    tok.post_processor = None
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    for name in ("add_bos_token", "add_eos_token"):
        if hasattr(fast, name):
            setattr(fast, name, False)
    log.info("trained a %s tokenizer: %d entries from %d texts", kind, len(fast), counted.n)
    return fast


def _normalizer(base, lowercase: bool):
    from tokenizers import normalizers

    return normalizers.Sequence([base, normalizers.Lowercase()]) if lowercase else base


class _Counter:
    """Pass texts through, counting them (the trainer consumes the iterator)."""

    def __init__(self, texts: Iterable[str]):
        self.texts = texts
        self.n = 0

    def __iter__(self) -> Iterator[str]:
        for text in self.texts:
            self.n += 1
            yield text


def iter_texts(path: str | Path) -> Iterator[str]:
    """The `text` and (if present) `text_pair` fields of each row of a JSONL file, in file order."""
    from textebm.io import iter_jsonl

    for lineno, row in iter_jsonl(path):
        for field in ("text", "text_pair"):
            value = row.get(field)
            if value is None:
                if field == "text":
                    raise InputError(path, "missing field 'text'", lineno)
                continue
            if not isinstance(value, str):
                raise InputError(path, f"field {field!r} should be a string, got {type(value).__name__}", lineno)
            yield value


def train_jsonl(path: str | Path, vocab_size: int, kind: str = "bpe",
                lowercase: bool = False) -> "PreTrainedTokenizerFast":
    """`train_tokenizer` on the texts of a JSONL file (see `iter_texts`)."""
    return train_tokenizer(iter_texts(path), vocab_size, kind, lowercase)
