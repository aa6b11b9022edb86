"""Calibration and classification metrics as pure functions of (probs, labels).

Every function takes `probs` (n, C) class probabilities (numpy array or torch tensor, any float
dtype; computed in float64) and `labels` (n,) integer class ids, and returns a Python float
(or a float64 array for per-sample quantities).

Binning (both ECEs, `reliability_bins`): B equal-width bins with edges k / B (k = 0..B, each
the double nearest the fraction); a probability p goes to the bin b with edges[b] <= p < edges[b+1],
and p = 1.0 goes to the last bin, so the bins are [0, 1/B), [1/B, 2/B), ..., [(B-1)/B, 1]. A
probability equal to an edge, e.g. 0.6 with B = 20, goes to the bin it opens, [0.6, 0.65).
(Reference code built on `linspace(0, 1, B + 1)` computes 12 · 0.05 = 0.6000000000000001 and so
puts 0.6 in [0.55, 0.6); only values exactly on an edge are affected.) Values a rounding error
outside [0, 1] are put in the first / last bin. Inputs are compared in float64 as given, so a
float32 probability is binned by its own value. Empty bins contribute nothing.

- `ece_classwise`: He et al. (2021) appendix C eq. (15), following Jung et al. (2020): all
  n × |Y| predictions p(y | x_i), binned per class y,
      ECE = 1/|Y| Σ_y Σ_b |B_yb| / n · |acc(B_yb) − conf(B_yb)|,
  acc(B_yb) = fraction of samples in B_yb whose label is y, conf(B_yb) = mean p(y | x) there.
- `ece_toplabel`: Guo et al. (2017): confidence max_y p(y | x), correct = [argmax = label],
      ECE = Σ_b |B_b| / n · |acc(B_b) − conf(B_b)|.
  argmax ties go to the lowest class index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

NLL_EPS = 1e-12


def as_numpy(x: Any, dtype=np.float64) -> np.ndarray:
    """numpy / torch / list -> numpy array of `dtype` (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def as_labels(x: Any) -> np.ndarray:
    """numpy / torch / list of integer class ids -> int64 array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    y = np.asarray(x)
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integer class ids, got dtype {y.dtype}")
    return y.astype(np.int64)


def _check(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    p = as_numpy(probs)
    y = as_labels(labels)
    if p.ndim != 2:
        raise ValueError(f"probs must have shape (n, C), got {p.shape}")
    if y.shape != (p.shape[0],):
        raise ValueError(f"labels must have shape ({p.shape[0]},), got {y.shape}")
    if p.shape[0] == 0:
        raise ValueError("no samples")
    if not np.isfinite(p).all():
        raise ValueError("probs contain NaN or inf")
    if y.min() < 0 or y.max() >= p.shape[1]:
        raise ValueError(f"labels must lie in [0, {p.shape[1]}), got range [{y.min()}, {y.max()}]")
    return p, y


def bin_edges(n_bins: int) -> np.ndarray:
    """Edges k / B, k = 0..B, each the double nearest to the exact fraction."""
    return np.arange(n_bins + 1, dtype=np.float64) / n_bins


def bin_index(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bin of each value: edges[b] <= p < edges[b+1], 1.0 in the last bin."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    edges = bin_edges(n_bins)
    idx = np.searchsorted(edges, conf, side="right") - 1
    return np.clip(idx, 0, n_bins - 1)


def _binned_gap(conf: np.ndarray, hit: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-bin (count, mean confidence, mean hit); mean = NaN for an empty bin."""
    idx = bin_index(conf, n_bins)
    count = np.bincount(idx, minlength=n_bins).astype(np.float64)
    conf_sum = np.bincount(idx, weights=conf, minlength=n_bins)
    hit_sum = np.bincount(idx, weights=hit, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return count, conf_sum / count, hit_sum / count


def ece_classwise(probs: Any, labels: Any, n_bins: int = 20) -> float:
    """Class-wise ECE of He et al. (2021) eq. (15); see the module docstring."""
    p, y = _check(probs, labels)
    n, c = p.shape
    total = 0.0
    for k in range(c):
        count, conf, acc = _binned_gap(p[:, k], (y == k).astype(np.float64), n_bins)
        full = count > 0
        total += float(np.sum(count[full] / n * np.abs(acc[full] - conf[full])))
    return total / c


def ece_toplabel(probs: Any, labels: Any, n_bins: int = 20) -> float:
    """Top-label (max-probability) ECE of Guo et al. (2017)."""
    p, y = _check(probs, labels)
    conf = p.max(axis=1)
    hit = (p.argmax(axis=1) == y).astype(np.float64)
    count, mconf, acc = _binned_gap(conf, hit, n_bins)
    full = count > 0
    return float(np.sum(count[full] / len(y) * np.abs(acc[full] - mconf[full])))


@dataclass
class ReliabilityBins:
    """Per-bin statistics for a reliability diagram. Arrays have length n_bins; NaN when empty."""

    edges: np.ndarray  # (n_bins + 1,)
    confidence: np.ndarray  # mean predicted probability in the bin
    accuracy: np.ndarray  # empirical frequency of the event in the bin
    counts: np.ndarray  # number of predictions in the bin
    ece: float  # the matching ECE (class-wise eq. (15) or top-label)


def reliability_bins(probs: Any, labels: Any, n_bins: int = 20, mode: str = "toplabel") -> ReliabilityBins:
    """Bins for plotting.

    mode "toplabel": the max-probability predictions (one per sample), accuracy = argmax correct.
    mode "classwise": all n × C predictions pooled into one set of bins, accuracy = fraction whose
    label is the predicted class y. (eq. (15) bins each class separately and averages; the pooled
    diagram is its picture, and `ece` holds the eq. (15) value.)
    """
    p, y = _check(probs, labels)
    if mode == "toplabel":
        count, conf, acc = _binned_gap(p.max(axis=1), (p.argmax(axis=1) == y).astype(np.float64), n_bins)
        ece = ece_toplabel(p, y, n_bins)
    elif mode == "classwise":
        onehot = np.eye(p.shape[1])[y]
        count, conf, acc = _binned_gap(p.reshape(-1), onehot.reshape(-1), n_bins)
        ece = ece_classwise(p, y, n_bins)
    else:
        raise ValueError(f"unknown reliability mode {mode!r}; expected 'toplabel' or 'classwise'")
    return ReliabilityBins(bin_edges(n_bins), conf, acc, count, ece)


def accuracy(probs: Any, labels: Any) -> float:
    p, y = _check(probs, labels)
    return float(np.mean(p.argmax(axis=1) == y))


def matthews_corrcoef(probs: Any, labels: Any) -> float:
    """Multi-class Matthews correlation (Gorodkin 2004) of argmax predictions; 0 if undefined.

    With confusion matrix counts: c = correct, s = n, p_k = predicted k, t_k = true k,
    MCC = (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)).
    """
    p, y = _check(probs, labels)
    pred = p.argmax(axis=1)
    k = p.shape[1]
    s = float(len(y))
    c = float(np.sum(pred == y))
    pk = np.bincount(pred, minlength=k).astype(np.float64)
    tk = np.bincount(y, minlength=k).astype(np.float64)
    cov_pt = c * s - float(pk @ tk)
    cov_pp = s * s - float(pk @ pk)
    cov_tt = s * s - float(tk @ tk)
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    return cov_pt / np.sqrt(cov_pp * cov_tt)


def nll(probs: Any, labels: Any, eps: float = NLL_EPS) -> float:
    """Mean −log p(label | x), with p clipped to [eps, 1]."""
    p, y = _check(probs, labels)
    return float(np.mean(-np.log(np.clip(p[np.arange(len(y)), y], eps, 1.0))))


def brier(probs: Any, labels: Any) -> float:
    """Mean over samples of Σ_c (p_c − [y = c])² (multi-class Brier score, range [0, 2])."""
    p, y = _check(probs, labels)
    onehot = np.eye(p.shape[1])[y]
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def entropy(probs: Any) -> np.ndarray:
    """Per-sample entropy −Σ_y p log p (nats), with 0 log 0 = 0. (n, C) -> (n,)."""
    p = as_numpy(probs)
    if p.ndim != 2:
        raise ValueError(f"probs must have shape (n, C), got {p.shape}")
    safe = np.where(p > 0, p, 1.0)
    return -np.sum(np.where(p > 0, p * np.log(safe), 0.0), axis=1)


def calibration_summary(probs: Any, labels: Any, n_bins: int = 20) -> dict[str, float]:
    """All metrics of one method, keyed as `textebm.calibration.report` expects."""
    return {
        "accuracy": accuracy(probs, labels),
        "mcc": matthews_corrcoef(probs, labels),
        "ece_classwise": ece_classwise(probs, labels, n_bins),
        "ece_toplabel": ece_toplabel(probs, labels, n_bins),
        "nll": nll(probs, labels),
        "brier": brier(probs, labels),
    }
