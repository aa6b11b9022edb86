"""The main job: paper a's comparison on rt-polarity with MiniLM, end to end on a CPU.

Steps (each is skipped when its output is already complete, so an interrupted quickstart
continues where it stopped):
  1. data            `data prepare rt-polarity` (or --data), split once with --seed
  2. per seed S (--seeds N runs seeds --seed .. --seed+N-1, in OUT/seed-S/):
     noise-lm        an infill LM (paper a, sec. 2.4: mask ratio 0.4) trained on the training split
     noise           `lm sample --mode infill --top-k 20`, K per training example and epoch
     runs/*          baseline, PosCal and the three EBM variants (scalar, hidden, sharp-hidden)
     eval            T-Scal / Scal-bin fit on train and on the dev half; everything on the test
                     half (the same half for every seed), with bootstrap intervals
  3. report.md, results.json: per seed, and mean / spread / interval over seeds

The seeds are the cells of a grid on textebm's one runner (`textebm.grid`): each finished seed is
cached in OUT/cells/ under a hash of everything its result depends on; `--plan` lists the seeds
left with their estimated time, `--shard I/N` (or a Slurm job array) splits them among processes
sharing OUT, and `--backend dask` runs them as tasks of a Dask cluster.

Seeds vary everything random in training (noise LM, noise, initialisation, batch order) and
keep the data split and the test half, so the methods are compared on the same examples.
Default settings fit a 2-core CPU in about 20 minutes per seed by training on a subset of the
training split for 3 epochs (a baseline becomes over-confident with epochs, which is where
joint EBM training pays off); `--full` uses paper-sized settings (all data, K=8).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from textebm import grid
from textebm.calibration.report import method_label, render_table
from textebm.calibration.uncertainty import seed_summary, summarise_seeds
from textebm.checkpoint import has_checkpoint
from textebm.classify.data import check_eval_labels, label_vocab
from textebm.classify.evaluate import ClassifyEvalConfig, evaluate_runs
from textebm.classify.train import ClassifyTrainConfig, classify_train
from textebm.data.readers import load_split
from textebm.data.recipes import prepare
from textebm.errors import TextebmError, TrainingInterrupted
from textebm.io import atomic_write, read_json, write_json
from textebm.lm.sample_command import SampleConfig, sample_file
from textebm.lm.train import LMTrainConfig, lm_train
from textebm.markdown import table
from textebm.models.load import CAUSAL_LM, CLOZE, ENCODER, find_model, folder_kind
from textebm.options import check_config, refuse_unused
from textebm.outputs import MARKER, check_output_dir, read_marker, remove, write_marker
from textebm.precision import resolve_precision
from textebm.runfolder import run_completed

log = logging.getLogger(__name__)

METHODS = ["baseline", "poscal", "ebm-scalar", "ebm-hidden", "ebm-sharp-hidden",
           "tscal-train", "tscal-dev", "scalbin-train", "scalbin-dev"]


# Settings sized to keep the quickstart within its budget (20 minutes plus set-up on a 2-core
# CPU) in the precision it runs in; see docs/classify.md for what the fp32 cut costs. The noise LM
# trains twice the epochs it did before the remedies grid (2 -> 4 in bf16): with the lighter NCE
# weight below, the `lm4w05` cell, the only one that kept accuracy within a point on rt-polarity.
PRESETS = {"bf16": {"train_limit": 2500, "lm_epochs": 4.0}, "fp32": {"train_limit": 1200, "lm_epochs": 2.0}}

# Seconds per unit of work on a 2-core CPU with native bf16 (AMD EPYC, avx512_bf16), for the
# start-of-run estimate: noise-LM step (batch 32), sampled sequence, classifier step (batch 32;
# baseline, PosCal, joint EBM with K=1) and predicted example in evaluation (which runs in fp32).
# bf16: the stages of a quickstart run with nothing else on the CPU (2026-11-26, 1,396 s; noise LM
# with its output layer on the masked positions only). fp32: those figures times the fp32/bf16
# ratios measured side by side (bench/bench_quickstart_steps.py on 2026-11-25; the noise-LM step's
# by bench/bench_hot_paths.py, 1.39x). A CPU without native bf16 runs fp32 about 1.3x slower than
# this one: see docs/classify.md and docs/performance.md.
STEP_SECONDS = {
    "bf16": {"lm": 0.362, "sample": 0.0127, "baseline": 0.40, "poscal": 0.48, "ebm": 0.75, "eval": 0.0050},
    "fp32": {"lm": 0.50, "sample": 0.0236, "baseline": 0.58, "poscal": 0.70, "ebm": 1.16, "eval": 0.0050},
}
QUICKSTART_KIND = "quickstart"


@dataclass(kw_only=True)
class QuickstartConfig(grid.GridOptions):
    out: str = field(default="runs/quickstart", metadata={"help": "output folder (an interrupted quickstart "
                                                                  "continues in it)"})
    full: bool = field(default=False, metadata={"help": "paper-sized settings: all data, K=8 (hours on a CPU)"})
    data: str = field(default="", metadata={"help": "use this prepared dataset folder instead of rt-polarity"})
    encoder: str = field(default="minilm-l6", metadata={"help": "pretrained encoder (HF folder or id)"})
    noise_lm: str = field(default="", metadata={"help": "start the infill noise LM from this model "
                                                        "(e.g. smollm2-135m); default: a small LM from scratch"})
    train_limit: int | None = field(default=None, metadata={
        "help": "training examples for the classifiers (0: all; default: 2500 in bf16, 1200 in fp32)", "min": 0})
    epochs: float = field(default=3.0, metadata={"help": "classifier epochs", "gt": 0})
    noise_ratio: int = field(default=1, metadata={"help": "K noise samples per data sample", "min": 1})
    nce_weight: float = field(default=0.5, metadata={
        "help": "EBMs: weight of the NCE term (paper: 1; 0.5 with the warm-up and the stronger noise LM kept "
                "accuracy within a point in the remedies grid, docs/classify.md)", "gt": 0})
    nce_warmup: float = field(default=0.3, metadata={
        "help": "EBMs: fraction of the steps over which the NCE weight rises from 0 (0: the paper's constant "
                "weight; 0.3 kept more accuracy in the remedies grid, docs/classify.md)", "min": 0, "lt": 1})
    energy_lr: float | None = field(default=None, metadata={
        "help": "EBM scalar: peak learning rate of the energy head (default: the classifier's)", "gt": 0})
    lm_epochs: float | None = field(default=None, metadata={
        "help": "noise LM epochs over the whole training split (default: 4 in bf16, 2 in fp32; 1 with --noise-lm)", "gt": 0})
    lm_layers: int = field(default=4, metadata={"help": "noise LM layers (from scratch)", "min": 1})
    lm_width: int = field(default=256, metadata={"help": "noise LM width (from scratch)", "min": 8})
    lm_vocab_size: int = field(default=8000, metadata={"help": "noise LM tokenizer vocabulary (from scratch)",
                                                       "min": 64})
    batch_size: int = field(default=32, metadata={"help": "classifier batch size", "min": 1})
    max_len: int = field(default=64, metadata={"help": "classifier max tokens", "min": 2})
    seed: int = field(default=0, metadata={"help": "random seed (also of the data split and the dev halving)",
                                           "min": 0})
    seeds: int = field(default=1, metadata={
        "help": "training seeds to run (--seed .. --seed+N-1): mean, spread and intervals over them", "min": 1})
    only_seeds: list[int] = field(default_factory=list, metadata={
        "help": "run and summarise only these of the seeds (e.g. --only-seeds 2): seeds of one study run at the "
                "same time in separate folders (one process each), then a run of all of them in one folder with "
                "--reuse takes their finished steps", "min": 0})
    precision: str = field(default="auto", metadata={
        "help": "auto: bf16 where the hardware multiplies it natively, else fp32 (see docs/training.md)",
        "choices": ["auto", "fp32", "bf16", "fp16"]})
    bootstrap: int = field(default=1000, metadata={"help": "bootstrap resamples of the test half (0: none)",
                                                   "min": 0})
    reuse: str = field(default="", metadata={
        "help": "another quickstart folder on the same data: take from it the finished steps whose inputs are "
                "the same here (noise LM, noise, baseline, PosCal), copied, not retrained; for studies of the "
                "EBM settings"})

    def check(self) -> None:
        super().check()
        outside = [s for s in self.only_seeds if s not in all_seeds(self)]
        if outside:
            raise TextebmError(f"--only-seeds {' '.join(map(str, outside))}: not among the seeds "
                               f"{self.seed}..{self.seed + self.seeds - 1} of --seed {self.seed} --seeds {self.seeds}")
        if self.full:
            refuse_unused(self, ["train_limit", "noise_ratio"], "with --full (it sets all data and K=8)")
        if self.noise_lm:
            refuse_unused(self, ["lm_layers", "lm_width", "lm_vocab_size"],
                          "with --noise-lm (the model's own size and tokenizer are used)")


def settle(cfg: QuickstartConfig, precision: str) -> QuickstartConfig:
    """Fill the settings left to the preset of `precision` (and --full's). A pretrained --noise-lm
    is fine-tuned for one epoch: the preset's epochs are sized for a small LM learning from scratch.
    A new config: the caller's is left as it was."""
    preset = PRESETS["bf16" if precision in ("bf16", "fp16") else "fp32"]
    if cfg.full:
        cfg = dataclasses.replace(cfg, train_limit=0, noise_ratio=8)
    if cfg.train_limit is None:
        cfg = dataclasses.replace(cfg, train_limit=preset["train_limit"])
    if cfg.lm_epochs is None:
        cfg = dataclasses.replace(cfg, lm_epochs=1.0 if cfg.noise_lm else preset["lm_epochs"])
    return cfg


def estimate_seconds(precision: str, lm_sentences: int, train_examples: int, eval_examples: int,
                     cfg: QuickstartConfig) -> dict[str, float]:
    """Expected seconds per step of the pipeline on a 2-core CPU (STEP_SECONDS)."""
    c = STEP_SECONDS["bf16" if precision in ("bf16", "fp16") else "fp32"]
    lm_steps = math.ceil(lm_sentences / 32) * cfg.lm_epochs
    steps = math.ceil(train_examples / cfg.batch_size) * cfg.epochs
    k = cfg.noise_ratio
    return {"noise-lm": lm_steps * c["lm"],
            "noise": train_examples * k * math.ceil(cfg.epochs) * c["sample"],
            "baselines": steps * (c["baseline"] + c["poscal"]),
            "ebms": 3 * steps * (c["baseline"] + k * (c["ebm"] - c["baseline"])),
            "eval": 5 * (train_examples + eval_examples) * c["eval"]}


def dataset_labels(data: Path, info: dict) -> list[str]:
    """The classes of the report: dataset.json's, or (a folder made by hand, without one) those of
    the training split, as `classify train` reads them."""
    return list(info.get("labels") or label_vocab(load_split(data, "train"), str(data / "train.jsonl")))


def check_models(cfg: QuickstartConfig) -> None:
    """--encoder an encoder (or a cloze run's), --noise-lm a causal LM: TextebmError naming the option."""
    enc = Path(cfg.encoder).expanduser()
    if not (enc.is_dir() and folder_kind(enc) == CLOZE):
        find_model(cfg.encoder, ENCODER, "--encoder")
    if cfg.noise_lm:
        find_model(cfg.noise_lm, CAUSAL_LM, "--noise-lm")


def quickstart(cfg: QuickstartConfig) -> dict:
    try:
        return _quickstart(cfg)
    except TrainingInterrupted:  # a step's run says --resume; the quickstart takes none, it resumes each step
        raise TrainingInterrupted(f"--out {cfg.out}: stopped; run the same command again (`make quickstart`) to "
                                  "continue: each step resumes from what it kept") from None


def _quickstart(cfg: QuickstartConfig) -> dict:
    check_config(cfg)  # bounds and rules between options, also when called from Python
    _, shard = cfg.start()  # threads, and this process's shard of the seeds
    out = Path(cfg.out)
    check_output_dir(out, QUICKSTART_KIND, overwrite=True)  # a quickstart folder continues; nothing else is touched
    choice = resolve_precision(cfg.precision)
    cfg = settle(cfg, choice.precision)
    log.info("[quickstart] precision %s", choice.reason)
    data = Path(cfg.data) if cfg.data else out / "data"
    if cfg.data:
        check_dataset(data, cfg.train_limit)  # before any work: a late step must not fail on the data
    reuse = reuse_source(cfg, out)  # with --plan too: a bad --reuse is refused before anything
    if cfg.plan:
        print(plan(cfg, choice.precision, data, out, shard))
        return {}
    check_models(cfg)  # before anything is written: a wrong folder must not leave a half-made OUT
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, QUICKSTART_KIND, ["data", "data.lock", "settings.json", "results.json", "report.md",
                                        "timings.json", CELLS] + [f"seed-{s}" for s in all_seeds(cfg)])
    step = StepTimer(out / "timings.json")  # the data step's time; each seed keeps its own
    if not cfg.data:
        prepared = lambda: (data / "dataset.json").is_file()
        # once, under a lock: processes that share OUT (--shard) prepare it once
        step("data", prepared(), lambda: grid.once(data, prepared, lambda: prepare("rt-polarity", data, seed=cfg.seed)))
        check_dataset(data, cfg.train_limit)
    info = read_json(data / "dataset.json") if (data / "dataset.json").is_file() else {}
    settings = check_settings(out, cfg, choice.precision, data)
    if reuse is not None:
        reuse.match(settings)
    est = estimate(cfg, choice.precision, info)
    log.info("[quickstart] expected duration on a 2-core CPU in %s: about %.0f minutes per seed, %d seed(s) "
             "(%s)", choice.precision, sum(est.values()) / 60, len(seeds_of(cfg)),
             ", ".join(f"{k} {v / 60:.1f}" for k, v in est.items()))
    if cfg.noise_lm:
        log.info("[quickstart] the estimate counts a small noise LM from scratch; --noise-lm %s is larger and its "
                 "noise LM and noise take longer (SmolLM2-135M measured 7.1 s per noise-LM step on one thread of a "
                 "2-core AVX512 CPU in bf16, the small LM 0.36 s on both threads)", cfg.noise_lm)

    cells = seed_cells(cfg, settings, sum(est.values()))
    runner = grid.Grid(out / CELLS, SeedRun(cfg, choice.precision, data, out, reuse))
    results = runner.run(cells, shard, cfg.backend, cfg.workers, cfg.address)
    per_seed = {c.task: r for c, r in zip(cells, results)}

    ran = ("data", *(f"seed {s}:" for s in per_seed))  # the steps of the seeds summarised here
    prev = read_json(out / "results.json") if (out / "results.json").is_file() else {}
    # results.json of a folder made before timings.json, then OUT/timings.json (before each seed
    # kept its own), then the seeds' own
    timings = {**prev.get("timings", {}), **step.times}
    for r in per_seed.values():
        timings.update(r.get("timings", {}))
    timings = {k: v for k, v in timings.items() if k.startswith(ran)}
    results = aggregate(per_seed)
    first = next(iter(per_seed.values()))["eval"]["settings"]["runs"]["baseline"]
    results.update(
        wall_seconds=round(sum(timings.values()), 1), timings=timings,
        settings={**{k: v for k, v in asdict(cfg).items() if k not in GRID_ONLY},
                  "train_examples": first["train_examples"], "dev_half": first["dev_half"],
                  "test_half": first["test_half"], "noise_per_example": cfg.noise_ratio * math.ceil(cfg.epochs),
                  "dataset": info.get("name", data.name),
                  "labels": dataset_labels(data, info),
                  "precision_choice": choice.as_dict(), "expected_seconds_per_seed": round(sum(est.values()))})
    write_json(out / "results.json", results)
    with atomic_write(out / "report.md") as f:
        f.write(render_report(results))
    log.info("[quickstart] finished: %s", out / "report.md")
    print((out / "report.md").read_text())
    return results


CELLS = "cells"  # OUT/cells: one file per finished seed (textebm.grid)
# How the seeds run, not what they compute: left out of results.json's settings.
GRID_ONLY = {f.name for f in dataclasses.fields(grid.GridOptions)}


class StepTimer:
    """Run a step unless it is done, and keep the seconds it took in `file` as it finishes, so a
    quickstart that was interrupted and continued counts every step once."""

    def __init__(self, file: Path):
        self.file = file
        self.times: dict[str, float] = read_json(file) if file.is_file() else {}

    def __call__(self, name: str, done: bool, fn) -> None:
        if done:
            log.info("[quickstart] %s: already done", name)
            return
        log.info("[quickstart] %s ...", name)
        t0 = time.perf_counter()
        fn()
        self.times[name] = round(time.perf_counter() - t0, 1)
        write_json(self.file, self.times)
        log.info("[quickstart] %s done in %.0f s", name, self.times[name])


def estimate(cfg: QuickstartConfig, precision: str, info: dict) -> dict[str, float]:
    """The start-of-run estimate per seed, from the prepared data's split sizes (rt-polarity's when
    it is not prepared yet)."""
    n_train = info.get("splits", {}).get("train", 10_000)
    n_eval = info.get("splits", {}).get("dev", 1_280)
    return estimate_seconds(precision, n_train, min(n_train, cfg.train_limit or n_train), n_eval, cfg)


def seed_cells(cfg: QuickstartConfig, settings: dict, seconds: float) -> list[grid.Cell]:
    """One grid cell per seed: its key is the folder's settings (the data by content, not by path),
    the training seed and the bootstrap resamples its evaluation draws."""
    base = {k: v for k, v in settings.items() if k != "data"}
    return [grid.Cell(f"seed-{s}", {**base, "training_seed": s, "bootstrap": cfg.bootstrap}, s, seconds)
            for s in seeds_of(cfg)]


def plan(cfg: QuickstartConfig, precision: str, data: Path, out: Path, shard: tuple[int, int]) -> str:
    """--plan: the seeds left and their estimated time; writes nothing."""
    prepared = (data / "dataset.json").is_file()
    info = read_json(data / "dataset.json") if prepared else {}
    est = estimate(cfg, precision, info)
    settings = settings_of(cfg, precision, data) if prepared else {"data": "not prepared yet"}
    # the per-seed estimate is the start-of-run one: wall time on a 2-core CPU, not one thread's
    left = lambda cells: (f"estimated time: {sum(c.seconds for c in cells) / 60:.1f} min on a 2-core CPU in "
                          f"{precision} (the start-of-run estimate, per seed)")
    text = grid.Grid(out / CELLS, SeedRun(cfg, precision, data, out, None)).plan(
        seed_cells(cfg, settings, sum(est.values())), shard, estimate=left)
    return text + ("" if prepared else "\n(the data step comes first: rt-polarity is not prepared in OUT yet)")


@dataclass
class SeedRun:
    """A seed's cell: `run_seed` with its steps timed into OUT/seed-S/timings.json (picklable, for
    a Dask worker)."""

    cfg: QuickstartConfig
    precision: str
    data: Path
    out: Path
    reuse: ReuseSource | None

    def __call__(self, cell: grid.Cell) -> dict:
        seed = cell.task
        folder = self.out / f"seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        step = StepTimer(folder / "timings.json")
        result = run_seed(self.cfg, self.precision, self.data, folder, seed, step, self.reuse)
        if self.reuse is not None and self.reuse.copied:  # a copied step counts the time it took where it ran
            step.times.update({f"{label} (copied from {self.reuse.root})": secs
                               for label, secs in self.reuse.copied.items() if secs is not None})
            self.reuse.copied.clear()
            write_json(step.file, step.times)
        return {**result, "timings": step.times}


def all_seeds(cfg: QuickstartConfig) -> list[int]:
    return list(range(cfg.seed, cfg.seed + cfg.seeds))


def seeds_of(cfg: QuickstartConfig) -> list[int]:
    """The seeds this run trains and summarises: all of them, or those of --only-seeds."""
    return [s for s in all_seeds(cfg) if not cfg.only_seeds or s in cfg.only_seeds]


def check_dataset(data: Path, train_limit: int = 0) -> None:
    """What every step needs from the data, checked before the first one: a dataset folder with
    train and dev splits, at least two labels in the training examples the runs read (the first
    `train_limit`, 0: all), and every dev label among them."""

    if not data.is_dir():
        raise TextebmError(f"--data {data}: the quickstart needs a dataset folder (train.jsonl, dev.jsonl); make "
                           "one with `textebm data convert` or `textebm data prepare`")
    rows = load_split(data, "train")[:train_limit or None]
    where = f"{data}/train.jsonl" + (f" (its first {train_limit} examples, --train-limit)" if train_limit else "")
    labels = label_vocab(rows, where)
    check_eval_labels(load_split(data, "dev"), labels, f"{data}/dev.jsonl")


RESULT_SETTINGS = ("encoder", "noise_lm", "train_limit", "epochs", "noise_ratio", "lm_epochs", "lm_layers",
                   "lm_width", "lm_vocab_size", "batch_size", "max_len", "seed", "full", "nce_weight",
                   "nce_warmup", "energy_lr")


# What a folder made before a setting existed was made with (not the setting's default today:
# --nce-warmup's default became 0.3 after folders with a constant NCE weight were made).
BEFORE_IT_EXISTED = {"nce_weight": 1.0, "nce_warmup": 0.0, "energy_lr": None}


def settings_of(cfg: QuickstartConfig, precision: str, data: Path) -> dict:
    """What the results depend on: the settings, the precision and the data (by content)."""
    digest = hashlib.sha256()
    for split in ("train", "dev"):
        digest.update((data / f"{split}.jsonl").read_bytes())
    return {**{k: getattr(cfg, k) for k in RESULT_SETTINGS}, "precision": precision, "data": str(data.resolve()),
            "data_sha256": digest.hexdigest()}


def check_settings(out: Path, cfg: QuickstartConfig, precision: str, data: Path) -> dict:
    """A quickstart folder continues only with the settings and data it was made with: steps whose
    inputs changed would otherwise be reused without a word. Writes OUT/settings.json first time;
    returns the settings."""

    now = settings_of(cfg, precision, data)
    f = out / "settings.json"
    if f.is_file():
        old = read_json(f)
        was = {k: old.get(k, BEFORE_IT_EXISTED.get(k)) for k in now}
        diff = [k for k in now if was[k] != now[k]]
        if diff:
            raise TextebmError(f"--out {out}: holds a quickstart made with other settings or data ("
                               + ", ".join(f"{k}: {was[k]!r} -> {now[k]!r}" if k != "data_sha256" else
                                           "the data files changed" for k in diff)
                               + "); choose another --out, or pass the values it was made with to continue it "
                               "(only --seeds, --only-seeds, --bootstrap and how it runs: --progress, --threads, --shard, "
                               "--backend... may change)")
        return now
    write_json(f, now)
    return now


# The settings each reusable step's output depends on (beyond the seed, whose folder it is).
STEP_INPUTS = {
    "noise-lm": ("precision", "data_sha256", "noise_lm", "lm_epochs", "lm_layers", "lm_width", "lm_vocab_size",
                 "max_len"),
    "baseline": ("precision", "data_sha256", "encoder", "train_limit", "epochs", "batch_size", "max_len"),
}
STEP_INPUTS["noise"] = STEP_INPUTS["noise-lm"] + ("train_limit", "noise_ratio", "epochs")
STEP_INPUTS["poscal"] = STEP_INPUTS["baseline"]
# An EBM sees the baseline's inputs, the noise, and its own loss settings (the head's learning rate
# only for the scalar energy, the one run that has a separate head group).
STEP_INPUTS.update({name: tuple(dict.fromkeys(STEP_INPUTS["baseline"] + STEP_INPUTS["noise"]
                                              + ("nce_weight", "nce_warmup") + extra))
                    for name, extra in (("ebm-scalar", ("energy_lr",)), ("ebm-hidden", ()),
                                        ("ebm-sharp-hidden", ()))})


@dataclass
class ReuseSource:
    """Another quickstart folder whose finished steps may be copied when their inputs are the same."""

    root: Path
    settings: dict
    steps: tuple[str, ...] = ()
    timings: dict = field(default_factory=dict)  # the source's timings.json: what each of its steps took
    copied: dict = field(default_factory=dict)  # {step label: its seconds in the source, None if unknown}

    def match(self, here: dict) -> None:
        self.steps = tuple(name for name, keys in STEP_INPUTS.items()
                           if all(self.settings.get(k) == here.get(k) for k in keys))
        log.info("[quickstart] --reuse %s: steps with the same inputs: %s", self.root,
                 ", ".join(self.steps) or "none (every step's settings differ)")

    def take(self, name: str, src: Path, dst: Path, done, label: str = "") -> bool:
        """Copy `src` (a finished step of the source) to `dst` when step `name` may be reused; note the
        time the step (`label`, as the quickstart names it) took in the source."""
        import shutil

        if name not in self.steps or not src.exists() or not done(src):
            return False
        if dst.is_dir() and read_marker(dst) is None:  # not textebm's: left alone (the step's command refuses it)
            return False
        tmp = dst.with_name(f".{dst.name}.reuse-partial")
        remove(tmp)  # left by an interrupted copy: the quickstart's own
        if src.is_dir():
            shutil.copytree(src, tmp, copy_function=_link_or_copy)
        else:
            _link_or_copy(src, tmp)
        if dst.is_dir():  # this quickstart's own unfinished try at the step (marked): the finished copy replaces it
            log.info("[quickstart] %s: an unfinished %s is replaced by the finished one of --reuse", name, dst)
            remove(dst)
        tmp.replace(dst)
        log.info("[quickstart] %s: reused %s", name, src)
        if label:  # the source may itself have copied it: "LABEL (copied from ...)"
            self.copied[label] = next((v for k, v in self.timings.items()
                                       if k == label or k.startswith(f"{label} (copied from ")), None)
        return True


def _link_or_copy(src, dst) -> None:
    """A hard link where the file system allows it (finished outputs are only ever replaced by a
    rename, never written in place), else a copy."""
    import os
    import shutil

    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def reuse_source(cfg: QuickstartConfig, out: Path) -> ReuseSource | None:
    if not cfg.reuse:
        return None
    root = Path(cfg.reuse)
    settings = root / "settings.json"
    marker = read_marker(root)
    if not root.exists():
        raise TextebmError(f"--reuse {root}: not a quickstart folder (no such folder)")
    if marker is not None and marker["kind"] != QUICKSTART_KIND:
        raise TextebmError(f"--reuse {root}: not a quickstart folder (it holds the output of `{marker['kind']}`)")
    if marker is None or not settings.is_file():
        raise TextebmError(f"--reuse {root}: not a quickstart folder (no {MARKER} and settings.json)")
    if root.resolve() == out.resolve():
        raise TextebmError(f"--reuse {root}: is --out itself")
    # what each of its steps took: the seeds' own files (OUT/timings.json held them all before)
    timings = {}
    for f in [root / "timings.json", *sorted(root.glob("seed-*/timings.json"))]:
        timings.update(read_json(f) if f.is_file() else {})
    return ReuseSource(root, read_json(settings), timings=timings)


RUNS = {"baseline": dict(energy="none"), "poscal": dict(energy="none", poscal=True),
        "ebm-scalar": dict(energy="scalar"), "ebm-hidden": dict(energy="hidden"),
        "ebm-sharp-hidden": dict(energy="sharp-hidden")}


def run_seed(cfg: QuickstartConfig, precision: str, data: Path, out: Path, seed: int, step,
             reuse: ReuseSource | None = None) -> dict:
    """Noise LM, noise, the five classifiers and their evaluation for one training seed; with
    `reuse`, finished steps of the same seed and inputs are copied from another quickstart."""

    common = dict(seed=seed, precision=precision, progress=cfg.progress, resume=False)
    src = reuse.root / out.name if reuse else None

    def reused(name: str, path: Path, done, label: str) -> bool:
        finished = done(path)
        if finished or reuse is None:
            return finished
        path.parent.mkdir(parents=True, exist_ok=True)
        return reuse.take(name, src / path.relative_to(out), path, done, label)

    lm_dir = out / "noise-lm"
    lm_cfg = LMTrainConfig(out=str(lm_dir), data=str(data), objective="infill", mask_ratio=0.4,
                           init=cfg.noise_lm, vocab_size=cfg.lm_vocab_size, layers=cfg.lm_layers,
                           width=cfg.lm_width, heads=4,
                           epochs=cfg.lm_epochs, batch_size=32, lr=1e-3 if not cfg.noise_lm else 5e-5,
                           max_len=cfg.max_len, checkpoint_every=100, **common)  # a killed run loses minutes at most
    label = f"seed {seed}: noise-lm"
    step(label, reused("noise-lm", lm_dir, run_completed, label), lambda: lm_train(_resumable(lm_cfg)))

    noise = out / "noise.jsonl"
    sample_cfg = SampleConfig(model=str(lm_dir / "model"), data=str(data), split="train", mode="infill",
                              top_k=20, per_example=cfg.noise_ratio * math.ceil(cfg.epochs), mask_ratio=0.4,
                              out=str(noise), limit=cfg.train_limit, seed=seed, precision=precision,
                              progress=cfg.progress)
    label = f"seed {seed}: noise"
    step(label, reused("noise", noise, Path.is_file, label), lambda: sample_file(sample_cfg))

    for name, kw in RUNS.items():
        run = out / "runs" / name
        ebm = kw["energy"] != "none"
        c = ClassifyTrainConfig(out=str(run), data=str(data), encoder=cfg.encoder, limit=cfg.train_limit,
                                epochs=cfg.epochs, batch_size=cfg.batch_size, max_len=cfg.max_len,
                                noise=str(noise) if ebm else "", noise_ratio=cfg.noise_ratio if ebm else 1,
                                nce_weight=cfg.nce_weight if ebm else 1.0, nce_warmup=cfg.nce_warmup if ebm else 0.0,
                                energy_lr=cfg.energy_lr if kw["energy"] == "scalar" else None,
                                eval_split="", checkpoint_every=100, **kw, **common)
        label = f"seed {seed}: train {name}"
        done = reused(name, run, run_completed, label) if name in STEP_INPUTS else run_completed(run)
        step(label, done, lambda c=c: classify_train(_resumable(c)))

    # The dev halving keeps --seed (not the training seed): every seed is scored on the same test half.
    ev_cfg = ClassifyEvalConfig(model=[str(out / "runs" / n) for n in RUNS], data=str(data),
                                out=str(out / "eval"), bins=20, split="dev", seed=cfg.seed,
                                bootstrap=cfg.bootstrap, overwrite=True)  # re-rendered on every call
    result: dict = {}
    metrics = out / "eval" / "metrics.json"
    done = (metrics.is_file()  # evaluated after the last of its runs finished, with these resamples
            and all(metrics.stat().st_mtime > (out / "runs" / n / "metrics.json").stat().st_mtime for n in RUNS)
            and read_json(metrics).get("bootstrap", {}).get("resamples", 0) == cfg.bootstrap)
    if done:
        result.update(read_json(metrics))
    step(f"seed {seed}: eval", done, lambda: result.update(evaluate_runs(ev_cfg)))
    return {"eval": result, "nce_accuracy": {n: final_logged(out / "runs" / n, "nce_acc") for n in RUNS
                                             if n.startswith("ebm-")},
            "train_ce": {n: final_logged(out / "runs" / n, "ce") for n in RUNS},
            "noise_lm": _lm_summary(lm_dir)}


def _resumable(c):
    """Resume a half-finished run left by an interrupted quickstart, else start it afresh (the
    run is the quickstart's own, so --overwrite replaces only what textebm wrote there)."""
    run = Path(c.out)
    if has_checkpoint(run):
        c.resume = True
    elif run.exists():
        c.overwrite = True
    return c


def final_logged(run: Path, key: str) -> float:
    """A training run's `key` (nce_acc: data-vs-noise accuracy of the NCE classifier; ce: the
    classification loss) over its last logged window of steps."""
    history = read_json(run / "metrics.json")["train"]["history"]
    return round(float(history[-1][key]), 4)


def _lm_summary(lm_dir: Path) -> dict:
    m = read_json(lm_dir / "metrics.json")
    return {"train_seconds": m["train"]["wall_seconds"], **m.get("eval", {})}


EBMS = ("ebm-scalar", "ebm-hidden", "ebm-sharp-hidden")
METRICS = ("accuracy", "ece_classwise", "ece_toplabel", "nll", "brier")


def aggregate(per_seed: dict[int, dict]) -> dict:
    """results.json's body: the mean of each metric over seeds ("methods"), each seed's table,
    mean / std / t-interval over seeds, the change of every method against the baseline per seed
    (paired bootstrap on the test half) and over seeds (paired by seed), NCE diagnostics."""

    tables = [r["eval"]["methods"] for r in per_seed.values()]
    summary = summarise_seeds([{m: t[m] for m in METHODS} for t in tables], METRICS)
    change = {}
    for m in METHODS[1:]:
        change[m] = {k: seed_summary([t[m][k] - t["baseline"][k] for t in tables]) for k in ("accuracy", "ece_classwise")}
    first = next(iter(per_seed.values()))["eval"]
    return {
        "methods": {m: {k: v["mean"] for k, v in summary[m].items()} for m in METHODS},
        "seeds": {str(s): {"methods": {m: r["eval"]["methods"][m] for m in METHODS},
                           "intervals": r["eval"].get("intervals", {}), "vs_baseline": r["eval"].get("vs_baseline", {}),
                           "nce_accuracy": r["nce_accuracy"], "train_ce": r["train_ce"], "noise_lm": r["noise_lm"]}
                  for s, r in per_seed.items()},
        "summary": summary,
        "change_vs_baseline": change,
        "bootstrap": first.get("bootstrap", {}),
        "diagnostics": {"nce_accuracy": {n: float(sum(r["nce_accuracy"][n] for r in per_seed.values()) / len(per_seed))
                                         for n in EBMS},
                        "train_ce": {n: float(sum(r["train_ce"][n] for r in per_seed.values()) / len(per_seed))
                                     for n in RUNS}},
    }


def _interval_words(lo: float, hi: float) -> str:
    if hi < 0:
        return "lower, the interval below 0"
    if lo > 0:
        return "higher, the interval above 0"
    return "no change the interval can tell from 0"


def ebm_verdict(results: dict) -> str:
    """Did joint EBM training lower class-wise ECE against the baseline, and at what cost in accuracy,
    drawn from intervals: over seeds (t-interval of the paired per-seed changes) when there are
    several, else from the paired bootstrap on the test half."""
    seeds = results["seeds"]
    n = len(seeds)
    base = results["methods"]["baseline"]
    parts = []
    for name in EBMS:
        if n >= 2:
            d_ece, d_acc = (results["change_vs_baseline"][name][k] for k in ("ece_classwise", "accuracy"))
            ece = (d_ece["mean"], d_ece["lo"], d_ece["hi"])
            acc = (d_acc["mean"], d_acc["lo"], d_acc["hi"])
            where = f"over {n} seeds"
        else:
            vs = next(iter(seeds.values()))["vs_baseline"].get(name)
            if not vs:
                continue
            ece = (vs["ece_classwise"]["diff"], vs["ece_classwise"]["lo"], vs["ece_classwise"]["hi"])
            acc = (vs["accuracy"]["diff"], vs["accuracy"]["lo"], vs["accuracy"]["hi"])
            where = "on the test half (bootstrap; one seed, so training variation is not measured)"
        parts.append(f"{name.removeprefix('ebm-')}: class-wise ECE {ece[0]:+.3f} [95% CI {ece[1]:+.3f}, {ece[2]:+.3f}], "
                     f"{_interval_words(ece[1], ece[2])}; accuracy {acc[0]:+.3f} [{acc[1]:+.3f}, {acc[2]:+.3f}], "
                     f"{_interval_words(acc[1], acc[2])}")
    if not parts:
        return ""
    return (f"Against the baseline (class-wise ECE {base['ece_classwise']:.3f}, accuracy {base['accuracy']:.3f}), "
            f"changes {where}: " + "; ".join(parts) + ".")


def copied_words(timings: dict[str, float]) -> str:
    """The part of the compute time spent in another folder, for steps copied by --reuse."""
    copied = sum(v for k, v in timings.items() if " (copied from " in k)
    return f"; {copied:.0f} s of it by steps that ran in another folder and were copied (--reuse)" if copied else ""


def train_ce_words(ce: dict[str, float], n_seeds: int) -> str:
    """The classification loss each run ended training with, and whether the EBMs fit the labels
    less than the baseline did in the same number of steps (one reason an EBM can lose accuracy)."""

    text = ("Training cross-entropy over the last logged steps" + (" (mean over seeds)" if n_seeds > 1 else "")
            + ": " + ", ".join(f"{method_label(n)} {v:.3f}" for n, v in ce.items()) + ".")
    worse = [n for n in EBMS if ce[n] > 1.1 * ce["baseline"]]
    if worse:
        text += (" The " + ", ".join(method_label(n) for n in worse) + f" end{'s' if len(worse) == 1 else ''} "
                 "with a training loss over 10% above the baseline's after the same steps: the NCE term slowed "
                 "the fit of the labels, one way an EBM loses accuracy. A baseline that fits the labels less, "
                 "trained for fewer epochs, is also better calibrated: before crediting the energy with a lower "
                 "ECE, compare with it (bench/baseline_epochs.py, docs/classify.md).")
    return text


def render_report(results: dict) -> str:
    s = results["settings"]
    seeds = list(results["seeds"])
    first = seeds[0]
    lines = [
        "# textebm quickstart: joint EBM training for calibration (He et al. 2021)",
        "",
        f"Dataset `{s['dataset']}` (classes: {', '.join(s['labels'])}), encoder `{s['encoder']}`, "
        f"{s['train_examples']} training examples, {s['epochs']:g} epochs, noise ratio K={s['noise_ratio']}, "
        f"NCE weight {s.get('nce_weight', 1.0):g}"
        + (f" warmed up from 0 over the first {100 * s['nce_warmup']:g}% of the steps" if s.get("nce_warmup") else "")
        + ", "
        f"training seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}; precision {s['precision_choice']['reason']}. "
        f"Numbers on the test half ({s['test_half']} examples) of the dev split, the same for every seed; "
        f"calibrators fit on the training set (-train) or the dev half ({s['dev_half']} examples, -dev). ECE with "
        "20 bins; class-wise ECE is the paper's eq. (15), top-label ECE the usual max-probability ECE.",
        "",
    ]
    if len(seeds) == 1:
        lines += [render_table(results["methods"]), ""]
    else:
        body = [[method_label(m), *(f"{row[k]['mean']:.3f} ± {row[k]['std']:.3f} [{row[k]['lo']:.3f}, {row[k]['hi']:.3f}]"
                                    if k in ("accuracy", "ece_classwise") else f"{row[k]['mean']:.3f} ± {row[k]['std']:.3f}"
                                    for k in METRICS)]
                for m, row in results["summary"].items()]
        lines += [f"Mean over {len(seeds)} seeds ± standard deviation, and the 95% t-interval of the mean:", "",
                  table(["Method", "acc.", "ECE (class-wise)", "ECE (top-label)", "NLL", "Brier"], body), ""]
    boot = results["seeds"][first]["intervals"]
    if boot:
        lines += [f"95% bootstrap intervals on the test half (seed {first}; {results['bootstrap'].get('resamples')} "
                  "resamples): " + "; ".join(f"{method_label(m)} acc. [{iv['accuracy'][0]:.3f}, {iv['accuracy'][1]:.3f}], "
                                              f"class-wise ECE [{iv['ece_classwise'][0]:.3f}, {iv['ece_classwise'][1]:.3f}]"
                                              for m, iv in boot.items()) + ".", ""]
    lines += [ebm_verdict(results), ""]
    nce = results["diagnostics"]["nce_accuracy"]
    lm = results["seeds"][first]["noise_lm"]
    lines += [
        f"Noise model: infill LM (mask ratio 0.4, top-k 20), {s['noise_per_example']} samples per training "
        f"example; dev perplexity of its infill objective: {lm.get('dev_perplexity', float('nan')):.1f} (seed {first}). "
        "NCE accuracy (data vs noise) at the end of training"
        + (" (mean over seeds)" if len(seeds) > 1 else "") + ": "
        + ", ".join(f"{n.removeprefix('ebm-')} {a:.3f}" for n, a in nce.items())
        + ". Near 1, the noise is easy to tell from data and NCE teaches the energy little (the paper's "
        "reason for infill noise, sec. 2.4); a noise LM closer to the data (`--noise-lm smollm2-135m`, "
        "more `--lm-epochs`) makes it harder.",
        "",
        train_ce_words(results["diagnostics"]["train_ce"], len(seeds)),
        "",
        (f"Compute time of the steps: {results['wall_seconds']:.0f} s (" + ", ".join(
            f"{k} {v:.0f} s" for k, v in results["timings"].items()) + ")" + copied_words(results["timings"]) + "."
         if results["timings"] else
         "Compute time of the steps: none recorded (the steps were copied by --reuse, or done by a textebm "
         "that did not keep timings.json)."),
        "",
        "## Plots",
        "",
    ]
    for seed in seeds:
        ev = f"seed-{seed}/eval"
        lines += [f"Seed {seed}: [report]({ev}/report.md), [per-example predictions]({ev}/predictions.jsonl).", "",
                  f"![reliability diagrams, class-wise, seed {seed}]({ev}/reliability_classwise_all.png)", "",
                  f"![energy histogram, seed {seed}]({ev}/energy_histogram.png)", "",
                  f"![entropy versus energy, seed {seed}]({ev}/entropy_vs_energy.png)", ""]
    return "\n".join(lines)
