"""Examples and noise for classifier training: label vocabulary, tokenisation, noise batches.

Noise for NCE comes from `textebm lm sample --mode infill` on the same training split: every
noise line names its `source_id`. In epoch e the noise pool holds K samples of every training
example (its samples e*K .. e*K+K-1, cycling through what the file has).

Eq. (7) of He et al. takes two independent expectations, one over data and one over noise, so a
noise sample need not share a batch with the sentence it was made from. textebm uses that to cut
padding: the epoch's noise pool is bucketed by its *own* length exactly as the data are (shuffle,
sort within windows, cut into batches, shuffle the batches), and data batch j of the epoch gets a
noise batch of K times its size (`noise_plan`). Pairing each noise sample with its own source
instead wasted over half of every joint batch in padding on rt-polarity (infill samples are
shorter or longer than their source by a varying amount); bucketed, the waste is that of the data.
The plan depends only on (seed, epoch, data batch), so a resumed run draws the same noise.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from textebm.data.batching import right_pad
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


def batch_inputs(items: list[tuple[list[int], list[int] | None]], pad_id: int) -> dict:
    ids, mask = right_pad([i for i, _ in items], pad_id)
    out = {"input_ids": ids, "attention_mask": mask}
    if items and items[0][1] is not None:
        out["token_type_ids"], _ = right_pad([t for _, t in items], 0)
    return out


def noise_plan(data_batches: Sequence[Sequence[int]], examples: list[Encoded], noise_lengths: Sequence[int],
               k: int, seed: int, epoch: int, window: int = 50) -> dict[tuple[int, ...], list[int]]:
    """Noise indices for each data batch of one epoch, keyed by the batch's example indices.

    The pool is K noise samples per example (see the module doc); it is shuffled, sorted by
    length within windows of `window` batches and cut into pieces of K x the data batch sizes;
    each data batch then gets a piece of its size, drawn in a seeded random order.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch + 500_009)
    pool = [ex.noise[(epoch * k + j) % len(ex.noise)] for ex in examples for j in range(k)]
    pool = [pool[p] for p in torch.randperm(len(pool), generator=g).tolist()]
    sizes = sorted((k * len(b) for b in data_batches), reverse=True)  # full batches first
    span = (sizes[0] if sizes else 1) * window
    ordered: list[int] = []
    for s in range(0, len(pool), span):
        ordered += sorted(pool[s:s + span], key=lambda n: noise_lengths[n])
    by_size: dict[int, list[list[int]]] = defaultdict(list)
    pos = 0
    for size in sizes:
        by_size[size].append(ordered[pos:pos + size])
        pos += size
    for size, pieces in by_size.items():
        by_size[size] = [pieces[p] for p in torch.randperm(len(pieces), generator=g).tolist()]
    return {tuple(b): by_size[k * len(b)].pop() for b in data_batches}


class Collator:
    """Batch of examples -> data inputs, labels and (with NCE) K noise inputs per example.

    With `batches` (a function epoch -> the training loop's data batches of that epoch), noise
    batches follow `noise_plan`; a batch the plan does not know (e.g. one that accelerate padded
    to even out processes) takes K of each example's own noise samples instead.
    """

    def __init__(self, pad_id: int, noise: list[tuple[list[int], list[int] | None]] | None, k: int,
                 examples: list[Encoded] | None = None, batches=None, seed: int = 0):
        self.pad_id, self.noise, self.k = pad_id, noise, k
        self.examples, self.batches, self.seed = examples, batches, seed
        self.noise_lengths = [len(ids) for ids, _ in noise] if noise is not None else []
        self.epoch = 0
        self._plan: dict[tuple[int, ...], list[int]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._plan = epoch, None

    def noise_indices(self, batch: list[Encoded]) -> list[int]:
        if self.batches is not None and self.examples is not None:
            if self._plan is None:
                self._plan = noise_plan(self.batches(self.epoch), self.examples, self.noise_lengths,
                                        self.k, self.seed, self.epoch)
            picks = self._plan.get(tuple(e.index for e in batch))
            if picks is not None:
                return picks
        return [e.noise[(self.epoch * self.k + j) % len(e.noise)] for e in batch for j in range(self.k)]

    def __call__(self, batch: list[Encoded]) -> dict:
        out = {"data": batch_inputs([(e.ids, e.type_ids) for e in batch], self.pad_id),
               "labels": torch.tensor([e.label for e in batch], dtype=torch.long),
               "index": torch.tensor([e.index for e in batch], dtype=torch.long)}
        if self.noise is not None:
            out["noise"] = batch_inputs([self.noise[p] for p in self.noise_indices(batch)], self.pad_id)
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
