"""Log-likelihoods and perplexity under a causal LM (a library; the `lm score` and `lm eval`
commands that use it are in `textebm.lm.eval_command`).

A text x is scored in the model's own layout (`textebm.models.lm_format.causal_example`):
log P(x) = sum over the predicted tokens of `x [eos]` (reversed x for an r2l model) of
log p(token | everything before it), [bos] excluded since it is given. `score_texts` is the
function other code (residual EBMs, `lm eval`) reuses; it sorts texts by length, batches
neighbours together (`textebm.inference.batched`) and returns results in the input order.
Log-probabilities are computed from fp32 logits whatever precision the model runs in.

Perplexity is token-level: exp(total NLL / total predicted tokens incl. [eos]). Because token
counts depend on the tokenizer, the word-level perplexity of the PTB convention is reported too:
the same total NLL over whitespace words plus one [eos] per text.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from textebm.data.batching import right_pad
from textebm.errors import TextebmError, TextTooLong
from textebm.inference import batched
from textebm.models.lm import special_ids
from textebm.models.lm_format import causal_example

log = logging.getLogger(__name__)


def check_scorable(meta, where: str = "") -> None:
    """A TextebmError (prefixed by `where`, e.g. "--model DIR: ") unless the LM gives P(x): one
    trained with the causal objective."""
    if meta.objective != "causal":
        raise TextebmError(f"{where}a causal LM trained with objective {meta.objective!r}, whose probabilities are "
                           "conditional on a masked copy of the text, gives no score of a text (`lm score`, `lm "
                           "eval`, `score` and the Python Scorer need the causal objective; the Python API samples "
                           "from an infill LM with textebm.InfillLM)")


@dataclass
class ScoreResult:
    logprob: float  # log P(x), natural log, [eos] included
    token_ids: list[int]  # the predicted tokens in model order: x (or reversed x), then [eos]
    token_logprobs: list[float]  # log p of each of them

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def next_token_targets(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor,
                       dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """The next-token shift of a causal LM: (logits (B, T-1, V) in fp32 or `dtype`, targets (B, T-1)).

    logits (B, T, V): position t predicts token t+1. ids (B, T): the tokens (training labels with
    -100 included). mask (B, T): nonzero where ids[:, t] counts; a target outside it is -100.
    """
    target = torch.where(mask[:, 1:] != 0, ids[:, 1:], -100)  # (B, T-1), -100: not counted
    return logits[:, :-1].to(dtype), target  # (B, T-1, V), (B, T-1)


# Causal LMs whose logits are exactly lm_head(model(...).last_hidden_state): no logit scaling or
# soft-capping between the two (Llama: textebm's transformer LMs and SmolLM2).
HEAD_SPLIT_TYPES = ("llama",)


def _body_and_head(model):
    """(decoder body, output layer) of a causal LM whose logits are head(body(...)), else None."""
    head, body = getattr(model, "lm_head", None), getattr(model, "model", None)
    if (getattr(getattr(model, "config", None), "model_type", None) in HEAD_SPLIT_TYPES and head is not None
            and body is not None):
        return body, head
    return None


def shifted_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """fp32 logits (N, V) of the positions t where keep[:, t] (keep: (B, T-1)), position t
    predicting token t+1, in row-major order. The output layer runs only on those rows where the
    model allows (`HEAD_SPLIT_TYPES`): an infill LM predicts about half of its positions, a padded
    batch fewer than all, and the 8k-50k-vocabulary head and its fp32 copy were much of the work."""
    split = _body_and_head(model)
    if split is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # (B, T, V)
        return logits[:, :-1][keep].float()  # (N, V)
    body, head = split
    h = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state  # (B, T, H)
    return head(h[:, :-1][keep]).float()  # (N, V)


def labelled_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 logits of the positions that predict a labelled token, and those tokens:
    (N, V), (N,) with N = the labelled positions of `labels` (B, T) after the first (-100: not
    predicted); the same rows `next_token_targets` keeps (`shifted_logits`)."""
    target = labels[:, 1:]  # (B, T-1)
    keep = target != -100  # (B, T-1)
    return shifted_logits(model, input_ids, attention_mask, keep), target[keep]  # (N, V), (N,)


def next_token_logprobs(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, banned: Sequence[int] = (),
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """log p(ids[:, t+1] | ids[:, :t+1]) from a causal LM's logits (B, T, V), in fp32 (or `dtype`):
    (B, T-1), 0 where position t+1 is outside `mask` (see `next_token_targets`). With `banned`, p is
    the LM renormalised without those tokens (paper d's P_LM: a banned target gets −inf). The one
    home of next-token log-probabilities: scoring, the LM's evaluation and the residual joint
    model's base LM use it; the LM's training loss applies cross-entropy to the same shift, on the
    labelled rows only (`labelled_logits`)."""
    logits, target = next_token_targets(logits, ids, mask, dtype)  # (B, T-1, V), (B, T-1)
    if banned:
        logits = logits.clone()  # not the model's own logits
        logits[..., list(banned)] = float("-inf")
    keep = target != -100  # (B, T-1)
    lp = logits.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)  # (B, T-1)
    return torch.where(keep, lp, torch.zeros_like(lp))


@torch.inference_mode()
def score_sequences(model, seqs: list[list[int]], pad: int, batch_size: int = 16, bucket: bool = True,
                    progress: bool = False) -> list[list[float]]:
    """log p of every token after the first of each sequence, in input order.

    With `bucket`, sequences are sorted by length (longest first) so each batch holds neighbours,
    which cuts padding (`textebm.inference.batched`); results are put back in input order.
    """

    device = next(model.parameters()).device

    def run(batch: list[list[int]]) -> list[list[float]]:
        ids, mask = right_pad(batch, pad)  # (B, T)
        ids, mask = ids.to(device), mask.to(device)
        keep = mask[:, 1:] != 0  # (B, T-1): the real tokens after the first
        logits = shifted_logits(model, ids, mask, keep)  # (N, V) fp32
        target = ids[:, 1:][keep]  # (N,)
        rows = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)  # (N,)
        lp = torch.zeros(keep.shape, dtype=rows.dtype, device=rows.device)  # (B, T-1)
        lp[keep] = rows
        lp = lp.cpu()
        return [lp[b, :len(seq) - 1].tolist() for b, seq in enumerate(batch)]

    return batched(seqs, [len(s) for s in seqs], batch_size, run, sort=bucket, progress=progress,
                   desc="scoring", unit="text")


def score_texts(model, tokenizer, meta, texts: list[str], batch_size: int = 16, bucket: bool = True,
                progress: bool = False) -> list[ScoreResult]:
    """log P(x) of each text under the model's layout, per token and in total (input order)."""

    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    return score_ids(model, tokenizer, meta, encoded, batch_size, bucket, progress)


def score_ids(model, tokenizer, meta, encoded: list[list[int]], batch_size: int = 16, bucket: bool = True,
              progress: bool = False) -> list[ScoreResult]:
    """`score_texts` of texts already tokenized (pieces of running text, say): each sequence in
    the model's layout, [bos] x [eos], as the LM's training and its evaluation read it."""

    check_scorable(meta)
    sp = special_ids(tokenizer, meta)
    seqs = [causal_example(ids, sp, meta.direction)[0] for ids in encoded]  # [bos] x [eos]
    limit = getattr(model.config, "max_position_embeddings", None)
    too_long = [i for i, s in enumerate(seqs) if limit and len(s) > limit]
    if too_long:  # [bos] and [eos] take two positions
        raise TextTooLong(too_long[0], len(seqs[too_long[0]]) - 2, limit - 2)
    per_token = score_sequences(model, seqs, sp.pad, batch_size, bucket, progress)
    return [ScoreResult(logprob=math.fsum(lp), token_ids=seq[1:], token_logprobs=lp)
            for seq, lp in zip(seqs, per_token)]


def item_texts(rows: list[dict]) -> tuple[list[str], list[int | None]]:
    """All texts to score (text, then text_pair where present) and, per row, the index of its pair."""
    texts = [r["text"] for r in rows]
    pair_at: list[int | None] = []
    for r in rows:
        if r.get("text_pair") is not None:
            pair_at.append(len(texts))
            texts.append(r["text_pair"])
        else:
            pair_at.append(None)
    return texts, pair_at


def perplexity_metrics(results: list[ScoreResult], texts: list[str] | None = None) -> dict:
    """Token-level perplexity from per-sequence scores, and word-level from the `texts` they scored
    (words: whitespace split + [eos]); token-level only without `texts` (pieces of running text)."""
    nll = -math.fsum(r.logprob for r in results)
    tokens = sum(r.num_tokens for r in results)
    out = {"tokens": tokens, "nll_per_token": nll / max(tokens, 1), "perplexity": math.exp(nll / max(tokens, 1))}
    if texts is None:
        return out
    words = sum(len(t.split()) + 1 for t in texts)
    return {"texts": len(texts), **out, "words": words, "nll_per_word": nll / max(words, 1),
            "word_perplexity": math.exp(nll / max(words, 1))}
