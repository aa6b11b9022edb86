"""How a text becomes a training / scoring / sampling sequence for a causal LM.

One place defines the three sequence layouts, shared by `lm train`, `lm sample` and `lm score`:

- causal, l2r:  [bos] x_1 ... x_n [eos]
- causal, r2l:  [bos] x_n ... x_1 [eos]           (paper c: a right-to-left model writes prefixes)
- infill:       [bos] m(x) [sep] x_1 ... x_n [eos]  (paper a, sec. 2.4 and appendix B)

where m(x) masks each token of x independently with probability M and writes each run of masked
tokens as one [mask] (appendix B, table 4: "<M> (as a) young <M> (woman)"). The model learns to
generate the *full* sentence after [sep], not only the masked words (footnote 2), so the loss
covers x and [eos] but not the context m(x) [sep]. With r2l the full sentence after [sep] is
reversed too (the masked context stays in reading order).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IGNORE_INDEX = -100


@dataclass(frozen=True)
class SpecialIds:
    bos: int
    eos: int
    pad: int
    mask: int | None = None
    sep: int | None = None


def mask_tokens(ids: list[int], ratio: float, generator: torch.Generator) -> tuple[list[bool], list[int]]:
    """Mask each token independently with probability `ratio`.

    Returns (per-token mask decisions, the masked sequence with each run of masked tokens merged
    into a single `-1` placeholder that the caller replaces by the mask id).
    """
    decisions = (torch.rand(len(ids), generator=generator) < ratio).tolist()
    out: list[int] = []
    for tok, masked in zip(ids, decisions):
        if masked:
            if not out or out[-1] != -1:
                out.append(-1)
        else:
            out.append(tok)
    return decisions, out


def causal_example(ids: list[int], sp: SpecialIds, direction: str = "l2r") -> tuple[list[int], list[int]]:
    """(input_ids, labels) for plain LM training; labels equal inputs except the leading [bos]."""
    body = list(reversed(ids)) if direction == "r2l" else list(ids)
    seq = [sp.bos, *body, sp.eos]
    labels = [IGNORE_INDEX, *body, sp.eos]
    return seq, labels


def infill_context(masked: list[int], sp: SpecialIds) -> list[int]:
    """The conditioning prefix `[bos] m(x) [sep]`; `masked` uses -1 for a merged mask run."""
    if sp.mask is None or sp.sep is None:
        raise ValueError("this tokenizer has no mask/sep tokens; train the LM with --objective infill")
    return [sp.bos, *[sp.mask if t == -1 else t for t in masked], sp.sep]


def infill_example(ids: list[int], sp: SpecialIds, ratio: float, generator: torch.Generator,
                   direction: str = "l2r") -> tuple[list[int], list[int], list[bool]]:
    """(input_ids, labels, mask decisions) for the infill objective of paper a, eq. (9)."""
    decisions, masked = mask_tokens(ids, ratio, generator)
    ctx = infill_context(masked, sp)
    body = list(reversed(ids)) if direction == "r2l" else list(ids)
    seq = [*ctx, *body, sp.eos]
    labels = [IGNORE_INDEX] * len(ctx) + [*body, sp.eos]
    return seq, labels, decisions
