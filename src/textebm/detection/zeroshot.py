"""Zero-shot detectors of generated text from causal-LM logits (pure functions, float64 inside).

All take next-token logits already aligned with their targets: `logits[b, t]` predicts
`targets[b, t]`; `mask[b, t]` marks the window's scored tokens. Higher = more likely generated.

- `loglik`: Σ_t log q(x_t | x_<t); the log-likelihood baseline of Bakhtin et al. (table 2) uses the
  TRAINING generator's LM, with the sign fitted on validation (`metrics.fit_sign`), since generated
  windows score higher under their own generator's family.
- `fast_detectgpt`: the analytic sampling discrepancy of Fast-DetectGPT (Bao et al. 2024) with one
  model for sampling and scoring: per position, the mean μ_t = Σ_v q_v log q_v and the variance
  σ²_t = Σ_v q_v (log q_v)² − μ_t² of log q(x̃_t) for x̃_t ~ q(· | x_<t); summed over the window,
  d = (Σ_t log q(x_t) − Σ_t μ_t) / sqrt(Σ_t σ²_t).
- `binoculars`: Hans et al. (2024), as their released code computes it from a performer and an
  observer LM sharing a tokenizer: log-perplexity of the text under the performer, divided by the
  cross-perplexity −(1/L) Σ_t Σ_v p_obs(v) log p_perf(v) (the observer's distribution scored by
  the performer's log-probabilities). Low ratios mean generated; returned negated so that higher =
  generated. (The paper's text names the observer for the perplexity; its code uses the performer,
  as here.)
"""

from __future__ import annotations

import torch
from torch import Tensor


def _log_probs(logits: Tensor) -> Tensor:
    return torch.log_softmax(logits.double(), -1)  # (B, T, V)


def loglik(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Σ_t log q(x_t | x_<t) over the masked positions.  (B,) float64."""
    lp = _log_probs(logits).gather(-1, targets[..., None]).squeeze(-1)  # (B, T)
    return torch.where(mask, lp, torch.zeros_like(lp)).sum(1)


def fast_detectgpt(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """The analytic sampling discrepancy d (B,) float64."""
    lp = _log_probs(logits)  # (B, T, V)
    p = lp.exp()
    ll = lp.gather(-1, targets[..., None]).squeeze(-1)  # (B, T)
    mu = (p * lp).sum(-1)  # (B, T) E[log q(x̃_t)]
    var = (p * lp.square()).sum(-1) - mu.square()  # (B, T) Var[log q(x̃_t)]
    zero = torch.zeros_like(ll)
    num = torch.where(mask, ll - mu, zero).sum(1)  # (B,)
    den = torch.where(mask, var, zero).sum(1).clamp(min=1e-12).sqrt()  # (B,)
    return num / den


def binoculars(performer_logits: Tensor, observer_logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """−(log-PPL_performer / cross-PPL_{observer→performer}) per window (B,) float64."""
    lp_perf = _log_probs(performer_logits)  # (B, T, V)
    p_obs = _log_probs(observer_logits).exp()  # (B, T, V)
    n = mask.sum(1).clamp(min=1)  # (B,)
    nll = -lp_perf.gather(-1, targets[..., None]).squeeze(-1)  # (B, T)
    xent = -(p_obs * lp_perf).sum(-1)  # (B, T)
    zero = torch.zeros_like(nll)
    log_ppl = torch.where(mask, nll, zero).sum(1) / n
    x_ppl = torch.where(mask, xent, zero).sum(1) / n
    return -(log_ppl / x_ppl)
