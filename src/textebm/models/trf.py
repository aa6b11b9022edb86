"""The TRF language model over the tagger's BiLSTM (paper e, eq. 3; its [23]): potential, ζ and π.

Eq. (3) of Song & Ou (2021), for a sentence x = (x_1, ..., x_l):

    u_θ(x) = Σ_{i=1..l-1} h_{f,i}ᵀ e_{i+1} + Σ_{i=2..l} h_{b,i}ᵀ e_{i-1}
           = Σ_{t=1..l} (h_{f,t-1} + h_{b,t+1})ᵀ e(x_t)      (h_{f,0} = h_{b,l+1} = 0)

with e(w) ∈ R^H an output embedding of word w, h_f / h_b the BiLSTM's forward and backward states
(`BiLSTMCRF.neighbour_states` gives the pair that scores x_t). `eq3_potential` is that sum;
`TRFHead` holds what the TRF adds to the tagger: the output embedding, the log-normalisers ζ_l
(one per length, learnt) and the fixed empirical length distribution π. Its `log_density` is
`textebm.losses.dnce.trf_log_density`; for the JRF (joint training) the potential is the CRF's
log-partition instead (`marginal_potential`), with the same ζ and π.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from textebm.losses.crf import crf_log_partition
from textebm.losses.dnce import trf_log_density
from textebm.models.crf import BiLSTMCRF
from textebm.precision import fp32_or_better


def length_distribution(lengths: Sequence[int] | Tensor, max_len: int) -> Tensor:
    """The empirical length distribution π (max_len + 1,) in float64 (π_0 = 0) of sentence lengths.
    A length outside [1, max_len] is a ValueError."""
    lengths = torch.as_tensor(lengths, dtype=torch.long).reshape(-1)  # (N,)
    if lengths.numel() == 0:
        raise ValueError("no sentence lengths to count")
    if int(lengths.min()) < 1 or int(lengths.max()) > max_len:
        raise ValueError(f"sentence lengths must lie in [1, {max_len}], got {int(lengths.min())}..{int(lengths.max())}")
    counts = torch.bincount(lengths, minlength=max_len + 1).to(torch.float64)  # (L + 1,)
    return counts / counts.sum()


def check_length_probs(length_probs: Tensor) -> None:
    """A ValueError unless `length_probs` is a (L + 1,) distribution over lengths 0..L, zero at 0."""
    if length_probs.dim() != 1 or length_probs.shape[0] < 2:
        raise ValueError("length_probs must be a (L + 1,) distribution over lengths 0..L")
    if float(length_probs[0]) != 0.0 or (length_probs < 0).any() or abs(float(length_probs.sum()) - 1) > 1e-6:
        raise ValueError("length_probs must be non-negative, zero at length 0, and sum to 1")


def eq3_potential(before: Tensor, after: Tensor, out_embed: Tensor, input_ids: Tensor, mask: Tensor) -> Tensor:
    """u(x) of eq. (3) in fp32 or better.

    before, after: (B, T, H) h_f at t−1 and h_b at t+1, zero where there is none
    (`BiLSTMCRF.neighbour_states`). out_embed: (V, H) output embeddings e. input_ids, mask: (B, T).
    -> (B,)."""
    dt = fp32_or_better(before.dtype)
    e = out_embed[input_ids].to(dt)  # (B, T, H)
    per_token = ((before.to(dt) + after.to(dt)) * e).sum(-1)  # (B, T)
    return (per_token * mask.to(dt)).sum(1)  # (B,)


class TRFHead(nn.Module):
    """What the TRF adds to a tagger: output embeddings e (V, H), log-normalisers ζ (L + 1,) and
    log π (L + 1,) (a buffer). ζ_l starts at l·zeta_per_token (log V by default: the log-normaliser
    of a zero potential). `hidden=None`: no output embeddings, for the JRF, whose potential is the
    CRF's log-partition (`marginal_potential`)."""

    def __init__(self, vocab_size: int, hidden: int | None, length_probs: Tensor,
                 zeta_per_token: float | None = None, init_std: float = 0.1):
        super().__init__()
        check_length_probs(length_probs)
        self.out_embed = None if hidden is None else nn.Parameter(torch.randn(vocab_size, hidden) * init_std)  # (V, H)
        per_token = math.log(vocab_size) if zeta_per_token is None else zeta_per_token
        self.zeta = nn.Parameter(torch.arange(length_probs.shape[0], dtype=torch.float32) * per_token)  # (L + 1,)
        self.register_buffer("log_pi", length_probs.to(torch.float32).log())  # (L + 1,), −inf where π_l = 0

    @property
    def max_len(self) -> int:
        return self.zeta.shape[0] - 1

    def potential(self, tagger: BiLSTMCRF, input_ids: Tensor, mask: Tensor) -> Tensor:
        """Eq. (3)'s u(x) (B,) over the tagger's BiLSTM (pre-training)."""
        if self.out_embed is None:
            raise ValueError("this TRF head has no output embeddings (hidden=None): eq. (3) needs them")
        before, after = tagger.neighbour_states(input_ids, mask)  # (B, T, H) each
        return eq3_potential(before, after, self.out_embed, input_ids, mask)

    @staticmethod
    def marginal_potential(tagger: BiLSTMCRF, input_ids: Tensor, mask: Tensor) -> Tensor:
        """The JRF's u(x) = log Σ_y exp u(x, y) (B,): the CRF's log-partition (joint training)."""
        return crf_log_partition(tagger.potentials(input_ids, mask), tagger.transitions, mask)

    def log_density(self, u: Tensor, mask: Tensor) -> Tensor:
        """log p(l, x) = u − ζ_l + log π_l (B,), l the number of real tokens of each row."""
        return trf_log_density(u, mask.sum(1), self.zeta, self.log_pi)
