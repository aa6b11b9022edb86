"""Losses of sequence energies against LM-generated negatives (Bakhtin et al. 2019, sec. 3.1 and
appendix C; the residual EBMs of Deng et al. 2020 train the same energies).

E(x | c) is the energy of a window given its context; low energy = real text. Each positive x+ has
k negatives x−_1..k generated from the same context.

Binary cross-entropy, eq. (1), written with the correct signs (the printed equation has a sign
typo: its second term must be −log σ(E(x−))):

    L_BCE = −log σ(−E(x+)) − log σ(E(x̃−)) = softplus(E(x+)) + softplus(−E(x̃−))

with x̃− chosen by `negatives`:
    "worst"   the most offending negative, the one with the LOWEST energy (the paper's default)
    "random"  one of the k at random (table 7's "1 random")
    "all"     every one of the k, their terms averaged (table 7's "all random"), so the positive
              and the negative side weigh the same

This is the NCE core (`textebm.losses.nce.nce_core`) with log p̃ = −E, no noise term and prior
ratio 1 (ν = 1): z = −E, data loss softplus(−z), noise loss softplus(z), as Deng et al.'s eq. (3).

Ranking loss, appendix C, eq. (2), with the margin an option (1 in eq. 2, 0.1 in figure 3):

    L_r = max(0, margin + E(x+) − E(x̃−))

with the same choice of x̃−. Both return the mean over the batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from textebm.losses.nce import NCEOutput, nce_core

NEGATIVES = ("worst", "random", "all")


def pick_negatives(e_neg: Tensor, negatives: str, generator: torch.Generator | None = None) -> Tensor:
    """The negatives' energies that enter the loss: (B, 1) for worst / random, (B, K) for all.

    e_neg: (B, K)."""
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {', '.join(NEGATIVES)}, got {negatives!r}")
    if e_neg.dim() != 2 or e_neg.shape[1] < 1:
        raise ValueError(f"e_neg must have shape (B, K) with K >= 1, got {tuple(e_neg.shape)}")
    if negatives == "all":
        return e_neg
    if negatives == "worst":
        idx = e_neg.detach().argmin(1, keepdim=True)  # (B, 1) the lowest energy: most offending
    else:
        idx = torch.randint(0, e_neg.shape[1], (e_neg.shape[0], 1), generator=generator,
                            device=e_neg.device)  # (B, 1)
    return e_neg.gather(1, idx)  # (B, 1)


def residual_bce(e_pos: Tensor, e_neg: Tensor, negatives: str = "worst",
                 generator: torch.Generator | None = None) -> NCEOutput:
    """Eq. (1): mean over the batch of softplus(E(x+)) + softplus(−E(x̃−)) (averaged over x̃− for "all").

    e_pos: (B,) energies of the positives; e_neg: (B, K) of their negatives. Accuracies in the
    output count a window as "real" when E < 0 (σ(−E) > 0.5)."""
    if e_pos.dim() != 1 or e_neg.shape[0] != e_pos.shape[0]:
        raise ValueError(f"e_pos (B,) and e_neg (B, K) do not match: {tuple(e_pos.shape)}, {tuple(e_neg.shape)}")
    chosen = pick_negatives(e_neg, negatives, generator)  # (B, J)
    b, j = chosen.shape
    energy = torch.cat([e_pos, chosen.reshape(-1)])  # (B + B*J,)
    is_data = torch.arange(energy.shape[0], device=energy.device) < b  # (B + B*J,)
    out = nce_core(-energy, 0.0, is_data, 0.0, reduction="sum")
    pos, neg = out.pos / b, out.neg / (b * j)
    return NCEOutput(loss=pos + neg, pos=pos, neg=neg, acc_data=out.acc_data, acc_noise=out.acc_noise,
                     accuracy=(out.acc_data + out.acc_noise) / 2, count=out.count)


def ranking_loss(e_pos: Tensor, e_neg: Tensor, margin: float = 1.0, negatives: str = "worst",
                 generator: torch.Generator | None = None) -> Tensor:
    """Eq. (2): mean over the batch of max(0, margin + E(x+) − E(x̃−)) (averaged over x̃− for "all")."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    chosen = pick_negatives(e_neg, negatives, generator)  # (B, J)
    return torch.relu(margin + e_pos[:, None] - chosen).mean()


def precision_at_1(e_pos: Tensor, e_neg: Tensor) -> Tensor:
    """P@1 (appendix C): the fraction of positives whose energy is below all of their negatives'."""
    return (e_pos < e_neg.min(1).values).float().mean()
