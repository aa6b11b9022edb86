"""Electric's NCE estimators and ELECTRA's replaced-token detection, over per-token tensors.

Clark et al. (2020), "Pre-Training Transformers as Energy-Based Cloze Models". Electric gives
every position t of a sequence x of n tokens an energy E(x)_t; p̂_θ(x_t | x_\\t) = exp(−E(x)_t).
The noise q(x_t | x_\\t) is a two-tower cloze model (`textebm.models.cloze.TwoTower`). Both
estimators below are callers of the one NCE core (`textebm.losses.nce.nce_core`) with the
posterior logit of "data"

    z = −E_t − log q(token_t | x_\\t) − log ν,

and differ in which tokens they score, in which context, and in ν:

Algorithm 1 (naive, k + 1 passes): the n data positions are scored on the clean x; each of the
k negatives is a copy of x with ONE position t ~ unif{1..n} replaced by x̂_t ~ q(· | x_\\t), scored
at that position. ν = k / n (the loss weights n·p̂ against k·q):

    Σ_t −log n p̂(x_t|x_\\t) / (n p̂ + k q(x_t|x_\\t))  +  Σ_j −log k q(x̂_j|·) / (n p̂(x̂_j|·) + k q(x̂_j|·))

Algorithm 2 (efficient, one pass): k unique positions R are replaced at once (x^noised) and
every position is scored in x^noised, ν = k / (n − k):

    Σ_{t∉R} −log (n−k) p̂(x_t|x^noised_\\t) / ((n−k) p̂ + k q(x_t|x_\\t))
  + Σ_{t∈R} −log k q(x̂_t|x_\\t) / ((n−k) p̂(x̂_t|x^noised_\\t) + k q(x̂_t|x_\\t))

Every position in R counts as noise even where the sample equals the original token (as the
paper and the released code do); q and its samples come from the CLEAN x. Both functions return
the SUM over sequences and positions (Algorithm 2 sums over t); the training step divides by the
number of real tokens of the batch, as the released code averages. log q enters as data: callers
pass it detached, so no NCE gradient reaches the noise model (q learns by maximum likelihood).

ELECTRA (sec. 2.5): the discriminator's logit s_t models P(replaced) = σ(s_t); trained by binary
cross-entropy against "t ∈ R" (without the log q term). Its token log-scores follow from the same
posterior with Algorithm 2's priors: σ(s_t) = k q / ((n−k) p + k q), hence

    log p(x_t | x_\\t) = log q(x_t | x_\\t) − s_t + log(k / (n − k)).
"""

from __future__ import annotations

import torch
from torch import Tensor

from textebm.losses.nce import NCEOutput, nce_core


def num_replaced(n: Tensor, fraction: float) -> Tensor:
    """k = ceil(fraction · n) per sequence, kept within [1, n − 1] so both classes exist (0 for n < 2).

    n: (B,) int number of real tokens.  Returns (B,) int."""
    k = torch.ceil(n.double() * fraction).long()  # (B,)
    k = torch.minimum(k.clamp(min=1), n - 1)  # (B,)
    return k.clamp(min=0)


def log_prior(k: Tensor, n_data: Tensor) -> Tensor:
    """log(k / n_data) per sequence as a (B, 1) float tensor (0 where the sequence takes no part)."""
    ok = (k > 0) & (n_data > 0)
    r = torch.where(ok, k.double() / n_data.clamp(min=1).double(), torch.ones_like(k, dtype=torch.double))
    return r.log().float().unsqueeze(1)  # (B, 1)


def electric_nce(energy: Tensor, log_q: Tensor, replaced: Tensor, mask: Tensor) -> NCEOutput:
    """Algorithm 2 (efficient NCE), summed over sequences and positions.

    energy:   (B, T) E(x^noised)_t from one pass over the noised sequences.
    log_q:    (B, T) log q(x^noised_t | x_\\t) from the noise model's pass over the CLEAN x
              (pass it detached: q is not trained by this loss).
    replaced: (B, T) bool, t ∈ R.
    mask:     (B, T) bool, the n real positions of each sequence (no padding or special tokens).
    n and k are counted from `mask` and `replaced`; a sequence with k = 0 or k = n takes no part.
    """
    mask = mask & _active(replaced, mask)  # (B, T)
    n = mask.sum(1)  # (B,)
    k = (replaced & mask).sum(1)  # (B,)
    return nce_core(-_f32(energy), _f32(log_q), ~replaced, log_prior(k, n - k), mask, reduction="sum")


def electric_nce_naive(energy_data: Tensor, log_q_data: Tensor, mask: Tensor,
                       energy_noise: Tensor, log_q_noise: Tensor, noise_mask: Tensor) -> NCEOutput:
    """Algorithm 1 (naive NCE, k + 1 passes), summed over sequences and samples.

    energy_data:  (B, T) E(x)_t of the clean sequences; log_q_data: (B, T) log q(x_t | x_\\t).
    mask:         (B, T) bool, the n real positions.
    energy_noise: (B, K) E at position t_j of the copy of x with only t_j replaced by x̂_j;
    log_q_noise:  (B, K) log q(x̂_j | x_\\t_j);  noise_mask: (B, K) bool, the k negatives that exist.
    ν = k / n per sequence.
    """
    n = mask.sum(1)  # (B,)
    k = noise_mask.sum(1)  # (B,)
    prior = log_prior(k, n)  # (B, 1)
    log_model = _f32(torch.cat([-energy_data, -energy_noise], 1))  # (B, T + K)
    log_noise = _f32(torch.cat([log_q_data, log_q_noise], 1))  # (B, T + K)
    is_data = torch.cat([torch.ones_like(mask), torch.zeros_like(noise_mask)], 1)  # (B, T + K)
    active = ((k > 0) & (n > 0)).unsqueeze(1)  # (B, 1)
    both = torch.cat([mask, noise_mask], 1) & active  # (B, T + K)
    return nce_core(log_model, log_noise, is_data, prior, both, reduction="sum")


def electra_rtd(logits: Tensor, replaced: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """ELECTRA's replaced-token detection: (summed binary cross-entropy, accuracy, positions that
    took part: the accuracy's weight in an average).

    logits: (B, T) s_t, the discriminator's logit for "replaced"; replaced: (B, T) bool (t ∈ R);
    mask: (B, T) bool real positions. Sequences with no replaced position (n < 2) take no part."""
    mask = mask & _active(replaced, mask)  # (B, T)
    s = _f32(logits)  # (B, T)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(s, replaced.float(), reduction="none")  # (B, T)
    loss = torch.where(mask, bce, torch.zeros_like(bce)).sum()
    with torch.no_grad():
        count = mask.sum()
        acc = (((s > 0) == replaced) & mask).sum() / count.clamp(min=1)
    return loss, acc, count


def electra_token_log_prob(log_q: Tensor, logits: Tensor, n: Tensor, k: Tensor) -> Tensor:
    """ELECTRA's token log-scores log p(x_t | x_\\t) = log q(x_t | x_\\t) − s_t + log(k / (n − k)).

    log_q, logits: (B, T); n, k: (B,) the real-token count and the number replaced in training
    (k = ceil(fraction · n)).  Returns (B, T)."""
    return _f32(log_q) - _f32(logits) + log_prior(k, n - k)


def _f32(x: Tensor) -> Tensor:
    """fp32 at least: metrics and losses never in a half precision (float64 stays float64)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _active(replaced: Tensor, mask: Tensor) -> Tensor:
    """(B, 1) bool: sequences with both data and noise positions."""
    k = (replaced & mask).sum(1)
    n = mask.sum(1)
    return ((k > 0) & (k < n)).unsqueeze(1)


__all__ = ["electric_nce", "electric_nce_naive", "electra_rtd", "electra_token_log_prob", "num_replaced",
           "log_prior"]
