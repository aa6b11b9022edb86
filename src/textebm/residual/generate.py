"""Algorithm 1 of Deng et al. (2020), top-k joint sampling: n candidate continuations of a prefix
from the base LM with top-k (batched, key-value cache), their energies, and one output resampled
in proportion to exp(−E). Without truncation (`top_k` 0) and as n grows the output follows the
joint model exactly; with top-k it follows P_LM^top-k(x) exp(−E(x)) / Z.

Every candidate and the resampling draw are seeded from the prefix's own seed, so an output
depends neither on the batch size nor on the other prefixes of a run, and a resumed run writes the
same rows. Candidate 0 is a plain top-k sample of the base LM: the same run shows the base LM's
output beside the joint model's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from textebm.residual.joint import BaseLM, JointEnergy
from textebm.residual.resample import resample
from textebm.seeds import derive_seed


@dataclass
class JointSample:
    candidates: list[list[int]]  # the n continuations drawn from the base LM (top-k)
    logq: np.ndarray  # (n,) their log-probabilities under the top-k sampling distribution
    energies: np.ndarray  # (n,) E(prefix + candidate), float64
    index: int  # the resampled candidate
    weights: np.ndarray  # (n,) normalised resampling weights
    ess: float  # effective sample size of the weights, in [1, n]

    @property
    def tokens(self) -> list[int]:
        return self.candidates[self.index]


def joint_sample(base: BaseLM, energy: JointEnergy, prefix: Sequence[int], length: int, n: int, top_k: int,
                 seed: int, batch_size: int = 64, use_cache: bool = True) -> JointSample:
    """Algorithm 1 for one prefix: `n` candidates of `length` tokens, seeded by (seed, i), and the
    resampling draw seeded by (seed, "resample"). `use_cache=False` scores every window in full."""
    ctx = base.context(prefix)
    gens = base.sample([ctx] * n, length, [derive_seed(seed, "candidate", i) for i in range(n)], top_k, batch_size)
    cands = [g.tokens for g in gens]
    e = energy.continuation_energies(prefix, cands, batch_size, use_cache)  # (n,)
    r = resample(e, torch.Generator().manual_seed(derive_seed(seed, "resample")))
    return JointSample(cands, np.array([g.logprob for g in gens]), e, r.index, r.weights, r.ess)
