"""How sure a calibration comparison is: bootstrap intervals on the test set, spread over seeds.

Two sources of doubt, reported separately:

- the test set is a sample: `bootstrap_ci` resamples the test examples with replacement
  (percentile bootstrap, Efron & Tibshirani 1993, ch. 13) and recomputes a metric;
  `paired_bootstrap_diff` does it for the difference of two methods scored on the *same*
  resamples (the examples are shared, so the difference is far less noisy than two separate
  intervals suggest);
- training is random: `seed_summary` gives the mean, the standard deviation (ddof=1) and a
  Student-t interval of the mean of a metric over independent seeds.

Metrics are the functions of `textebm.calibration.metrics` (probs (N, C), labels (N,)); every
computation is float64.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from textebm.bootstrap import percentile_interval, resample_counts, resample_indices
from textebm.calibration import metrics as M

Metric = Callable[[np.ndarray, np.ndarray], float]


def metric_fn(name: str, n_bins: int = 20) -> Metric:
    """The metric called `name` in `calibration_summary` (accuracy, ece_classwise, ...)."""
    table: dict[str, Metric] = {
        "accuracy": M.accuracy, "nll": M.nll, "brier": M.brier, "mcc": M.matthews_corrcoef,
        "ece_classwise": lambda p, y: M.ece_classwise(p, y, n_bins),
        "ece_toplabel": lambda p, y: M.ece_toplabel(p, y, n_bins),
    }
    if name not in table:
        raise ValueError(f"unknown metric {name!r}; expected one of {', '.join(table)}")
    return table[name]


def resampled_metric(name: str, probs: np.ndarray, labels: np.ndarray, idx: np.ndarray, n_bins: int = 20
                     ) -> np.ndarray:
    """metric(probs[i], labels[i]) for every row i of `idx` (n_boot, N) -> (n_boot,).

    Accuracy and the two ECEs are computed for all resamples at once from resample counts w:
    a bin's |B| |acc - conf| is |sum_i w_i (hit_i - p_i)| over its examples, so an ECE is a
    matrix product (n_boot, N) @ (N, n_bins). Other metrics loop over the resamples."""
    n = len(labels)
    if name == "accuracy":
        hits = (probs.argmax(1) == labels).astype(np.float64)  # (N,)
        return hits[idx].mean(1)  # (n_boot,)
    if name not in ("ece_classwise", "ece_toplabel"):
        f = metric_fn(name, n_bins)
        return np.array([f(probs[i], labels[i]) for i in idx])
    w = resample_counts(idx)  # (n_boot, N)
    if name == "ece_toplabel":
        cols = [(probs.max(1), (probs.argmax(1) == labels).astype(np.float64))]
    else:
        cols = [(probs[:, k], (labels == k).astype(np.float64)) for k in range(probs.shape[1])]
    total = np.zeros(idx.shape[0])  # (n_boot,)
    for conf, hit in cols:
        onehot = np.eye(n_bins)[M.bin_index(conf, n_bins)]  # (N, n_bins)
        gap = w @ (onehot * (hit - conf)[:, None])  # (n_boot, n_bins) sum of hit - conf per bin
        total += np.abs(gap).sum(1) / n
    return total / len(cols)


def bootstrap_ci(probs: Any, labels: Any, names: Sequence[str] = ("accuracy", "ece_classwise"),
                 n_boot: int = 1000, level: float = 0.95, seed: int = 0, n_bins: int = 20
                 ) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap interval of each metric over resamples of the test examples."""
    p, y = M.as_numpy(probs), M.as_labels(labels)
    idx = resample_indices(len(y), n_boot, seed)  # (n_boot, N)
    return {name: percentile_interval(resampled_metric(name, p, y, idx, n_bins), level) for name in names}


def paired_bootstrap_diff(probs_a: Any, probs_b: Any, labels: Any, name: str, n_boot: int = 1000,
                          level: float = 0.95, seed: int = 0, n_bins: int = 20) -> dict[str, float]:
    """Interval of metric(a) - metric(b) over shared resamples of the test examples.

    Returns {"diff": the observed difference, "lo", "hi", "p_below_zero": the fraction of
    resamples where a scored below b}."""
    a, b, y = M.as_numpy(probs_a), M.as_numpy(probs_b), M.as_labels(labels)
    if a.shape != b.shape:
        raise ValueError(f"the two methods' probabilities differ in shape: {a.shape} vs {b.shape}")
    f = metric_fn(name, n_bins)
    idx = resample_indices(len(y), n_boot, seed)  # (n_boot, N)
    diffs = resampled_metric(name, a, y, idx, n_bins) - resampled_metric(name, b, y, idx, n_bins)  # (n_boot,)
    lo, hi = percentile_interval(diffs, level)
    return {"diff": f(a, y) - f(b, y), "lo": lo, "hi": hi, "p_below_zero": float((diffs < 0).mean())}


def t_quantile(q: float, df: int) -> float:
    """Student-t quantile: scipy's when installed, else bisection on the t CDF integrated by
    Simpson's rule (exact to about 1e-9; scipy is a test dependency only)."""
    try:
        from scipy.stats import t

        return float(t.ppf(q, df))
    except ImportError:
        pass
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x: float, n: int = 4000) -> float:  # 0.5 + integral of the density over [0, x]
        h = x / n
        ys = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        return 0.5 + h / 3 * (ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2]))

    if q == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    target = max(q, 1 - q)
    while cdf(hi) < target:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < target else (lo, mid)
    return (lo + hi) / 2 if q > 0.5 else -(lo + hi) / 2


def seed_summary(values: Sequence[float], level: float = 0.95) -> dict[str, float]:
    """Mean, standard deviation (ddof=1) and the Student-t interval of the mean over seeds."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    if n == 0:
        raise ValueError("seed_summary needs at least one value")
    mean = float(v.mean())
    if n == 1:
        return {"n": 1, "mean": mean, "std": None, "lo": None, "hi": None}  # JSON null: no spread from one
    std = float(v.std(ddof=1))
    half = t_quantile(1 - (1 - level) / 2, n - 1) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "lo": mean - half, "hi": mean + half}


def summarise_seeds(per_seed: Sequence[Mapping[str, Mapping[str, float]]],
                    names: Sequence[str] = ("accuracy", "ece_classwise", "ece_toplabel", "nll", "brier")
                    ) -> dict[str, dict[str, dict[str, float]]]:
    """{method: {metric: seed_summary}} from a list of per-seed {method: {metric: value}} tables
    (methods present in every seed only)."""
    methods = [m for m in per_seed[0] if all(m in table for table in per_seed)]
    return {m: {k: seed_summary([table[m][k] for table in per_seed]) for k in names if k in per_seed[0][m]}
            for m in methods}
