"""Energy functions defined on top of a text classifier (He et al. 2021, sec. 2.2).

An energy-based model writes P(x) = exp(-E(x)) / Z. Given an encoder `enc(x)` and a classifier
head `f_CLS` producing |Y| logits, three variants of the energy Ê(x) are used:

- scalar (eq. 3):        Ê(x) = g_S(enc(x)), a separate linear head with one output;
- hidden (eq. 4):        Ê(x) = -LogSumExp_y f_CLS(enc(x))[y], the EBM "hidden" in every softmax
                         classifier (Grathwohl et al. 2019): exp(-Ê(x)) = sum_y exp(logit_y);
- sharp-hidden (eq. 5):  Ê(x) = -max_y f_CLS(enc(x))[y], an approximation of (4) that ties the
                         energy to the predicted class.

Since max_y l_y <= LogSumExp_y l_y <= max_y l_y + log|Y|, the variants satisfy
hidden <= sharp-hidden <= hidden + log|Y|.

In NCE training the full energy is E(x) = Ê(x) - log P_N(x) (Deng et al. 2020); that shift is
folded into the loss (`textebm.losses.nce`), so everything here returns Ê only.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

VARIANTS = ("scalar", "hidden", "sharp-hidden")


class ScalarEnergyHead(nn.Module):
    """g_S of eq. (3): a linear map from the pooled encoding to one energy per example."""

    def __init__(self, hidden: int):
        super().__init__()
        self.proj = nn.Linear(hidden, 1)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.proj(pooled).squeeze(-1)  # (..., H) -> (...)


def hidden_energy(logits: Tensor) -> Tensor:
    """Eq. (4): Ê(x) = -logsumexp_y logits[y]. logits (..., |Y|) -> energies (...)."""
    return -torch.logsumexp(logits, dim=-1)  # (..., C) -> (...)


def sharp_hidden_energy(logits: Tensor) -> Tensor:
    """Eq. (5): Ê(x) = -max_y logits[y]. logits (..., |Y|) -> energies (...).

    The gradient flows to the arg-max logit only (the sub-gradient torch picks for max)."""
    return -logits.max(dim=-1).values  # (..., C) -> (...)


def energy_from(variant: str, logits: Tensor, scalar: Tensor | None = None) -> Tensor:
    """Ê(x) for one of `VARIANTS`.

    variant: "scalar" | "hidden" | "sharp-hidden".
    logits: (B, |Y|) classifier logits (ignored for "scalar").
    scalar: (B,) output of a `ScalarEnergyHead`; required for "scalar".
    Returns (B,) energies.
    """
    if variant == "scalar":
        if scalar is None:
            raise ValueError("energy variant 'scalar' needs the output of a ScalarEnergyHead (scalar=...)")
        return scalar  # (B,)
    if variant == "hidden":
        return hidden_energy(logits)  # (B,)
    if variant == "sharp-hidden":
        return sharp_hidden_energy(logits)  # (B,)
    raise ValueError(f"unknown energy variant {variant!r}; expected one of {', '.join(VARIANTS)}")
