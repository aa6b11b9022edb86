"""Metrics of a real-vs-generated detector from scores, computed in float64.

Convention: a higher score means "more likely machine-generated" (for an energy, the score is
E(x); for a log-likelihood baseline, the sign is fitted on validation, see `fit_sign`).

- `auroc`: the probability that a generated window scores above a real one (ties count 1/2),
  by the rank-sum (Mann-Whitney U) formula.
- `threshold_at_fpr`: the smallest threshold whose false-positive rate on real windows is at most
  `fpr` (fitted on validation windows, never on test); `tpr_at_fpr` applies it.
- `best_threshold`: the threshold that maximises class-balanced accuracy on validation.
- `balanced_accuracy`: the mean of the accuracies on real and on generated windows at a threshold
  (the paper's class-balanced accuracy).
"""

from __future__ import annotations

import numpy as np


def _arrays(real, fake) -> tuple[np.ndarray, np.ndarray]:
    r, f = np.asarray(real, dtype=np.float64).ravel(), np.asarray(fake, dtype=np.float64).ravel()
    if r.size == 0 or f.size == 0:
        raise ValueError("need at least one real and one generated score")
    if not (np.isfinite(r).all() and np.isfinite(f).all()):
        raise ValueError("scores must be finite")
    return r, f


def auroc(real, fake) -> float:
    """P(score(generated) > score(real)) + 1/2 P(equal)."""
    from scipy.stats import rankdata

    r, f = _arrays(real, fake)
    ranks = rankdata(np.concatenate([r, f]))  # average ranks for ties
    u = ranks[r.size:].sum() - f.size * (f.size + 1) / 2
    return float(u / (r.size * f.size))


def balanced_accuracy(real, fake, threshold: float) -> float:
    """Mean of P(real score <= threshold) and P(generated score > threshold)."""
    r, f = _arrays(real, fake)
    return float(((r <= threshold).mean() + (f > threshold).mean()) / 2)


def best_threshold(real, fake) -> float:
    """The threshold (midpoint between neighbouring scores) maximising balanced accuracy; the
    lowest one on ties. Every candidate at once by binary search: O(n log n)."""
    r, f = _arrays(real, fake)
    s = np.unique(np.concatenate([r, f]))
    cands = np.concatenate([[s[0] - 1.0], (s[:-1] + s[1:]) / 2, [s[-1] + 1.0]])
    real_le = np.searchsorted(np.sort(r), cands, side="right") / r.size  # P(real <= t)
    fake_gt = 1.0 - np.searchsorted(np.sort(f), cands, side="right") / f.size  # P(generated > t)
    return float(cands[int(np.argmax((real_le + fake_gt) / 2))])


def threshold_at_fpr(real, fpr: float) -> float:
    """The lowest threshold t with mean(real > t) <= fpr: a window is called generated when its
    score exceeds t."""
    if not 0 <= fpr < 1:
        raise ValueError(f"fpr must be in [0, 1), got {fpr}")
    r = np.sort(np.asarray(real, dtype=np.float64).ravel())
    n = r.size
    allowed = int(np.floor(fpr * n + 1e-9))  # real windows that may exceed the threshold
    return float(r[n - 1 - allowed]) if allowed < n else float(r[0] - 1.0)


def tpr_at_fpr(real_val, fake_test, fpr: float = 0.01, real_test=None) -> dict[str, float]:
    """True-positive rate on generated test windows at the threshold fitted on real validation
    windows for `fpr`; with `real_test`, the false-positive rate it reaches there."""
    t = threshold_at_fpr(real_val, fpr)
    out = {"threshold": t, "tpr": float((np.asarray(fake_test, dtype=np.float64) > t).mean())}
    if real_test is not None:
        out["fpr"] = float((np.asarray(real_test, dtype=np.float64) > t).mean())
    return out


def fit_sign(real, fake) -> int:
    """+1 if generated windows score higher on validation (AUROC >= 0.5), else −1: the sign that
    turns a baseline's score (e.g. a log-likelihood) into "higher = generated"."""
    return 1 if auroc(real, fake) >= 0.5 else -1
