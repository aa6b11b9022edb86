"""The percentile bootstrap (Efron & Tibshirani 1993, ch. 13), shared by every "how sure" figure:
resample the test items with replacement, recompute the statistic, read its quantiles.

Methods compared on the same items share one set of resamples (`resample_indices` with one seed),
so a difference between two methods is resampled as a pair."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) indices drawn with replacement by a seeded generator (shared across methods)."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    """The central `level` interval of the resampled statistics (percentile method)."""
    alpha = (1 - level) / 2
    lo, hi = np.quantile(stats, [alpha, 1 - alpha])
    return float(lo), float(hi)


def resample_counts(idx: np.ndarray) -> np.ndarray:
    """(n_boot, N) how often each item occurs in each resample, from (n_boot, N) indices."""
    n_boot, n = idx.shape
    counts = np.zeros((n_boot, n))  # (n_boot, N)
    np.add.at(counts, (np.repeat(np.arange(n_boot), n), idx.reshape(-1)), 1.0)
    return counts


def resampled_perplexities(nll: np.ndarray, tokens: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Token perplexity of each model on each resample of the windows: exp(Σ nll / Σ tokens) over
    the windows a resample draws (a window drawn twice counts twice).

    nll: (M, W) summed negative log-likelihood of each window's scored tokens under each of M
    models; tokens: (W,) scored tokens of each window (the same for every model); idx: (n_boot, W)
    indices of the windows drawn. Returns (n_boot, M); NaN for a resample of no tokens."""
    counts = resample_counts(idx)  # (n_boot, W)
    total = counts @ nll.T  # (n_boot, M) summed NLL of each resample
    tok = counts @ tokens  # (n_boot,)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tok[:, None] > 0, np.exp(total / tok[:, None]), np.nan)  # (n_boot, M)


def paired_perplexity_diffs(nll, tokens, pairs: Sequence[tuple[int, int]], n_boot: int = 1000, seed: int = 0,
                            level: float = 0.95) -> list[dict]:
    """Perplexity of model a minus that of model b on the same windows, for each pair (a, b) of
    rows of `nll`, with its paired percentile-bootstrap interval: each resample draws W windows
    with replacement and recomputes every model's perplexity on that draw (`resampled_perplexities`);
    every pair shares the same `n_boot` resamples (one seed). Whatever the rows hold per window is
    held fixed (for a joint model, its log Z estimate): the interval is over the test windows only.

    nll: (M, W) summed negative log-likelihood of each window under each model; tokens: (W,).
    Returns per pair {"diff", "lo", "hi", "excludes_zero", "p_below_zero"}: with n_boot 0, or one
    window (every resample is that window: no spread to read), only "diff" is known (the others
    None). Resamples of no tokens are left out."""
    nll = np.asarray(nll, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    if nll.ndim != 2 or tokens.shape != nll.shape[1:] or not tokens.size:
        raise ValueError(f"paired_perplexity_diffs: give nll (M, W) and tokens (W,) for W >= 1 windows, got "
                         f"{nll.shape} and {tokens.shape}")
    if not np.all(np.isfinite(nll)) or np.any(tokens < 0) or tokens.sum() <= 0:
        raise ValueError("paired_perplexity_diffs: the NLLs must be finite and the windows hold tokens")
    if n_boot < 0 or not 0 < level < 1:
        raise ValueError(f"paired_perplexity_diffs: n_boot {n_boot} must be >= 0 and level {level} in (0, 1)")
    m = nll.shape[0]
    if any(not (0 <= a < m and 0 <= b < m) for a, b in pairs):
        raise ValueError(f"paired_perplexity_diffs: a pair names a row outside the {m} models")
    ppl = np.exp(nll.sum(1) / tokens.sum())  # (M,) on all windows
    out = [{"diff": float(ppl[a] - ppl[b]), "lo": None, "hi": None, "excludes_zero": None, "p_below_zero": None}
           for a, b in pairs]
    if n_boot == 0 or tokens.size < 2:
        return out
    boot = resampled_perplexities(nll, tokens, resample_indices(tokens.size, n_boot, seed))  # (n_boot, M)
    boot = boot[np.isfinite(boot).all(1)]  # (kept, M)
    for row, (a, b) in zip(out, pairs):
        d = boot[:, a] - boot[:, b]  # (kept,)
        lo, hi = percentile_interval(d, level)
        row.update(lo=lo, hi=hi, excludes_zero=bool(lo > 0 or hi < 0), p_below_zero=float((d < 0).mean()))
    return out


def mean_interval(values, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    """The percentile-bootstrap interval of the mean of `values` (N,), N >= 1, over `n_boot`
    resamples of the items (seeded); None for n_boot 0 or a single value (no spread to read)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)  # (N,)
    if not v.size or not np.all(np.isfinite(v)):
        raise ValueError("mean_interval: give at least one value, all finite")
    if n_boot < 0 or not 0 < level < 1:
        raise ValueError(f"mean_interval: n_boot {n_boot} must be >= 0 and level {level} in (0, 1)")
    if n_boot == 0 or v.size < 2:
        return None
    return percentile_interval(v[resample_indices(v.size, n_boot, seed)].mean(1), level)  # (n_boot,) means
