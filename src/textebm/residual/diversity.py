"""Unique n-gram ratios of generated text against real text (Deng et al. 2020, figure 2, after
Holtzman et al. 2019): the share of a sequence's n-grams that are distinct, averaged over
sequences. A degenerate, repetitive generator scores low; real text sets the reference."""

from __future__ import annotations

from collections.abc import Sequence


def unique_ngram_ratio(seqs: Sequence[Sequence[int]], n: int) -> float | None:
    """Mean over sequences of (distinct n-grams / n-grams) in each; sequences shorter than n are
    left out (None when none is long enough: metrics.json stays valid JSON)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    ratios = []
    for s in seqs:
        grams = [tuple(s[i:i + n]) for i in range(len(s) - n + 1)]
        if grams:
            ratios.append(len(set(grams)) / len(grams))
    return sum(ratios) / len(ratios) if ratios else None


def ngram_ratios(seqs: Sequence[Sequence[int]], orders: Sequence[int] = (1, 2, 3, 4)) -> dict[str, float | None]:
    """{"unique_1gram": r1, ...} for each order."""
    return {f"unique_{n}gram": unique_ngram_ratio(seqs, n) for n in orders}
