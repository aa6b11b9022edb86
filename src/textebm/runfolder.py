"""A training run's folder (`opts`: a command's `textebm.train.TrainOptions`): what it holds, and the policy of writing it (the loop, `textebm.train`,
calls these).

    RUN/config.json      the command's config (written first)
    RUN/checkpoint/      the last checkpoint (textebm.checkpoint), removed after success unless kept
    RUN/metrics.json     training history, wall time, evaluation results
    RUN/model/           the final model;  RUN/best/, RUN/last/: keep_best's weights

`check_run_dir` refuses what a run may not write over (a non-empty folder without --resume or
--overwrite, a resumed run whose settings differ, an input of the run as its output) and
completes what a kill cut short (`recover_run_folder`); `start_run` marks and writes a new run.
Under --overwrite the earlier run's entries wait in RUN/.textebm-replaced (`set_aside`) until the
new run has written its first checkpoint or its model, and come back (`bring_back`) if it fails
before: a run that stops at step 2 never costs the one it was to replace. `RunFolder` writes and
reads the checkpoint on every process; `interrupted_message` says what a stopped run kept.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

from textebm.checkpoint import (
    BEST_DIR,
    CHECKPOINT_DIR,
    has_checkpoint,
    load_checkpoint,
    load_extra_state,
    rng_state,
    save_checkpoint,
)
from textebm.errors import TextebmError
from textebm.io import read_json, write_json
from textebm.options import option_defaults
from textebm.outputs import (
    MARKER,
    check_not_input,
    check_output_dir,
    own_entries,
    read_marker,
    remove,
    write_marker,
)

log = logging.getLogger(__name__)


# Options that may differ between a run and its resumption (--out too: a run folder moved or renamed,
# or named by another path, is still the same run).
RESUME_FREE = {"out", "resume", "overwrite", "progress", "threads", "keep_checkpoint", "checkpoint_every",
               "precision_choice"}


LAST_DIR = "last"  # under keep_best, the last step's model when the run keeps an earlier one


RUN_ENTRIES = ["config.json", CHECKPOINT_DIR, "metrics.json", "model", BEST_DIR, LAST_DIR]  # what a run folder holds


def check_keep_best(cfg, eval_split: str, measure: str) -> None:
    """--keep-best chooses the epoch by `measure` on the evaluation split: refused without one."""
    if cfg.keep_best and not eval_split:
        raise TextebmError(f"--keep-best chooses the epoch by {measure}: it needs an evaluation split "
                           "(--eval-split, or a dataset folder with a dev split)")


def run_kind(opts: Any) -> str:
    """The command a run folder belongs to (its output marker's kind), e.g. "lm train"."""
    return getattr(opts, "COMMAND", "train")


# The options of training commands that name inputs (files or folders): --out may be none of them
# and hold none of them (`outputs.check_not_input`).
INPUT_OPTIONS = ("data", "init", "residual_of", "tokenizer", "train", "val", "vocab", "encoder", "noise",
                 "unlabelled", "base")
INPUTS_KEY = "inputs_sha256"  # config.json: the content of each input, which --resume compares


def record_moved_inputs(run: Path, config: dict) -> None:
    """Under --resume with the same inputs by content, read from other paths: RUN/config.json is
    rewritten with the paths this run reads, so what reads them later (a joint model checking its
    energy's negatives) finds them."""
    cfg_file = run / "config.json"
    old = read_json(cfg_file)
    if INPUTS_KEY not in old or old[INPUTS_KEY] != config.get(INPUTS_KEY):
        return
    moved = {k: config[k] for k in INPUT_OPTIONS if k in config and old.get(k) != config[k]}
    if moved:
        log.info("%s: its inputs are read from new paths (the same content): %s", run,
                 ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in moved.items()))
        write_json(cfg_file, {**old, **moved})


def _resume_diff(old: dict, config: dict) -> list[str]:
    """What differs between a run's config.json (`old`) and the settings it is resumed with, for
    the message. Inputs are compared by content where the run recorded it (the same files under
    another path resume; other content under the same path does not), else by path (a run
    started before textebm recorded its inputs' content)."""
    hashed = INPUTS_KEY in old
    free = RESUME_FREE | (set(INPUT_OPTIONS) | {INPUTS_KEY} if hashed else {INPUTS_KEY})
    diff = [f"{k}={old.get(k)!r}->{config.get(k)!r}" for k in sorted(set(old) | set(config))
            if k not in free and old.get(k) != config.get(k)]
    if hashed:
        was, now = old[INPUTS_KEY], config.get(INPUTS_KEY, {})
        for k in sorted(set(was) | set(now)):
            if was.get(k) != now.get(k):
                value = config.get(k) or old.get(k)
                shown = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else value
                if k not in now or k not in was:
                    diff.append(f"--{k.replace('_', '-')}: {'given' if k in now else 'left out'} now, "
                                f"{'left out' if k in now else 'given'} when the run started")
                else:
                    diff.append(f"--{k.replace('_', '-')} {shown}: other content than the run started with "
                                f"(sha256 {str(was[k])[:12]} -> {str(now[k])[:12]})")
    return diff


def check_run_dir(opts: Any, config: dict | None) -> None:
    """Refuse a non-empty RUN without --resume / --overwrite, and a resumed run whose settings differ.

    Only reads, but for completing what a kill cut short in RUN (`recover_run_folder`): every
    process calls it before anything is written, so all of them stop with the same message instead
    of one erring and the others failing at the next barrier. Commands call
    it with `config=None` before their own work (data, tokenizer, model), so a bad --out fails at
    once; `train` calls it again with the full config."""

    run = Path(opts.out)
    cfg_file = run / "config.json"
    recover_run_folder(run)
    if opts.resume and cfg_file.is_file() and config is not None:
        diff = _resume_diff({**option_defaults(opts, config), **read_json(cfg_file)}, config)
        if diff:
            raise TextebmError(f"--out {run}: --resume with different settings: " + ", ".join(diff)
                               + "; pass the run's settings, or --overwrite to start it again")
    check_not_input(run, [(f"--{name.replace('_', '-')}", getattr(opts, name, "")) for name in INPUT_OPTIONS])
    if opts.resume:
        if not cfg_file.is_file():
            raise TextebmError(f"--out {run}: nothing to resume (no config.json)")
        return
    marker = read_marker(run)
    if (not opts.overwrite and marker is not None and marker["kind"] == run_kind(opts) and cfg_file.is_file()
            and not run_completed(run)):
        raise TextebmError(f"--out {run}: holds an unfinished run; pass --resume to continue it, --overwrite "
                           "to start it again, or choose another folder")
    check_output_dir(run, run_kind(opts), opts.overwrite)


def start_run(run: Path, opts: Any, config: dict, entries: Sequence[str] = tuple(RUN_ENTRIES)) -> None:
    """Write the run's marker and config.json (main process, fresh start). With --overwrite, the
    entries of the earlier run are first set aside (`set_aside`); files textebm did not write stay."""

    if opts.overwrite:  # the user asked to replace this earlier run of the same command
        set_aside(run)
    run.mkdir(parents=True, exist_ok=True)
    write_marker(run, run_kind(opts), list(entries))
    write_json(run / "config.json", config)


SET_ASIDE = ".textebm-replaced"  # RUN/SET_ASIDE: the earlier run --overwrite replaces, until the new one holds


SETTING_ASIDE = ".textebm-replacing"  # RUN/SETTING_ASIDE: that run's entries while they move aside


RESTORING = ".textebm-restoring"  # RUN/RESTORING: the run set aside, while it moves back (`bring_back`)


def set_aside(run: Path) -> None:
    """Move the earlier run's entries and marker into RUN/.textebm-replaced. They are removed when
    the new run writes its first checkpoint or its model (`drop_set_aside`) and brought back when
    it fails before (`abandon_failed_start`), so a run that fails at step 2 loses nothing.

    The entries move into RUN/.textebm-replacing first, the marker last, and the folder becomes
    .textebm-replaced in one rename: a move that a crash cut short is completed by the next run
    (the marker, still in RUN or already moved, says which entries are the earlier run's), never
    taken for a failed try and removed."""

    aside, moving = run / SET_ASIDE, run / SETTING_ASIDE
    if aside.is_dir() and has_checkpoint(run):
        remove(aside)  # the run here got past its checkpoint before it stopped: it is the one to replace
    marker = read_marker(run) or (read_marker(moving) if moving.is_dir() else None)
    names = [n for n in [*own_entries(marker), MARKER]
             if n not in (SET_ASIDE, SETTING_ASIDE, RESTORING) and (run / n).exists()]
    if aside.is_dir() and not moving.is_dir():  # a try that stopped before its first checkpoint; the run before it waits aside
        for name in names:
            remove(run / name)
        return
    if not names and not moving.is_dir():
        return
    moving.mkdir(exist_ok=True)
    for name in names:  # MARKER last
        (run / name).rename(moving / name)
    moving.rename(aside)


def drop_set_aside(run: Path) -> None:
    """The new run holds a checkpoint or its model: the earlier run it replaces goes for good."""

    remove(run / SET_ASIDE)


def holds_progress(run: Path) -> bool:
    """True when RUN holds something a --resume continues from: a checkpoint or the model."""
    return has_checkpoint(run) or (run / "model").exists()


def stages_with_progress(run: Path, entries: Sequence[str]) -> list[str]:
    """The entries of RUN that are runs of their own (a method's first stage, in its `run_files`)
    holding a checkpoint or a model."""
    return [n for n in entries if n not in RUN_ENTRIES and (run / n).is_dir() and holds_progress(run / n)]


def abandon_failed_start(run: Path, created: bool, entries: Sequence[str] = tuple(RUN_ENTRIES)) -> None:
    """After a failure before the first checkpoint, remove what this run wrote (nothing there
    could be resumed), so the same command can simply be run again, and bring back the earlier
    run that --overwrite had set aside."""

    if holds_progress(run) or stages_with_progress(run, entries):
        return
    for name in [*entries, MARKER]:
        remove(run / name)
    bring_back(run)
    if created and run.is_dir() and not any(run.iterdir()):
        run.rmdir()


def bring_back(run: Path) -> None:
    """Move the earlier run set aside back into RUN: the folder aside first becomes
    RUN/.textebm-restoring in one rename, then its entries move out one by one (the marker last),
    so a kill midway leaves a state `recover_run_folder` completes, never entries that a later
    `set_aside` would take for a failed try's and remove."""
    aside, restoring = run / SET_ASIDE, run / RESTORING
    if aside.is_dir() and not restoring.exists():
        aside.rename(restoring)
    if not restoring.is_dir():
        return
    for entry in sorted(restoring.iterdir(), key=lambda p: p.name == MARKER):  # the marker last
        if os.path.lexists(run / entry.name):  # a failed try's entry of that name: the earlier run's wins
            log.warning("%s: %s of a failed try is replaced by the earlier run's", run, entry.name)
            remove(run / entry.name)
        entry.rename(run / entry.name)
    restoring.rmdir()


def recover_run_folder(run: Path) -> None:
    """Complete what a kill cut short in RUN, before anything reads it: a move aside
    (RUN/.textebm-replacing) is finished; an earlier run set aside whose replacement never wrote its
    marker, or whose bringing back stopped midway (RUN/.textebm-restoring), is brought back whole.
    Several processes may call it at once: a rename another one did first is skipped."""
    try:
        if (run / SETTING_ASIDE).is_dir():
            set_aside(run)
        if (run / RESTORING).is_dir() or ((run / SET_ASIDE).is_dir() and read_marker(run) is None):
            bring_back(run)
    except FileNotFoundError:
        pass


def run_completed(run: Path) -> bool:
    """True when RUN finished: metrics.json says completed and model/ was written."""
    m = run / "metrics.json"
    return m.is_file() and bool(read_json(m).get("completed")) and (run / "model").is_dir()


class RunFolder:
    """The checkpoint of a run in RUN/checkpoint (textebm.checkpoint): the recipe's model, the
    optimizer, the schedule, every process's RNG and the recipe's own state, saved by the main
    process and restored by every process."""

    def __init__(self, path: Path, accelerator):
        self.path, self.accelerator = Path(path), accelerator
        self.checkpoint = self.path / CHECKPOINT_DIR

    def has_checkpoint(self) -> bool:
        return has_checkpoint(self.path)

    def save_checkpoint(self, recipe, optimizer, scheduler, state: dict) -> None:
        acc = self.accelerator
        tensors, meta = rng_state()
        own = {k: v.detach().cpu().contiguous() for k, v in recipe.state().items()}
        gathered = _gather(acc, (tensors, meta, own))
        if acc.is_main_process:
            save_checkpoint(self.path, recipe.model, optimizer, scheduler, state,
                            [(t, m) for t, m, _ in gathered], [o for _, _, o in gathered])
            drop_set_aside(self.path)  # this run now has a checkpoint: the run it replaces goes
        acc.wait_for_everyone()

    def load_checkpoint(self, recipe, optimizer, scheduler) -> dict:
        rank = self.accelerator.process_index
        st = load_checkpoint(self.path, recipe.model, optimizer, scheduler, rank=rank)
        extra = load_extra_state(self.path, rank)
        if extra or recipe.state():
            recipe.load_state(extra)
        return st


def _gather(accelerator, obj) -> list:
    """`obj` of every process, in rank order (itself alone under one process)."""
    if accelerator.num_processes == 1:
        return [obj]
    from accelerate.utils import gather_object

    return gather_object([obj])


def interrupted_message(run: Path, entries: Sequence[str] = ()) -> str:
    """What the user reads after Ctrl-C: how to continue the run, or that nothing was kept."""
    if has_checkpoint(run):
        step = read_json(run / CHECKPOINT_DIR / "state.json").get("step")
        return (f"--out {run}: the checkpoint of step {step} is kept; run the same command with "
                "--resume to continue it")
    if (run / "model").exists():  # stopped after the last step: the trained model is written
        return (f"--out {run}: stopped after training, while writing its metrics or evaluating; the trained "
                "model/ is kept (usable as it is), but no checkpoint of the last step: the same command with --resume "
                "trains again from the start to the same weights (same seed) and finishes the run")
    if stages := stages_with_progress(run, entries):
        return (f"--out {run}: stopped before its first checkpoint; what its first stage trained "
                f"({', '.join(stages)}) is kept: run the same command with --resume to continue")
    return f"--out {run}: stopped before its first checkpoint, nothing was kept; run the command again"
