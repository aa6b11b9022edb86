"""A toy training run on the generic loop (run as a script by tests/test_train_loop.py).

usage: python toy_train.py OUT [--resume] [--overwrite] [--nan-at STEP] [--kill-at STEP] [--precision P]
                           [--epochs E] [--lr LR] [--keep-checkpoint] [--save-log FILE]
                           [--streams] [--batch-log FILE] [--group PREFIX=LR ...] [--buffer]
                           [--interrupt-at STEP] [--schedule linear|cosine]
                           [--keep-best STEP:LOSS,...] [--patience N] [--weights-log DIR]

Also run under `accelerate launch` by tests/test_distributed.py. --save-log FILE appends one line
"RANK WORLD_SIZE BACKEND" to FILE each time the final model is saved. --kill-at STEP ends the
process with status 137 right after optimizer step STEP (as a hard kill would), when the loop
asks the recipe for the next batch's loss; --interrupt-at STEP raises KeyboardInterrupt there
instead (Ctrl-C).

--streams adds two streams to the main one (see `streams`): "aux" in lockstep, "unl" cycling
through its own epochs; every stream's squared error is part of the loss. --batch-log FILE then
appends, per step, the item indices of each stream's batch to FILE.RANK as a JSON line.
--group PREFIX=LR trains the parameters whose names start with PREFIX at peak learning rate LR.
--buffer gives the recipe state of its own, as a replay buffer is (`Recipe.state`): a tensor of
the last predictions that each step updates and that enters the loss, so a resumed run equals an
uninterrupted one only if the checkpoint carries it.
--keep-best STEP:LOSS,... sets `keep_best`, and `validate` returns LOSS after optimizer step STEP
(scripted, so a test knows which weights must be kept), --patience N stops after N validations
without a better one; --weights-log DIR writes the weights at
each validation to DIR/step-STEP.safetensors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file, save_model

from textebm.errors import TextebmError
from textebm.options import options_dict
from textebm.data.batching import Stream
from textebm.train import ParamGroup, Recipe, train, TrainOptions


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


def indexed(items):
    """(ids, y) items -> (ids, y, index) items, so a batch names the items it holds."""
    return [(ids, y, i) for i, (ids, y) in enumerate(items)]


def collate_indexed(items):
    return (*collate([(ids, y) for ids, y, _ in items]), torch.tensor([i for _, _, i in items]))


AUX_PER_ITEM, AUX_K = 3, 2  # aux holds 3 variants of each main item; an epoch uses 2 of each


def aux_items(epoch: int, n: int = 96) -> list[int]:
    """Variants (epoch*K + j) mod 3 of every main item: the NCE noise pool's pattern."""
    return [AUX_PER_ITEM * i + (epoch * AUX_K + j) % AUX_PER_ITEM for i in range(n) for j in range(AUX_K)]


def streams(batch_size: int = 8) -> dict[str, Stream]:
    """"aux": K=2 items per main item at batch size 2 x 8, lockstep; "unl": 51 items at batch size
    8 (6 full batches, its short batch dropped), cycling through its own epochs."""
    aux = indexed(data(96 * AUX_PER_ITEM, seed=1))
    unl = indexed(data(51, seed=2))
    return {"aux": Stream(dataset=aux, lengths=[len(i) for i, _, _ in aux], collate=collate_indexed,
                          batch_size=AUX_K * batch_size, epoch_items=aux_items),
            "unl": Stream(dataset=unl, lengths=[len(i) for i, _, _ in unl], collate=collate_indexed,
                          batch_size=batch_size, lockstep=False, seed_offset=2)}


def options(out: str, **kw) -> TrainOptions:
    return TrainOptions(out=out, batch_size=8, checkpoint_every=5, log_every=4, progress=False, seed=3, **kw)


def expected_batches(epochs: int, processes: int = 1, rank: int = 0) -> list[dict[str, list[int]]]:
    """What --streams --batch-log records on `rank`: each stream's sampler at each epoch, sharded
    as accelerate shards it, one dict per step."""
    from accelerate.data_loader import BatchSamplerShard

    from textebm.data.batching import BucketBatchSampler
    from textebm.data.batching import stream_sampler

    opts = options("unused")
    samplers = {"main": BucketBatchSampler([len(i) for i, _ in data()], opts.batch_size, opts.seed)}
    samplers.update({n: stream_sampler(st, opts.seed, len(samplers["main"])) for n, st in streams().items()})
    steps = []
    for epoch in range(epochs):
        for s in samplers.values():
            s.set_epoch(epoch)
        shards = {n: list(BatchSamplerShard(s, processes, rank)) for n, s in samplers.items()}
        steps += [dict(zip(shards, b)) for b in zip(*shards.values(), strict=True)]
    return steps


def mse(m, batch):
    device = next(m.parameters()).device
    ids, mask, y = (t.to(device) for t in batch[:3])
    return ((m(ids, mask) - y) ** 2).mean()


class ToyRecipe(Recipe):
    """The toy regression on the loop, with the options of `main`."""

    def __init__(self, a, model, items):
        self.a, self.model, self.items, self.calls = a, model, items, 0
        self.dataset, self.collate = (indexed(items), collate_indexed) if a.streams else (items, collate)
        self.lengths = [len(i[0]) for i in self.dataset]
        self.streams = streams() if a.streams else None
        self.param_groups = [ParamGroup(name=prefix.strip("."), prefix=prefix, lr=float(lr))
                             for prefix, lr in (g.split("=") for g in a.group)]
        self.buffer = torch.zeros(4) if a.buffer else None  # the last 4 batches' mean predictions
        script = getattr(a, "keep_best", "")
        self.keep_best = bool(script)
        self.val_script = {int(k): float(v) for k, v in (e.split(":") for e in script.split(","))} if script else {}
        self.patience = getattr(a, "patience", 0)
        self.step = 0

    def loss(self, model, batch, at):
        if self.a.kill_at and at.step == self.a.kill_at:  # optimizer step kill_at is done
            os._exit(137)
        if self.a.interrupt_at and at.step == self.a.interrupt_at:
            raise KeyboardInterrupt
        self.step = at.step + 1  # the step this batch ends (validate's key)
        self.calls += 1
        if self.a.streams:
            loss = sum(mse(model, b) for b in batch.values())
            if self.a.batch_log:
                with open(f"{self.a.batch_log}.{os.environ.get('RANK', '0')}", "a") as f:
                    f.write(json.dumps({k: b[3].tolist() for k, b in batch.items()}) + "\n")
        else:
            loss = mse(model, batch)
        if self.buffer is not None:  # pull the predictions towards those of the last batches
            main = batch["main"] if self.a.streams else batch
            pred = model(*main[:2]).mean()
            loss = loss + 0.1 * (pred - self.buffer.mean()) ** 2
            self.buffer = torch.cat([self.buffer[1:], pred.detach().float().cpu().reshape(1)])
        if self.a.nan_at and self.calls >= self.a.nan_at:
            loss = loss * float("nan")
        return loss, {}

    def validate(self):
        if self.a.weights_log:
            Path(self.a.weights_log).mkdir(exist_ok=True)
            save_model(self.model, str(Path(self.a.weights_log) / f"step-{self.step}.safetensors"))
        return self.val_script[self.step]

    def evaluate(self):
        return {"mse": float(mse(self.model, collate(self.items)))}

    def save(self, folder):
        save_model(self.model, str(Path(folder) / "model.safetensors"))
        if self.buffer is not None:
            save_file({"buffer": self.buffer}, str(Path(folder) / "buffer.safetensors"))
        if self.a.save_log:
            dist = torch.distributed.is_available() and torch.distributed.is_initialized()
            backend = torch.distributed.get_backend() if dist else "none"
            with open(self.a.save_log, "a") as f:
                f.write(f"{os.environ.get('RANK', '0')} {os.environ.get('WORLD_SIZE', '1')} {backend}\n")

    def state(self):
        return {} if self.buffer is None else {"buffer": self.buffer}

    def load_state(self, tensors):
        self.buffer = tensors["buffer"]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--nan-at", type=int, default=0)
    p.add_argument("--kill-at", type=int, default=0)
    p.add_argument("--interrupt-at", type=int, default=0)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--keep-checkpoint", action="store_true")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--save-log", default=None)
    p.add_argument("--streams", action="store_true")
    p.add_argument("--batch-log", default=None)
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--buffer", action="store_true")
    p.add_argument("--schedule", default="linear")
    p.add_argument("--keep-best", default="")
    p.add_argument("--weights-log", default=None)
    p.add_argument("--patience", type=int, default=0)
    a = p.parse_args(argv)
    opts = options(a.out, epochs=a.epochs, lr=a.lr, resume=a.resume, precision=a.precision,
                   keep_checkpoint=a.keep_checkpoint, overwrite=a.overwrite, schedule=a.schedule)
    torch.manual_seed(0)
    recipe = ToyRecipe(a, Toy(), data())
    try:
        train(opts, {**options_dict(opts), "streams": a.streams, "groups": a.group, "buffer": a.buffer,
                     "keep_best": a.keep_best, "patience": a.patience}, recipe)
    except TextebmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"interrupted: {e}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
