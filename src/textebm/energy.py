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

Also here, for any model that turns a token sequence into one energy: `pool` (a sentence vector
from a (B, T, H) hidden state, `POOLINGS`) and `sequence_energy` (the variant dispatch, with
"none" for a plain classifier that trains no energy). Command options take their choices from
`VARIANTS`, `ENERGY_CHOICES` and `POOLINGS`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from textebm.precision import fp32_or_better

VARIANTS = ("scalar", "hidden", "sharp-hidden")
ENERGY_CHOICES = ("none", *VARIANTS)  # `--energy`: none = plain fine-tuning, no energy
POOLINGS = ("mean", "cls")


class ScalarEnergyHead(nn.Module):
    """g_S of eq. (3): a linear map from the pooled encoding to one energy per example."""

    def __init__(self, hidden: int):
        super().__init__()
        self.proj = nn.Linear(hidden, 1)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.proj(pooled).squeeze(-1)  # (..., H) -> (...)


def fp32_linear(h: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """The output layer of every energy and score head: h W^T + b in fp32 or better (fp64 stays
    fp64), so a model whose body runs in bf16 still gives fp32 energies (under training's autocast
    the multiply runs in the autocast precision, as every other). h (..., H), weight (O, H), bias
    (O,) -> (..., O)."""
    dt = fp32_or_better(h.dtype)
    return nn.functional.linear(h.to(dt), weight.to(dt), bias.to(dt))  # (..., O)


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


def energy_head(variant: str, hidden: int) -> ScalarEnergyHead | None:
    """The parameters a variant adds to a classifier: g_S for "scalar", nothing otherwise."""
    if variant not in ENERGY_CHOICES:
        raise ValueError(f"unknown energy variant {variant!r}; expected one of {', '.join(ENERGY_CHOICES)}")
    return ScalarEnergyHead(hidden) if variant == "scalar" else None


def sequence_energy(variant: str, logits: Tensor, pooled: Tensor, head: ScalarEnergyHead | None = None
                    ) -> Tensor | None:
    """Ê(x) of `variant` for a batch, or None for "none".

    logits: (B, |Y|) classifier logits; pooled: (B, H) sentence encodings (input of g_S);
    head: the `energy_head(variant, H)` of the model. Returns (B,) fp32 energies or None.
    """
    if variant == "none":
        return None
    scalar = None
    if variant == "scalar":
        if head is None:
            raise ValueError("energy variant 'scalar' needs the model's ScalarEnergyHead (head=...)")
        scalar = head(pooled).float()  # (B,)
    return energy_from(variant, logits.float(), scalar)  # (B,)


def pool(hidden: Tensor, mask: Tensor, how: str = "mean") -> Tensor:
    """One vector per sequence from hidden states (B, T, H) and the attention mask (B, T).

    mean: average over the real (mask 1) tokens, accumulated in fp32 (fp64 stays fp64); cls: the first token.
    Returns (B, H) in the hidden states' dtype.
    """
    if how == "cls":
        return hidden[:, 0]  # (B, H)
    if how != "mean":
        raise ValueError(f"unknown pooling {how!r}; expected one of {', '.join(POOLINGS)}")
    acc = fp32_or_better(hidden.dtype)
    m = mask.unsqueeze(-1).to(acc)  # (B, T, 1)
    summed = (hidden.to(acc) * m).sum(1)  # (B, H)
    return (summed / m.sum(1).clamp(min=1)).to(hidden.dtype)  # (B, H)
