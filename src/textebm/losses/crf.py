"""The linear-chain CRF of paper e (Song & Ou 2021, eq. 5-6) as pure functions of tensors.

A sentence x of length l and a tag sequence y = (y_1, ..., y_l), y_t in {0, ..., K-1}, score

    u(x, y) = Σ_{t=1..l} phi[t, y_t] + Σ_{t=2..l} A[y_{t-1}, y_t]                      (eq. 6)

with node potentials phi (from the network: Ψ_θ(x)) and one transition matrix A (K, K); the
CRF is p(y | x) = exp(u(x, y)) / Z(x) with log Z(x) = log Σ_y exp(u(x, y)) (eq. 5), which is
also the marginal potential u(x) of the joint random field.

Eq. (6) writes its edge sum from i = 1 with an undefined y_0; the paper has no start or end
transitions, and neither has this CRF: a sentence's first tag scores phi only, its last one no
end term. (The paper's TF code, thu-spmi/semi-EBM, wraps each sentence in begin/end tokens and
restricts their tags to a begin and an end tag (`beg_idxs`/`end_idxs` in hrf/alg.py), which
gives A a begin row and an end column; a caller that wants those adds the two boundary tags
itself.) pytorch-crf's start/end transitions set to zero give the same model (bench/bench_crf.py).

Shapes: phi (B, T, K), A (K, K), tags (B, T) integer, mask (B, T) bool or 0/1, right-padded
(mask[b, t] is true for t < length_b) with every length >= 1. Potentials at padding positions
are never read (any value, inf or nan included, changes nothing). Everything runs in fp32 or
better: bf16/fp16 inputs are promoted, fp64 stays fp64. Loops run over time only; every step is
batched over the sentences.
"""

from __future__ import annotations

import torch
from torch import Tensor

from textebm.precision import fp32_or_better

REDUCTIONS = ("mean", "none")


def _prepare(phi: Tensor, A: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(phi with padding zeroed, A, mask as bool), checked, in fp32 or better."""
    if phi.dim() != 3:
        raise ValueError(f"phi must have shape (B, T, K), got {tuple(phi.shape)}")
    B, T, K = phi.shape
    if A.shape != (K, K):
        raise ValueError(f"A must have shape ({K}, {K}) for K = {K} tags, got {tuple(A.shape)}")
    if mask.shape != (B, T):
        raise ValueError(f"mask must have shape ({B}, {T}), got {tuple(mask.shape)}")
    if T == 0:
        raise ValueError("empty batch of sentences (T = 0)")
    mask = mask.bool()
    if not bool(mask[:, 0].all()):
        raise ValueError("every sentence must have at least one token (mask[:, 0] all true)")
    if T > 1 and bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        raise ValueError("mask must be right-padded (no real token after a padding position)")
    dt = fp32_or_better(phi.dtype, A.dtype)
    phi = phi.to(dt).masked_fill(~mask.unsqueeze(-1), 0.0)  # (B, T, K): padding never read
    return phi, A.to(dt), mask


def _forward(phi: Tensor, A: Tensor, mask: Tensor) -> Tensor:
    """Forward variables: alpha[:, t, k] = log Σ over y_1..t with y_t = k of exp(partial score);
    at padding positions the last real alpha is carried on. (B, T, K)."""
    alpha = phi[:, 0]  # (B, K)
    alphas = [alpha]
    for t in range(1, phi.shape[1]):
        nxt = torch.logsumexp(alpha.unsqueeze(2) + A, dim=1) + phi[:, t]  # (B, K, 1) + (K, K) -> (B, K)
        alpha = torch.where(mask[:, t, None], nxt, alpha)  # (B, K)
        alphas.append(alpha)
    return torch.stack(alphas, 1)  # (B, T, K)


def crf_log_partition(phi: Tensor, A: Tensor, mask: Tensor) -> Tensor:
    """log Z(x) = log Σ_y exp(u(x, y)) by the forward algorithm: (B,)."""
    phi, A, mask = _prepare(phi, A, mask)
    return torch.logsumexp(_forward(phi, A, mask)[:, -1], dim=1)  # (B, K) carried to T-1 -> (B,)


def crf_score(phi: Tensor, A: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
    """u(x, y) of eq. (6) for the given tags: (B,). Tags at padding positions are ignored (any
    value, e.g. -1)."""
    phi, A, mask = _prepare(phi, A, mask)
    if tags.shape != mask.shape:
        raise ValueError(f"tags must have shape {tuple(mask.shape)}, got {tuple(tags.shape)}")
    K = phi.shape[2]
    y = torch.where(mask, tags.long(), torch.zeros_like(tags, dtype=torch.long))  # (B, T) padding -> 0
    if bool(((y < 0) | (y >= K)).any()):
        raise ValueError(f"tags must lie in [0, {K}) at every real token")
    node = phi.gather(2, y.unsqueeze(2)).squeeze(2)  # (B, T), 0 at padding (phi zeroed there)
    edge = A[y[:, :-1], y[:, 1:]]  # (B, T-1): A[y_{t-1}, y_t]
    edge = torch.where(mask[:, 1:], edge, torch.zeros_like(edge))  # (B, T-1)
    return node.sum(1) + edge.sum(1)  # (B,)


def crf_nll(phi: Tensor, A: Tensor, tags: Tensor, mask: Tensor, reduction: str = "mean") -> Tensor:
    """−log p(y | x) = log Z(x) − u(x, y): per sentence (B,) with reduction="none", else their
    mean over the batch (a scalar), as the paper's code averages over sentences."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    nll = crf_log_partition(phi, A, mask) - crf_score(phi, A, tags, mask)  # (B,)
    return nll.mean() if reduction == "mean" else nll


def crf_marginals(phi: Tensor, A: Tensor, mask: Tensor) -> Tensor:
    """Node marginals p(y_t = k | x) by forward-backward: (B, T, K), each real position summing to
    1, zero at padding positions."""
    phi, A, mask = _prepare(phi, A, mask)
    alpha = _forward(phi, A, mask)  # (B, T, K)
    log_z = torch.logsumexp(alpha[:, -1], dim=1)  # (B,): the carried alpha of each last real token
    beta = torch.zeros_like(phi[:, 0])  # (B, K): 0 at each sentence's last real token
    betas = [beta]
    for t in range(phi.shape[1] - 2, -1, -1):
        nxt = torch.logsumexp(A + (phi[:, t + 1] + beta).unsqueeze(1), dim=2)  # (K, K) + (B, 1, K) -> (B, K)
        beta = torch.where(mask[:, t + 1, None], nxt, torch.zeros_like(nxt))  # (B, K)
        betas.append(beta)
    beta_all = torch.stack(betas[::-1], 1)  # (B, T, K)
    marg = torch.exp(alpha + beta_all - log_z[:, None, None])  # (B, T, K)
    return marg.masked_fill(~mask.unsqueeze(-1), 0.0)


def viterbi(phi: Tensor, A: Tensor, mask: Tensor, pad: int = -1) -> tuple[Tensor, Tensor]:
    """(tags (B, T) long, scores (B,)): the highest-scoring tag sequence of each sentence and its
    u(x, y); positions past a sentence's end hold `pad`.

    The max-product recursion runs over all T positions for every sentence at once (past a
    sentence's end it computes values that are never read); each sentence's best final score is
    then taken at its own last token. Backpointers are one (B, T-1, K) tensor, made the identity
    past each sentence's end, so that one backtrack from position T-1, gathering all sentences at
    each position, carries every sentence's best last tag down to its last token and on to its
    first."""
    phi, A, mask = _prepare(phi, A, mask)
    B, T, K = phi.shape
    At = A.t()  # (K_next, K_prev): the max runs over the last, contiguous dimension
    score = phi[:, 0]  # (B, K)
    scores, back = [score], []
    for t in range(1, T):
        best, idx = (score.unsqueeze(1) + At).max(dim=2)  # (B, 1, K_prev) + (K, K) -> (B, K_next)
        score = best + phi[:, t]  # (B, K)
        scores.append(score)
        back.append(idx)
    last = (mask.sum(1) - 1)[:, None, None].expand(B, 1, K)  # (B, 1, K): each sentence's last position
    best_score, tag = torch.stack(scores, 1).gather(1, last).squeeze(1).max(dim=1)  # (B,), (B,)
    tags = [tag]
    if T > 1:
        keep = torch.arange(K, device=phi.device).expand(B, T - 1, K)  # identity backpointers
        bps = torch.where(mask[:, 1:, None], torch.stack(back, 1), keep)  # (B, T-1, K)
        for t in range(T - 2, -1, -1):
            tag = bps[:, t].gather(1, tag.unsqueeze(1)).squeeze(1)  # (B,): the best tag at t given t+1
            tags.append(tag)
    path = torch.stack(tags[::-1], 1)  # (B, T)
    return path.masked_fill(~mask, pad), best_score
