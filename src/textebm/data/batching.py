"""Batches: token-id lists padded into tensors (right padding for training, scoring and encoders;
left padding for generation, so that every row's next token is in the last column), and the
training loop's data streams with their length-bucketed samplers and loaders."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from textebm.errors import TextebmError


def right_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (B, T), sequences aligned on the left."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)  # (B, T)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, :len(s)] = 1
    return ids, mask


def left_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (B, T), sequences aligned on the right."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)  # (B, T)
    for b, s in enumerate(seqs):
        ids[b, T - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[b, T - len(s):] = 1
    return ids, mask


class Batch:
    """Base of a training batch as a small dataclass of tensors (typed fields, not a dict of keys
    that differ per recipe). `.to(device)` moves every tensor field, and the tensors of dict fields
    (a model's input dict), as accelerate's loaders expect of a batch; other fields stay."""

    def to(self, device, non_blocking: bool = False):
        import dataclasses

        def move(v):
            if isinstance(v, torch.Tensor):
                return v.to(device, non_blocking=non_blocking)
            if isinstance(v, dict):
                return {k: move(x) for k, x in v.items()}
            return v

        return dataclasses.replace(self, **{f.name: move(getattr(self, f.name)) for f in dataclasses.fields(self)})


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length: shuffle, sort within windows of 50 batches, shuffle batches.

    Deterministic given (seed, epoch); padding waste stays small while batch order stays random.
    The one batch shorter than `batch_size` (when the data do not divide) always comes last: under
    several processes accelerate deals batches in rounds and drops a round whose last batch is
    short, so a short batch in mid-epoch would silently lose a batch on every process.
    `epoch_items(e)` (optional) gives the indices into `lengths` that make up epoch e (repeats
    allowed, the same number every epoch); by default every index once.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, shuffle: bool = True,
                 window: int = 50, epoch_items: Callable[[int], Sequence[int]] | None = None):
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.window = window
        self.epoch_items = epoch_items
        self.n_items = len(epoch_items(0)) if epoch_items is not None else len(self.lengths)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(self.n_items / self.batch_size)

    def __iter__(self):
        return iter(self.batches(self.epoch))

    def batches(self, epoch: int) -> list[list[int]]:
        """The batches of `epoch`, in order."""
        pool = list(range(len(self.lengths))) if self.epoch_items is None else list(self.epoch_items(epoch))
        if len(pool) != self.n_items:
            raise TextebmError(f"epoch_items gave {len(pool)} items for epoch {epoch} and {self.n_items} "
                               "for epoch 0; it must give the same number every epoch")
        n, bs = len(pool), self.batch_size
        if not self.shuffle:
            order = sorted(pool, key=lambda i: self.lengths[i])
            return [order[i:i + bs] for i in range(0, n, bs)]
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        perm = torch.randperm(n, generator=g).tolist()
        span = bs * self.window
        batches = []
        for start in range(0, n, span):
            chunk = sorted((pool[p] for p in perm[start:start + span]), key=lambda i: self.lengths[i])
            batches += [chunk[i:i + bs] for i in range(0, len(chunk), bs)]
        full = [b for b in batches if len(b) == bs]
        short = [b for b in batches if len(b) < bs]  # at most one: spans divide by batch_size
        return [full[j] for j in torch.randperm(len(full), generator=g).tolist()] + short


class CycleBatchSampler(Sampler[list[int]]):
    """`per_epoch` full batches for each main epoch, read on through `inner`'s own epochs.

    Main epoch e takes batches e*per_epoch .. (e+1)*per_epoch - 1 of the endless sequence of
    inner's epochs 0, 1, 2, ... with each inner epoch's short batch dropped: every batch is full,
    so sharding across processes stays aligned with the main stream.
    """

    def __init__(self, inner: BucketBatchSampler, per_epoch: int):
        self.inner, self.per_epoch = inner, per_epoch
        self.batch_size = inner.batch_size
        self.full_per_inner = inner.n_items // inner.batch_size
        if self.full_per_inner == 0:
            raise TextebmError(f"a cycling stream needs at least batch_size ({inner.batch_size}) items, "
                               f"it has {inner.n_items}")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.per_epoch

    def __iter__(self):
        inner_epoch, skip = divmod(self.epoch * self.per_epoch, self.full_per_inner)
        left = self.per_epoch
        while left:
            full = [b for b in self.inner.batches(inner_epoch) if len(b) == self.batch_size]
            take = full[skip:skip + left]
            yield from take
            left -= len(take)
            inner_epoch, skip = inner_epoch + 1, 0


@dataclass(kw_only=True)
class Stream:
    """A data stream of the training loop: the main one (the recipe's dataset) or an extra one,
    `recipe.streams = {name: Stream(...)}` (`textebm.train`'s module doc)."""

    dataset: Sequence  # the items; collate gets a list of them
    lengths: Sequence[int]  # one per dataset item, for bucketing
    collate: Callable[[list], Any]
    batch_size: int  # items per batch and process
    lockstep: bool = True  # True: one epoch per main epoch, as many batches; False: its own epochs
    epoch_items: Callable[[int], Sequence[int]] | None = None  # dataset indices of the stream's epoch e
    seed_offset: int = 1  # its sampler's seed is the run's seed + seed_offset


def stream_sampler(stream: Stream, seed: int, main_batches: int) -> Sampler[list[int]]:
    """The batch sampler of a stream under the run's `seed` (the main stream: lockstep, seed
    offset 0), given the main stream's batches per epoch (all processes)."""
    inner = BucketBatchSampler(stream.lengths, stream.batch_size, seed + stream.seed_offset,
                               epoch_items=stream.epoch_items)
    return inner if stream.lockstep else CycleBatchSampler(inner, main_batches)


def stream_loader(stream: Stream, sampler: Sampler[list[int]], seed: int) -> DataLoader:
    """A DataLoader of the stream's items in the sampler's batches, through its collate."""
    # Each loader gets its own generator: drawing its base seed from the global RNG would shift
    # dropout's random stream between an uninterrupted and a resumed run.
    return DataLoader(list(range(len(stream.dataset))), batch_sampler=sampler,
                      collate_fn=lambda idx: stream.collate([stream.dataset[i] for i in idx]),
                      generator=torch.Generator().manual_seed(seed))
