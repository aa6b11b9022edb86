"""One readable training loop for every model in textebm, on accelerate.

A command builds a `Recipe` (its model, data, loss, outputs and any state of its own) and calls
`train(opts, config, recipe)`. The loop owns what is common: device placement, mixed precision
(fp32 / bf16 / fp16; bf16 works on CPU too), several processes (`accelerate launch`),
length-bucketed batches, AdamW with warm-up and linear (or cosine) decay, gradient clipping, progress, NaN
checks, atomic checkpoints and exact resume. `train` runs a recipe in its run folder
(`started_run`, after the policy of `textebm.runfolder`: what the folder holds, --resume,
--overwrite, failures), `optimise` is the loop itself; the streams, their batch samplers and
loaders are `textebm.data.batching`'s.

Batches. The recipe's `collate` makes them from its items, and the loop passes them to
`recipe.loss` as they are: tensors, a dataclass of tensors (`textebm.data.batching.Batch`), images;
accelerate moves anything with `.to(device)`.

Data streams. The recipe's `dataset`, `lengths` and `collate` are the main stream; epochs and steps
count its batches. `recipe.streams = {name: Stream(...)}` adds more, and `loss` then gets one dict
per step, {"main": the main batch, name: that stream's batch, ...}. Every stream is bucketed by its
own lengths (`BucketBatchSampler`, its own seed), sharded across processes by accelerate, and
gives exactly one batch per main batch:

    lockstep (default)  the stream's epoch is the main stream's, so it must have as many batches
                        per epoch (e.g. K items per main item at batch size K x B). Both put their
                        short batch last, so under accelerate's round-robin sharding every process
                        gets batch j of each stream together.
    cycling             (lockstep=False) the stream runs through its own epochs, whatever its size;
                        it drops its short batch, so every batch it gives is full.

`Stream.epoch_items(e)` chooses the items of the stream's epoch e (e.g. noise sample (e*K + j) mod
n of every example). A stream's batches depend only on (seed, main epoch, batch in epoch), so a
checkpoint needs no state of its own for them and a resumed run draws the same batches.

Parameter groups. `recipe.param_groups = [ParamGroup(name, prefix, lr)]` trains the parameters
whose names start with `prefix` at their own peak learning rate, the rest at `opts.lr` (several
models trained together are several prefixes of the recipe's one module). Each group keeps
weight decay off biases and norms; warm-up and decay scale every group alike; the history logs
`lr_<name>` next to `lr`.

Two stages. A method whose model starts from a first stage of its own (paper e's pre-training)
opens its run folder with `started_run`, trains the first stage inside it as a run of its own (a
`train` call into a folder of RUN named in the recipe's `run_files`, which resumes by itself),
loads its result into the recipe's model, then trains in RUN with `run_loop`: every loop makes
its own Accelerator, once. A run stopped after its first stage made progress keeps it for
--resume.

Schedules. `recipe.loss` gets a `Progress` (optimizer steps done, the run's total, the epoch):
a schedule that depends on it (a loss weight's warm-up) resumes exactly, since the step count
comes from the checkpoint.
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from textebm.checkpoint import BEST_DIR, CHECKPOINT_DIR, has_checkpoint, load_best, save_best
from textebm.data.batching import Stream, stream_loader, stream_sampler
from textebm.data.layout import input_sha256
from textebm.errors import TextebmError, TrainingDiverged, TrainingInterrupted
from textebm.fingerprint import json_sha256
from textebm.inference import set_threads
from textebm.io import atomic_dir, read_json, write_json
from textebm.options import threads_field
from textebm.outputs import seal_marker
from textebm.precision import resolve_for_run
from textebm.progress import on_terminal
from textebm.runfolder import (  # the run folder's policy, which the loop below follows
    INPUTS_KEY,
    INPUT_OPTIONS,
    LAST_DIR,
    RUN_ENTRIES,
    SET_ASIDE,
    RunFolder,
    abandon_failed_start,
    check_run_dir,
    drop_set_aside,
    holds_progress,
    interrupted_message,
    record_moved_inputs,
    run_completed,
    stages_with_progress,
    start_run,
)

log = logging.getLogger(__name__)


def input_hashes(opts: Any) -> dict[str, str]:
    """The content of each input option of `opts` that is set (INPUT_OPTIONS): sha256 of the file
    or of the folder's files (a list: of each item's, in order); a value that names nothing here
    (a models-fetch id, a dataset recipe) stands for itself."""
    out = {}
    for name in INPUT_OPTIONS:
        value = getattr(opts, name, None)
        if value in (None, "", [], ()):
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        hashes = [input_sha256(str(v)) for v in items]
        out[name] = hashes[0] if len(hashes) == 1 else json_sha256(hashes)
    return out


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
    schedule: str = field(default="linear", metadata={
        "help": "learning-rate decay after the warm-up, to 0 at the last step: linear, or cosine (half a cosine)",
        "choices": ["linear", "cosine"]})
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


def setup_torch(opts: TrainOptions) -> None:
    """Process-wide settings measured to matter on CPU (ASSETS.md): flush denormals, threads."""
    torch.set_flush_denormal(True)
    set_threads(opts.threads)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass(kw_only=True)
class ParamGroup:
    """Parameters whose names (as in `model.named_parameters()`) start with `prefix`, trained at
    peak learning rate `lr` under the common schedule."""

    name: str
    prefix: str | tuple[str, ...]
    lr: float


MAIN = "main"  # the main stream's key in a step's batch dict


@dataclass(frozen=True)
class Progress:
    """Where the run stands at a batch: optimizer steps done (from the checkpoint on resume, so a
    schedule over steps resumes exactly), the run's total steps, and the epoch."""

    step: int
    total: int
    epoch: int


class Recipe:
    """What a training command trains: `train(opts, config, recipe)` runs it (see the module doc).

    A recipe owns its model, data, loss, outputs and any state of its own. Set `model`,
    `dataset`, `lengths` and `collate`, and define `loss` and `save`; the other methods do nothing
    unless a recipe needs them (the defaults below), and `streams`, `param_groups`, `run_files`,
    `keep_best` and `patience` are optional.

    `model` holds every trained parameter: several models trained together (paper e's TRF and its
    noise LM) are attributes of one module, at their own learning rates through `param_groups`
    (prefixes of the parameter names); a frozen part (paper d's base LM) has requires_grad False
    and is left out of the optimizer. The loop places `model` with accelerate and checkpoints its
    weights with the optimizer.
    """

    model: torch.nn.Module
    dataset: Sequence  # the main stream's items: epochs and steps count its batches
    lengths: Sequence[int]  # one per item, for bucketing (any size measure: tokens, pixels, ...)
    collate: Callable[[list], Any]  # items -> a batch: tensors, or a dataclass of them with `.to(device)`
    streams: dict[str, Stream] | None = None  # extra streams; `loss` then gets {MAIN: batch, name: batch}
    param_groups: Sequence[ParamGroup] = ()
    run_files: Sequence[str] = ()  # what the command writes into RUN beside RUN_ENTRIES (in its marker;
    # a first stage's run folder among them)
    keep_best: bool = False  # validate after every epoch and end with the best weights (`validate`)
    patience: int = 0  # with keep_best: stop after this many validations without a better one (0: never)

    def loss(self, model: torch.nn.Module, batch: Any, at: Progress) -> tuple[torch.Tensor, dict[str, float]]:
        """(scalar loss, floats to log) of one batch, under autocast. `model` is `self.model` as
        accelerate placed it: call it for the forward passes (processes synchronise gradients
        through it). An inner loop (sampling with a replay buffer) runs here."""
        raise NotImplementedError

    def save(self, folder: Path) -> None:
        """Write the final model into `folder` (RUN/model, written atomically)."""
        raise NotImplementedError

    def evaluate(self) -> dict[str, Any] | None:
        """Metrics of the trained model for metrics.json (after `save`, under no_grad and autocast)."""
        return None

    def validate(self) -> float:
        """A validation loss (lower is better) of the current weights, under no_grad and autocast,
        on every process: with `keep_best`, the loop calls it after every full epoch and after the
        last step, and the run ends with the weights of the lowest."""
        raise NotImplementedError

    def start_epoch(self, epoch: int) -> None:
        """Before every epoch's batches, also a resumed epoch's."""

    def end_epoch(self, epoch: int) -> None:
        """After every full epoch, under no_grad and autocast. What it changes must live in the
        model's buffers or in `state()`, so that checkpoints carry it."""

    def state(self) -> dict[str, torch.Tensor]:
        """Tensors of the recipe's own that a checkpoint keeps (a replay buffer, a running
        estimate), one set per process, saved as safetensors beside the model."""
        return {}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore `state()` from a checkpoint (this process's own)."""
        if tensors:
            raise TextebmError(f"the checkpoint holds recipe state {sorted(tensors)} this recipe does not take")


def make_accelerator(opts: TrainOptions, precision: str):
    """An Accelerator for `precision` (fp32 | bf16 | fp16: `--precision` as `started_run` resolved it)."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

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


def cosine_schedule(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """The learning-rate factor at a step: linear warm-up as `linear_schedule`, then half a cosine
    from 1 after the warm-up to 0 at `total_steps` (Deng et al. 2020, appendix A.3)."""
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        done = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))  # decay's fraction done
        return 0.5 * (1.0 + math.cos(math.pi * done))
    return f


def lr_schedule(opts: TrainOptions, total_steps: int) -> Callable[[int], float]:
    """The learning-rate factor of --schedule over a run of `total_steps` optimizer steps."""
    make = cosine_schedule if opts.schedule == "cosine" else linear_schedule
    return make(int(opts.warmup * total_steps), total_steps)


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


def train(opts: TrainOptions, config: dict, recipe: Recipe) -> dict:
    """Train `recipe` under the run folder `opts.out`; return metrics.json.

    `started_run` keeps the run folder's policy, `run_loop` trains in it. A method of two stages
    calls them itself: its first stage is a `train` call of its own inside the started run, its
    second stage the `run_loop` (`tagging/train.py`'s pre-training).
    """
    with started_run(opts, config, recipe) as run:
        return run.finished if run.finished is not None else run_loop(opts, recipe, run)


@dataclass(frozen=True)
class Run:
    """A run folder that `started_run` checked and started, or found to resume."""

    path: Path
    choice: Any  # the precision it trains in (`precision.PrecisionChoice`)
    finished: dict | None  # under --resume, metrics.json of a run that had finished: nothing to train


@contextmanager
def started_run(opts: TrainOptions, config: dict, recipe: Recipe) -> Iterator[Run]:
    """The run folder around a training: check the folder, write config.json, set an earlier run
    aside under --overwrite (dropped once this one has a checkpoint or a model, brought back if it
    fails before), or check config.json under --resume (the checkpoint is `optimise`'s). A failure
    inside before the first checkpoint (or a first stage's) removes what the run wrote; a
    divergence or Ctrl-C says what was kept."""
    if recipe.keep_best and type(recipe).validate is Recipe.validate:
        raise TextebmError(f"{type(recipe).__name__} has no validation loss to keep the best weights by")
    if recipe.patience and not recipe.keep_best:
        raise TextebmError("patience (stopping when the validation loss stops improving) needs keep_best")
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list, parse_flag_from_env

    setup_torch(opts)
    path = Path(opts.out)
    choice = resolve_for_run(opts.precision, path, opts.resume)
    # the processes of `accelerate launch` (one without it), set up as the loop's Accelerator sets them up
    processes = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    hashes: list = [None]  # large inputs read once, by the main process, not once per process
    if processes.is_main_process:
        try:
            hashes = [input_hashes(opts)]
        except (TextebmError, OSError) as e:  # every process stops with it, none waits for the hashes
            if processes.num_processes == 1:
                raise
            hashes = [TextebmError(f"reading the inputs: {e}")]
    if processes.num_processes > 1:
        broadcast_object_list(hashes)
    if isinstance(hashes[0], TextebmError):
        raise hashes[0]
    config = {**config, "precision_choice": choice.as_dict(), INPUTS_KEY: hashes[0]}
    check_run_dir(opts, config)  # every process, before anything is written
    if processes.is_main_process:
        log.info("precision %s", choice.reason)
    processes.wait_for_everyone()
    created = not path.exists()
    entries = [*RUN_ENTRIES, *recipe.run_files]
    if processes.is_main_process and not opts.resume:
        start_run(path, opts, config, entries)
    elif processes.is_main_process and (path / "config.json").is_file():
        record_moved_inputs(path, config)
    processes.wait_for_everyone()
    if opts.resume and run_completed(path):
        log.info("%s already finished; nothing to resume", path)
        yield Run(path, choice, finished=read_json(path / "metrics.json"))
        return
    try:
        yield Run(path, choice, finished=None)
    except BaseException as e:
        # what was kept, read before a failed start is cleaned away (and an earlier run brought back)
        message = interrupted_message(path, entries) if isinstance(e, KeyboardInterrupt) else ""
        if processes.is_main_process and not opts.resume:
            restored = (path / SET_ASIDE).is_dir() and not (holds_progress(path) or stages_with_progress(path, entries))
            if message and restored:
                message = (f"--out {path}: stopped before its first checkpoint; the earlier run that --overwrite "
                           "was to replace is back in place, as it was; run the command again to replace it")
            abandon_failed_start(path, created, entries)
        if isinstance(e, TrainingDiverged):
            where = (f"the last good checkpoint is kept in {path / CHECKPOINT_DIR}" if has_checkpoint(path)
                     else "no checkpoint was written yet")
            fp32 = "" if choice.precision == "fp32" else ", --precision fp32"
            raise TrainingDiverged(f"{e} ({where}). Try a lower --lr{fp32}, or --grad-clip.") from None
        if isinstance(e, KeyboardInterrupt) and not isinstance(e, TrainingInterrupted):
            raise TrainingInterrupted(message) from None
        raise


def run_loop(opts: TrainOptions, recipe: Recipe, run: Run) -> dict:
    """Train `recipe` in a started run with an Accelerator of its own (`optimise`), then write the
    model, metrics.json and the evaluation (`finish_run`); return metrics.json."""
    accelerator = make_accelerator(opts, run.choice.precision)
    folder = RunFolder(run.path, accelerator)
    done = optimise(opts, recipe, accelerator, folder)
    return finish_run(opts, recipe, accelerator, folder, done, run.choice)


@dataclass
class Trained:
    """What `optimise` hands back to the run folder."""

    steps: int
    epochs_completed: float
    history: list[dict]
    wall_seconds: float
    validation: list[dict] = field(default_factory=list)  # {step, epoch, loss} under keep_best
    stopped_early: bool = False  # by the recipe's patience


def optimise(opts: TrainOptions, recipe: Recipe, accelerator, folder: RunFolder) -> Trained:
    """The loop: AdamW on `recipe.loss` over the recipe's batches until the run's total steps,
    with a checkpoint in `folder` every --checkpoint-every steps (resumed from under --resume)."""
    seed_everything(opts.seed)
    main = Stream(dataset=recipe.dataset, lengths=recipe.lengths, collate=recipe.collate, batch_size=opts.batch_size,
                  seed_offset=0)
    extra = _check_streams(main, recipe.streams or {})
    main_batches = math.ceil(len(main.lengths) / main.batch_size)  # = len(the main stream's sampler)
    samplers = {name: stream_sampler(st, opts.seed, main_batches) for name, st in {MAIN: main, **extra}.items()}
    for name, st in extra.items():
        if st.lockstep and len(samplers[name]) != len(samplers[MAIN]):
            raise TextebmError(f"stream {name!r}: {len(samplers[name])} batches per epoch, the main stream "
                               f"{len(samplers[MAIN])}; a lockstep stream needs as many (e.g. K items per "
                               f"main item at batch size K x {main.batch_size}), or pass lockstep=False")
    loaders = [stream_loader(st, samplers[name], opts.seed) for name, st in {MAIN: main, **extra}.items()]
    optimizer = make_optimizer(recipe.model, opts, recipe.param_groups)
    model, optimizer, *loaders = accelerator.prepare(recipe.model, optimizer, *loaders)
    loaders = dict(zip(samplers, loaders))
    steps_per_epoch = math.ceil(len(loaders[MAIN]) / opts.grad_accum)
    total = math.ceil(opts.epochs * steps_per_epoch)
    if opts.max_steps:
        total = min(total, opts.max_steps)
    if total <= 0:
        raise TextebmError("no training steps: the training data is empty or --epochs is 0")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(opts, total))

    step, epoch, batch_in_epoch, history, wall, validation, stopped = 0, 0, 0, [], 0.0, [], False
    running: dict[str, list[float]] = {}  # losses since the last history entry
    if opts.resume and folder.has_checkpoint():
        st = folder.load_checkpoint(recipe, optimizer, scheduler)
        step, epoch, batch_in_epoch = st["step"], st["epoch"], st["batch_in_epoch"]
        history, wall, running = st["history"], st["wall_seconds"], st.get("running", {})
        validation = st.get("validation", [])
        log.info("resuming %s at step %d (epoch %d, batch %d)", folder.path, step, epoch, batch_in_epoch)

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
        recipe.start_epoch(epoch)
        for batch in batches:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss, logs = recipe.loss(model, batch, Progress(step=step, total=total, epoch=epoch))
                _check_finite(loss, step, accelerator)
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
                folder.save_checkpoint(recipe, optimizer, scheduler,
                                       {"step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch,
                                        "history": history, "running": running, "validation": validation,
                                        "wall_seconds": time.perf_counter() - t0})
            if step >= total:
                break
        else:
            with torch.no_grad(), accelerator.autocast():
                recipe.end_epoch(epoch)
            if recipe.keep_best and step < total:
                validate_epoch(recipe, accelerator, folder, validation, step, epoch, final=False)
                if recipe.patience and since_best(validation) >= recipe.patience:
                    log.info("no better validation loss in %d epochs: stopping at step %d of %d", recipe.patience,
                             step, total)
                    total, stopped = step, True  # ends the loop; the schedule is not stretched
            model.train()
            epoch, batch_in_epoch = epoch + 1, 0
            continue
        break
    if bar is not None:
        bar.close()
    if recipe.keep_best and (not validation or validation[-1]["step"] != step):
        validate_epoch(recipe, accelerator, folder, validation, step, epoch, final=True)
    return Trained(steps=step, epochs_completed=epoch + batch_in_epoch / max(1, len(loaders[MAIN])),
                   history=history, wall_seconds=time.perf_counter() - t0, validation=validation,
                   stopped_early=stopped)


def since_best(validation: list[dict]) -> int:
    """Validations after the best one (the first best, when several are equal)."""
    losses = [v["loss"] for v in validation]
    return len(losses) - 1 - losses.index(min(losses))


def validate_epoch(recipe: Recipe, accelerator, folder: RunFolder, validation: list[dict], step: int, epoch: int,
                   final: bool) -> None:
    """`recipe.validate()` into `validation`; a new best (before the last step) is written to
    RUN/best, so that a resumed run still has it. The final weights stay in memory."""
    recipe.model.eval()
    with torch.no_grad(), accelerator.autocast():
        value = float(recipe.validate())
    if not math.isfinite(value):
        raise TrainingDiverged(f"validation loss is {value} after step {step}; stopping")
    best = min((v["loss"] for v in validation), default=math.inf)
    validation.append({"step": step, "epoch": epoch, "loss": value})
    if accelerator.is_main_process:
        log.info("validation after step %d (epoch %d): loss %.4f%s", step, epoch + 1, value,
                 " (best so far)" if value < best else f" (best {best:.4f})")
        if value < best and not final:
            save_best(folder.path, accelerator.unwrap_model(recipe.model), validation[-1])
    accelerator.wait_for_everyone()


def finish_run(opts: TrainOptions, recipe: Recipe, accelerator, folder: RunFolder, done: Trained, choice) -> dict:
    """Write the model, metrics.json and the evaluation; remove the checkpoint (unless kept)."""
    recipe.model.eval()
    metrics: dict[str, Any] = {"train": {"steps": done.steps, "epochs_completed": done.epochs_completed,
                                         "wall_seconds": round(done.wall_seconds, 2), "history": done.history,
                                         "processes": accelerator.num_processes,
                                         "precision": choice.precision},
                               "precision_choice": choice.as_dict()}
    if done.history:
        metrics["train"]["final_loss"] = done.history[-1]["loss"]
    if done.validation:
        metrics["train"]["validation"] = done.validation
        metrics["train"]["stopped_early"] = done.stopped_early
        metrics["train"]["kept"] = keep_best_weights(recipe, folder, done.validation, accelerator)
    # The model is saved before evaluation, so an error there cannot throw away a finished training.
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        with atomic_dir(folder.path / "model") as tmp:
            recipe.save(tmp)
        write_json(folder.path / "metrics.json", metrics)
        drop_set_aside(folder.path)
    with torch.no_grad(), accelerator.autocast():
        evaluation = recipe.evaluate()
    if evaluation is not None:
        metrics["eval"] = evaluation
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        metrics["completed"] = True
        write_json(folder.path / "metrics.json", metrics)
        if not opts.keep_checkpoint:
            shutil.rmtree(folder.checkpoint, ignore_errors=True)
            shutil.rmtree(folder.path / BEST_DIR, ignore_errors=True)
        seal_marker(folder.path)  # a later --overwrite refuses an entry the user changed since
    accelerator.wait_for_everyone()
    return metrics


def keep_best_weights(recipe: Recipe, folder: RunFolder, validation: list[dict], accelerator) -> dict:
    """Load RUN/best into the model when an earlier validation beat the last one, the last step's
    model saved first as RUN/last (a folder like RUN/model, for the last-weights figure); return
    the entry of the weights the run ends with."""
    best = min(validation, key=lambda v: v["loss"])
    if best is validation[-1] or best["loss"] >= validation[-1]["loss"]:
        return validation[-1]
    if accelerator.is_main_process:
        with atomic_dir(folder.path / LAST_DIR) as tmp:
            recipe.save(tmp)
    accelerator.wait_for_everyone()
    stored = load_best(folder.path, recipe.model)
    if stored is None or stored["step"] != best["step"]:
        raise TextebmError(f"{folder.path / BEST_DIR} does not hold the weights of the best validation "
                           f"(step {best['step']}); rerun with --overwrite")
    log.info("keeping the weights after step %d (epoch %d, validation loss %.4f; the last step's %.4f)",
             best["step"], best["epoch"] + 1, best["loss"], validation[-1]["loss"])
    return best


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


def _check_finite(loss: torch.Tensor, step: int, accelerator) -> None:
    bad = (~torch.isfinite(loss.detach())).float().reshape(1)
    if accelerator.num_processes > 1:
        bad = accelerator.reduce(bad, reduction="sum")
    if bad.item() > 0:
        raise TrainingDiverged(f"loss is {float(loss.detach()):.4g} at step {step + 1}; stopping")


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
    """A bar on a terminal; None elsewhere (no terminal, --no-progress, another process), where the
    loop logs a line per log window instead (`progress_line`)."""
    if not opts.progress or not accelerator.is_main_process or not on_terminal():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True)


