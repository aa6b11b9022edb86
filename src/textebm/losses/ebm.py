"""Maximum-likelihood losses of an EBM over continuous x (JEM, Grathwohl et al. 2020), as pure
functions of potentials; paper e's image methods (Song & Ou 2021, sec. 3.2-3.3) are built on them.

For p_θ(x) = exp(u_θ(x)) / Z(θ), the log-likelihood's gradient is
∇ log p_θ(x) = ∇u_θ(x) − E_{x'~p_θ}[∇u_θ(x')] (paper e, eq. 2). With x' drawn by SGLD
(`textebm.langevin`) and held fixed, the loss

    L_ML = −mean_data u(x) + mean_samples u(x')

has that gradient (negated); its value is not a likelihood. `energy_reg` adds
energy_reg · mean(u(x)² + u(x')²), the energy-magnitude penalty of Du & Mordatch (2019), which
keeps the energies near zero (0 turns it off).

Joint training (sec. 3.3): u(x, y) = Ψ(x)[y], so p(y | x) = softmax(Ψ(x)) and the marginal is
u(x) = logsumexp_y Ψ(x)[y]; the loss is the cross-entropy on labelled images plus `weight` times
L_ML of the marginal on unlabelled images and their SGLD samples.
"""

from __future__ import annotations

import torch
from torch import Tensor

from textebm.precision import fp32_or_better


def marginal_potential(logits: Tensor) -> Tensor:
    """u(x) = logsumexp_y Ψ(x)[y]: logits (B, K) -> (B,), in fp32 or better."""
    return torch.logsumexp(logits.to(fp32_or_better(logits.dtype)), -1)  # (B,)


def ebm_ml_loss(u_data: Tensor, u_samples: Tensor, energy_reg: float = 0.0) -> Tensor:
    """−mean u(data) + mean u(samples) (+ energy_reg · mean(u² over both)); u_data (B,), u_samples (N,)."""
    loss = u_samples.mean() - u_data.mean()
    if energy_reg:
        loss = loss + energy_reg * (u_data.pow(2).mean() + u_samples.pow(2).mean())
    return loss


def joint_ssl_loss(logits_labelled: Tensor, labels: Tensor, logits_unlabelled: Tensor, logits_samples: Tensor,
                   weight: float = 1.0, energy_reg: float = 0.0) -> tuple[Tensor, Tensor, Tensor]:
    """(total, cross-entropy, L_ML) of joint training: logits (B, K), labels (B,), the unlabelled
    images' logits (U, K) and the SGLD samples' (N, K); total = CE + weight · L_ML of the marginal."""
    ce = torch.nn.functional.cross_entropy(logits_labelled.to(fp32_or_better(logits_labelled.dtype)), labels)
    ml = ebm_ml_loss(marginal_potential(logits_unlabelled), marginal_potential(logits_samples), energy_reg)
    return ce + weight * ml, ce, ml
