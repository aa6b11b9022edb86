"""Train a BPE or WordPiece tokenizer on a corpus, for models trained from scratch.

The result is a plain `PreTrainedTokenizerFast` that `AutoTokenizer.from_pretrained(dir)` loads
back. It carries textebm's six special tokens (ids 0-5, in this order):

    <pad> <unk> <s> (bos) </s> (eos) <mask> <sep>

and adds none of them when encoding: `textebm.models.lm_format` lays out `[bos] x [eos]`, infill
contexts etc. itself, so `tokenizer(text).input_ids` is the text alone.

- `bpe`: byte-level BPE as in GPT-2 (no unknown characters; `decode(encode(x)) == x` exactly,
  up to NFC normalisation and lowercasing).
- `wordpiece`: BERT-style WordPiece (splits on whitespace and punctuation; decoding re-joins words
  with single spaces and removes the space before punctuation).

Training is deterministic: the same texts in the same order give the same tokenizer.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from textebm.errors import InputError, TextebmError
from textebm.io import iter_jsonl

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
    from transformers import PreTrainedTokenizerFast

    if kind not in KINDS:
        raise TextebmError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    least = len(SPECIAL_TOKENS) + (256 if kind == "bpe" else 1)
    if vocab_size < least:
        raise TextebmError(f"--vocab-size {vocab_size} is too small for {kind}: it needs at least {least}"
                           + (" (256 bytes + 6 special tokens)" if kind == "bpe" else ""))
    counted = _Counter(texts)
    train = _train_bpe if kind == "bpe" else _train_wordpiece
    tok = train(counted, vocab_size, lowercase)
    if counted.n == 0:
        raise TextebmError("no texts to train the tokenizer on")
    # No post-processor: encoding adds no bos/eos; textebm.models.lm_format places them itself.
    tok.post_processor = None
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    log.info("trained a %s tokenizer: %d entries from %d texts", kind, len(fast), counted.n)
    return fast


def _train_bpe(texts: Iterable[str], vocab_size: int, lowercase: bool):
    """Byte-level BPE as in GPT-2; its trainer sorts its alphabet, so it is deterministic."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = (normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
                      if lowercase else normalizers.NFC())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


_PRIVATE_USE = 0xF0000  # planes 15-16: room for 2 * 32767 coded characters
_MAX_CHARS = 32767


def _train_wordpiece(texts: Iterable[str], vocab_size: int, lowercase: bool):
    """A WordPiece tokenizer whose training does not depend on hash order.

    `tokenizers`' own WordPieceTrainer numbers the `##c` continuation pieces in hash-map order, so
    ties between merges of equal count fall differently from run to run. Here each character is
    written as one private-use code point, one code for a word-initial and another for a
    continuing occurrence; a plain BPE trainer (which sorts its alphabet) learns merges over
    these codes; decoding the codes back (continuing ones with a `##` prefix) gives the WordPiece
    vocabulary, as WordPieceTrainer does internally.
    """
    from collections import Counter

    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                            strip_accents=None, lowercase=lowercase)
    pre = pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for text in texts:
        words.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    chars: Counter[str] = Counter()
    for word, n in words.items():
        for c in word:
            chars[c] += n
    kept = sorted(c for c, _ in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))[:_MAX_CHARS])
    code = {c: i for i, c in enumerate(kept)}

    def encode(word: str) -> str:
        return "".join(chr(_PRIVATE_USE + 2 * code[c] + (i > 0)) for i, c in enumerate(word))

    def coded_words() -> Iterator[str]:
        for word in sorted(words):
            if all(c in code for c in word):
                yield from itertools.repeat(encode(word), words[word])

    specials = list(SPECIAL_TOKENS.values())
    bpe = Tokenizer(models.BPE())
    bpe.train_from_iterator(coded_words(), trainer=trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False))

    def decode(piece: str) -> str:
        idx = [ord(ch) - _PRIVATE_USE for ch in piece]
        text = "".join(kept[i // 2] for i in idx)
        return "##" + text if idx[0] % 2 else text

    vocab = {p if p in specials else decode(p): i for p, i in bpe.get_vocab().items()}
    tok = Tokenizer(models.WordPiece(vocab, unk_token=SPECIAL_TOKENS["unk_token"], continuing_subword_prefix="##"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok


class _Counter:
    """Pass texts through, counting them (the trainer consumes the iterator)."""

    def __init__(self, texts: Iterable[str]):
        self.texts = texts
        self.n = 0

    def __iter__(self) -> Iterator[str]:
        for text in self.texts:
            self.n += 1
            yield text


def same_vocab(a, b) -> bool:
    """Whether two tokenizers map the same tokens to the same ids (then ids of one are ids of the other)."""
    return a is b or a.get_vocab() == b.get_vocab()


def iter_texts(path: str | Path) -> Iterator[str]:
    """The `text` and (if present) `text_pair` fields of each row of a JSONL file, in file order."""

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


def train_jsonl(path: str | Path | list, vocab_size: int, kind: str = "bpe",
                lowercase: bool = False) -> "PreTrainedTokenizerFast":
    """`train_tokenizer` on the texts of one JSONL file or of several, in order (see `iter_texts`)."""
    paths = path if isinstance(path, (list, tuple)) else [path]
    texts = itertools.chain.from_iterable(iter_texts(p) for p in paths)
    first = next(texts, None)
    if first is None:  # named by file: a split of no rows (a tagging dataset of tokens only has none)
        raise InputError(", ".join(map(str, paths)), "no texts to train the tokenizer on (no rows)")
    return train_tokenizer(itertools.chain([first], texts), vocab_size, kind, lowercase)
