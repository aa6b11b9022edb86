"""Top-k sampling from a causal LM: textebm's own batched sampler (a library; `lm sample` is its
command, in `textebm.lm.sample_command`).

`generate` samples continuations of left-padded contexts with a key-value cache; with
`use_cache=False` it is the uncached reference that re-runs the full sequence at every step. Each
sampled token is drawn by the inverse CDF of the top-k, tempered distribution q from a uniform
taken from the sequence's own `torch.Generator` (on the CPU, whatever device the model is on), so
a sequence's tokens depend neither on the batch it was put in nor on whether a run was
interrupted and resumed. Logits are upcast to fp32 (the top-k cut and softmax in fp64) whatever
precision the model runs in.

`generate_groups` is the batching loop of the commands that sample many sequences into rows
(`lm sample`: a row's text and text_pair; `negatives generate`: a window's k negatives): jobs in
a fixed order, `batch_size` at a time, each seeded by its own generator, and the rows a batch
completed handed back after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

import torch

from textebm.data.batching import left_pad
from textebm.models.lm import cache_arg
from textebm.models.lm_format import SpecialIds
from textebm.sampling import sample_top_k


@dataclass
class Generation:
    tokens: list[int]  # sampled ids in model order, ending with [eos] when the model stopped itself
    logprob: float  # sum of log q over `tokens`, q = the top-k truncated, tempered distribution


def banned_ids(sp: SpecialIds) -> list[int]:
    """Layout symbols a sample must not contain ([bos], [pad], [mask], [sep]; [eos] ends it)."""
    return sorted({t for t in (sp.bos, sp.pad, sp.mask, sp.sep) if t is not None} - {sp.eos})


def fixed_length_banned(sp: SpecialIds) -> tuple[int, ...]:
    """What a continuation of fixed length never holds: the layout symbols and [eos] (paper d's
    P_LM bans them and renormalises the rest: its negatives, log Z samples and statistics)."""
    return tuple(sorted(set(banned_ids(sp)) | {sp.eos}))


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn: from the `top_k` most likely at `temperature`, never one of `banned`;
    [eos] ends a sequence, [pad] fills a batch."""

    top_k: int
    temperature: float
    eos: int
    pad: int
    banned: tuple[int, ...] = ()


class SeqJob(Protocol):
    """One sequence to sample: part `part` of output row `group`, continuing `context` (starting
    with [bos]) by at most `max_new` tokens with a generator seeded by `seed`."""

    group: Any
    part: int
    context: list[int]
    max_new: int
    seed: int


def generate_groups(model, jobs: Sequence[SeqJob], batch_size: int, sampling: Sampling,
                    group_size: Callable[[Any], int]) -> Iterator[tuple[list, list[tuple[Any, dict]]]]:
    """Sample `jobs` in their order, `batch_size` at a time. After each batch yield (the batch's
    jobs, the groups it completed as (group, {part: (job, Generation)}) in order of first job);
    a group is complete when it has `group_size(group)` parts."""
    pending: dict[Any, dict[int, tuple[SeqJob, Generation]]] = {}
    for s in range(0, len(jobs), batch_size):
        batch = jobs[s:s + batch_size]
        gens = generate(model, [jb.context for jb in batch], [jb.max_new for jb in batch],
                        [torch.Generator().manual_seed(jb.seed) for jb in batch], sampling.eos, sampling.pad,
                        sampling.top_k, sampling.temperature, sampling.banned)
        for jb, gen in zip(batch, gens):
            pending.setdefault(jb.group, {})[jb.part] = (jb, gen)
        done = [g for g, parts in pending.items() if len(parts) == group_size(g)]
        yield batch, [(g, pending.pop(g)) for g in done]


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids (B, T) that start at 0 on each row's first real token (pads get 0)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def _uniforms(gens: list[torch.Generator], alive: torch.Tensor) -> torch.Tensor:
    """One uniform per live row from that row's own (CPU) generator (B,); dead rows draw nothing."""
    u = torch.zeros(len(gens))
    for b in alive.nonzero().flatten().tolist():
        u[b] = torch.rand((), generator=gens[b])
    return u


@torch.inference_mode()
def generate(model, contexts: list[list[int]], max_new_tokens: list[int], generators: list[torch.Generator],
             eos: int, pad: int, top_k: int, temperature: float = 1.0, banned: Sequence[int] = (),
             use_cache: bool = True) -> list[Generation]:
    """Top-k sample a continuation of each context until [eos] or its own `max_new_tokens`.

    `contexts` are full model inputs (starting with [bos]) of any lengths; they are left-padded
    into one batch on the model's device. Row b draws its uniforms from `generators[b]` only, so
    its tokens do not depend on the other rows. Tokens in `banned` (e.g. [pad], [sep]) get
    probability 0. `use_cache=False` is the slow reference that re-runs every prefix.
    """
    out = [Generation([], 0.0) for _ in contexts]
    todo = [b for b, n in enumerate(max_new_tokens) if n > 0]
    if not todo:
        return out
    run = _generate_cached if use_cache else _generate_uncached
    run(model, [contexts[b] for b in todo], [max_new_tokens[b] for b in todo],
        [generators[b] for b in todo], [out[b] for b in todo], eos, pad, top_k, temperature, list(banned))
    return out


def _record(out: list[Generation], rows: list[int], alive: torch.Tensor, tok: torch.Tensor,
            logq: torch.Tensor, eos: int, max_new: list[int]) -> torch.Tensor:
    """Append each live row's token (tok, logq: (B,) on the CPU); return which rows are still
    alive afterwards (B,), on the CPU."""
    still = alive.clone()
    for b in alive.nonzero().flatten().tolist():
        g = out[rows[b]]
        g.tokens.append(int(tok[b]))
        g.logprob += float(logq[b])
        if g.tokens[-1] == eos or len(g.tokens) >= max_new[rows[b]]:
            still[b] = False
    return still


def _next_logits(output, banned: list[int]) -> torch.Tensor:
    """fp32 logits of the last position (B, V), banned tokens at -inf."""
    logits = output.logits[:, -1].float()  # (B, V)
    if banned:
        logits[:, banned] = float("-inf")
    return logits


def _generate_cached(model, contexts, max_new, gens, out, eos, pad, top_k, temperature, banned) -> None:
    from transformers import DynamicCache

    device = next(model.parameters()).device
    # Many continuations of one context (Algorithm 1's candidates, the samples behind log Z): the
    # context is run once and its keys and values repeated for every row.
    shared = len(contexts) > 1 and all(c == contexts[0] for c in contexts)
    ids, mask = left_pad(contexts[:1] if shared else contexts, pad)  # (B, P), B = 1 when shared
    ids, mask = ids.to(device), mask.to(device)
    pos = positions(mask)  # (B, P)
    cache = DynamicCache(config=model.config)
    output = model(input_ids=ids, attention_mask=mask, position_ids=pos, **cache_arg(model, cache),
                   use_cache=True, logits_to_keep=1)
    logits = _next_logits(output, banned)  # (B, V)
    if shared:
        n = len(contexts)
        cache.batch_repeat_interleave(n)
        logits, mask, pos = logits.expand(n, -1).clone(), mask.expand(n, -1), pos.expand(n, -1)  # (n, V), (n, P)
    next_pos = pos[:, -1] + 1  # (B,)
    rows = list(range(len(contexts)))  # batch row -> sequence index
    alive = torch.ones(len(contexts), dtype=torch.bool)  # (B,) on the CPU
    while True:
        tok, logq = sample_top_k(logits, top_k, temperature, _uniforms(gens, alive))  # (B,), (B,)
        tok_cpu = tok.cpu()  # (B,)
        alive = _record(out, rows, alive, tok_cpu, logq.cpu(), eos, max_new)
        if not alive.any():
            return
        dead = int((~alive).sum())
        if dead >= max(1, len(rows) // 4):  # drop finished rows once they are a quarter of the batch
            keep = alive.nonzero().flatten()  # (B',) on the CPU
            keep_dev = keep.to(device)  # (B',)
            cache.batch_select_indices(keep_dev)
            mask, next_pos, tok = mask[keep_dev], next_pos[keep_dev], tok[keep_dev]
            rows, gens = [rows[b] for b in keep.tolist()], [gens[b] for b in keep.tolist()]
            alive = alive[keep]
        feed = torch.where(alive.to(device), tok, pad).unsqueeze(-1)  # (B, 1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)  # (B, T+1)
        output = model(input_ids=feed, attention_mask=mask, position_ids=next_pos.unsqueeze(-1),
                       **cache_arg(model, cache), use_cache=True)
        logits = _next_logits(output, banned)  # (B, V)
        next_pos = next_pos + 1


def _generate_uncached(model, contexts, max_new, gens, out, eos, pad, top_k, temperature, banned) -> None:
    device = next(model.parameters()).device
    seqs = [list(c) for c in contexts]
    live = list(range(len(contexts)))
    while live:
        ids, mask = left_pad([seqs[b] for b in live], pad)  # (B, T)
        ids, mask = ids.to(device), mask.to(device)
        output = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask),
                       use_cache=False, logits_to_keep=1)
        logits = _next_logits(output, banned)  # (B, V)
        alive = torch.ones(len(live), dtype=torch.bool)  # (B,)
        tok, logq = sample_top_k(logits, top_k, temperature, _uniforms([gens[b] for b in live], alive))
        tok, logq = tok.cpu(), logq.cpu()  # (B,), (B,)
        still = _record(out, live, alive, tok, logq, eos, max_new)
        for r, b in enumerate(live):
            seqs[b].append(int(tok[r]))
        live = [b for r, b in enumerate(live) if still[r]]
