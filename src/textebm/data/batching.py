"""Pad token-id lists into batch tensors: right padding (training, scoring, encoders) and left
padding (generation, so that every row's next token is in the last column)."""

from __future__ import annotations

import torch


def right_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (B, T), sequences aligned on the left."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)  # (B, T)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, :len(s)] = 1
    return ids, mask


def left_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (B, T), sequences aligned on the right."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)  # (B, T)
    for b, s in enumerate(seqs):
        ids[b, T - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[b, T - len(s):] = 1
    return ids, mask


class Batch:
    """Base of a training batch as a small dataclass of tensors (typed fields, not a dict of keys
    that differ per recipe). `.to(device)` moves every tensor field, and the tensors of dict fields
    (a model's input dict), as accelerate's loaders expect of a batch; other fields stay."""

    def to(self, device, non_blocking: bool = False):
        import dataclasses

        def move(v):
            if isinstance(v, torch.Tensor):
                return v.to(device, non_blocking=non_blocking)
            if isinstance(v, dict):
                return {k: move(x) for k, x in v.items()}
            return v

        return dataclasses.replace(self, **{f.name: move(getattr(self, f.name)) for f in dataclasses.fields(self)})
