"""A tagger's folder loaded whole, and sentences tagged with it.

    tagger, vocab, path = load_tagging_model("runs/pos")      # RUN or RUN/model
    tags = tag_sentences(tagger, vocab, rows, batch_size=64)  # a tag list per row (Viterbi)

The folder holds `tagger.json` (the spec: sizes and the tag set), `model.safetensors` and
`words.json` (the word vocabulary, `tagging/vocab.py`); a folder without `words.json`, or whose
vocabulary does not fit the spec, is refused with an error naming the file (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from textebm.data.batching import right_pad
from textebm.errors import InputError, TextebmError
from textebm.inference import batched
from textebm.models.crf import SPEC_FILE, BiLSTMCRF
from textebm.models.load import TAGGER, find_model, load_tagger
from textebm.tagging.vocab import VOCAB_FILE, WordVocab, load_vocab


TRF_FILE = "trf.safetensors"  # beside a stage-1 tagger: the TRF head and the noise LM


def load_tagging_model(model: str | Path, device: str | torch.device | None = None,
                       option: str = "--model") -> tuple[BiLSTMCRF, WordVocab, Path]:
    """(tagger in eval mode, its vocabulary, its folder), checked before any weights are read. The
    tagger of pre-training's stage 1 (with its TRF_FILE) is refused: its output layer and A were
    never trained, only its encoder is."""
    path = find_model(model, TAGGER, option, ids=False).path
    if (path / TRF_FILE).is_file():
        raise TextebmError(f"{option} {model}: the first stage of pre-training (a TRF language model: its encoder "
                           "is trained, its tag output layer and transitions are not), not a trained tagger; give the "
                           "run folder of `tag train --method pretrain` (RUN, not RUN/pretrain)")
    vocab = load_vocab(path)
    tagger = load_tagger(path, dtype=torch.float32, device=device, option=option)
    if len(vocab) != tagger.spec.vocab_size or tagger.spec.pad_id != vocab.pad_id:
        raise InputError(path / VOCAB_FILE, f"{len(vocab)} words (padding id {vocab.pad_id}), but {SPEC_FILE} "
                                            f"says vocab_size {tagger.spec.vocab_size} (pad_id "
                                            f"{tagger.spec.pad_id}): not this tagger's vocabulary")
    if len(vocab.chars) != tagger.spec.char_vocab:
        raise InputError(path / VOCAB_FILE, f"{len(vocab.chars)} characters, but {SPEC_FILE} says char_vocab "
                                            f"{tagger.spec.char_vocab}: not this tagger's vocabulary")
    return tagger, vocab, path


def pad_chars(sentences: Sequence[Sequence[list[int]]], T: int) -> torch.Tensor:
    """Each sentence's per-token character ids -> (B, T, C), 0 past each word's and sentence's end
    (C the longest word)."""
    C = max((len(w) for s in sentences for w in s), default=1)
    out = torch.zeros(len(sentences), T, C, dtype=torch.long)  # (B, T, C)
    for b, words in enumerate(sentences):
        for t, w in enumerate(words):
            out[b, t, :len(w)] = torch.tensor(w, dtype=torch.long)
    return out


def tag_batch(items: Sequence[tuple], pad_id: int) -> dict[str, torch.Tensor]:
    """(word ids, tag ids[, character ids per token]) items -> {"input_ids", "tags", "mask"}, each
    (B, T), right-padded (tags -1 and mask 0 past each sentence's end), and "chars" (B, T, C) when
    the items carry characters (a tagger with a character CNN)."""
    ids, mask = right_pad([it[0] for it in items], pad_id)  # (B, T), (B, T)
    tags, _ = right_pad([it[1] for it in items], -1)  # (B, T)
    batch = {"input_ids": ids, "tags": tags, "mask": mask.bool()}
    if items and len(items[0]) > 2:
        batch["chars"] = pad_chars([it[2] for it in items], ids.shape[1])  # (B, T, C)
    return batch


@torch.no_grad()
def tag_sentences(tagger: BiLSTMCRF, vocab: WordVocab, rows: Sequence[dict[str, Any]], batch_size: int,
                  progress: bool = False) -> list[list[str]]:
    """The Viterbi tags of each row's `tokens` (unknown words -> the unknown id), in input
    order, decoded in length-sorted batches."""
    tagger.eval()
    device = next(tagger.parameters()).device
    names = tagger.spec.tags

    spelt = bool(tagger.spec.char_vocab)

    def decode(batch: list[tuple[list[int], list[list[int]]]]) -> list[list[str]]:
        ids, mask = right_pad([w for w, _ in batch], vocab.pad_id)  # (B, T)
        chars = pad_chars([c for _, c in batch], ids.shape[1]).to(device) if spelt else None  # (B, T, C)
        best = tagger.decode(ids.to(device), mask.bool().to(device), chars=chars).cpu()  # (B, T), -1 past the end
        return [[names[k] for k in best[b, :len(w)].tolist()] for b, (w, _) in enumerate(batch)]

    encoded = [(vocab.encode(row["tokens"]), vocab.encode_chars(row["tokens"]) if spelt else []) for row in rows]
    return batched(encoded, [len(w) for w, _ in encoded], batch_size, decode, progress=progress,
                   desc="tag", unit="sentence")
