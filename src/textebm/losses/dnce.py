"""Dynamic noise-contrastive estimation (DNCE) of trans-dimensional random fields (TRFs).

A TRF language model (Wang & Ou 2018, paper e's [23]; paper e, sec. 3.1-3.3) gives a sentence x of
length l the density

    log p_θ(l, x) = u_θ(x) − ζ_l + log π_l,

u_θ the potential (eq. 3 of paper e for pre-training; log Σ_y exp u_θ(x, y), the CRF's log-partition,
for joint training), ζ_l ≈ log Z_l the log-normaliser of length l, learnt as a parameter (NCE
self-normalises), and π_l the empirical length distribution (fixed). `trf_log_density` computes it.

DNCE (Wang & Ou, "Improved training of neural trans-dimensional random field language models with
dynamic noise-contrastive estimation", SLT 2018) changes NCE in two ways:

1. The noise q_φ (an LSTM LM) is *dynamic*: trained at the same time, by maximum likelihood on the
   data (minimising KL(p_d || q_φ)), so it follows the data and few noise samples suffice.
   `noise_nll` is that loss; q_φ gets no gradient from the NCE part (its log q enters detached).
2. The classifier tells the interpolation p_int = α p_d + (1 − α) q_φ from q_φ. Data-side samples
   are drawn from p_int (a fraction α of real sentences, 1 − α noise sentences: `mixed_noise_count`)
   and the model side is interpolated the same way, r_θ = α p_θ + (1 − α) q_φ, so that the
   optimum r_θ = p_int gives p_θ = p_d. With ν = #noise samples / #data-side samples,

       P(data side | x) = r_θ(x) / (r_θ(x) + ν q_φ(x)) = sigmoid(z),
       z = log r_θ(x) − log q_φ(x) − log ν,

   and the loss is NCE's binary cross-entropy over the data-side and noise samples, which is
   `textebm.losses.nce.nce_core(log r_θ, log q_φ, is_data, log ν)`: the maths is the same, only the
   model log-density is the interpolated one. α = 1 is plain NCE with a trained noise.

Where the released code differs (see docs/ssl.md): thu-spmi/CAT (`cat/lm/trf/model.py`, method
"dnce") interpolates the same way but weights each sample's ∇(u − ζ) by sigmoid(∓z) alone, without
the factor α p_θ / r_θ of the exact gradient; paper e's own TF code (thu-spmi/semi-EBM,
`train/trf_uns.py`, `nce_net_uns.py`) mixes noise sentences into the data side (`data_factor`) but
scores them with p_θ, not r_θ, and uses log Z_l = a·l + b (two parameters) instead of one ζ per length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from textebm.losses.nce import NCEOutput, nce_core
from textebm.precision import fp32_or_better


def trf_log_density(u: Tensor, lengths: Tensor, zeta: Tensor, log_pi: Tensor) -> Tensor:
    """log p(l, x) = u(x) − ζ_l + log π_l of a TRF, in fp32 or better.

    u: (B,) potentials. lengths: (B,) int, 1 <= l <= L. zeta: (L + 1,) log-normalisers indexed by
    length (entry 0 unused). log_pi: (L + 1,) log length probabilities (−inf where π_l = 0).
    -> (B,). A length past L is a ValueError (the TRF has no normaliser for it)."""
    if zeta.shape != log_pi.shape or zeta.dim() != 1:
        raise ValueError(f"zeta {tuple(zeta.shape)} and log_pi {tuple(log_pi.shape)} must be the same (L + 1,)")
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) >= zeta.shape[0]):
        raise ValueError(f"sentence lengths must lie in [1, {zeta.shape[0] - 1}], got "
                         f"{int(lengths.min())}..{int(lengths.max())}")
    dt = fp32_or_better(u.dtype)
    return u.to(dt) - zeta.to(dt)[lengths] + log_pi.to(dt)[lengths]  # (B,)


def interpolated_log_density(log_p: Tensor, log_q: Tensor, alpha: float) -> Tensor:
    """log r = log(α p + (1 − α) q) element-wise, stable in log space; α = 1 gives log p."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
    if alpha == 1.0:
        return log_p
    return torch.logaddexp(log_p + math.log(alpha), log_q + math.log1p(-alpha))  # (...)


def mixed_noise_count(n_data: int, alpha: float) -> int:
    """How many noise sentences join `n_data` real ones on the data side so that real ones are a
    fraction α of it: round(n_data (1 − α) / α) (thu-spmi/CAT truncates instead)."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
    return round(n_data * (1.0 - alpha) / alpha)


def dnce_loss(log_p: Tensor, log_q: Tensor, is_data: Tensor, alpha: float, nu: float,
              mask: Tensor | None = None) -> NCEOutput:
    """The DNCE loss of the TRF over data-side and noise samples (see the module docstring).

    log_p: (N,) the TRF's log p_θ(l, x) of every sample (`trf_log_density`).
    log_q: (N,) the noise LM's log q_φ(l, x) of every sample; detached here (q_φ learns from
        `noise_nll` only).
    is_data: (N,) bool, True for the data side (real sentences and the noise sentences mixed into
        it, i.e. samples of p_int), False for the noise samples.
    alpha: the interpolation weight α in (0, 1]; 1 is plain NCE.
    nu: the noise ratio ν = #noise / #data-side samples, > 0.
    mask: optional (N,) bool; False samples are ignored.

    Reduction "data": (Σ data-side softplus(−z) + Σ noise softplus(z)) / #data-side
    = data-side mean + ν · noise mean.
    """
    if not nu > 0 or not math.isfinite(nu):
        raise ValueError(f"noise ratio nu must be a positive number, got {nu}")
    if log_p.shape != log_q.shape:
        raise ValueError(f"log_p {tuple(log_p.shape)} and log_q {tuple(log_q.shape)} differ in shape")
    log_q = log_q.detach().to(log_p.dtype)  # (N,)
    log_r = interpolated_log_density(log_p, log_q, alpha)  # (N,)
    return nce_core(log_r, log_q, is_data, math.log(nu), mask=mask, reduction="data")


def noise_nll(log_q_data: Tensor, n_tokens: Tensor | int) -> Tensor:
    """The dynamic noise's own loss, −Σ log q_φ(x) / Σ l over the real sentences of the batch
    (per token, as thu-spmi/CAT; its minimiser over φ is that of KL(p_d || q_φ)). log_q_data: (B,)."""
    return -log_q_data.sum() / n_tokens
