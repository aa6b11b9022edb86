"""A toy training run on the generic loop (run as a script by tests/test_train_loop.py).

usage: python toy_train.py OUT [--resume] [--nan-at STEP] [--precision P] [--epochs E] [--lr LR]
                           [--keep-checkpoint] [--save-log FILE]

Also run under `accelerate launch` by tests/test_distributed.py. --save-log FILE appends one line
"RANK WORLD_SIZE BACKEND" to FILE each time the final model is saved.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_model

from textebm.errors import TextebmError
from textebm.train import TrainOptions, options_dict, train


class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.drop = torch.nn.Dropout(0.3)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, ids, mask):  # ids, mask: (B, T)
        h = self.drop(self.emb(ids)) * mask.unsqueeze(-1)  # (B, T, 16)
        return self.out(h.sum(1) / mask.sum(1, keepdim=True)).squeeze(-1)  # (B,)


def data(n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(n):
        L = int(torch.randint(2, 12, (1,), generator=g))
        ids = torch.randint(0, 50, (L,), generator=g).tolist()
        items.append((ids, float(sum(ids)) / (50 * L)))
    return items


def collate(items):
    T = max(len(i) for i, _ in items)
    ids = torch.zeros(len(items), T, dtype=torch.long)
    mask = torch.zeros(len(items), T)
    for r, (i, _) in enumerate(items):
        ids[r, :len(i)] = torch.tensor(i)
        mask[r, :len(i)] = 1
    return ids, mask, torch.tensor([y for _, y in items])


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--nan-at", type=int, default=0)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--keep-checkpoint", action="store_true")
    p.add_argument("--save-log", default=None)
    a = p.parse_args(argv)
    opts = TrainOptions(out=a.out, epochs=a.epochs, batch_size=8, lr=a.lr, checkpoint_every=5,
                        log_every=4, resume=a.resume, precision=a.precision, progress=False, seed=3,
                        keep_checkpoint=a.keep_checkpoint)
    torch.manual_seed(0)
    model = Toy()
    items = data()
    calls = {"n": 0}

    def step_fn(m, batch):
        ids, mask, y = batch
        calls["n"] += 1
        loss = ((m(ids, mask) - y) ** 2).mean()
        if a.nan_at and calls["n"] >= a.nan_at:
            loss = loss * float("nan")
        return loss, {}

    def save(m, d):
        save_model(m, str(Path(d) / "model.safetensors"))
        if a.save_log:
            dist = torch.distributed.is_available() and torch.distributed.is_initialized()
            backend = torch.distributed.get_backend() if dist else "none"
            with open(a.save_log, "a") as f:
                f.write(f"{os.environ.get('RANK', '0')} {os.environ.get('WORLD_SIZE', '1')} {backend}\n")

    try:
        train(opts, options_dict(opts), model, items, [len(i) for i, _ in items], collate, step_fn,
              save_model=save,
              evaluate=lambda m: {"mse": float(step_fn(m, collate(items))[0])})
    except TextebmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
