"""Examples and noise for classifier training: label vocabulary, tokenisation, noise batches.

Noise for NCE comes from `textebm lm sample --mode infill` on the same training split: every
noise line names its `source_id`. In epoch e the noise pool holds K samples of every training
example (its samples e*K .. e*K+K-1, cycling through what the file has).

Eq. (7) of He et al. takes two independent expectations, one over data and one over noise, so a
noise sample need not share a batch with the sentence it was made from. textebm uses that to cut
padding: the noise is a lockstep data stream of the training loop (`noise_stream`,
textebm.data.batching.Stream). Each epoch's pool is bucketed by its *own* length exactly as the data are
(shuffle, sort within windows, cut into batches of K x the data batch size, shuffle the batches),
and step j of the epoch takes data batch j and noise batch j. Pairing each noise sample with its
own source instead wasted over half of every joint batch in padding on rt-polarity (infill
samples are shorter or longer than their source by a varying amount); bucketed, the waste is that
of the data. The noise batches depend only on (seed, epoch, batch), so a resumed run draws the
same noise.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from textebm.data.batching import Batch, right_pad, Stream
from textebm.data.readers import example_id
from textebm.errors import InputError, TextebmError
from textebm.io import iter_jsonl

log = logging.getLogger(__name__)


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


def check_eval_labels(rows: list[dict], labels: list[str], path: str) -> None:
    """The one rule for evaluation data (`classify train` and `classify eval`): every example has
    a label, and every label was seen in training (a classifier cannot predict another one, and
    scoring only the known ones would overstate accuracy)."""
    missing = [i for i, r in enumerate(rows) if r.get("label") is None]
    if missing:
        raise InputError(path, f"{len(missing)} of {len(rows)} examples have no label (first: line "
                               f"{missing[0] + 1}); evaluation needs labels (pass --eval-split '' to skip it)")
    unknown = sorted({str(r["label"]) for r in rows} - set(labels))
    if unknown:
        raise InputError(path, f"labels {unknown} do not occur in the training data ({labels}); a classifier "
                               "can only predict labels it was trained on")


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


def pairs_problem(rows: list[dict], pairs: bool | None) -> str:
    """'' when `rows` are what a classifier trained on text pairs (`pairs` True) or on single texts
    (False) reads, or when it is unknown (None); else what differs. A pair classifier given single
    texts (or the reverse) would return labels for inputs it never saw the like of."""
    has = any(r.get("text_pair") is not None for r in rows)
    if pairs is None or has == pairs:
        return ""
    return ("the classifier was trained on text pairs (text, text_pair), these examples have no text_pair"
            if pairs else "the classifier was trained on single texts, these examples have a text_pair")


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
    for i, (ex, r) in enumerate(zip(examples, rows)):
        ex.noise = by_source.get(example_id(r, i), [])
        if not ex.noise:
            lacking.append(example_id(r, i))
    if lacking:
        raise InputError(noise_path, f"no noise samples for {len(lacking)} of {len(examples)} training examples "
                         f"(first: {lacking[0]}); sample noise from the same split with `textebm lm sample "
                         "--mode infill --split train`")


def warn_noise_reuse(examples: list[Encoded], k: int, epochs: float, noise_path: str) -> int:
    """Warn when some example has fewer than K x ceil(epochs) noise samples: epoch e uses samples
    e*K .. e*K+K-1 (mod what the file has), so fewer means the same noise is shown again. Returns
    the number of examples short of samples."""
    import math

    need = k * math.ceil(epochs)
    short = [len(e.noise) for e in examples if len(e.noise) < need]
    if short:
        log.warning("%s: %d of %d training examples have fewer than K x epochs = %d x %d = %d noise samples "
                    "(as few as %d); their samples are reused %s. Sample enough with `textebm lm sample "
                    "--per-example %d`.", noise_path, len(short), len(examples), k, math.ceil(epochs), need,
                    min(short), "within an epoch" if min(short) < k else "across epochs", need)
    return len(short)


def batch_inputs(items: list[tuple[list[int], list[int] | None]], pad_id: int) -> dict:
    ids, mask = right_pad([i for i, _ in items], pad_id)
    out = {"input_ids": ids, "attention_mask": mask}
    if items and items[0][1] is not None:
        out["token_type_ids"], _ = right_pad([t for _, t in items], 0)
    return out


def noise_pool(examples: list[Encoded], k: int, epoch: int) -> list[int]:
    """The noise of `epoch`: samples (epoch*K + j) mod n, j < K, of every example's n samples."""
    return [ex.noise[(epoch * k + j) % len(ex.noise)] for ex in examples for j in range(k)]


def noise_stream(examples: list[Encoded], noise: list[tuple[list[int], list[int] | None]], k: int,
                 batch_size: int, pad_id: int):
    """The NCE noise as a lockstep stream of `train`: each epoch's pool in batches of K x `batch_size`."""

    return Stream(dataset=noise, lengths=[len(ids) for ids, _ in noise],
                  collate=lambda items: batch_inputs(items, pad_id), batch_size=k * batch_size,
                  epoch_items=lambda epoch: noise_pool(examples, k, epoch))


@dataclass
class ClassifyBatch(Batch):
    """A batch of `classify train`: the encoder's padded inputs, labels (B,) and example indices
    (B,); with NCE, the noise inputs of its K x B noise samples (from the noise stream)."""

    data: dict[str, torch.Tensor]  # input_ids, attention_mask[, token_type_ids]: (B, T)
    labels: torch.Tensor  # (B,)
    index: torch.Tensor  # (B,)
    noise: dict[str, torch.Tensor] | None = None  # (B*K, T') each


class Collator:
    """Batch of examples -> ClassifyBatch (no noise: the noise stream brings it)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, batch: list[Encoded]) -> ClassifyBatch:
        return ClassifyBatch(data=batch_inputs([(e.ids, e.type_ids) for e in batch], self.pad_id),
                             labels=torch.tensor([e.label for e in batch], dtype=torch.long),
                             index=torch.tensor([e.index for e in batch], dtype=torch.long))


def read_noise(path: str | Path, pairs: bool) -> list[dict]:
    """The noise texts (`lm sample` rows), line by line: a `text` string (and a `text_pair` one;
    either may be empty: a noise LM's sample can be), each line of the classifier's kind (`pairs`:
    text pairs or single texts, as the training split holds)."""
    rows = []
    for lineno, obj in iter_jsonl(path):
        for field in ("text", "text_pair"):
            value = obj.get(field)
            if (field == "text" or value is not None) and not isinstance(value, str):
                raise InputError(path, f"noise line has no {field!r} string", lineno)
        if (obj.get("text_pair") is not None) != pairs:
            have, want = ("a text pair", "single texts") if not pairs else ("a single text", "text pairs")
            raise InputError(path, f"{have}, where the training split holds {want}: the noise must be of the "
                                   "classifier's kind (sample it from the training split)", lineno)
        rows.append(obj)
    if not rows:
        raise InputError(path, "noise file is empty")
    return rows
