"""The main job: paper a's comparison on rt-polarity with MiniLM, end to end on a CPU.

Steps (each is skipped when its output is already complete, so an interrupted quickstart
continues where it stopped):
  1. data       `data prepare rt-polarity`
  2. noise-lm   an infill LM (paper a, sec. 2.4: mask ratio 0.4) trained on the training split
  3. noise      `lm sample --mode infill --top-k 20`, K per training example and epoch
  4. runs/*     baseline, PosCal and the three EBM variants (scalar, hidden, sharp-hidden)
  5. eval       T-Scal / Scal-bin fit on train and on the dev half; everything on the test half
  6. report.md, results.json, plots

Default settings fit a 2-core CPU in about 20 minutes by training on a subset of the training
split for the paper's 3 epochs (a baseline becomes over-confident with epochs, which is where
joint EBM training pays off); `--full` uses paper-sized settings (all data, K=8).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from textebm.io import read_json

log = logging.getLogger(__name__)

METHODS = ["baseline", "poscal", "ebm-scalar", "ebm-hidden", "ebm-sharp-hidden",
           "tscal-train", "tscal-dev", "scalbin-train", "scalbin-dev"]


# Settings sized to keep the quickstart within its budget (20 minutes plus set-up on a 2-core
# CPU) in the precision it runs in; see docs/classify.md for what the fp32 cut costs.
PRESETS = {"bf16": {"train_limit": 3000, "lm_epochs": 2.0}, "fp32": {"train_limit": 1200, "lm_epochs": 1.0}}

# Seconds per unit of work measured on a 2-core CPU with native bf16 (AVX512-BF16), for the
# start-of-run estimate: noise-LM step (batch 32), sampled sequence, classifier step (batch 32,
# baseline / PosCal / joint EBM K=1) and predicted example in evaluation (which runs in fp32), by
# precision. The fp32 figures
# stand for a CPU without native bf16 too: there fp32 runs at about the same speed (ASSETS.md).
STEP_SECONDS = {
    "bf16": {"lm": 0.38, "sample": 0.0117, "baseline": 0.25, "poscal": 0.30, "ebm": 0.45, "eval": 0.006},
    "fp32": {"lm": 0.40, "sample": 0.020, "baseline": 0.95, "poscal": 1.10, "ebm": 1.75, "eval": 0.006},
}
QUICKSTART_KIND = "quickstart"


@dataclass
class QuickstartConfig:
    out: str = field(default="runs/quickstart", metadata={"help": "output folder (an interrupted quickstart "
                                                                  "continues in it)"})
    full: bool = field(default=False, metadata={"help": "paper-sized settings: all data, K=8 (hours on a CPU)"})
    data: str = field(default="", metadata={"help": "use this prepared dataset folder instead of rt-polarity"})
    encoder: str = field(default="minilm-l6", metadata={"help": "pretrained encoder (HF folder or id)"})
    noise_lm: str = field(default="", metadata={"help": "start the infill noise LM from this model "
                                                        "(e.g. smollm2-135m); default: a small LM from scratch"})
    train_limit: int | None = field(default=None, metadata={
        "help": "training examples for the classifiers (0: all; default: 3000 in bf16, 1200 in fp32)", "min": 0})
    epochs: float = field(default=3.0, metadata={"help": "classifier epochs", "gt": 0})
    noise_ratio: int = field(default=1, metadata={"help": "K noise samples per data sample", "min": 1})
    lm_epochs: float | None = field(default=None, metadata={
        "help": "noise LM epochs over the whole training split (default: 2 in bf16, 1 in fp32)", "gt": 0})
    lm_layers: int = field(default=4, metadata={"help": "noise LM layers (from scratch)", "min": 1})
    lm_width: int = field(default=256, metadata={"help": "noise LM width (from scratch)", "min": 8})
    lm_vocab_size: int = field(default=8000, metadata={"help": "noise LM tokenizer vocabulary (from scratch)",
                                                       "min": 64})
    batch_size: int = field(default=32, metadata={"help": "classifier batch size", "min": 1})
    max_len: int = field(default=64, metadata={"help": "classifier max tokens", "min": 2})
    seed: int = field(default=0, metadata={"help": "random seed", "min": 0})
    precision: str = field(default="auto", metadata={
        "help": "auto: bf16 where the hardware multiplies it natively, else fp32 (see docs/training.md)",
        "choices": ["auto", "fp32", "bf16", "fp16"]})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def check(self) -> None:
        from textebm.cli.args import refuse_unused

        if self.full:
            refuse_unused(self, ["train_limit", "noise_ratio"], "with --full (it sets all data and K=8)")
        if self.noise_lm:
            refuse_unused(self, ["lm_layers", "lm_width", "lm_vocab_size"],
                          "with --noise-lm (the model's own size and tokenizer are used)")


def settle(cfg: QuickstartConfig, precision: str) -> QuickstartConfig:
    """Fill the settings left to the preset of `precision` (and --full's)."""
    preset = PRESETS["bf16" if precision in ("bf16", "fp16") else "fp32"]
    if cfg.full:
        cfg.train_limit, cfg.noise_ratio = 0, 8
    if cfg.train_limit is None:
        cfg.train_limit = preset["train_limit"]
    if cfg.lm_epochs is None:
        cfg.lm_epochs = preset["lm_epochs"]
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


def quickstart(cfg: QuickstartConfig) -> dict:
    from textebm.classify.evaluate import ClassifyEvalConfig, evaluate_runs
    from textebm.classify.train import ClassifyTrainConfig, classify_train
    from textebm.io import atomic_write, write_json
    from textebm.lm.sampling import SampleConfig, sample_file
    from textebm.lm.train import LMTrainConfig, lm_train
    from textebm.train import run_completed

    from textebm.outputs import check_output_dir, write_marker
    from textebm.precision import resolve_precision

    out = Path(cfg.out)
    check_output_dir(out, QUICKSTART_KIND, overwrite=True)  # a quickstart folder continues; nothing else is touched
    choice = resolve_precision(cfg.precision)
    cfg = settle(cfg, choice.precision)
    log.info("[quickstart] precision %s", choice.reason)
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, QUICKSTART_KIND, ["data", "noise-lm", "noise.jsonl", "runs", "eval", "results.json",
                                        "report.md"])
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    def step(name: str, done: bool, fn) -> None:
        if done:
            log.info("[quickstart] %s: already done", name)
            return
        log.info("[quickstart] %s ...", name)
        s = time.perf_counter()
        fn()
        timings[name] = round(time.perf_counter() - s, 1)
        log.info("[quickstart] %s done in %.0f s", name, timings[name])

    data = Path(cfg.data) if cfg.data else out / "data"
    if not cfg.data:
        from textebm.data.recipes import prepare

        step("data", (data / "dataset.json").is_file(), lambda: prepare("rt-polarity", data, seed=cfg.seed))
    info = read_json(data / "dataset.json") if (data / "dataset.json").is_file() else {}
    n_train = info.get("splits", {}).get("train", 10_000)
    n_eval = info.get("splits", {}).get("dev", 1_280)
    est = estimate_seconds(choice.precision, n_train, min(n_train, cfg.train_limit or n_train), n_eval, cfg)
    log.info("[quickstart] expected duration on a 2-core CPU in %s: about %.0f minutes (%s)", choice.precision,
             sum(est.values()) / 60, ", ".join(f"{k} {v / 60:.1f}" for k, v in est.items()))

    common = dict(seed=cfg.seed, precision=choice.precision, progress=cfg.progress, resume=False)
    lm_dir = out / "noise-lm"
    lm_cfg = LMTrainConfig(out=str(lm_dir), data=str(data), objective="infill", mask_ratio=0.4,
                           init=cfg.noise_lm, vocab_size=cfg.lm_vocab_size, layers=cfg.lm_layers,
                           width=cfg.lm_width, heads=4,
                           epochs=cfg.lm_epochs, batch_size=32, lr=1e-3 if not cfg.noise_lm else 5e-5,
                           max_len=cfg.max_len, checkpoint_every=500, **common)
    step("noise-lm", run_completed(lm_dir), lambda: lm_train(_resumable(lm_cfg)))

    # Noise is sampled in fp32 whatever the training precision: one token at a time from the small
    # noise LM, bf16 was no faster even on a CPU with native bf16 (bench/bench_quickstart_steps.py).
    noise = out / "noise.jsonl"
    per_example = cfg.noise_ratio * math.ceil(cfg.epochs)
    sample_cfg = SampleConfig(model=str(lm_dir / "model"), data=str(data), split="train", mode="infill",
                              top_k=20, per_example=per_example, mask_ratio=0.4, out=str(noise),
                              limit=cfg.train_limit, seed=cfg.seed, precision="fp32",
                              progress=cfg.progress)
    step("noise", noise.is_file(), lambda: sample_file(sample_cfg))

    runs = {"baseline": dict(energy="none"), "poscal": dict(energy="none", poscal=True),
            "ebm-scalar": dict(energy="scalar"), "ebm-hidden": dict(energy="hidden"),
            "ebm-sharp-hidden": dict(energy="sharp-hidden")}
    for name, kw in runs.items():
        run = out / "runs" / name
        c = ClassifyTrainConfig(out=str(run), data=str(data), encoder=cfg.encoder, limit=cfg.train_limit,
                                epochs=cfg.epochs, batch_size=cfg.batch_size, max_len=cfg.max_len,
                                noise=str(noise) if kw["energy"] != "none" else "", noise_ratio=cfg.noise_ratio,
                                eval_split="", checkpoint_every=100, **kw, **common)
        step(f"train {name}", run_completed(run), lambda c=c: classify_train(_resumable(c)))

    ev_cfg = ClassifyEvalConfig(model=[str(out / "runs" / n) for n in runs], data=str(data),
                                out=str(out / "eval"), bins=20, split="dev", seed=cfg.seed,
                                overwrite=True)  # re-rendered on every call
    result: dict = {}
    step("eval", False, lambda: result.update(evaluate_runs(ev_cfg)))

    wall = time.perf_counter() - t0
    prev = read_json(out / "results.json") if (out / "results.json").is_file() else {}
    timings = {**prev.get("timings", {}), **timings}
    settings = {**asdict(cfg), "train_examples": result["settings"]["runs"]["baseline"]["train_examples"],
                "dev_half": result["settings"]["runs"]["baseline"]["dev_half"],
                "test_half": result["settings"]["runs"]["baseline"]["test_half"],
                "noise_per_example": per_example, "noise_lm": _lm_summary(lm_dir),
                "dataset": info.get("name", data.name), "labels": info.get("labels", []),
                "precision_choice": choice.as_dict(), "expected_seconds": round(sum(est.values()))}
    results = {"methods": {m: result["methods"][m] for m in METHODS},
               "wall_seconds": round(sum(timings.values()), 1), "timings": timings, "settings": settings,
               "diagnostics": {"nce_accuracy": {n: _final_nce_accuracy(out / "runs" / n) for n in runs
                                                if n.startswith("ebm-")}}}
    write_json(out / "results.json", results)
    with atomic_write(out / "report.md") as f:
        f.write(render_report(results, out))
    log.info("[quickstart] finished in %.0f s: %s", wall, out / "report.md")
    print((out / "report.md").read_text())
    return results


def _resumable(c):
    """Resume a half-finished run left by an interrupted quickstart, else start it afresh (the
    run is the quickstart's own, so --overwrite replaces only what textebm wrote there)."""
    run = Path(c.out)
    if (run / "checkpoint" / "state.json").is_file():
        c.resume = True
    elif run.exists():
        c.overwrite = True
    return c


def _final_nce_accuracy(run: Path) -> float:
    """Data-vs-noise accuracy of the NCE classifier over the last logged steps of an EBM run."""
    history = read_json(run / "metrics.json")["train"]["history"]
    return round(float(history[-1]["nce_acc"]), 4)


def _lm_summary(lm_dir: Path) -> dict:
    m = read_json(lm_dir / "metrics.json")
    return {"train_seconds": m["train"]["wall_seconds"], **m.get("eval", {})}


def ebm_verdict(methods: dict) -> str:
    """One sentence: did joint EBM training lower class-wise ECE against the baseline, and by how much."""
    base = methods["baseline"]["ece_classwise"]
    parts = []
    for name in ("ebm-scalar", "ebm-hidden", "ebm-sharp-hidden"):
        m = methods[name]
        change = (m["ece_classwise"] - base) / base if base > 0 else float("nan")
        parts.append(f"{name.removeprefix('ebm-')} {m['ece_classwise']:.3f} ({change:+.0%}, accuracy "
                     f"{m['accuracy'] - methods['baseline']['accuracy']:+.3f})")
    lowered = sum(methods[n]["ece_classwise"] < base for n in ("ebm-scalar", "ebm-hidden", "ebm-sharp-hidden"))
    return (f"Class-wise ECE of the baseline: {base:.3f}; with joint EBM training: " + "; ".join(parts)
            + f". {lowered} of 3 energy variants lowered it here.")


def render_report(results: dict, out: Path) -> str:
    from textebm.calibration.report import render_table

    s = results["settings"]
    lines = [
        "# textebm quickstart: joint EBM training for calibration (He et al. 2021)",
        "",
        f"Dataset `{s['dataset']}` (classes: {', '.join(s['labels'])}), encoder `{s['encoder']}`, "
        f"{s['train_examples']} training examples, {s['epochs']:g} epochs, noise ratio K={s['noise_ratio']}, "
        f"seed {s['seed']}; precision {s['precision_choice']['reason']}. "
        f"Numbers on the test half ({s['test_half']} examples) of the dev split; calibrators fit on the "
        f"training set (-train) or the dev half ({s['dev_half']} examples, -dev). ECE with 20 bins; "
        "class-wise ECE is the paper's eq. (15), top-label ECE the usual max-probability ECE.",
        "",
        render_table(results["methods"]),
        "",
        ebm_verdict(results["methods"]),
        "",
        f"Noise model: infill LM (mask ratio 0.4, top-k 20), {s['noise_per_example']} samples per training "
        f"example; dev perplexity of its infill objective: {s['noise_lm'].get('dev_perplexity', float('nan')):.1f}. "
        "NCE accuracy (data vs noise) at the end of training: "
        + ", ".join(f"{n.removeprefix('ebm-')} {a:.3f}" for n, a in results["diagnostics"]["nce_accuracy"].items())
        + ". Near 1, the noise is easy to tell from data and NCE teaches the energy little (the paper's "
        "reason for infill noise, sec. 2.4); a noise LM closer to the data (`--noise-lm smollm2-135m`, "
        "more `--lm-epochs`) makes it harder.",
        "",
        f"Wall time: {results['wall_seconds']:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in results["timings"].items()) + ").",
        "",
        "## Plots",
        "",
        "![reliability diagrams, class-wise](eval/reliability_classwise_all.png)",
        "",
        "One reliability diagram per method, class-wise and top-label: "
        + ", ".join(f"[{p.stem.removeprefix('reliability_')}](eval/{p.name})"
                    for p in sorted((out / 'eval').glob('reliability_*_*.png')) if not p.stem.endswith('_all')),
        "",
        "![energy histogram](eval/energy_histogram.png)",
        "",
        "![entropy versus energy](eval/entropy_vs_energy.png)",
        "",
    ]
    return "\n".join(lines)
