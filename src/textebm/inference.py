"""Batched inference shared by every model: length-sorted batches, results in input order.

`batched` is the one helper behind LM scoring (`textebm.lm.scoring.score_sequences`), classifier
predictions (`textebm.classify.predict.predict`) and the LM's dev perplexity during training
(`textebm.lm.train.evaluate_lm`). Items are sorted by length, longest first, so each batch holds
neighbours (little padding) and a batch too large for memory fails at once, not at the end;
results are put back in the order of the input.

`inference_setup` picks where and in what precision inference runs: the accelerator when there
is one (`textebm.precision.inference_device`), the precision resolved from `--precision`, whose
reason is logged. `set_threads` applies the `--threads` option (`textebm.options.threads_field`)
of every command that runs a model, training commands included.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence, TypeVar

import torch

from textebm.precision import inference_device, resolve_precision
from textebm.progress import progress_bar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


def batched(items: Sequence[T], lengths: Sequence[int], batch_size: int,
            fn: Callable[[list[T]], Sequence[R]], *, sort: bool = True, progress: bool = False,
            desc: str = "inference", unit: str = "item") -> list[R]:
    """`fn` over batches of `items`; returns its per-item outputs in input order.

    `fn(batch)` gets up to `batch_size` items and returns one output per item, in the batch's
    order. With `sort` (the default), batches are cut from the items sorted by `lengths`, longest
    first (ties keep input order); without it, in input order (a reference for tests).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if len(lengths) != len(items):
        raise ValueError(f"{len(items)} items but {len(lengths)} lengths")
    order = sorted(range(len(items)), key=lambda i: -lengths[i]) if sort else list(range(len(items)))
    out: list = [None] * len(items)
    with progress_bar(len(items), desc, unit, progress) as bar:
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            results = fn([items[i] for i in idx])
            if len(results) != len(idx):
                raise ValueError(f"fn returned {len(results)} outputs for a batch of {len(idx)}")
            for i, r in zip(idx, results):
                out[i] = r
            bar.update(len(idx))
    return out


def set_threads(threads: int) -> None:
    """torch's intra-op thread count, when `threads` (a `--threads` value) is not 0."""
    if threads:
        torch.set_num_threads(threads)


def inference_setup(requested: str = "auto", device: torch.device | None = None):
    """(device, PrecisionChoice) for inference: `device`, by default the GPU when there is one, else
    the CPU, and `--precision` resolved for it (its reason logged)."""

    device = device if device is not None else inference_device()
    choice = resolve_precision(requested, device.type, inference=True)
    log.info("inference on %s, precision %s", device, choice.reason)
    if device.type == "cpu":
        torch.set_flush_denormal(True)
    return device, choice
