"""Examples and noise for classifier training: label vocabulary, tokenisation, noise pairing.

Noise for NCE comes from `textebm lm sample --mode infill` on the same training split: every
noise line names its `source_id`. Data example i is paired, in epoch e, with K of its own noise
samples (indices e*K .. e*K+K-1, cycling), so a batch's noise has about the lengths of its data
(infill keeps most of the sentence) and is padded on its own ("bucket noise by its own length").
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from textebm.errors import InputError, TextebmError


@dataclass
class Encoded:
    ids: list[int]
    type_ids: list[int] | None
    label: int  # -1 when unlabelled
    noise: list[int]  # indices into the encoded noise list (empty without NCE)
    index: int


def label_vocab(rows: list[dict], path: str) -> list[str]:
    labels = sorted({str(r["label"]) for r in rows if r.get("label") is not None})
    missing = [r.get("id", i) for i, r in enumerate(rows) if r.get("label") is None]
    if missing:
        raise InputError(path, f"{len(missing)} training examples have no label (first: {missing[0]})")
    if len(labels) < 2:
        raise InputError(path, f"classification needs at least 2 labels, found {labels}")
    return labels


def encode(tokenizer, rows: list[dict], max_len: int) -> list[tuple[list[int], list[int] | None]]:
    texts = [r["text"] for r in rows]
    pairs = [r.get("text_pair") for r in rows]
    kw = dict(truncation=True, max_length=max_len)
    if any(p is not None for p in pairs):
        if not all(p is not None for p in pairs):
            raise TextebmError("some examples have text_pair and some do not; a split must be consistent")
        enc = tokenizer(texts, pairs, **kw)
    else:
        enc = tokenizer(texts, **kw)
    type_ids = enc.get("token_type_ids")
    return [(ids, type_ids[i] if type_ids is not None else None) for i, ids in enumerate(enc["input_ids"])]


def encode_examples(tokenizer, rows: list[dict], labels: list[str], max_len: int) -> list[Encoded]:
    index = {l: i for i, l in enumerate(labels)}
    out = []
    for i, ((ids, tt), r) in enumerate(zip(encode(tokenizer, rows, max_len), rows)):
        lab = r.get("label")
        out.append(Encoded(ids, tt, index.get(str(lab), -1) if lab is not None else -1, [], i))
    return out


def attach_noise(examples: list[Encoded], rows: list[dict], noise_rows: list[dict], noise_path: str,
                 ) -> None:
    """Link each example to the indices of its noise samples (by `source_id`)."""
    by_source: dict[str, list[int]] = defaultdict(list)
    for j, n in enumerate(noise_rows):
        if "source_id" not in n:
            raise InputError(noise_path, "noise line has no source_id (make noise with `textebm lm sample`)", j + 1)
        by_source[str(n["source_id"])].append(j)
    lacking = []
    for ex, r in zip(examples, rows):
        ex.noise = by_source.get(str(r.get("id")), [])
        if not ex.noise:
            lacking.append(r.get("id"))
    if lacking:
        raise InputError(noise_path, f"no noise samples for {len(lacking)} of {len(examples)} training examples "
                         f"(first: {lacking[0]}); sample noise from the same split with `textebm lm sample "
                         "--mode infill --split train`")


def pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)  # (B, T)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


def batch_inputs(items: list[tuple[list[int], list[int] | None]], pad_id: int) -> dict:
    ids, mask = pad([i for i, _ in items], pad_id)
    out = {"input_ids": ids, "attention_mask": mask}
    if items and items[0][1] is not None:
        out["token_type_ids"], _ = pad([t for _, t in items], 0)
    return out


class Collator:
    """Batch of examples -> data inputs, labels and (with NCE) K noise inputs per example."""

    def __init__(self, pad_id: int, noise: list[tuple[list[int], list[int] | None]] | None, k: int):
        self.pad_id, self.noise, self.k = pad_id, noise, k
        self.epoch = 0

    def __call__(self, batch: list[Encoded]) -> dict:
        out = {"data": batch_inputs([(e.ids, e.type_ids) for e in batch], self.pad_id),
               "labels": torch.tensor([e.label for e in batch], dtype=torch.long),
               "index": torch.tensor([e.index for e in batch], dtype=torch.long)}
        if self.noise is not None:
            picks = [e.noise[(self.epoch * self.k + j) % len(e.noise)] for e in batch for j in range(self.k)]
            out["noise"] = batch_inputs([self.noise[p] for p in picks], self.pad_id)
        return out


def read_noise(path: str | Path) -> list[dict]:
    from textebm.io import iter_jsonl

    rows = []
    for lineno, obj in iter_jsonl(path):
        if not isinstance(obj.get("text"), str):
            raise InputError(path, "noise line has no 'text' string", lineno)
        rows.append(obj)
    if not rows:
        raise InputError(path, "noise file is empty")
    return rows
