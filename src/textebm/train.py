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
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from textebm.errors import TextebmError, TrainingDiverged
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
    threads: int = field(default=0, metadata={"help": "CPU threads (0: torch default)", "min": 0})
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
    if opts.threads:
        torch.set_num_threads(opts.threads)


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
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, shuffle: bool = True,
                 window: int = 50):
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.window = window
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(len(self.lengths) / self.batch_size)

    def __iter__(self):
        n = len(self.lengths)
        if not self.shuffle:
            order = sorted(range(n), key=lambda i: self.lengths[i])
            yield from (order[i:i + self.batch_size] for i in range(0, n, self.batch_size))
            return
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        perm = torch.randperm(n, generator=g).tolist()
        span = self.batch_size * self.window
        batches = []
        for start in range(0, n, span):
            chunk = sorted(perm[start:start + span], key=lambda i: self.lengths[i])
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        full = [b for b in batches if len(b) == self.batch_size]
        short = [b for b in batches if len(b) < self.batch_size]  # at most one: spans divide by batch_size
        for j in torch.randperm(len(full), generator=g).tolist():
            yield full[j]
        yield from short


def batch_sampler(lengths: Sequence[int], opts: TrainOptions) -> BucketBatchSampler:
    """The sampler `train` draws its batches from; commands that plan per-batch data (the noise
    batches of `classify train`) build the same one to know those batches."""
    return BucketBatchSampler(lengths, opts.batch_size, opts.seed)


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


def make_optimizer(model: torch.nn.Module, opts: TrainOptions) -> torch.optim.Optimizer:
    """AdamW, no decay on biases and norms; fused where supported (about 10x cheaper on CPU)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": opts.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in decay + no_decay)
    return torch.optim.AdamW(groups, lr=opts.lr, fused=fused)


RUN_ENTRIES = ["config.json", "checkpoint", "metrics.json", "model"]  # what a run folder holds


def eval_split_of(cfg) -> str:
    """The split a training command evaluates on: `cfg.eval_split`, except that the default "dev"
    is skipped (with a note) when --data is a single file, which holds the train split only; an
    --eval-split the user set explicitly is refused there by the reader."""
    from textebm.cli.args import changed

    if cfg.eval_split and not Path(cfg.data).is_dir() and not changed(cfg, "eval_split"):
        log.info("--data %s is a single file (the train split only): no %s evaluation", cfg.data, cfg.eval_split)
        return ""
    return cfg.eval_split


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
    from textebm.outputs import read_marker, remove, write_marker

    if opts.overwrite and (old := read_marker(run)) is not None:
        for name in old.get("entries", []):
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
) -> dict:
    """Train `model` on `dataset` by minimising `step_fn(model, batch)`; return metrics.json.

    `step_fn` returns (scalar loss, floats to log); it runs under autocast. `save_model(model, dir)`
    writes the final model; `evaluate(model)` (optional) returns metrics for metrics.json.
    `on_epoch_start(epoch)` runs before every epoch's batches (also a resumed one);
    `on_epoch_end(model, epoch)` after every full epoch: state it changes must live in the model
    (buffers) so that checkpoints carry it.
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
        return _train(opts, choice, model, dataset, lengths, collate, step_fn, save_model, evaluate,
                      accelerator, on_epoch_start, on_epoch_end)
    except BaseException:
        if accelerator.is_main_process and not opts.resume:
            abandon_failed_start(run, created)
        raise


def _train(opts, choice, model, dataset, lengths, collate, step_fn, save_model, evaluate, accelerator,
           on_epoch_start, on_epoch_end) -> dict:
    run = Path(opts.out)

    seed_everything(opts.seed)
    sampler = batch_sampler(lengths, opts)
    # The loader gets its own generator: drawing its base seed from the global RNG would shift
    # dropout's random stream between an uninterrupted and a resumed run.
    loader = DataLoader(list(range(len(dataset))), batch_sampler=sampler,
                        collate_fn=lambda idx: collate([dataset[i] for i in idx]),
                        generator=torch.Generator().manual_seed(opts.seed))
    optimizer = make_optimizer(model, opts)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
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
    kill_at = int(os.environ.get("TEXTEBM_KILL_AT_STEP", "0"))  # test hook: simulate a hard kill
    t0 = time.perf_counter() - wall
    model.train()
    while step < total:
        # accelerate's loaders count epochs themselves and pass them to the sampler on iteration:
        # set it on the loader we iterate, or a resumed run would replay epoch 0's order.
        batches = accelerator.skip_first_batches(loader, batch_in_epoch) if batch_in_epoch else loader
        for obj in (batches, sampler):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        if on_epoch_start is not None:
            on_epoch_start(epoch)
        for batch in batches:
            with accelerator.accumulate(model):
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
                history.append({"step": step, "epoch": epoch, "lr": scheduler.get_last_lr()[0],
                                **{k: float(np.mean(v)) for k, v in running.items()}})
                running = {}
            if step % opts.checkpoint_every == 0 and step < total:
                _checkpoint(run, accelerator, model, optimizer, scheduler,
                            {"step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch, "history": history,
                             "running": running, "wall_seconds": time.perf_counter() - t0})
            if kill_at and step == kill_at:
                os._exit(137)
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


def _progress(opts: TrainOptions, accelerator, total: int, initial: int):
    if not opts.progress or not accelerator.is_main_process:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True)


def options_dict(cfg: Any) -> dict:
    """A config dataclass as plain JSON (for RUN/config.json)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}
