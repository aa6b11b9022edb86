"""Residual noise-contrastive estimation (NCE) loss, eq. (7) of He et al. (2021).

NCE (Gutmann & Hyvärinen 2010; Ma & Collins 2018) trains an unnormalised model
P̃(x) = exp(-E(x)) to tell data samples x+ ~ P_D from K times as many noise samples x- ~ P_N.
Eq. (6):

    L = E_{x+ ~ P_D} -log P̃(x+) / (P̃(x+) + K P_N(x+))
      + K · E_{x- ~ P_N} -log K P_N(x-) / (P̃(x-) + K P_N(x-))

With the residual parameterisation of Deng et al. (2020), E(x) = Ê(x) - log P_N(x), we have
P̃(x) = exp(-Ê(x)) P_N(x), so every P_N(x) cancels and eq. (6) becomes eq. (7):

    L = E_{x+} -log 1 / (1 + K exp(Ê(x+)))  +  K · E_{x-} -log K / (K + exp(-Ê(x-)))
      = E_{x+} softplus(Ê(x+) + log K)      +  K · E_{x-} softplus(-Ê(x-) - log K)

The second line is what is computed (softplus via `logaddexp(0, ·)`, exact and overflow-free for
any finite energy). Expectations are sample means: the data term is the mean over the B data
samples, the noise term is K times the mean over the B·K noise samples.

The posterior that a sample is data is P(D=1 | x) = 1 / (1 + K exp(Ê(x))) = sigmoid(-Ê(x) - log K);
a sample counts as classified "data" when that posterior is > 0.5, i.e. Ê(x) < -log K.

Related: `textebm.energy` gives Ê for the scalar / hidden / sharp-hidden variants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class NCEOutput:
    """Loss and its pieces; every field is a 0-d tensor. Only `loss` carries a useful gradient."""

    loss: Tensor  # pos + neg, eq. (7)
    pos: Tensor  # mean over data of softplus(Ê(x+) + log K)
    neg: Tensor  # K * mean over noise of softplus(-Ê(x-) - log K)
    acc_data: Tensor  # fraction of data samples with P(data | x) > 0.5
    acc_noise: Tensor  # fraction of noise samples with P(noise | x) > 0.5
    accuracy: Tensor  # fraction of all B + B·K samples classified correctly


def _softplus(x: Tensor) -> Tensor:
    return torch.logaddexp(torch.zeros_like(x), x)  # log(1 + exp(x)), stable for |x| large


def nce_loss(e_pos: Tensor, e_neg: Tensor, k: int) -> NCEOutput:
    """Eq. (7) from energies.

    e_pos: (B,) energies Ê of the data samples.
    e_neg: (B*K,) or (B, K) energies Ê of the noise samples.
    k: the noise ratio K >= 1 (number of noise samples per data sample).
    """
    if k < 1 or int(k) != k:
        raise ValueError(f"noise ratio K must be a positive integer, got {k}")
    if e_pos.dim() != 1:
        raise ValueError(f"e_pos must have shape (B,), got {tuple(e_pos.shape)}")
    b = e_pos.shape[0]
    if e_neg.dim() == 2 and e_neg.shape[1] != k:
        raise ValueError(f"e_neg of shape {tuple(e_neg.shape)} does not match K={k}")
    if e_neg.numel() != b * k or e_neg.dim() > 2:
        raise ValueError(f"e_neg must hold B*K = {b}*{k} energies, got shape {tuple(e_neg.shape)}")
    if b == 0:
        raise ValueError("nce_loss needs at least one data sample")
    e_neg = e_neg.reshape(-1)  # (B*K,)
    log_k = math.log(k)
    pos = _softplus(e_pos + log_k).mean()  # (B,) -> ()
    neg = k * _softplus(-e_neg - log_k).mean()  # (B*K,) -> ()
    with torch.no_grad():
        data_ok = (e_pos < -log_k).float()  # (B,) P(data|x+) > 0.5
        noise_ok = (e_neg > -log_k).float()  # (B*K,) P(noise|x-) > 0.5
        accuracy = (data_ok.sum() + noise_ok.sum()) / (b + b * k)
    return NCEOutput(
        loss=pos + neg,
        pos=pos,
        neg=neg,
        acc_data=data_ok.mean(),
        acc_noise=noise_ok.mean(),
        accuracy=accuracy,
    )
