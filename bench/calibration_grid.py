"""Why do the EBM variants lose accuracy? Remedies of issue 9, each a cell run over several seeds.

    python bench/calibration_grid.py [--out runs/grid] [--seeds 3] [--cells default k4 ...] [--data DIR]

Every cell is a `textebm quickstart` with its own settings in OUT/CELL (per seed: noise LM, noise,
five classifiers, evaluation) on one dataset folder, OUT/data. The cells run on textebm's grid
runner (docs/grids.md): a finished cell is recorded in OUT/cells/ under a hash of its settings and
the data, `--plan` lists the cells left, `--shard I/N` (or a Slurm job array) splits them among
processes sharing OUT, and `--backend dask` runs them as Dask tasks. A quickstart folder continues
where it stopped, so the grid is cached per cell and per seed and resumable: kill it, run it
again, and finished work is kept. A cell that fails is reported and the grid goes on (run it
again to retry that cell). Cells after `default` take its finished steps whose inputs they share
(`quickstart --reuse`; `lm4w` and `lm4w05` take lm4's; a cell whose source is in the grid waits for
it to finish): the EBM-only cells train only the three EBMs, and every cell but `e4`
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


# Rough CPU time of one seed of a cell on one thread (docs/classify.md: 30-60 minutes in bf16,
# smollm2 almost 2 hours), for --plan.
SEED_SECONDS = {"smollm2": 2 * 3600}
SEED_SECONDS_DEFAULT = 45 * 60


def data_key(data: Path) -> str:
    """The dataset folder's identity by content: a hash of its files."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in data.iterdir() if p.is_file()):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


class Quickstarts:
    """The grid's cells on textebm's grid runner: each cell one quickstart folder OUT/CELL (itself
    resumable), cached as finished in OUT/cells/. A cell that takes finished steps from another cell
    (`--reuse`) has that cell finished first (or waits for the process computing it)."""

    def __init__(self, out: Path, data: str, seeds: int, preset: list[str], cells: list[str]):
        from textebm import grid

        self.out, self.data, self.seeds, self.preset, self.names = out, data, seeds, preset, cells
        self.runner = grid.Grid(out / "cells", self.compute)
        self.key = data_key(Path(data)) if Path(data).is_dir() else "not prepared yet"

    def cell(self, name: str):
        from textebm import grid

        args = [*self.preset, *CELLS[name]]
        return grid.Cell(name, {"cell": name, "args": args, "seeds": self.seeds, "data": self.key,
                                "reuse": self.source(name)}, name, SEED_SECONDS.get(name, SEED_SECONDS_DEFAULT) * self.seeds)

    def source(self, name: str) -> str:
        return "" if name == "default" else REUSE_FROM.get(name, "default")

    def cells(self) -> list:
        return [self.cell(n) for n in self.names]

    def compute(self, cell) -> dict:
        from textebm.errors import TextebmError

        name = cell.task
        src = self.source(name)
        if src in self.names:
            self.runner.run_cell(self.cell(src))  # its finished steps are taken, not trained again
        reuse = ["--reuse", str(self.out / src)] if src and (self.out / src / "settings.json").is_file() else []
        cmd = [sys.executable, "-m", "textebm", "quickstart", "--out", str(self.out / name), "--seeds",
               str(self.seeds), "--no-progress", "--data", self.data, *reuse, *self.preset, *CELLS[name]]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            raise TextebmError(f"cell {name}: quickstart exited with status {rc}")
        return {"folder": str(self.out / name), "seeds": cell_results(self.out, name)["seeds"]}


def main() -> None:
    from textebm import grid
    from textebm.errors import TextebmError

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
    ap.add_argument("--plan", action="store_true", help="list the cells left and their rough CPU time, then stop")
    ap.add_argument("--shard", default="", help="I/N: this process's share of the cells (default: from a Slurm "
                                                "job array when in one); see docs/grids.md")
    ap.add_argument("--backend", choices=list(grid.BACKENDS), default="local",
                    help="run the cells here, or as tasks on a Dask cluster (pip install 'textebm[grid]')")
    ap.add_argument("--workers", type=int, default=2, help="--backend dask: local worker processes")
    ap.add_argument("--address", default="", help="--backend dask: scheduler of an existing cluster")
    args = ap.parse_args()
    out = Path(args.out)
    preset = ["--precision", args.precision, "--train-limit", "2500", "--lm-epochs", "2"]
    try:
        shard = grid.shard_from(args.shard)
        if not args.report:
            data = args.data or str(out / "data")
            grid_ = Quickstarts(out, data, args.seeds, preset, args.cells)
            if args.plan:
                print(grid_.runner.plan(grid_.cells(), shard))
                return
            if not args.data and not (out / "data" / "dataset.json").is_file():
                subprocess.run([sys.executable, "-m", "textebm", "data", "prepare", "rt-polarity", "--out", data,
                                "--seed", "0"], check=True)
                grid_ = Quickstarts(out, data, args.seeds, preset, args.cells)  # keyed by the data prepared
            grid_.runner.run(grid_.cells(), shard, args.backend, args.workers, args.address, keep_going=True)
    except TextebmError as e:
        sys.exit(f"calibration_grid: {e}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "grid.md").write_text(report(out, args.cells))
    print((out / "grid.md").read_text())


if __name__ == "__main__":
    main()
