"""Is the EBMs' lower ECE only a side effect of fitting the labels less? The baseline at other epochs.

    python bench/baseline_epochs.py [--grid runs/grid-fp32] [--epochs 1.5 2 2.5 4] [--seeds 3]
                                    [--cells default lm4 ...] [--against 2] [--base-cell default] [--report]

The EBMs of a calibration grid (bench/calibration_grid.py) end their 3 epochs with a training loss
on the labels well above the baseline's (0.34-0.39 against 0.235), about where the baseline is after
2 epochs, and the paper notes that training the baseline longer worsens its ECE. So the baseline's
ECE depends on how far it is trained, and an EBM that fits less may be better calibrated for that
reason alone. This trains the baseline alone for each of `--epochs`, with every other setting of the
grid's `default` baseline (or `--base-cell`'s; its config.json: data, encoder, 2,500 examples, learning rate and its
schedule, precision, seed), evaluates it on the same test half (`classify eval`, dev halving seed 0,
as the quickstart does), and writes GRID/baseline-epochs.md and .png:

- the baseline's accuracy and ECE at each number of epochs (the grid's own 3-epoch baseline among
  them): the trade-off the baseline offers by training time alone;
- each EBM of `--cells` against the baseline at `--against` epochs, paired by seed (mean change
  and 95% t-interval), and against the 3-epoch baseline;
- a plot of accuracy against class-wise ECE, the baseline's series as a line.

An EBM that lies below and to the right of the baseline's line is better calibrated than stopping
the baseline early can make it; one on or above the line is not.

Per seed, each run (GRID/baseline-eE/seed-S/run) and its evaluation (.../eval) are cached: a finished
seed is skipped and an interrupted training resumes. `--report` only writes the report from what
has finished.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from calibration_grid import EBMS, NOT_RUN, cell_results  # bench/ is on the path of a script run from it

GRID_EPOCHS = 3.0  # the epochs of the grid's cells (the quickstart's default)


def run_seed(cell: Path, seed: int, out: Path, epochs: float) -> None:
    """Train (or resume) one seed's baseline for `epochs`, as the cell's baseline otherwise, and evaluate it.
    The settings are the cell's baseline's of that seed, or, before the cell has reached the seed, those
    of its seed-0 baseline with the seed changed (no other setting of a baseline depends on the seed)."""
    own = cell / f"seed-{seed}" / "runs" / "baseline" / "config.json"
    cfg = json.loads((own if own.is_file() else cell / "seed-0" / "runs" / "baseline" / "config.json").read_text())
    cfg["seed"] = seed
    run, ev = out / "run", out / "eval"
    if not (run / "model").is_dir():
        cmd = [sys.executable, "-m", "textebm", "classify", "train", "--data", cfg["data"], "--out", str(run),
               "--encoder", cfg["encoder"], "--limit", str(cfg["limit"]), "--epochs", str(epochs),
               "--seed", str(cfg["seed"]), "--precision", cfg["precision"], "--lr", str(cfg["lr"]),
               "--warmup", str(cfg["warmup"]), "--weight-decay", str(cfg["weight_decay"]),
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


def report(grid: Path, epochs: list[float], seeds: list[int], cells: list[str], against: float,
           base: str = "default") -> str:
    from textebm.calibration.plots import plot_tradeoff
    from textebm.calibration.uncertainty import seed_summary
    from textebm.classify.quickstart import final_logged

    default = cell_results(grid, base)
    if default is None:
        sys.exit(f"{grid / base} has not finished: run the grid's {base} cell first")
    seeds = [s for s in seeds if str(s) in default["seeds"]]

    def baseline(e: float) -> dict[int, dict] | None:
        """{seed: metrics and final CE} of the baseline at `e` epochs, None unless every seed has finished."""
        if e == GRID_EPOCHS:
            return {s: {**default["seeds"][str(s)]["methods"]["baseline"],
                        "ce": final_logged(grid / base / f"seed-{s}" / "runs" / "baseline", "ce")} for s in seeds}
        d = grid / f"baseline-e{e:g}"
        if not all((d / f"seed-{s}" / "eval" / "metrics.json").is_file() for s in seeds):
            return None
        return {s: {**json.loads((d / f"seed-{s}" / "eval" / "metrics.json").read_text())["methods"]["baseline"],
                    "ce": final_logged(d / f"seed-{s}" / "run", "ce")} for s in seeds}

    def fmt(v: list[float]) -> str:
        r = seed_summary(v)
        return f"{r['mean']:.3f} ± {r['std']:.3f}" if r["std"] is not None else f"{r['mean']:.3f}"

    def change(a: list[float], b: list[float]) -> str:
        r = seed_summary([x - y for x, y in zip(a, b)])
        return f"{r['mean']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]" if r["std"] is not None else f"{r['mean']:+.3f}"

    series = {e: b for e in sorted({*epochs, GRID_EPOCHS}) if (b := baseline(e)) is not None}
    lines = [f"# The baseline at other epochs, beside the grid's EBMs ({grid})", "",
             f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), the same test half; mean ± standard deviation "
             "over seeds. Final training CE: the classification loss over the last logged steps.", "",
             "| baseline epochs | accuracy | class-wise ECE | top-label ECE | final training CE |",
             "|---|---|---|---|---|"]
    for e, b in series.items():
        cols = [fmt([b[s][k] for s in seeds]) for k in ("accuracy", "ece_classwise", "ece_toplabel", "ce")]
        lines.append(f"| {e:g} | " + " | ".join(cols) + " |")
    points = {f"baseline, {e:g} epochs": ([b[s]["accuracy"] for s in seeds], [b[s]["ece_classwise"] for s in seeds])
              for e, b in series.items()}
    ref = series.get(against)
    three = series[GRID_EPOCHS]
    lines += ["", f"EBMs (3 epochs) against the baseline at {against:g} epochs and at 3 epochs: change paired by "
              "seed, 95% t-interval over seeds.", "",
              f"| cell | seeds | EBM | accuracy | class-wise ECE | change in acc. vs {against:g} ep. | "
              f"change in ECE vs {against:g} ep. | change in acc. vs 3 ep. | change in ECE vs 3 ep. | "
              "final training CE |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        if (r := cell_results(grid, cell)) is None:
            lines.append(NOT_RUN.format(cell))
            continue
        ss = [s for s in seeds if str(s) in r["seeds"]]
        for m in EBMS:
            acc = [r["seeds"][str(s)]["methods"][m]["accuracy"] for s in ss]
            ece = [r["seeds"][str(s)]["methods"][m]["ece_classwise"] for s in ss]
            ce = [final_logged(grid / cell / f"seed-{s}" / "runs" / m, "ce") for s in ss]
            vs = []
            for b in (ref, three):  # the baseline at --against epochs (when it has finished), then at 3
                vs += ([change(acc, [b[s]["accuracy"] for s in ss]), change(ece, [b[s]["ece_classwise"] for s in ss])]
                       if b else ["", ""])
            lines.append(f"| {cell} | {len(ss)} | {m} | {fmt(acc)} | {fmt(ece)} | " + " | ".join(vs)
                         + f" | {fmt(ce)} |")
            points[f"{cell}: {m}"] = (acc, ece)
    png = grid / "baseline-epochs.png"
    plot_tradeoff(points, png, line=[k for k in points if k.startswith("baseline, ")])
    lines += ["", f"![accuracy against class-wise ECE]({png.name})"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="runs/grid-fp32", help="a calibration grid's --out (its `default` cell)")
    ap.add_argument("--epochs", type=float, nargs="+", default=[1.5, 2.0, 2.5, 4.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--cells", nargs="+", default=["default"], help="grid cells whose EBMs to set beside")
    ap.add_argument("--against", type=float, default=2.0, help="the baseline epochs the EBMs are paired with")
    ap.add_argument("--base-cell", default="default",
                    help="the cell whose baseline is trained at other epochs (its config and its 3-epoch results): "
                         "any cell that keeps the default baseline's settings (not e4, e4w, e2), e.g. smollm2 "
                         "where `default` has not run")
    ap.add_argument("--report", action="store_true", help="only write the report from what has finished")
    args = ap.parse_args()
    if any(e <= 0 for e in args.epochs):
        ap.error("--epochs: every value must be above 0")
    grid, seeds = Path(args.grid), list(range(args.seeds))
    if not args.report:
        for e in args.epochs:
            if e != GRID_EPOCHS:
                for s in seeds:
                    run_seed(grid / args.base_cell, s, grid / f"baseline-e{e:g}" / f"seed-{s}", e)
    text = report(grid, args.epochs, seeds, args.cells, args.against, args.base_cell)
    (grid / "baseline-epochs.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
