"""Estimators of the log-partition function of a residual EBM (Deng et al. 2020, sec. 3.2, Theorem 2).

The joint model P(x) ∝ P_LM(x) exp(-E(x)) has Z = E_{x~P_LM}[exp(-E(x))]. From n samples of the
base LM with energies E_1..E_n:

    T_n = log (1/n) Σ_i exp(-E_i)                      (eq. 4; E[T_n] < log Z for large n)
    U_n = (2n - 1) T_n - 2(n - 1) T̄_{n-1}             (E[U_n] > log Z for large n)

where T̄_{n-1} is the mean over i of the leave-one-out estimate T_{n-1}^{(-i)} (the paper's
"leave-one-out strategy", after Nowozin 2018). Both bias terms are O(1/n) with opposite signs:
n (E[T_n] - log Z) → -μ₂ / (2μ²) and n (E[U_n] - log Z) → +μ₂ / (2μ²), μ = Z and μ₂ the variance of
exp(-E) (appendix A.2). They are bounds only asymptotically.

Everything is float64 with log-sum-exp; the leave-one-out sums come from prefix and suffix
log-add-exp, never from subtracting one weight from the total (U_n multiplies rounding by ~2n).
"""

from __future__ import annotations

import math

import numpy as np


def _loo_logsumexp(w: np.ndarray) -> np.ndarray:
    """log Σ_{j≠i} exp(w_j) for each i, by prefix and suffix log-add-exp. w (..., n) -> (..., n)."""
    edge = np.full(w.shape[:-1] + (1,), -np.inf)
    pre = np.logaddexp.accumulate(w, axis=-1)  # (..., n) log Σ_{j<=i}
    suf = np.logaddexp.accumulate(w[..., ::-1], axis=-1)[..., ::-1]  # (..., n) log Σ_{j>=i}
    before = np.concatenate([edge, pre[..., :-1]], axis=-1)  # (..., n) log Σ_{j<i}
    after = np.concatenate([suf[..., 1:], edge], axis=-1)  # (..., n) log Σ_{j>i}
    return np.logaddexp(before, after)  # (..., n)


def log_partition_estimates(energies):
    """(T_n, U_n) of Theorem 2 from the energies (..., n) of n ≥ 2 samples of the base LM; floats
    for one vector, arrays (...) for a batch of them (one estimate per row).

    Raises ValueError for n < 2 (U_n needs a leave-one-out estimate) or a non-finite energy."""
    e = np.asarray(energies, dtype=np.float64)
    if e.ndim == 0:
        e = e.reshape(1)
    n = e.shape[-1]
    if n < 2:
        raise ValueError(f"the upper estimate needs at least 2 samples, got {n}")
    if not np.all(np.isfinite(e)):
        raise ValueError("an energy is NaN or infinite")
    w = -e  # (..., n) log weights
    t_n = np.logaddexp.reduce(w, axis=-1) - math.log(n)  # (...)
    t_loo = _loo_logsumexp(w) - math.log(n - 1)  # (..., n) T_{n-1} without sample i
    u_n = (2 * n - 1) * t_n - 2 * (n - 1) * t_loo.mean(axis=-1)  # (...)
    if e.ndim == 1:
        return float(t_n), float(u_n)
    return t_n, u_n
