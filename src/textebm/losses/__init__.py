"""Training objectives as pure functions of tensors (energies, logits), one per module.

- `nce`: noise-contrastive estimation: `nce_core` over log-scores, noise log-probabilities, priors
  and a mask (per sequence or per token); `nce_loss` is eq. (7) of He et al. (2021) on top of it.
- `electric`: Electric's Algorithms 1 and 2 and ELECTRA's replaced-token detection (Clark et al. 2020),
  callers of the NCE core over per-token tensors.
- `residual`: sequence energies against LM negatives (Bakhtin et al. 2019): BCE with the most
  offending / a random / all negatives, the ranking loss, P@1.
- `poscal`: PosCal calibration penalty (Jung et al. 2020).
- `crf`: the linear-chain CRF of paper e (Song & Ou 2021, eq. 6): log-partition by the forward
  algorithm, sequence score, negative log-likelihood, node marginals, batched Viterbi.
- `dnce`: the TRF's log-density u − ζ_l + log π_l and dynamic NCE (Wang & Ou 2018, paper e's [23]),
  a caller of the NCE core with the interpolated model α p_θ + (1 − α) q.
"""

from textebm.losses.nce import NCEOutput, nce_core, nce_loss
from textebm.losses.poscal import PosCalStats, poscal_penalty

__all__ = ["NCEOutput", "nce_core", "nce_loss", "PosCalStats", "poscal_penalty"]
