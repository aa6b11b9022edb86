"""Is the EBMs' lower ECE only a side effect of fitting the labels less? The baseline at fewer epochs.

    python bench/baseline_epochs.py [--grid runs/grid-fp32] [--cell default] [--epochs 2] [--seeds 3]

The EBMs of a calibration-grid cell (bench/calibration_grid.py) end 3 epochs with a training loss on
the labels well above the baseline's (0.34-0.39 against 0.235), about where the baseline is after
2 epochs. This trains the baseline alone for `--epochs` with every other setting of the cell's
baseline (its config.json: data, encoder, 2,500 examples, learning rate, precision, seed), evaluates
it on the same test half (`classify eval`, dev halving seed 0, as the quickstart), and sets it beside
the cell's 3-epoch baseline and EBMs, paired by seed: if the shorter baseline is as well calibrated
as the EBMs at the same accuracy, the EBMs' ECE gain is what a slower fit gives anyway.

Per seed, the run (GRID/baseline-eEPOCHS/seed-S/run) and its evaluation (.../eval) are cached: a
finished seed is skipped and an interrupted training resumes. Writes GRID/baseline-eEPOCHS/table.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

EBMS = ("ebm-scalar", "ebm-hidden", "ebm-sharp-hidden")


def run_seed(cell_seed: Path, out: Path, epochs: float) -> dict:
    """Train (or resume) the shorter baseline of one seed and evaluate it; its eval metrics."""
    cfg = json.loads((cell_seed / "runs" / "baseline" / "config.json").read_text())
    run, ev = out / "run", out / "eval"
    if not (run / "model").is_dir():
        cmd = [sys.executable, "-m", "textebm", "classify", "train", "--data", cfg["data"], "--out", str(run),
               "--encoder", cfg["encoder"], "--limit", str(cfg["limit"]), "--epochs", str(epochs),
               "--seed", str(cfg["seed"]), "--precision", cfg["precision"], "--lr", str(cfg["lr"]),
               "--batch-size", str(cfg["batch_size"]), "--max-len", str(cfg["max_len"]), "--head", cfg["head"],
               "--pooling", cfg["pooling"], "--eval-split", "", "--no-progress"]
        if (run / "config.json").is_file():
            cmd.append("--resume")
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    if not (ev / "metrics.json").is_file():
        cmd = [sys.executable, "-m", "textebm", "classify", "eval", "--model", str(run), "--data", cfg["data"],
               "--out", str(ev), "--seed", "0", "--no-calibrators", "--bootstrap", "0", "--precision", "fp32"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return json.loads((ev / "metrics.json").read_text())["methods"]["baseline"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="runs/grid-fp32", help="a calibration grid's --out")
    ap.add_argument("--cell", default="default", help="the cell whose baseline and EBMs to compare with")
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()

    from textebm.calibration.uncertainty import seed_summary
    from textebm.quickstart import final_logged

    grid, out = Path(args.grid), Path(args.grid) / f"baseline-e{args.epochs:g}"
    seeds = list(range(args.seeds))
    short = {s: run_seed(grid / args.cell / f"seed-{s}", out / f"seed-{s}", args.epochs) for s in seeds}
    results = json.loads((grid / args.cell / "results.json").read_text())
    if missing := [s for s in seeds if str(s) not in results["seeds"]]:
        sys.exit(f"cell {args.cell} has no results for seeds {missing} yet: run the grid on, then this again")
    short_ce = [final_logged(out / f"seed-{s}" / "run", "ce") for s in seeds]

    def fmt(v: list[float]) -> str:
        r = seed_summary(v)
        return f"{r['mean']:.3f} ± {r['std']:.3f}" if r["std"] is not None else f"{r['mean']:.3f}"

    def change(a: list[float], b: list[float]) -> str:
        r = seed_summary([x - y for x, y in zip(a, b)])
        return f"{r['mean']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]" if r["std"] is not None else f"{r['mean']:+.3f}"

    acc0 = [short[s]["accuracy"] for s in seeds]
    ece0 = [short[s]["ece_classwise"] for s in seeds]
    lines = [f"Baseline at {args.epochs:g} epochs against cell `{args.cell}` (3 epochs), {len(seeds)} seeds, "
             "mean ± standard deviation; changes against the shorter baseline paired by seed, 95% t-interval.",
             "", "| method | epochs | accuracy | class-wise ECE | change in acc. vs the shorter baseline | "
             "change in ECE vs the shorter baseline | final training CE |", "|---|---|---|---|---|---|---|",
             f"| baseline | {args.epochs:g} | {fmt(acc0)} | {fmt(ece0)} | | | {sum(short_ce) / len(short_ce):.3f} |"]
    for m in ("baseline", *EBMS):
        acc = [results["seeds"][str(s)]["methods"][m]["accuracy"] for s in seeds]
        ece = [results["seeds"][str(s)]["methods"][m]["ece_classwise"] for s in seeds]
        ce = [final_logged(grid / args.cell / f"seed-{s}" / "runs" / m, "ce") for s in seeds]
        lines.append(f"| {m} | 3 | {fmt(acc)} | {fmt(ece)} | {change(acc, acc0)} | {change(ece, ece0)} | "
                     f"{sum(ce) / len(ce):.3f} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print((out / "table.md").read_text())


if __name__ == "__main__":
    main()
