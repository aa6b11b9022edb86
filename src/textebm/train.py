"""One readable training loop for every model in textebm, on accelerate.

A command builds its model, data and loss, then calls `train(...)`. The loop owns what is common:
device placement, mixed precision (fp32 / bf16 / fp16; bf16 works on CPU too), several processes
(`accelerate launch`), length-bucketed batches, AdamW with warm-up and linear decay, gradient
clipping, progress, NaN checks, atomic checkpoints and exact resume, `config.json` and
`metrics.json`.

    RUN/config.json      the command's config (written first)
    RUN/checkpoint/      the last checkpoint (see textebm.checkpoint), removed after success
                         unless --keep-checkpoint
    RUN/metrics.json     training history, wall time, evaluation results
    RUN/model/           the final model, written by the command's `save_model` callback

Data streams. `dataset`, `lengths` and `collate` are the main stream; epochs and steps count its
batches. `streams={name: Stream(...)}` adds more, and `step_fn` then gets one dict per step,
{"main": the main batch, name: that stream's batch, ...}. Every stream is bucketed by its own
lengths (`BucketBatchSampler`, its own seed), sharded across processes by accelerate, and gives
exactly one batch per main batch:

    lockstep (default)  the stream's epoch is the main stream's, so it must have as many batches
                        per epoch (e.g. K items per main item at batch size K x B). Both put their
                        short batch last, so under accelerate's round-robin sharding every process
                        gets batch j of each stream together.
    cycling             (lockstep=False) the stream runs through its own epochs, whatever its size;
                        it drops its short batch, so every batch it gives is full.

`Stream.epoch_items(e)` chooses the items of the stream's epoch e (e.g. noise sample (e*K + j) mod
n of every example). A stream's batches depend only on (seed, main epoch, batch in epoch), so a
checkpoint needs no state of its own for them and a resumed run draws the same batches.

Parameter groups. `param_groups=[ParamGroup(name, prefix, lr)]` trains the parameters whose names
start with `prefix` at their own peak learning rate, the rest at `opts.lr`. Each group keeps
weight decay off biases and norms; warm-up and decay scale every group alike; the history logs
`lr_<name>` next to `lr`.

`on_step_end(step)` runs on every process after each optimizer step (after logging and
checkpointing), with the number of steps done; the tests use it to kill a run hard.
`on_step_start(step, total)` runs before every batch's loss with the optimizer steps done so far
and the run's total: a schedule that depends on it (a loss weight's warm-up) resumes exactly,
since the step count comes from the checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from textebm.errors import TextebmError, TrainingDiverged
from textebm.inference import set_threads
from textebm.options import threads_field
from textebm.io import atomic_dir, read_json, write_json

log = logging.getLogger(__name__)

StepFn = Callable[[torch.nn.Module, Any], tuple[torch.Tensor, dict[str, float]]]


@dataclass(kw_only=True)
class TrainOptions:
    """Options shared by every training command (the command's config extends this)."""

    out: str = field(metadata={"help": "run folder (config.json, checkpoint/, metrics.json, model/)"})
    seed: int = field(default=0, metadata={"help": "random seed (same seed, same numbers on CPU)", "min": 0})
    epochs: float = field(default=1.0, metadata={"help": "passes over the training data", "gt": 0})
    max_steps: int = field(default=0, metadata={"help": "stop after this many optimizer steps (0: no limit)",
                                                "min": 0})
    batch_size: int = field(default=32, metadata={"help": "examples per batch and process", "min": 1})
    grad_accum: int = field(default=1, metadata={"help": "batches per optimizer step", "min": 1})
    lr: float = field(default=5e-5, metadata={"help": "peak learning rate (AdamW)", "gt": 0})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay", "min": 0})
    warmup: float = field(default=0.06, metadata={"help": "warm-up fraction of all steps", "min": 0, "lt": 1})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm (0: off)", "min": 0})
    precision: str = field(default="auto", metadata={
        "help": "auto: bf16 where the hardware multiplies it natively (CUDA with bf16; a CPU with "
                "avx512_bf16/amx_bf16, confirmed by a timed probe), else fp32; fp16 needs CUDA",
        "choices": ["auto", "fp32", "bf16", "fp16"]})
    checkpoint_every: int = field(default=200, metadata={"help": "save a checkpoint every N steps", "min": 1})
    log_every: int = field(default=20, metadata={"help": "record the loss every N steps", "min": 1})
    resume: bool = field(default=False, metadata={"help": "continue the run in --out from its last checkpoint"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace an earlier run of the same command in --out (never files textebm did not write)"})
    keep_checkpoint: bool = field(default=False, metadata={"help": "keep RUN/checkpoint after success"})
    threads: int = threads_field()
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})

    def check(self) -> None:
        if self.resume and self.overwrite:
            raise TextebmError("--resume and --overwrite contradict each other; pass one")


# Options that may differ between a run and its resumption.
RESUME_FREE = {"resume", "overwrite", "progress", "threads", "keep_checkpoint", "checkpoint_every",
               "precision_choice"}


def setup_torch(opts: TrainOptions) -> None:
    """Process-wide settings measured to matter on CPU (ASSETS.md): flush denormals, threads."""
    torch.set_flush_denormal(True)
    set_threads(opts.threads)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length: shuffle, sort within windows of 50 batches, shuffle batches.

    Deterministic given (seed, epoch); padding waste stays small while batch order stays random.
    The one batch shorter than `batch_size` (when the data do not divide) always comes last: under
    several processes accelerate deals batches in rounds and drops a round whose last batch is
    short, so a short batch in mid-epoch would silently lose a batch on every process.
    `epoch_items(e)` (optional) gives the indices into `lengths` that make up epoch e (repeats
    allowed, the same number every epoch); by default every index once.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, shuffle: bool = True,
                 window: int = 50, epoch_items: Callable[[int], Sequence[int]] | None = None):
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.window = window
        self.epoch_items = epoch_items
        self.n_items = len(epoch_items(0)) if epoch_items is not None else len(self.lengths)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(self.n_items / self.batch_size)

    def __iter__(self):
        return iter(self.batches(self.epoch))

    def batches(self, epoch: int) -> list[list[int]]:
        """The batches of `epoch`, in order."""
        pool = list(range(len(self.lengths))) if self.epoch_items is None else list(self.epoch_items(epoch))
        if len(pool) != self.n_items:
            raise TextebmError(f"epoch_items gave {len(pool)} items for epoch {epoch} and {self.n_items} "
                               "for epoch 0; it must give the same number every epoch")
        n, bs = len(pool), self.batch_size
        if not self.shuffle:
            order = sorted(pool, key=lambda i: self.lengths[i])
            return [order[i:i + bs] for i in range(0, n, bs)]
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        perm = torch.randperm(n, generator=g).tolist()
        span = bs * self.window
        batches = []
        for start in range(0, n, span):
            chunk = sorted((pool[p] for p in perm[start:start + span]), key=lambda i: self.lengths[i])
            batches += [chunk[i:i + bs] for i in range(0, len(chunk), bs)]
        full = [b for b in batches if len(b) == bs]
        short = [b for b in batches if len(b) < bs]  # at most one: spans divide by batch_size
        return [full[j] for j in torch.randperm(len(full), generator=g).tolist()] + short


class CycleBatchSampler(Sampler[list[int]]):
    """`per_epoch` full batches for each main epoch, read on through `inner`'s own epochs.

    Main epoch e takes batches e*per_epoch .. (e+1)*per_epoch - 1 of the endless sequence of
    inner's epochs 0, 1, 2, ... with each inner epoch's short batch dropped: every batch is full,
    so sharding across processes stays aligned with the main stream.
    """

    def __init__(self, inner: BucketBatchSampler, per_epoch: int):
        self.inner, self.per_epoch = inner, per_epoch
        self.batch_size = inner.batch_size
        self.full_per_inner = inner.n_items // inner.batch_size
        if self.full_per_inner == 0:
            raise TextebmError(f"a cycling stream needs at least batch_size ({inner.batch_size}) items, "
                               f"it has {inner.n_items}")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.per_epoch

    def __iter__(self):
        inner_epoch, skip = divmod(self.epoch * self.per_epoch, self.full_per_inner)
        left = self.per_epoch
        while left:
            full = [b for b in self.inner.batches(inner_epoch) if len(b) == self.batch_size]
            take = full[skip:skip + left]
            yield from take
            left -= len(take)
            inner_epoch, skip = inner_epoch + 1, 0


@dataclass(kw_only=True)
class Stream:
    """An extra data stream: `train(..., streams={name: Stream(...)})` (see the module doc)."""

    dataset: Sequence  # the items; collate gets a list of them
    lengths: Sequence[int]  # one per dataset item, for bucketing
    collate: Callable[[list], Any]
    batch_size: int  # items per batch and process
    lockstep: bool = True  # True: one epoch per main epoch, as many batches; False: its own epochs
    epoch_items: Callable[[int], Sequence[int]] | None = None  # dataset indices of the stream's epoch e
    seed_offset: int = 1  # its sampler's seed is opts.seed + seed_offset


@dataclass(kw_only=True)
class ParamGroup:
    """Parameters whose names (as in `model.named_parameters()`) start with `prefix`, trained at
    peak learning rate `lr` under the common schedule."""

    name: str
    prefix: str | tuple[str, ...]
    lr: float


MAIN = "main"  # the main stream's key in a step's batch dict


def batch_sampler(lengths: Sequence[int], opts: TrainOptions) -> BucketBatchSampler:
    """The main stream's sampler."""
    return BucketBatchSampler(lengths, opts.batch_size, opts.seed)


def stream_sampler(stream: Stream, opts: TrainOptions, main_batches: int) -> Sampler[list[int]]:
    """The sampler of an extra stream, given the main stream's batches per epoch (all processes)."""
    inner = BucketBatchSampler(stream.lengths, stream.batch_size, opts.seed + stream.seed_offset,
                               epoch_items=stream.epoch_items)
    return inner if stream.lockstep else CycleBatchSampler(inner, main_batches)


def make_accelerator(opts: TrainOptions, precision: str | None = None):
    """An Accelerator for `precision` (fp32 | bf16 | fp16; default: `opts.precision` resolved)."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    from textebm.precision import resolve_precision

    precision = precision or resolve_precision(opts.precision).precision
    _forget_previous_run()
    return Accelerator(
        mixed_precision={"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[precision],
        gradient_accumulation_steps=opts.grad_accum,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=False),
    )


def _forget_previous_run() -> None:
    """Let one process train several models with different settings (the quickstart does).

    accelerate keeps the mixed precision and gradient accumulation of the first `Accelerator` in
    process-wide singletons and refuses a second one that differs. Their per-run part is cleared
    here (as accelerate's own tests do between runs); the distributed state (`PartialState`:
    process group, device) is kept, so this is safe under `accelerate launch`.
    """
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()


def linear_schedule(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return f


def make_optimizer(model: torch.nn.Module, opts: TrainOptions,
                   param_groups: Sequence[ParamGroup] = ()) -> torch.optim.Optimizer:
    """AdamW, no decay on biases and norms; fused where supported (about 10x cheaper on CPU).

    Parameters matching no `param_groups` prefix form the group "" at `opts.lr`. Every group is
    split in two torch groups (decay, no decay) that carry its name under "name".
    """
    names = [g.name for g in param_groups]
    if len(set(names)) < len(names) or "" in names:
        raise TextebmError(f"parameter groups need distinct, non-empty names, got {names}")
    members: dict[str, list[torch.nn.Parameter]] = {"": [], **{n: [] for n in names}}
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        hits = [g.name for g in param_groups if pname.startswith(g.prefix)]
        if len(hits) > 1:
            raise TextebmError(f"parameter {pname} is in several parameter groups: {hits}")
        members[hits[0] if hits else ""].append(p)
    if empty := [n for n in names if not members[n]]:
        raise TextebmError(f"parameter groups {empty} match no trainable parameter")
    lrs = {"": opts.lr, **{g.name: g.lr for g in param_groups}}
    groups = []
    for name, params in members.items():
        groups += [{"params": [p for p in params if p.ndim >= 2], "weight_decay": opts.weight_decay,
                    "lr": lrs[name], "name": name},
                   {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0,
                    "lr": lrs[name], "name": name}]
    every = [p for ps in members.values() for p in ps]
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in every)
    return torch.optim.AdamW(groups, lr=opts.lr, fused=fused)


def group_lrs(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """The current learning rate of each parameter group: "lr" (the rest), "lr_<name>"."""
    return {("lr_" + g["name"]) if g.get("name") else "lr": g["lr"] for g in optimizer.param_groups}


RUN_ENTRIES = ["config.json", "checkpoint", "metrics.json", "model"]  # what a run folder holds


def eval_split_of(cfg) -> str:
    """The split a training command evaluates on: --eval-split when given ('' skips it); by
    default "dev" for a dataset folder and none for a single file (which is the train split only)."""
    if cfg.eval_split is not None:
        return cfg.eval_split
    if Path(cfg.data).is_dir():
        return "dev"
    log.info("--data %s is a single file (the train split only): no evaluation after training", cfg.data)
    return ""


def run_kind(opts: TrainOptions) -> str:
    """The command a run folder belongs to (its output marker's kind), e.g. "lm train"."""
    return getattr(opts, "COMMAND", "train")


def check_run_dir(opts: TrainOptions, config: dict | None) -> None:
    """Refuse a non-empty RUN without --resume / --overwrite, and a resumed run whose settings differ.

    Only reads: every process calls it before anything is written, so all of them stop with the
    same message instead of one erring and the others failing at the next barrier. Commands call
    it with `config=None` before their own work (data, tokenizer, model), so a bad --out fails at
    once; `train` calls it again with the full config."""
    from textebm.outputs import check_output_dir, read_marker

    run = Path(opts.out)
    cfg_file = run / "config.json"
    if opts.resume:
        if not cfg_file.is_file():
            raise TextebmError(f"--out {run}: nothing to resume (no config.json)")
        if config is None:
            return
        old = read_json(cfg_file)
        diff = sorted(k for k in set(old) | set(config)
                      if k not in RESUME_FREE and old.get(k) != config.get(k))
        if diff:
            raise TextebmError(f"--out {run}: --resume with different settings: "
                               + ", ".join(f"{k}={old.get(k)!r}->{config.get(k)!r}" for k in diff)
                               + "; pass the run's settings, or --overwrite to start it again")
        return
    marker = read_marker(run)
    if (not opts.overwrite and marker is not None and marker["kind"] == run_kind(opts) and cfg_file.is_file()
            and not run_completed(run)):
        raise TextebmError(f"--out {run}: holds an unfinished run; pass --resume to continue it, --overwrite "
                           "to start it again, or choose another folder")
    check_output_dir(run, run_kind(opts), opts.overwrite)


def start_run(run: Path, opts: TrainOptions, config: dict) -> None:
    """Write the run's marker and config.json (main process, fresh start). With --overwrite, the
    entries of the earlier run are removed first; files textebm did not write stay."""
    from textebm.outputs import own_entries, read_marker, remove, write_marker

    if opts.overwrite:  # the user asked to replace this earlier run of the same command
        for name in own_entries(read_marker(run)):
            remove(run / name)
    run.mkdir(parents=True, exist_ok=True)
    write_marker(run, run_kind(opts), RUN_ENTRIES)
    write_json(run / "config.json", config)


def abandon_failed_start(run: Path, created: bool) -> None:
    """After a failure before the first checkpoint, remove what this run wrote (nothing there
    could be resumed), so the same command can simply be run again."""
    from textebm.outputs import MARKER, remove

    if (run / "checkpoint" / "state.json").is_file() or (run / "model").exists():
        return
    for name in [*RUN_ENTRIES, MARKER]:
        remove(run / name)
    if created and run.is_dir() and not any(run.iterdir()):
        run.rmdir()


def run_precision(opts: TrainOptions, run: Path):
    """`--precision` resolved for this machine; a resumed run keeps the precision it started with."""
    from textebm.precision import PrecisionChoice, resolve_precision

    if opts.resume and (run / "config.json").is_file():
        old = read_json(run / "config.json").get("precision_choice")
        if isinstance(old, dict) and old.get("requested") == opts.precision:
            choice = resolve_precision(old["precision"])
            return PrecisionChoice(**{**choice.as_dict(), "requested": opts.precision,
                                      "reason": f"{old['precision']}: as when the run started ({old.get('reason')})"})
    return resolve_precision(opts.precision)


def train(
    opts: TrainOptions,
    config: dict,
    model: torch.nn.Module,
    dataset: Sequence,
    lengths: Sequence[int],
    collate: Callable[[list], Any],
    step_fn: StepFn,
    save_model: Callable[[torch.nn.Module, Path], None],
    evaluate: Callable[[torch.nn.Module], dict[str, float]] | None = None,
    accelerator=None,
    on_epoch_start: Callable[[int], None] | None = None,
    on_epoch_end: Callable[[torch.nn.Module, int], None] | None = None,
    *,
    streams: dict[str, Stream] | None = None,
    param_groups: Sequence[ParamGroup] = (),
    on_step_end: Callable[[int], None] | None = None,
    on_step_start: Callable[[int, int], None] | None = None,
) -> dict:
    """Train `model` on `dataset` by minimising `step_fn(model, batch)`; return metrics.json.

    `step_fn` returns (scalar loss, floats to log); it runs under autocast. With `streams`, its
    batch is {"main": batch of `dataset`, name: batch of that stream, ...} (see the module doc).
    `save_model(model, dir)` writes the final model; `evaluate(model)` (optional) returns metrics
    for metrics.json. `on_epoch_start(epoch)` runs before every epoch's batches (also a resumed
    one); `on_epoch_end(model, epoch)` after every full epoch: state it changes must live in the
    model (buffers) so that checkpoints carry it. `param_groups` give parameters their own learning
    rates; `on_step_end(step)` runs after every optimizer step.
    """
    setup_torch(opts)
    run = Path(opts.out)
    choice = run_precision(opts, run)
    config = {**config, "precision_choice": choice.as_dict()}
    check_run_dir(opts, config)  # every process, before anything is written
    accelerator = accelerator or make_accelerator(opts, choice.precision)
    if accelerator.is_main_process:
        log.info("precision %s", choice.reason)
    accelerator.wait_for_everyone()
    created = not run.exists()
    if accelerator.is_main_process and not opts.resume:
        start_run(run, opts, config)
    accelerator.wait_for_everyone()
    if opts.resume and run_completed(run):
        log.info("%s already finished; nothing to resume", run)
        return read_json(run / "metrics.json")
    try:
        main = Stream(dataset=dataset, lengths=lengths, collate=collate, batch_size=opts.batch_size)
        return _train(opts, choice, model, main, streams or {}, step_fn, save_model, evaluate, accelerator,
                      on_epoch_start, on_epoch_end, param_groups, on_step_end, on_step_start)
    except BaseException:
        if accelerator.is_main_process and not opts.resume:
            abandon_failed_start(run, created)
        raise


def _loader(stream: Stream, sampler: Sampler[list[int]], seed: int) -> DataLoader:
    # Each loader gets its own generator: drawing its base seed from the global RNG would shift
    # dropout's random stream between an uninterrupted and a resumed run.
    return DataLoader(list(range(len(stream.dataset))), batch_sampler=sampler,
                      collate_fn=lambda idx: stream.collate([stream.dataset[i] for i in idx]),
                      generator=torch.Generator().manual_seed(seed))


def _check_streams(main: Stream, extra: dict[str, Stream]) -> dict[str, Stream]:
    """`extra`, after refusing bad names and sizes."""
    for name, st in {MAIN: main, **extra}.items():
        if name in ("", MAIN) and st is not main:
            raise TextebmError(f"a stream may not be called {name!r}")
        if len(st.dataset) != len(st.lengths):
            raise TextebmError(f"stream {name!r}: {len(st.dataset)} items but {len(st.lengths)} lengths")
        if st.batch_size < 1:
            raise TextebmError(f"stream {name!r}: batch_size must be >= 1, got {st.batch_size}")
    return extra


def _zip_streams(batches: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One dict {name: batch} per main batch; the streams give equally many batches per process."""
    its = {name: iter(b) for name, b in batches.items() if name != MAIN}
    end = object()
    for batch in batches[MAIN]:
        step = {MAIN: batch, **{name: next(it, end) for name, it in its.items()}}
        if any(b is end for b in step.values()):
            raise TextebmError(f"streams ran out before the main stream: {[n for n, b in step.items() if b is end]}")
        yield step
    # Finish each loader's epoch (accelerate tracks the loaders being iterated); none may have more.
    if more := [name for name, it in its.items() if next(it, end) is not end]:
        raise TextebmError(f"streams have more batches than the main stream: {more}")


def _train(opts, choice, model, main: Stream, extra: dict[str, Stream], step_fn, save_model,
           evaluate, accelerator, on_epoch_start, on_epoch_end, param_groups, on_step_end,
           on_step_start=None) -> dict:
    run = Path(opts.out)

    seed_everything(opts.seed)
    streams = {MAIN: main, **_check_streams(main, extra)}
    samplers = {MAIN: batch_sampler(main.lengths, opts)}
    samplers.update({name: stream_sampler(st, opts, len(samplers[MAIN])) for name, st in extra.items()})
    for name, st in extra.items():
        if st.lockstep and len(samplers[name]) != len(samplers[MAIN]):
            raise TextebmError(f"stream {name!r}: {len(samplers[name])} batches per epoch, the main stream "
                               f"{len(samplers[MAIN])}; a lockstep stream needs as many (e.g. K items per "
                               f"main item at batch size K x {main.batch_size}), or pass lockstep=False")
    loaders = [_loader(st, samplers[name], opts.seed) for name, st in streams.items()]
    optimizer = make_optimizer(model, opts, param_groups)
    model, optimizer, *loaders = accelerator.prepare(model, optimizer, *loaders)
    loaders = dict(zip(samplers, loaders))
    loader = loaders[MAIN]
    steps_per_epoch = math.ceil(len(loader) / opts.grad_accum)
    total = math.ceil(opts.epochs * steps_per_epoch)
    if opts.max_steps:
        total = min(total, opts.max_steps)
    if total <= 0:
        raise TextebmError("no training steps: the training data is empty or --epochs is 0")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(int(opts.warmup * total), total))

    step, epoch, batch_in_epoch, history, wall = 0, 0, 0, [], 0.0
    running: dict[str, list[float]] = {}  # losses since the last history entry
    if opts.resume and (run / "checkpoint" / "state.json").is_file():
        from textebm.checkpoint import load_checkpoint
        st = load_checkpoint(run, accelerator.unwrap_model(model), optimizer, scheduler,
                             rank=accelerator.process_index)
        step, epoch, batch_in_epoch = st["step"], st["epoch"], st["batch_in_epoch"]
        history, wall, running = st["history"], st["wall_seconds"], st.get("running", {})
        log.info("resuming %s at step %d (epoch %d, batch %d)", run, step, epoch, batch_in_epoch)

    bar = _progress(opts, accelerator, total, step)
    t0 = time.perf_counter() - wall
    first_step, t_start = step, time.perf_counter()  # this process's own rate, for the estimate
    model.train()
    while step < total:
        # accelerate's loaders count epochs themselves and pass them to the sampler on iteration:
        # set it on the loader we iterate, or a resumed run would replay epoch 0's order.
        epoch_batches = {}
        for name, ld in loaders.items():
            epoch_batches[name] = accelerator.skip_first_batches(ld, batch_in_epoch) if batch_in_epoch else ld
            for obj in (epoch_batches[name], samplers[name]):
                if hasattr(obj, "set_epoch"):
                    obj.set_epoch(epoch)
        batches = _zip_streams(epoch_batches) if extra else epoch_batches[MAIN]
        if on_epoch_start is not None:
            on_epoch_start(epoch)
        for batch in batches:
            with accelerator.accumulate(model):
                if on_step_start is not None:
                    on_step_start(step, total)
                with accelerator.autocast():
                    loss, logs = step_fn(model, batch)
                _check_finite(loss, step, run, accelerator)
                accelerator.backward(loss)
                if accelerator.sync_gradients and opts.grad_clip > 0:
                    accelerator.clip_grad_norm_(model.parameters(), opts.grad_clip)
                optimizer.step()
                if accelerator.sync_gradients:
                    scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            batch_in_epoch += 1
            for k, v in {"loss": float(loss.detach()), **logs}.items():
                running.setdefault(k, []).append(float(v))
            if not accelerator.sync_gradients:
                continue
            step += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{running['loss'][-1]:.4f}", refresh=False)
            if step % opts.log_every == 0 or step == total:
                history.append({"step": step, "epoch": epoch, **group_lrs(optimizer),
                                **{k: float(np.mean(v)) for k, v in running.items()}})
                running = {}
                if bar is None and accelerator.is_main_process:  # without a bar, a line now and then
                    log.info(progress_line(history[-1], total, step - first_step, time.perf_counter() - t_start))
            if step % opts.checkpoint_every == 0 and step < total:
                _checkpoint(run, accelerator, model, optimizer, scheduler,
                            {"step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch, "history": history,
                             "running": running, "wall_seconds": time.perf_counter() - t0})
            if on_step_end is not None:
                on_step_end(step)
            if step >= total:
                break
        else:
            if on_epoch_end is not None:
                with torch.no_grad(), accelerator.autocast():
                    on_epoch_end(model, epoch)
                model.train()
            epoch, batch_in_epoch = epoch + 1, 0
            continue
        break
    if bar is not None:
        bar.close()

    wall = time.perf_counter() - t0
    model.eval()
    metrics: dict[str, Any] = {"train": {"steps": step, "epochs_completed": epoch + batch_in_epoch / max(1, len(loader)),
                                         "wall_seconds": round(wall, 2), "history": history,
                                         "processes": accelerator.num_processes,
                                         "precision": choice.precision},
                               "precision_choice": choice.as_dict()}
    if history:
        metrics["train"]["final_loss"] = history[-1]["loss"]
    # The model is saved before evaluation, so an error there cannot throw away a finished training.
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        with atomic_dir(run / "model") as tmp:
            save_model(accelerator.unwrap_model(model), tmp)
        write_json(run / "metrics.json", metrics)
    if evaluate is not None:
        with torch.no_grad(), accelerator.autocast():
            metrics["eval"] = evaluate(accelerator.unwrap_model(model))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        metrics["completed"] = True
        write_json(run / "metrics.json", metrics)
        if not opts.keep_checkpoint:
            shutil.rmtree(run / "checkpoint", ignore_errors=True)
    accelerator.wait_for_everyone()
    return metrics


def run_completed(run: Path) -> bool:
    """True when RUN finished: metrics.json says completed and model/ was written."""
    m = run / "metrics.json"
    return m.is_file() and bool(read_json(m).get("completed")) and (run / "model").is_dir()


def _check_finite(loss: torch.Tensor, step: int, run: Path, accelerator) -> None:
    bad = (~torch.isfinite(loss.detach())).float().reshape(1)
    if accelerator.num_processes > 1:
        bad = accelerator.reduce(bad, reduction="sum")
    if bad.item() > 0:
        has_ckpt = (run / "checkpoint" / "state.json").is_file()
        where = f"the last good checkpoint is kept in {run / 'checkpoint'}" if has_ckpt else "no checkpoint was written yet"
        raise TrainingDiverged(f"loss is {float(loss):.4g} at step {step + 1}; stopping ({where}). "
                               "Try a lower --lr, --precision fp32, or --grad-clip.")


def _checkpoint(run, accelerator, model, optimizer, scheduler, state: dict):
    from textebm.checkpoint import rng_state, save_checkpoint

    tensors, meta = rng_state()
    gathered = _gather_rng(accelerator, tensors, meta)
    if accelerator.is_main_process:
        save_checkpoint(run, accelerator.unwrap_model(model), optimizer, scheduler, state, gathered)
    accelerator.wait_for_everyone()


def _gather_rng(accelerator, tensors: dict, meta: dict) -> list[tuple[dict, dict]]:
    if accelerator.num_processes == 1:
        return [(tensors, meta)]
    from accelerate.utils import gather_object

    return gather_object([(tensors, meta)])


def progress_line(entry: dict[str, Any], total: int, steps_done: int, seconds: float) -> str:
    """'step 40/321 (12%), loss 3.2145, 2.10 s/step, about 9.8 min left' from a history entry and
    the steps this process ran in `seconds` (a resumed run's rate is its own, not the first run's)."""
    step = entry["step"]
    line = f"step {step}/{total} ({100 * step / total:.0f}%), loss {entry['loss']:.4f}"
    if steps_done > 0 and seconds > 0:
        per = seconds / steps_done
        left = (total - step) * per
        line += f", {per:.2f} s/step, about {left / 60:.1f} min left" if step < total else f", {per:.2f} s/step"
    return line


def _progress(opts: TrainOptions, accelerator, total: int, initial: int):
    if not opts.progress or not accelerator.is_main_process:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True)


def options_dict(cfg: Any) -> dict:
    """A config dataclass as plain JSON (for RUN/config.json)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}
