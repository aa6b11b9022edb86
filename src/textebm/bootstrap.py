"""The percentile bootstrap (Efron & Tibshirani 1993, ch. 13), shared by every "how sure" figure:
resample the test items with replacement, recompute the statistic, read its quantiles.

Methods compared on the same items share one set of resamples (`resample_indices` with one seed),
so a difference between two methods is resampled as a pair."""

from __future__ import annotations

import numpy as np


def resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) indices drawn with replacement by a seeded generator (shared across methods)."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    """The central `level` interval of the resampled statistics (percentile method)."""
    alpha = (1 - level) / 2
    lo, hi = np.quantile(stats, [alpha, 1 - alpha])
    return float(lo), float(hi)
