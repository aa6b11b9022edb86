"""The one token draw of textebm's samplers: one category per row by the inverse CDF.

`textebm.lm.generate` draws every generated token with it (top-k, tempered, or untruncated), and
paper e's noise LM (`textebm.models.noise_lm`) its sentences. The inverse CDF of one uniform per
row (a searchsorted on the cumulative probabilities) replaced `torch.multinomial` in the noise
LM, where it was three quarters of a DNCE step's time on CPU (docs/performance.md).
"""

from __future__ import annotations

import torch


def sample_top_k(logits: torch.Tensor, k: int, temperature: float, uniforms: torch.Tensor,
                 log_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from the top-k distribution by the inverse CDF.

    logits (B, V), uniforms (B,) in [0, 1). Returns tokens (B,) and their log q (B,), on the
    logits' device, where q = softmax(top-k logits / temperature), zero outside the top k. k = 1
    is greedy decoding. With k >= V (untruncated) the inverse CDF runs over the vocabulary in its
    own order, with no sort (the sort of 8k logits per step was most of an untruncated sample's
    cost); below V, over the top k from the most likely down.

    `log_probs`: the rows are already normalised log-probabilities and the draw is untruncated at
    temperature 1 (a noise LM's): they are used as they are, in their own precision, without the
    float64 re-normalisation (most of the draw's time). The CDF's last entry is then 1 up to the
    rounding of a cumulative sum, and the uniform is scaled by it.
    """
    if log_probs:
        if k < logits.shape[-1] or temperature != 1.0:
            raise ValueError("log_probs draws are untruncated at temperature 1")
        logq, idx = logits, None  # (B, V)
    else:
        scaled = logits.double() / temperature  # (B, V)
        if k >= logits.shape[-1]:  # the full distribution: no sort, the CDF in vocabulary order
            logq = scaled.log_softmax(-1)  # (B, V)
            idx = None
        else:
            top, idx = scaled.topk(k, dim=-1)  # (B, k), most likely first
            logq = top.log_softmax(-1)  # (B, k)
    cdf = logq.exp().cumsum(-1)  # (B, k)
    target = (uniforms.to(cdf.device, cdf.dtype) * cdf[:, -1]).unsqueeze(-1)  # (B, 1)
    choice = torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[-1] - 1)  # (B, 1)
    tokens = choice if idx is None else idx.gather(-1, choice)  # (B, 1)
    return tokens.squeeze(-1), logq.gather(-1, choice).squeeze(-1).float()
