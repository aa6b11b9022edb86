"""Algorithm 1 of Deng et al. (2020), its resampling step: from n candidates x_1..x_n drawn from the
base LM (top-k) with energies E_1..E_n, return x_i with probability exp(−E_i) / Σ_j exp(−E_j).

The weights are normalised in float64 by log-sum-exp; each output keeps its candidates' weights
and their effective sample size ESS = (Σ w)² / Σ w² (1 when one candidate takes all the weight,
n when all weigh the same), the usual health check of importance resampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Resampled:
    index: int  # the chosen candidate
    weights: np.ndarray  # (n,) float64 normalised weights exp(−E_i) / Σ_j exp(−E_j)
    ess: float  # effective sample size of the weights, in [1, n]


def resample(energies, generator: torch.Generator) -> Resampled:
    """One draw of Algorithm 1's resampling from candidate energies (n,), n ≥ 1, by the inverse CDF
    with one uniform from `generator` (seeded per prefix: the draw does not depend on the batch)."""
    e = np.asarray(energies, dtype=np.float64).reshape(-1)  # (n,)
    if e.size == 0 or not np.all(np.isfinite(e)):
        raise ValueError("resampling needs at least one candidate and finite energies")
    logw = -e - np.logaddexp.reduce(-e)  # (n,) log normalised weights
    w = np.exp(logw)  # (n,)
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    index = int(min(np.searchsorted(np.cumsum(w), u * w.sum(), side="right"), e.size - 1))
    return Resampled(index, w, float(1.0 / np.sum(w * w)))
