"""Noise-contrastive estimation (NCE): one core over log-scores, and the callers built on it.

NCE (Gutmann & Hyvärinen 2010; Ma & Collins 2018) trains an unnormalised model p̃_θ(x) to tell
data samples from noise samples drawn from a known distribution P_N. With ν = P(noise) / P(data)
(the noise-to-data ratio of the classification task; ν = K in He et al. 2021), the posterior that
a sample x is data is

    P(D=1 | x) = p̃_θ(x) / (p̃_θ(x) + ν P_N(x)) = sigmoid(z),
    z = log p̃_θ(x) − log P_N(x) − log ν,

and the loss is the binary cross-entropy of that classifier: softplus(−z) for a data sample,
softplus(z) for a noise sample. `nce_core` computes exactly this, element-wise over tensors of any
shape (one element per sequence, or one per token), with a per-element or broadcast log ν and a
mask. Its minimiser over p̃_θ is p̃_θ = p_data, self-normalised (Gutmann & Hyvärinen, Theorem 1).

Callers
-------
He et al. (2021), eq. (6):

    L = E_{x+ ~ P_D} −log P̃(x+) / (P̃(x+) + K P_N(x+))
      + K · E_{x- ~ P_N} −log K P_N(x-) / (P̃(x-) + K P_N(x-))

is `nce_core(−E, log P_N, is_data, log K)` with the default reduction "data" (sum over all
elements / number of data elements = data mean + K × noise mean when there are B data and B·K
noise samples). With the residual parameterisation of Deng et al. (2020), E(x) = Ê(x) − log P_N(x),
P̃(x) = exp(−Ê(x)) P_N(x), every P_N cancels (z = −Ê(x) − log K) and eq. (6) becomes eq. (7):

    L = E_{x+} −log 1 / (1 + K exp(Ê(x+)))  +  K · E_{x-} −log K / (K + exp(−Ê(x-)))
      = E_{x+} softplus(Ê(x+) + log K)      +  K · E_{x-} softplus(−Ê(x-) − log K)

`nce_loss(e_pos, e_neg, K)` is that thin caller: `nce_core(−Ê, 0, is_data, log K)`.

Deng et al. (2020), eq. (3) (residual EBM, noise = the LM conditioned on the same prefix, one
noise sequence per data sequence): `nce_core(−E_θ, 0, is_data, 0.0)`, since
log P_θ − log P_LM = −E_θ and K = 1.

Clark et al. (2020), Electric, Algorithm 2 (efficient NCE, per-token energies): for a sequence of
n tokens of which the k positions in R were replaced by noise tokens x̂_t ~ q(· | x_\\t), every
position t adds −log of

    (n−k) p̂_θ(x_t | x^noised_\\t) / ((n−k) p̂_θ(x_t | ·) + k q(x_t | x_\\t))       t ∉ R (data)
    k q(x̂_t | x_\\t) / ((n−k) p̂_θ(x̂_t | ·) + k q(x̂_t | x_\\t))                  t ∈ R (noise)

with p̂_θ = exp(−E(x^noised)_t). That is `nce_core` on (B, T) tensors with

    log_model = −E(x^noised)_t,  log_noise = log q(x^noised_t | x_\\t),  is_data = t ∉ R,
    log_prior_ratio = log(k_i / (n_i − k_i))  of shape (B, 1)  (n_i real tokens, k_i replaced),
    mask = the attention mask,   reduction = "sum"  (Algorithm 2 sums over t; summed over the batch),

i.e. z_t = −E_t − log q_t − log(k/(n−k)). The released code (google-research/electra,
`electric_objective`) uses the fixed prior log(p/(1−p)) with p = mask_prob, and averages over
all non-padding tokens of the batch: reduction = "mean".

Softplus is `logaddexp(0, ·)`: exact and overflow-free for any finite argument.
Related: `textebm.energy` gives Ê for the scalar / hidden / sharp-hidden variants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

REDUCTIONS = ("data", "mean", "sum")


@dataclass
class NCEOutput:
    """Loss and its pieces; every field is a 0-d tensor. Only `loss` carries a useful gradient."""

    loss: Tensor  # pos + neg (eq. 7 for `nce_loss`)
    pos: Tensor  # data part: sum over data of softplus(−z), / the reduction's denominator
    neg: Tensor  # noise part: sum over noise of softplus(z), / the same denominator
    acc_data: Tensor  # fraction of data samples with P(data | x) > 0.5, i.e. z > 0
    acc_noise: Tensor  # fraction of noise samples with P(data | x) <= 0.5, i.e. z <= 0
    accuracy: Tensor  # fraction of all (unmasked) samples classified correctly (NaN if none)
    count: Tensor  # how many samples took part (data + noise): the weight of `accuracy` in an average


def _softplus(x: Tensor) -> Tensor:
    return torch.logaddexp(torch.zeros_like(x), x)  # log(1 + exp(x)), stable for |x| large


def _check_term(name: str, value, shape: torch.Size) -> None:
    """A float, or a tensor broadcastable to `shape` without enlarging it."""
    if isinstance(value, Tensor):
        if not value.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {value.dtype}")
        try:
            ok = torch.broadcast_shapes(value.shape, shape) == shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"{name} of shape {tuple(value.shape)} does not broadcast to {tuple(shape)}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
    else:
        raise ValueError(f"{name} must be a float or a tensor, got {type(value).__name__}")


def nce_core(log_model: Tensor, log_noise: Tensor | float, is_data: Tensor,
             log_prior_ratio: Tensor | float, mask: Tensor | None = None,
             reduction: str = "data") -> NCEOutput:
    """The NCE binary-classification loss over samples of any shape (see the module docstring).

    log_model: (...) unnormalised model log-density s = log p̃_θ(x) = −E(x) of each sample.
    log_noise: (...) or broadcastable, or a float: log P_N(x) of each sample (0 where it cancels).
    is_data: (...) bool, True for data samples, False for noise samples.
    log_prior_ratio: float or tensor broadcastable to (...): log ν = log(P(noise) / P(data)),
        log K for eq. (6)-(7), log(k / (n−k)) per sequence (shape (B, 1)) for Electric.
    mask: (...) bool or None; False elements are ignored entirely (value and gradient).
    reduction: the denominator of the summed loss elements over unmasked samples:
        "data": number of data samples (default; Gutmann & Hyvärinen's J_T, He et al. eq. (6)-(7):
                data mean + ν · noise mean when #noise = ν · #data);
        "mean": number of samples (released Electric / ELECTRA code: mean over non-padding tokens);
        "sum":  1 (Electric's Algorithm 2 as printed: the sum over positions).
        A zero count is replaced by 1 (an empty selection gives loss 0, not NaN); the
        accuracies of an empty set are NaN.

    Posterior logit of "data": z = s − log P_N(x) − log ν; loss elements softplus(−z) for data,
    softplus(z) for noise. Returns NCEOutput (accuracies computed without gradient).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {', '.join(REDUCTIONS)}")
    if not isinstance(log_model, Tensor) or not log_model.is_floating_point():
        raise ValueError("log_model must be a floating-point tensor")
    shape = log_model.shape
    if not isinstance(is_data, Tensor) or is_data.dtype != torch.bool or is_data.shape != shape:
        raise ValueError(f"is_data must be a bool tensor of shape {tuple(shape)}, got "
                         f"{getattr(is_data, 'dtype', type(is_data).__name__)} "
                         f"{tuple(getattr(is_data, 'shape', ()))}")
    if mask is not None and (not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != shape):
        raise ValueError(f"mask must be None or a bool tensor of shape {tuple(shape)}, got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)} {tuple(getattr(mask, 'shape', ()))}")
    _check_term("log_noise", log_noise, shape)
    _check_term("log_prior_ratio", log_prior_ratio, shape)

    z = log_model - log_noise - log_prior_ratio  # (...) logit of P(data | x)
    if mask is not None:
        z = torch.where(mask, z, torch.zeros_like(z))  # (...) no value or gradient from masked elements
        sel_data = is_data & mask  # (...)
        sel_noise = ~is_data & mask  # (...)
    else:
        sel_data = is_data  # (...)
        sel_noise = ~is_data  # (...)
    elem = _softplus(torch.where(is_data, -z, z))  # (...) −log P(true class | x)
    zero = torch.zeros_like(elem)  # (...)
    n_data = sel_data.sum()  # () int
    n_noise = sel_noise.sum()  # () int
    if reduction == "data":
        denom = n_data.clamp(min=1)  # ()
    elif reduction == "mean":
        denom = (n_data + n_noise).clamp(min=1)  # ()
    else:
        denom = 1
    pos = torch.where(sel_data, elem, zero).sum() / denom  # ()
    neg = torch.where(sel_noise, elem, zero).sum() / denom  # ()
    with torch.no_grad():
        says_data = z > 0  # (...) P(data | x) > 0.5
        data_ok = (sel_data & says_data).sum()  # ()
        noise_ok = (sel_noise & ~says_data).sum()  # ()
        acc_data = data_ok / n_data  # () NaN if no data sample
        acc_noise = noise_ok / n_noise  # ()
        accuracy = (data_ok + noise_ok) / (n_data + n_noise)  # ()
    return NCEOutput(loss=pos + neg, pos=pos, neg=neg, acc_data=acc_data, acc_noise=acc_noise,
                     accuracy=accuracy, count=n_data + n_noise)


def nce_loss(e_pos: Tensor, e_neg: Tensor, k: int) -> NCEOutput:
    """Eq. (7) of He et al. (2021) from residual energies: `nce_core(−Ê, 0, is_data, log K)`.

    e_pos: (B,) energies Ê of the data samples.
    e_neg: (B*K,) or (B, K) energies Ê of the noise samples.
    k: the noise ratio K >= 1 (number of noise samples per data sample).
    pos = mean over data of softplus(Ê(x+) + log K); neg = K · mean over noise of
    softplus(−Ê(x-) − log K); a sample counts as "data" when Ê(x) < −log K.
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
    energy = torch.cat([e_pos, e_neg.reshape(-1)])  # (B + B*K,)
    is_data = torch.arange(energy.shape[0], device=energy.device) < b  # (B + B*K,)
    # residual form: log p̃ − log P_N = −Ê, so log P_N cancels and enters as 0
    return nce_core(-energy, 0.0, is_data, math.log(k))
