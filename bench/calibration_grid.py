"""Why do the EBM variants lose accuracy? Remedies of issue 9, each a cell run over several seeds.

    python bench/calibration_grid.py [--out runs/grid] [--seeds 3] [--cells default k4 ...] [--data DIR]

Every cell is a `textebm quickstart` with its own settings in OUT/CELL (per seed: noise LM, noise,
five classifiers, evaluation) on one dataset folder, OUT/data. A quickstart folder continues where
it stopped, so the grid is cached per cell and per seed and resumable: kill it, run it again, and
finished work is kept. Cells after `default` take its finished steps whose inputs they share
(`quickstart --reuse`; `lm4w` and `lm4w05` take lm4's): the EBM-only cells train only the three EBMs, and every cell but `e4`
reuses the baseline and PosCal, so each compares against the same baselines.
At the end (and with --report alone) it writes OUT/grid.md: per cell, the baseline and every EBM
variant as mean ± standard deviation over seeds of accuracy and class-wise ECE, and each EBM's
change against its baseline with the 95% t-interval over seeds, and the training cross-entropy
each run ended with (mean over seeds; its last logged window of steps), each EBM's final NCE
(data-vs-noise) accuracy, and the noise LM's infill perplexity on dev.

The cells (settings on top of the quickstart's defaults as they were when the grid started:
K=1, noise LM from scratch for 2 epochs in bf16, a constant NCE weight of 1):
  default     those defaults (today's quickstart defaults are the `lm4w05` cell's)
  lm4         a stronger noise LM: 4 epochs instead of 2
  lm4w        the 4-epoch noise LM with the NCE warm-up (lm4 lowered ECE most, the warm-up kept accuracy)
  lm4w05      lm4w with a lighter NCE term (weight 0.5): lm4's ECE gain is large, so trade some of it
              for accuracy, as w05 did at a weaker noise LM
  smollm2     the noise LM fine-tuned from SmolLM2-135M (as the paper fine-tunes GPT-2)
  k4          more noise: K=4
  w05         a lighter NCE term: weight 0.5
  warmup      the NCE weight warmed up over the first 30% of the steps
  elr         the scalar energy head at 10x the encoder's learning rate
  e4          every classifier (baseline too) trains 4 epochs instead of 3: do the EBMs, which end
              with a higher training loss, catch up with more steps?
  e4w         4 epochs with the NCE warm-up: the two remedies that came closest, together
  e2          every classifier trains 2 epochs: is a baseline that fits the labels as little as the
              EBMs do as well calibrated as they are (the EBMs' gain as a side effect of a slower fit)?
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# Every cell is one remedy on top of the defaults the grid started from: a constant NCE weight of 1
# (the quickstart's defaults have since become `lm4w05`'s: a warm-up, weight 0.5, a 4-epoch noise LM).
BASE = ["--nce-warmup", "0", "--nce-weight", "1"]
WARM = ["--nce-warmup", "0.3", "--nce-weight", "1"]
CELLS: dict[str, list[str]] = {
    "default": BASE,
    "lm4": [*BASE, "--lm-epochs", "4"],
    "lm4w": [*WARM, "--lm-epochs", "4"],
    "lm4w05": ["--nce-warmup", "0.3", "--lm-epochs", "4", "--nce-weight", "0.5"],
    "smollm2": [*BASE, "--noise-lm", "smollm2-135m", "--lm-epochs", "1"],
    "k4": [*BASE, "--noise-ratio", "4"],
    "w05": [*BASE, "--nce-weight", "0.5"],
    "warmup": WARM,
    "elr": [*BASE, "--energy-lr", "5e-4"],
    "e4": [*BASE, "--epochs", "4"],
    "e4w": [*WARM, "--epochs", "4"],
    "e2": [*BASE, "--epochs", "2"],
}
# The cell whose finished steps a cell takes (default: `default`): lm4w and lm4w05 share lm4's noise LM
# and noise.
REUSE_FROM = {"lm4w": "lm4", "lm4w05": "lm4"}
EBMS = ("ebm-scalar", "ebm-hidden", "ebm-sharp-hidden")


def cell_results(out: Path, cell: str) -> dict | None:
    """A cell's results.json (mean, spread and intervals over its seeds), None until it has finished."""
    f = out / cell / "results.json"
    return json.loads(f.read_text()) if f.is_file() else None


NOT_RUN = "| {} | - | (not run yet) | | | | | | | |"


def report(out: Path, cells: list[str]) -> str:
    from textebm.classify.quickstart import final_logged

    lines = ["| cell | seeds | method | accuracy | class-wise ECE | change in acc. vs baseline [95% CI] | "
             "change in ECE vs baseline [95% CI] | final training CE | final NCE acc. | noise-LM dev ppl |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        if (r := cell_results(out, cell)) is None:
            lines.append(NOT_RUN.format(cell))
            continue
        n = len(r["seeds"])
        for m in ("baseline", *EBMS):
            acc, ece = r["summary"][m]["accuracy"], r["summary"][m]["ece_classwise"]
            cells_ = [f"{acc['mean']:.3f} ± {acc['std']:.3f}" if n > 1 else f"{acc['mean']:.3f}",
                      f"{ece['mean']:.3f} ± {ece['std']:.3f}" if n > 1 else f"{ece['mean']:.3f}"]
            if m == "baseline":
                cells_ += ["", ""]
            else:
                ch = r["change_vs_baseline"][m]
                cells_ += [f"{ch[k]['mean']:+.3f} [{ch[k]['lo']:+.3f}, {ch[k]['hi']:+.3f}]" if n > 1
                           else f"{ch[k]['mean']:+.3f}" for k in ("accuracy", "ece_classwise")]
            seeds = [out / cell / f"seed-{seed}" for seed in r["seeds"]]
            ce = [final_logged(d / "runs" / m, "ce") for d in seeds]
            cells_.append(f"{sum(ce) / len(ce):.3f}")
            # how well the EBM's NCE classifier tells data from noise, and how close the noise LM is
            # to the data (infill perplexity on dev): the two sides of sec. 2.4's warning
            nce = [final_logged(d / "runs" / m, "nce_acc") for d in seeds] if m != "baseline" else []
            cells_.append(f"{sum(nce) / len(nce):.3f}" if nce else "")
            ppl = [json.loads((d / "noise-lm" / "metrics.json").read_text())["eval"]["dev_perplexity"]
                   for d in seeds if (d / "noise-lm" / "metrics.json").is_file()]
            cells_.append(f"{sum(ppl) / len(ppl):.1f}" if ppl and m == "baseline" else "")
            lines.append(f"| {cell} | {n} | {m} | " + " | ".join(cells_) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/grid")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    ap.add_argument("--data", default="", help="a prepared dataset folder (default: rt-polarity)")
    ap.add_argument("--report", action="store_true", help="only write OUT/grid.md from what has finished")
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                    help="training precision of every cell. The grid's settings are the bf16 preset's "
                         "(2,500 examples, a 2-epoch noise LM) in either precision, so cells stay the same "
                         "experiment on a CPU without native bf16 (there auto picks fp32, whose quickstart "
                         "preset is smaller); use a separate --out per precision")
    args = ap.parse_args()
    out = Path(args.out)
    preset = ["--precision", args.precision, "--train-limit", "2500", "--lm-epochs", "2"]
    if not args.report:
        data = args.data or str(out / "data")
        if not args.data and not (out / "data" / "dataset.json").is_file():
            subprocess.run([sys.executable, "-m", "textebm", "data", "prepare", "rt-polarity", "--out", data,
                            "--seed", "0"], check=True)
        for cell in args.cells:
            src = out / REUSE_FROM.get(cell, "default")
            reuse = ["--reuse", str(src)] if cell != "default" and (src / "settings.json").is_file() else []
            cmd = [sys.executable, "-m", "textebm", "quickstart", "--out", str(out / cell), "--seeds",
                   str(args.seeds), "--no-progress", "--data", data, *reuse, *preset, *CELLS[cell]]
            print("+", " ".join(cmd), flush=True)
            if subprocess.run(cmd).returncode != 0:
                print(f"cell {cell} failed; the grid goes on (rerun to retry it)", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grid.md").write_text(report(out, args.cells))
    print((out / "grid.md").read_text())


if __name__ == "__main__":
    main()
