"""Unique n-gram ratios of generated text against real text (Deng et al. 2020, figure 2, after
Holtzman et al. 2019). Two readings: per sequence (the share of a sequence's n-grams that are
distinct, averaged over sequences: it saturates near 1 at n = 3 and 4 for short continuations)
and over the whole set, as the paper's figure 2 (right) counts them (distinct n-grams of all the
generations together over their n-grams: a generator that writes the same phrases for every
prefix scores low). A degenerate, repetitive generator scores low; real text sets the reference."""

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


def set_unique_ngram_ratio(seqs: Sequence[Sequence[int]], n: int) -> float | None:
    """Distinct n-grams of all the sequences together over all their n-grams (figure 2, right);
    None when no sequence has n tokens."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    grams = [tuple(s[i:i + n]) for s in seqs for i in range(len(s) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def ngram_ratios(seqs: Sequence[Sequence[int]], orders: Sequence[int] = (1, 2, 3, 4)) -> dict[str, float | None]:
    """{"unique_1gram": r1, ..., "set_unique_1gram": s1, ...} for each order: per sequence, then
    over the whole set."""
    return {**{f"unique_{n}gram": unique_ngram_ratio(seqs, n) for n in orders},
            **{f"set_unique_{n}gram": set_unique_ngram_ratio(seqs, n) for n in orders}}
