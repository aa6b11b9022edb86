"""Post-hoc calibrators with a scikit-learn-like interface, and the dev-halving protocol.

Both calibrators take raw logits (n, C) (numpy or torch); `log(probs)` works as logits when only
probabilities are at hand. `__init__` stores parameters, `fit(logits, labels)` returns `self`,
`predict_proba(logits)` (alias `transform`) returns calibrated (n, C) float64 probabilities whose
rows sum to 1.

- `TemperatureScaling` (Guo et al. 2017): softmax(z / T), T fitted by minimising the NLL.
- `ScalingBinning` (Kumar et al. 2019, "Verified Uncertainty Calibration"): per-class Platt
  scaling, then equal-mass binning of the scaled probabilities, output = bin mean.
- `halve_dev`: He et al. (2021) split the one labelled GLUE dev set into a dev half (to fit
  calibrators) and a test half (to evaluate), with a fixed seed.
- `fit_logged(method, logits, labels, label)`: `CALIBRATORS[method]` ("tscal", "scalbin", the
  names of `classify eval`'s report) fitted, its CalibrationWarnings logged, not printed: what
  `classify eval` and `textebm.Classifier.fit_calibrator` fit.

The maths and the deviations from the reference code are written out in docs/calibration.md.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np

from textebm.calibration.metrics import as_labels, as_numpy

log = logging.getLogger(__name__)


class CalibrationWarning(UserWarning):
    """A calibrator met degenerate data and fell back to a documented default."""


def _warn(message: str) -> None:
    warnings.warn(message, CalibrationWarning, stacklevel=3)


def halve_dev(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split indices 0..n-1 into (dev_idx, test_idx) by a seeded random permutation.

    dev gets floor(n / 2) indices, test the other ceil(n / 2); both are sorted. The same (n, seed)
    always gives the same split (numpy's PCG64 `default_rng(seed).permutation(n)`).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    perm = np.random.default_rng(seed).permutation(n)
    half = n // 2
    return np.sort(perm[:half]), np.sort(perm[half:])


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)  # (n, C)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _check_logits(logits: Any, labels: Any | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    z = as_numpy(logits)
    if z.ndim != 2 or z.shape[1] < 1:
        raise ValueError(f"logits must have shape (n, C), got {z.shape}")
    if not np.isfinite(z).all():
        raise ValueError("logits contain NaN or inf")
    if labels is None:
        return z, None
    y = as_labels(labels)
    if y.shape != (z.shape[0],):
        raise ValueError(f"labels must have shape ({z.shape[0]},), got {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= z.shape[1]):
        raise ValueError(f"labels must lie in [0, {z.shape[1]})")
    return z, y


class TemperatureScaling:
    """p = softmax(z / T) with one temperature T > 0 fitted on (logits, labels) by minimum NLL.

    Objective, written with β = 1/T (`fit` minimises it over β):
        f(β)   = 1/n Σ_i [ logsumexp_c(β z_ic) − β z_{i,y_i} ]
        f'(β)  = 1/n Σ_i [ Σ_c p_ic z_ic − z_{i,y_i} ],   p_i = softmax(β z_i)
        f''(β) = 1/n Σ_i Var_{c ~ p_i}(z_ic) >= 0
    f is convex in β, so the root of f' in [1/t_max, 1/t_min] is found by a Newton iteration
    safeguarded by bisection. (In log T = s: df/ds = −β f'(β), the same stationary point.)

    Degenerate fits never give NaN, inf or 0: if the optimum lies beyond the range (perfectly
    separable data → T → 0; useless logits → T → ∞) T is clamped to [t_min, t_max]; with n < 2
    samples, or logits constant within every row, T = 1. Each case raises a CalibrationWarning.
    """

    def __init__(self, t_min: float = 0.05, t_max: float = 100.0, max_iter: int = 100, tol: float = 1e-10):
        self.t_min = t_min
        self.t_max = t_max
        self.max_iter = max_iter
        self.tol = tol

    @staticmethod
    def objective(beta: float, logits: np.ndarray, labels: np.ndarray) -> tuple[float, float, float]:
        """(f, f', f'') at β for float64 logits (n, C) and int labels (n,)."""
        bz = beta * logits  # (n, C)
        m = bz.max(axis=1, keepdims=True)  # (n, 1)
        lse = (m + np.log(np.exp(bz - m).sum(axis=1, keepdims=True)))[:, 0]  # (n,)
        p = np.exp(bz - lse[:, None])  # (n, C)
        zy = logits[np.arange(len(labels)), labels]  # (n,)
        ez = (p * logits).sum(axis=1)  # (n,)  E_p[z]
        var = (p * logits**2).sum(axis=1) - ez**2  # (n,)  Var_p[z]
        f = float(np.mean(lse - beta * zy))
        return f, float(np.mean(ez - zy)), float(np.mean(np.maximum(var, 0.0)))

    def fit(self, logits: Any, labels: Any) -> "TemperatureScaling":
        z, y = _check_logits(logits, labels)
        self.n_iter_ = 0
        if len(y) < 2:
            _warn(f"temperature scaling on {len(y)} sample(s): keeping T = 1")
            self.temperature_ = 1.0
            return self
        if np.all(z.max(axis=1) == z.min(axis=1)):
            _warn("logits are constant within every row: keeping T = 1")
            self.temperature_ = 1.0
            return self
        lo, hi = 1.0 / self.t_max, 1.0 / self.t_min
        g_lo = self.objective(lo, z, y)[1]
        g_hi = self.objective(hi, z, y)[1]
        if g_lo >= 0:  # f increasing on the whole range: optimum at T >= t_max
            _warn(f"NLL keeps falling as T grows: T clamped to {self.t_max}")
            self.temperature_ = float(self.t_max)
            return self
        if g_hi <= 0:  # f decreasing on the whole range: optimum at T <= t_min (separable data)
            _warn(f"NLL keeps falling as T shrinks (separable data?): T clamped to {self.t_min}")
            self.temperature_ = float(self.t_min)
            return self
        beta = min(max(1.0, lo), hi)
        for it in range(1, self.max_iter + 1):
            self.n_iter_ = it
            _, g, h = self.objective(beta, z, y)
            if abs(g) <= self.tol:
                break
            if g > 0:
                hi = beta
            else:
                lo = beta
            step = beta - g / h if h > 0 else None
            beta = step if step is not None and lo < step < hi else 0.5 * (lo + hi)
            if hi - lo <= 1e-12 * hi:
                break
        self.temperature_ = float(1.0 / beta)
        return self

    def predict_proba(self, logits: Any) -> np.ndarray:
        if not hasattr(self, "temperature_"):
            raise RuntimeError("TemperatureScaling: call fit() before predict_proba()")
        z, _ = _check_logits(logits)
        return softmax(z / self.temperature_)

    transform = predict_proba  # the fit / transform vocabulary: the same calibrated probabilities


# --- scaling-binning ---------------------------------------------------------------------------

PLATT_EPS = 1e-12  # as the reference code: probabilities clipped to [eps, 1 - eps] before logit


def _sigmoid(u: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(u))
    return np.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, PLATT_EPS, 1.0 - PLATT_EPS)
    return np.log(p / (1.0 - p))


def platt_fit(x: np.ndarray, t: np.ndarray, ridge: float = 1e-6, max_iter: int = 100) -> tuple[float, float]:
    """(a, b) minimising 1/n Σ BCE(sigmoid(a x_i + b), t_i) + ridge/2 (a² + b²), by Newton's method
    with backtracking. The tiny ridge keeps (a, b) finite on separable data.

    Gradient: 1/n Σ (σ_i − t_i) [x_i, 1] + ridge w; Hessian: 1/n Σ σ_i(1−σ_i) [x_i,1][x_i,1]ᵀ + ridge I.
    """
    X = np.stack([x, np.ones_like(x)], axis=1)  # (n, 2)

    def loss(w: np.ndarray) -> float:
        u = X @ w  # (n,)
        return float(np.mean(np.maximum(u, 0) + np.log1p(np.exp(-np.abs(u))) - t * u) + 0.5 * ridge * w @ w)

    w = np.array([1.0, 0.0])
    f = loss(w)
    for _ in range(max_iter):
        s = _sigmoid(X @ w)  # (n,)
        grad = X.T @ (s - t) / len(t) + ridge * w  # (2,)
        if np.max(np.abs(grad)) < 1e-10:
            break
        hess = (X * (s * (1 - s))[:, None]).T @ X / len(t) + ridge * np.eye(2)  # (2, 2)
        step = np.linalg.solve(hess, grad)
        lr = 1.0
        while lr > 1e-10:
            w_new = w - lr * step
            f_new = loss(w_new)
            if f_new <= f - 1e-4 * lr * float(grad @ step):
                break
            lr *= 0.5
        else:
            break
        w, f = w_new, f_new
    return float(w[0]), float(w[1])


def equal_mass_edges(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Upper bin edges (last = 1.0) so that about the same number of values falls in each bin.

    As `get_equal_bins` of Kumar et al.'s code: sort, split into min(n_bins, n) near-equal parts
    (`np.array_split`), put an edge midway between consecutive parts, add 1.0, drop duplicates.
    A value v falls in bin `searchsorted(edges, v, side="left")`.
    """
    parts = np.array_split(np.sort(values), min(n_bins, len(values)))
    edges = [(parts[i][-1] + parts[i + 1][0]) / 2.0 for i in range(len(parts) - 1)] + [1.0]
    return np.array(sorted(set(edges)), dtype=np.float64)


def bin_means(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of the values in each bin; an empty bin gets its midpoint (edges[0] / 2 for the first)."""
    idx = np.searchsorted(edges, values, side="left")  # (n,)
    count = np.bincount(idx, minlength=len(edges))
    total = np.bincount(idx, weights=values, minlength=len(edges))
    lower = np.concatenate([[0.0], edges[:-1]])
    mid = (lower + edges) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), mid)


class ScalingBinning:
    """Scaling-binning calibrator of Kumar et al. (2019), marginal (one-vs-rest per class).

    fit: p = softmax(logits); split the fit data by `halve_dev(n, seed)`; for every class c:
      1. Platt scaling on the first half: g_c(p) = sigmoid(a_c logit(p_c) + b_c), fitted on the
         targets [y = c] (`platt_fit`);
      2. equal-mass bins of g_c(p_c) over the second half (`equal_mass_edges`, n_bins bins);
      3. each bin outputs the mean of g_c(p_c) of the second-half points in it (`bin_means`).
    predict_proba: q_c = bin mean of the bin of g_c(p_c), then each row is divided by its sum so
    it is a distribution (a row summing to 0 becomes uniform).

    Kumar et al.'s released `PlattBinnerMarginalCalibrator` fits steps 1-3 on the same points and
    does not renormalise; their algorithm in the paper uses separate splits for scaling and
    binning, which is what is done here. With fewer than 4 points, or a class whose label is
    constant on the first half (Platt would diverge), the affected step falls back (all points /
    identity scaling a=1, b=0) with a CalibrationWarning.
    """

    def __init__(self, n_bins: int = 20, seed: int = 0, ridge: float = 1e-6):
        self.n_bins = n_bins
        self.seed = seed
        self.ridge = ridge

    def fit(self, logits: Any, labels: Any) -> "ScalingBinning":
        z, y = _check_logits(logits, labels)
        n, c = z.shape
        if n == 0:
            raise ValueError("ScalingBinning.fit needs at least one sample")
        probs = softmax(z)  # (n, C)
        if n < 4:
            _warn(f"scaling-binning on {n} sample(s): using all of them for both scaling and binning")
            first = second = np.arange(n)
        else:
            first, second = halve_dev(n, self.seed)
        self.platt_ = np.zeros((c, 2))  # (C, 2) a_c, b_c
        self.edges_: list[np.ndarray] = []
        self.means_: list[np.ndarray] = []
        for k in range(c):
            t = (y[first] == k).astype(np.float64)
            if t.min() == t.max():
                _warn(f"class {k}: labels constant in the scaling half; Platt scaling replaced by identity")
                a, b = 1.0, 0.0
            else:
                a, b = platt_fit(_logit(probs[first, k]), t, ridge=self.ridge)
            self.platt_[k] = (a, b)
            scaled = _sigmoid(a * _logit(probs[second, k]) + b)  # (n2,)
            edges = equal_mass_edges(scaled, self.n_bins)
            self.edges_.append(edges)
            self.means_.append(bin_means(scaled, edges))
        return self

    def predict_proba(self, logits: Any) -> np.ndarray:
        if not hasattr(self, "platt_"):
            raise RuntimeError("ScalingBinning: call fit() before predict_proba()")
        z, _ = _check_logits(logits)
        if z.shape[1] != len(self.platt_):
            raise ValueError(f"fitted on {len(self.platt_)} classes, got logits with {z.shape[1]}")
        probs = softmax(z)  # (n, C)
        out = np.empty_like(probs)
        for k, ((a, b), edges, means) in enumerate(zip(self.platt_, self.edges_, self.means_)):
            scaled = _sigmoid(a * _logit(probs[:, k]) + b)  # (n,)
            out[:, k] = means[np.searchsorted(edges, scaled, side="left")]
        total = out.sum(axis=1, keepdims=True)  # (n, 1)
        uniform = np.full_like(out, 1.0 / out.shape[1])
        return np.where(total > 0, out / np.where(total > 0, total, 1.0), uniform)

    transform = predict_proba  # the fit / transform vocabulary


# --- by name ------------------------------------------------------------------------------------

CALIBRATORS: dict[str, type[TemperatureScaling] | type[ScalingBinning]] = {
    "tscal": TemperatureScaling, "scalbin": ScalingBinning}


def fit_logged(method: str | TemperatureScaling | ScalingBinning, logits: Any, labels: Any,
               label: str) -> TemperatureScaling | ScalingBinning:
    """`CALIBRATORS[method]()` with its defaults (or the calibrator `method` itself), fitted on
    (logits (n, C), labels (n,)); each CalibrationWarning (a degenerate fit's fallback) goes to the
    log as "`label`: message", not to stderr as a Python warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = (CALIBRATORS[method]() if isinstance(method, str) else method).fit(logits, labels)
    for w in caught:
        log.warning("%s: %s", label, w.message)
    return cal
