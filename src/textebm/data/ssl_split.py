"""The seeded, nested labelled / unlabelled split of a semi-supervised grid (paper e, sec. 4).

    split = nested_split(train_tokens, labelled_size=2500, seed=0,
                         proportions=(0.02, 0.1, 1.0), ratios=(50, 250, 500), extra=other_tokens,
                         exclude=dev_and_test_tokens, ratios_by_proportion={1.0: (50,)})
    split.labelled(0.1)              # indices into train_tokens: 250 sentences
    split.unlabelled(0.1, 250)       # ("train" | "extra", index) refs: 62,500 sentences

Labelled: one seeded permutation of the training sentences; the labelled set of proportion p is
its first round(p * labelled_size) sentences, so 2 % ⊂ 10 % ⊂ 100 %.
Unlabelled: one seeded permutation (a second stream of the same seed) of the pool, that is the
training sentences outside the 100 % labelled set plus the `extra` sentences (other corpora,
tokenised the same way); a sentence equal (same tokens) to a 100 %-labelled one or to one of
`exclude` (dev and test sentences) is left out, and so is one longer than `max_pool_tokens`
when it is set (a CPU cap on the pool's long tail: docs/tag-grid.md). The cell
(p, U/L = r) takes the pool's first r * |labelled(p)| sentences: every smaller pool is a prefix
of every larger one, across ratios and labelled sizes, so the cells share what they can and
proportions and ratios stay exact. Brown and
other corpora are mixed by the permutation, so every pool has the same mix of domains.
Labelled and unlabelled never share a sentence index; the same inputs and seed give the same split.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from textebm.errors import TextebmError
from textebm.seeds import derive_seed

Ref = tuple[str, int]  # ("train", i): train[i]; ("extra", i): extra[i]


@dataclass(frozen=True)
class NestedSplit:
    """A nested split; build it with `nested_split`. `order`: indices into the training
    sentences, draw order (its first `labelled_size` are the 100 % set); `pool`: the unlabelled
    sentences in draw order; `sizes`: proportion -> labelled size."""

    labelled_size: int
    sizes: dict[float, int]
    order: tuple[int, ...]
    pool: tuple[Ref, ...]
    seed: int

    def labelled(self, proportion: float) -> list[int]:
        """Indices (into the training sentences) of the labelled set of `proportion`."""
        return list(self.order[:self._size(proportion)])

    def max_ratio(self, proportion: float) -> int:
        """The largest U/L the pool allows at `proportion`."""
        return len(self.pool) // self._size(proportion)

    def unlabelled(self, proportion: float, ratio: int) -> list[Ref]:
        """The unlabelled sentences of the cell (`proportion`, U/L = `ratio`): the first
        ratio * |labelled(proportion)| of the pool."""
        need = _check_ratio(ratio) * self._size(proportion)
        if need > len(self.pool):
            raise TextebmError(
                f"ratios: U/L={ratio} at proportion {proportion:g} ({self._size(proportion):,} "
                f"labelled) needs {need:,} unlabelled sentences; the pool has {len(self.pool):,} "
                f"(the largest U/L it allows is {self.max_ratio(proportion)})")
        return list(self.pool[:need])

    def digest(self) -> str:
        """sha256 of the split itself, to key cached results by what they were trained on."""
        blob = json.dumps([self.order[:self.labelled_size], self.pool], separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def _size(self, proportion: float) -> int:
        if proportion not in self.sizes:
            raise TextebmError(f"proportions: {proportion:g} is not one of this split's "
                               f"({', '.join(f'{p:g}' for p in self.sizes)})")
        return self.sizes[proportion]


def nested_split(
    train: Sequence[Sequence[str]],
    labelled_size: int,
    seed: int,
    proportions: Sequence[float] = (0.02, 0.1, 1.0),
    ratios: Sequence[int] = (),
    extra: Sequence[Sequence[str]] = (),
    exclude: Iterable[Sequence[str]] = (),
    ratios_by_proportion: Mapping[float, Sequence[int]] | None = None,
    max_pool_tokens: int = 0,
) -> NestedSplit:
    """The nested split of the module docstring. `train`, `extra`, `exclude`: sentences as token
    lists. `ratios` (U/L) are checked against the pool for every proportion, except where
    `ratios_by_proportion` gives a proportion its own; nothing is drawn lazily, so a grid that
    cannot run fails here, naming the option (`labelled_size`, `proportions`, `ratios`), before
    any training. `max_pool_tokens` > 0 leaves out of the pool every sentence with more tokens
    (the labelled draw does not change)."""
    if isinstance(max_pool_tokens, bool) or not isinstance(max_pool_tokens, int) or max_pool_tokens < 0:
        raise TextebmError(f"max_pool_tokens: {max_pool_tokens!r}; expected a whole number >= 0 (0: no cap)")
    if isinstance(labelled_size, bool) or not isinstance(labelled_size, int) or labelled_size < 1:
        raise TextebmError(f"labelled_size: {labelled_size!r}; expected a whole number >= 1")
    if labelled_size > len(train):
        raise TextebmError(f"labelled_size: {labelled_size:,} is more than the {len(train):,} "
                           "training sentences")
    for what, sentences in (("train", train), ("extra", extra)):
        empty = next((i for i, s in enumerate(sentences) if len(s) == 0), None)
        if empty is not None:
            raise TextebmError(f"{what} sentence {empty + 1} is empty; a sentence needs a token")
    if not proportions:
        raise TextebmError("proportions: none given")
    sizes: dict[float, int] = {}
    for p in sorted(proportions):
        if not 0 < p <= 1:
            raise TextebmError(f"proportions: {p!r}; expected a fraction in (0, 1] of "
                               "labelled_size")
        sizes[p] = round(p * labelled_size)
        if sizes[p] < 1:
            raise TextebmError(f"proportions: {p:g} of labelled_size={labelled_size:,} leaves no "
                               f"sentence ({p * labelled_size:.2f}, rounded to 0); use a larger "
                               "proportion or labelled_size")

    order = list(range(len(train)))
    random.Random(derive_seed(seed, "ssl-split", "labelled")).shuffle(order)
    labelled = set(order[:labelled_size])
    banned = {tuple(train[i]) for i in labelled} | {tuple(s) for s in exclude}
    fits = (lambda s: len(s) <= max_pool_tokens) if max_pool_tokens else (lambda s: True)
    pool: list[Ref] = [("train", i) for i in range(len(train))
                       if i not in labelled and tuple(train[i]) not in banned and fits(train[i])]
    pool += [("extra", i) for i, s in enumerate(extra) if tuple(s) not in banned and fits(s)]
    random.Random(derive_seed(seed, "ssl-split", "unlabelled")).shuffle(pool)
    split = NestedSplit(labelled_size, sizes, tuple(order), tuple(pool), seed)

    own = dict(ratios_by_proportion or {})
    unknown = [p for p in own if p not in sizes]
    if unknown:
        raise TextebmError(f"ratios: given for proportion {unknown[0]:g}, which is not one of "
                           f"proportions ({', '.join(f'{p:g}' for p in sizes)})")
    for p in sizes:
        for r in own.get(p, ratios):
            split.unlabelled(p, r)  # raises naming `ratios` when the pool is too small
    return split


def _check_ratio(ratio: int) -> int:
    if isinstance(ratio, bool) or not isinstance(ratio, int) or ratio < 0:
        raise TextebmError(f"ratios: {ratio!r}; expected a whole number >= 0 (U/L, 0: supervised)")
    return ratio
