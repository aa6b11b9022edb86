"""The semi-supervised taggers' pieces (paper e, sec. 3.2-3.3): the tagger, its TRF and the noise
LM as one module, one DNCE step, and the joint method's weight ramp.

    model = SemiSupervisedTagger(tagger, TRFHead(...), NoiseLM(...))
    out = dnce_step(model.pretrain_log_density, model.noise, ids, mask, DNCESpec(alpha=0.5, nu=1.0))
    loss = out.dnce + out.noise_nll                       # pre-training (stage 1)
    loss = crf_nll(...) + ramp_weight(step, 0.1, N) * out.dnce + out.noise_nll   # joint (eq. 6)

`dnce_step` is DNCE as `losses/dnce.py` defines it, on a batch of real sentences: k =
`mixed_noise_count(B, α)` noise sentences join the B real ones on the data side, ν(B + k) more are
the noise side, all drawn from the noise LM (the global torch RNG unless a generator is given, so
a checkpoint's RNG state makes a resumed run draw the same ones); the TRF's log-density of all of
them (`log_density(ids, mask)`: eq. (3) over the BiLSTM for pre-training, the CRF's log-partition
for the JRF), the noise LM's log q of the real ones with gradient (its own maximum likelihood,
`noise_nll`) and of the sampled ones as drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from textebm.losses.dnce import dnce_loss, mixed_noise_count, noise_nll
from textebm.models.crf import BiLSTMCRF
from textebm.models.noise_lm import NoiseLM
from textebm.models.trf import TRFHead


@dataclass(frozen=True)
class DNCESpec:
    """DNCE's settings: alpha, the real sentences' share of the data side (1: plain NCE with the
    trained noise); nu, noise sentences per data-side sentence."""

    alpha: float = 0.5
    nu: float = 1.0


@dataclass
class DNCEStep:
    """One DNCE step's losses (scalars) and what it drew."""

    dnce: Tensor  # the TRF's DNCE loss (no gradient to the noise LM)
    noise_nll: Tensor  # the noise LM's per-token NLL of the real sentences (its only loss)
    n_noise: int  # sentences drawn from the noise LM (data side's k + noise side)
    accuracy: float  # the classifier's accuracy (data side vs noise)


class SemiSupervisedTagger(nn.Module):
    """The tagger, its TRF head (ζ, log π and, for eq. (3), output embeddings) and the noise LM:
    one module, so the loop checkpoints them together and trains the noise (`noise.` parameters)
    in a parameter group of its own."""

    def __init__(self, tagger: BiLSTMCRF, trf: TRFHead, noise: NoiseLM):
        super().__init__()
        self.tagger, self.trf, self.noise = tagger, trf, noise

    def pretrain_log_density(self, input_ids: Tensor, mask: Tensor) -> Tensor:
        """log p(l, x) (B,) of the TRF whose potential is eq. (3) over the tagger's BiLSTM."""
        return self.trf.log_density(self.trf.potential(self.tagger, input_ids, mask), mask)

    def joint_log_density(self, input_ids: Tensor, mask: Tensor) -> Tensor:
        """log p(l, x) (B,) of the JRF's marginal: u(x) = log Σ_y exp u(x, y), the CRF's log-partition."""
        return self.trf.log_density(TRFHead.marginal_potential(self.tagger, input_ids, mask), mask)


def _pad_to(ids: Tensor, mask: Tensor, T: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-pad (B, t) ids and mask to (B, T)."""
    extra = T - ids.shape[1]
    return (nn.functional.pad(ids, (0, extra), value=pad_id), nn.functional.pad(mask, (0, extra), value=False))


def dnce_step(log_density: Callable[[Tensor, Tensor], Tensor], noise: NoiseLM, input_ids: Tensor, mask: Tensor,
              spec: DNCESpec, generator: torch.Generator | None = None) -> DNCEStep:
    """DNCE on the real sentences `input_ids`, `mask` (B, T) (see the module doc). ν is applied
    exactly as drawn: round(ν (B + k)) noise-side sentences, and the loss's ν is their count over
    the data side's B + k."""
    B = input_ids.shape[0]
    k = mixed_noise_count(B, spec.alpha)
    n_side = max(1, round(spec.nu * (B + k)))
    x_n, m_n, log_q_n = noise.sample(k + n_side, generator=generator)  # (k + n_side, T_n), (k + n_side,)
    T = max(input_ids.shape[1], x_n.shape[1])
    ids_d, mask_d = _pad_to(input_ids, mask, T, noise.pad_id)  # (B, T)
    ids_n, mask_n = _pad_to(x_n, m_n, T, noise.pad_id)  # (k + n_side, T)
    ids, every = torch.cat([ids_d, ids_n]), torch.cat([mask_d, mask_n])  # (N, T)
    log_q_real = noise.log_prob(input_ids, mask)  # (B,) with gradient: the noise's own loss
    log_p = log_density(ids, every)  # (N,)
    log_q = torch.cat([log_q_real.detach().to(log_p.dtype), log_q_n.to(log_p.dtype)])  # (N,)
    is_data = torch.arange(ids.shape[0], device=ids.device) < B + k  # (N,)
    out = dnce_loss(log_p, log_q, is_data, spec.alpha, n_side / (B + k))
    return DNCEStep(dnce=out.loss, noise_nll=noise_nll(log_q_real, mask.sum()), n_noise=k + n_side,
                    accuracy=float(out.accuracy))


@torch.no_grad()
def estimate_zeta(log_potential: Callable[[Tensor, Tensor], Tensor], length_probs: Tensor, vocab_size: int,
                  pad_id: int, n: int = 8, generator: torch.Generator | None = None,
                  proposal: NoiseLM | None = None) -> Tensor:
    """ζ_l ≈ log Z_l = log Σ_{x ∈ W^l} exp u(x), W the words (every id but `pad_id`), by importance
    sampling with n sentences per length: log Z_l = log E_{x ~ r(·|l)} exp(u(x) − log r(x|l)),
    r uniform over W^l (log r = −l·log|W|) or, given a `proposal`, the noise LM's q(x | l). On a
    trained TRF (bench/results/tagging/zeta_spread.json) the uniform estimate spreads about 2 nats
    over seeds whatever the draws, the noise LM's 24 nats at 8 draws and 5 at 512: its importance
    weights are heavy-tailed there, so the commands use the uniform one. A log-mean-exp, biased low by Jensen, by little
    where the weights vary little. Lengths that π never gives keep l·log|W|.
    `log_potential(ids, mask)` -> u (B,). -> (L + 1,) float32, entry 0 is 0."""
    L = length_probs.shape[0] - 1
    words = vocab_size - 1
    zeta = torch.arange(L + 1, dtype=torch.float64) * math.log(words)  # (L + 1,)
    for l in range(1, L + 1):
        if float(length_probs[l]) == 0.0:
            continue
        if proposal is None:
            ids = torch.randint(0, words, (n, l), generator=generator)  # (n, l) over the words ...
            ids = ids + (ids >= pad_id).long()  # ... skipping the padding id
            mask, log_r = torch.ones(n, l, dtype=torch.bool), torch.full((n,), -l * math.log(words),
                                                                        dtype=torch.float64)
        else:
            ids, mask, log_q = proposal.sample(n, generator=generator, lengths=torch.full((n,), l))  # (n, l)
            log_r = log_q.double().cpu() - math.log(float(proposal.length_probs[l]))  # (n,): log q(x | l)
        u = log_potential(ids, mask).double().cpu()  # (n,)
        zeta[l] = float(torch.logsumexp(u - log_r, 0)) - math.log(n)
    return zeta.float()


def ramp_weight(step: int, peak: float, steps: int) -> float:
    """The unlabelled loss's weight at optimizer step `step` (0-based, the steps done):
    peak · sqrt(min(step, N) / N) (thu-spmi/semi-EBM: 0.1 · sqrt(min(step, 40000) / 40000));
    N = 0 is no ramp (the peak from the first step)."""
    if steps <= 0:
        return peak
    return peak * math.sqrt(min(step, steps) / steps)
