"""Training objectives as pure functions of tensors (energies, logits), one per module.

- `nce`: residual noise-contrastive estimation, eq. (7) of He et al. (2021).
- `poscal`: PosCal calibration penalty (Jung et al. 2020).
"""

from textebm.losses.nce import NCEOutput, nce_loss
from textebm.losses.poscal import PosCalStats, poscal_penalty

__all__ = ["NCEOutput", "nce_loss", "PosCalStats", "poscal_penalty"]
