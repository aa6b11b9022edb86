"""Per-token log-scores of texts, and their sum (a pseudo-log-likelihood), by five methods.

    electric   log p̂(x_t | x_\\t) = −E(x)_t            one pass (Clark et al. 2020, sec. 3.2)
    electra    log q(x_t | x_\\t) − s_t + log(k/(n−k))   one encoder pass + one two-tower pass
    twotower   log q(x_t | x_\\t)                         one pass of the two-tower model
    mlm        log p(x_t | x with x_t masked)            n passes, one masked copy per token
                                                         (Salazar et al. 2020), sub-batched under a
                                                         token budget
    causal     log p(x_t | x_<t) (and [eos])             one pass (`textebm.lm.scoring`)

Each scorer takes texts and returns `TextScores`: the scored tokens, their character spans in the
text and their log-scores in nats, computed from fp32 values whatever precision the model runs in.
PLL(x) = the sum over tokens. Electric's scores are unnormalised (NCE makes them approximately
self-normalised); the others are log-probabilities. The texts' framing tokens ([CLS]/[SEP] or
<s>/</s>) are not scored; a causal LM scores its [eos] (span (len, len)).

Masked-LM PLL: a text of n tokens becomes n copies with one position replaced by [MASK]. The
copies of all the texts given, longest text first, are cut into passes of at most `token_budget`
tokens (copies × sequence length) and at most `token_budget` × 64 attention cells (copies ×
length²), so short texts share a pass, and the output layer runs only at the masked position of
each copy. The largest tensors are therefore bounded by the budget, not
by n²: a 400-token text runs in the memory of a 40-token one (one copy per pass at 400 tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from textebm.data.batching import right_pad
from textebm.errors import TextebmError, TextTooLong
from textebm.inference import batched
from textebm.lm.scoring import score_texts
from textebm.losses.electric import electra_token_log_prob, num_replaced

METHODS = ("electric", "electra", "twotower", "mlm", "causal")


@dataclass
class TextScores:
    token_ids: list[int]
    offsets: list[tuple[int, int]]  # character span of each token in the text
    scores: list[float]  # log-score of each token (nats)

    @property
    def total(self) -> float:
        return math.fsum(self.scores)


def text_ids(tokenizer, texts: list[str], method: str) -> list[list[int]]:
    """The token ids `method` scores each text as, without framing (`_encode`'s)."""
    return tokenizer(texts, add_special_tokens=False, split_special_tokens=method != "causal")["input_ids"]


def _encode(tokenizer, texts: list[str], split_special: bool = True
            ) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
    """Token ids and character spans of `texts`, without framing. With `split_special` a special
    token's string in a text ("[MASK]", "</s>") is plain text, never that token (never data)."""
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=split_special)
    return enc["input_ids"], [[tuple(o) for o in offs] for offs in enc["offset_mapping"]]


def _framed_batches(model, ids: list[list[int]], batch_size: int, fn: Callable, device) -> list[list[float]]:
    """fn(input_ids, attention_mask) → (B, T) token scores over framed, right-padded batches;
    returns each text's scores at its token positions (1..n), in input order."""

    spec = model.spec
    framed = [[spec.start_id, *x, spec.end_id] for x in ids]

    def run(batch: list[list[int]]) -> list[list[float]]:
        inp, attn = right_pad(batch, spec.pad_id)  # (B, T)
        s = fn(inp.to(device), attn.to(device)).float().cpu()  # (B, T)
        return [s[b, 1:len(seq) - 1].tolist() for b, seq in enumerate(batch)]

    return batched(framed, [len(f) for f in framed], batch_size, run)


def max_text_tokens(model) -> int:
    """The most tokens of one text a cloze model scores ([cls] and [sep] take two positions)."""
    limit = model.spec.context
    if model.encoder is not None:
        limit = min(limit, getattr(model.encoder.config, "max_position_embeddings", limit))
    return limit - 2


def check_length(model, ids: list[list[int]]) -> None:
    limit = max_text_tokens(model)
    for i, x in enumerate(ids):
        if len(x) > limit:
            raise TextTooLong(i, len(x), limit)


@torch.inference_mode()
def cloze_scores(model, tokenizer, texts: list[str], method: str, batch_size: int = 16,
                 token_budget: int = 4096) -> list[TextScores]:
    """Per-token scores of `texts` by a `ClozeModel` (textebm.models.cloze) with `method`."""

    check_method(model.spec.objective, method)
    ids, offsets = _encode(tokenizer, texts)
    check_length(model, ids)
    device = next(model.parameters()).device
    if method == "electric":
        per_text = _framed_batches(model, ids, batch_size, lambda x, a: -model.token_scores(x, a), device)
    elif method == "twotower":
        per_text = _framed_batches(model, ids, batch_size, lambda x, a: _gather(model.noise_log_probs(x, a), x),
                                   device)
    elif method == "electra":
        def electra(x, a):
            n = a.sum(1) - 2  # (B,) real tokens
            k = num_replaced(n, model.spec.mask_fraction)  # (B,) as in training
            return electra_token_log_prob(_gather(model.noise_log_probs(x, a), x), model.token_scores(x, a), n, k)

        per_text = _framed_batches(model, ids, batch_size, electra, device)
    else:
        per_text = mlm_token_scores_many(model, ids, token_budget)
    return [TextScores(x, o, s) for x, o, s in zip(ids, offsets, per_text)]


def method_problem(objective: str, method: str) -> str:
    """'' when a model trained with `objective` (a cloze objective, or "causal" for a causal LM)
    scores by `method`, else why not: a cloze model scores by its own objective, and (with a
    two-tower noise model) by q; a causal LM by its own probabilities."""
    allowed = {"electric": ("electric", "twotower"), "electra": ("electra", "twotower"), "mlm": ("mlm",),
               "twotower": ("twotower",), "causal": ("causal",)}[objective]
    return "" if method in allowed else f"a model trained with objective {objective} scores with {' or '.join(allowed)}"


def check_method(objective: str, method: str) -> None:
    """TextebmError naming --method unless a model trained with `objective` scores by `method`."""
    if why := method_problem(objective, method):
        raise TextebmError(f"--method {method}: {why}")


def _gather(log_probs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return log_probs.gather(-1, ids[..., None]).squeeze(-1)  # (B, T)


ATTENTION_LEN = 64  # a pass holds at most token_budget * ATTENTION_LEN attention cells per head


def mlm_token_scores(model, ids: list[int], token_budget: int = 4096) -> list[float]:
    """log p(x_t | x with x_t masked) for every token of one text (`mlm_token_scores_many`)."""
    return mlm_token_scores_many(model, [ids], token_budget)[0]


def mlm_token_scores_many(model, texts: list[list[int]], token_budget: int = 4096) -> list[list[float]]:
    """log p(x_t | x with x_t masked) for every token of every text: one masked copy per token, the
    copies of all texts in passes of at most `token_budget` tokens and `token_budget` ×
    ATTENTION_LEN attention cells (at least one copy per pass), the masked-LM head run only at each
    copy's masked position. Copies go in order of their text's length, longest first, so a pass
    holds copies of texts of about one length (right-padded to its longest, masked out): a pass
    fills with the copies of several short texts instead of holding one text's few."""
    spec = model.spec
    device = next(model.parameters()).device
    out: list[list[float]] = [[0.0] * len(ids) for ids in texts]
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # longest first; ties in input order
    jobs = [(i, t) for i in order for t in range(1, len(texts[i]) + 1)]  # (text, masked position)
    s = 0
    while s < len(jobs):
        t_len = len(texts[jobs[s][0]]) + 2  # the pass's longest framed text: its first copy's
        per_pass = max(1, min(token_budget // t_len, token_budget * ATTENTION_LEN // (t_len * t_len)))
        chunk = jobs[s:s + per_pass]
        s += len(chunk)
        copies = torch.full((len(chunk), t_len), spec.pad_id, dtype=torch.long)  # (C, T)
        attn = torch.zeros_like(copies)  # (C, T)
        target = torch.empty(len(chunk), dtype=torch.long)  # (C,) the masked tokens
        for r, (i, t) in enumerate(chunk):
            framed = [spec.start_id, *texts[i], spec.end_id]
            copies[r, :len(framed)] = torch.tensor(framed)
            attn[r, :len(framed)] = 1
            target[r] = framed[t]
        pos = torch.tensor([t for _, t in chunk])  # (C,) masked positions
        rows = torch.arange(len(chunk))
        copies[rows, pos] = spec.mask_id
        copies, attn, pos, rows, target = (x.to(device) for x in (copies, attn, pos, rows, target))
        h = model.hidden(copies, attn)[rows, pos]  # (C, H) only the masked states
        logp = torch.log_softmax(model.mlm_head(h).float(), -1)  # (C, V)
        for (i, t), v in zip(chunk, logp.gather(-1, target[:, None]).squeeze(-1).tolist()):
            out[i][t - 1] = v
    return out


def mlm_token_scores_reference(model, ids: list[int]) -> list[float]:
    """The slow path: one masked copy per forward pass, the full output layer (tests)."""
    spec = model.spec
    seq = torch.tensor([[spec.start_id, *ids, spec.end_id]])
    out = []
    for t in range(1, len(ids) + 1):
        x = seq.clone()
        x[0, t] = spec.mask_id
        logits = model.mlm_head(model.hidden(x, torch.ones_like(x))).float()  # (1, T, V)
        out.append(float(torch.log_softmax(logits[0, t], -1)[seq[0, t]]))
    return out


@torch.inference_mode()
def causal_scores(model, tokenizer, meta, texts: list[str], batch_size: int = 16) -> list[TextScores]:
    """log p of each token and [eos] under a causal LM (either direction), tokens in text order."""

    _, offsets = _encode(tokenizer, texts, split_special=False)  # the spans of the ids score_texts reads
    results = score_texts(model, tokenizer, meta, texts, batch_size)
    out = []
    for text, off, r in zip(texts, offsets, results):
        body_ids, body = r.token_ids[:-1], r.token_logprobs[:-1]
        if meta.direction == "r2l":  # model order is reversed text order
            body_ids, body = body_ids[::-1], body[::-1]
        end = len(text)
        out.append(TextScores([*body_ids, r.token_ids[-1]], [*off, (end, end)], [*body, r.token_logprobs[-1]]))
    return out
