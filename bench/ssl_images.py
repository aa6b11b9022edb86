"""Figure 1 of paper e on digits: test error against labelled proportion for the three methods.

    python bench/ssl_images.py [--out runs/ssl_images] [--proportions 0.02 0.05 0.1] [--seeds 3]
                               [--plan] [--shard I/N] [--report]

Each cell is one `textebm ssl-images` run (method, labelled proportion, seed; --seed and
--split-seed both the seed, so each seed also draws its own labelled set, as the paper's "randomly
sampled labels"): `supervised`, `pretrain` (stage 1, `ssl-images pretrain`, built once per
proportion and seed as a shared artifact, then `train --method pretrain --init`), `joint`, plus
`supervised` on 100 % of the labels (the figure's dashed line). Cells run on textebm's grid runner
(docs/grids.md): a finished cell is cached in OUT/cells/ under a hash of its settings and is never
rerun, an interrupted run folder is resumed (--resume), `--plan` lists what is left with its CPU
time, `--shard I/N` splits the cells among processes sharing OUT.

At the end it writes OUT/figure1.md (mean ± standard deviation of the test error over seeds, per
method and proportion; each seed's numbers; the paired changes (same seed, same labelled set):
pre-training and joint against supervised, joint against pre-training)
and OUT/figure1.png. bench/ssl_images.sh runs it as the docs report it.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path

from textebm.cli import main as textebm
from textebm.errors import TextebmError
from textebm.figures import new_figure, save_png
from textebm.grid import Cell, Grid, once, shard_from
from textebm.images.train import METHODS
from textebm.io import atomic_write, read_json
from textebm.markdown import table
from textebm.precision import cpu_capability, cpu_flags, cpu_name
from textebm.runfolder import run_completed

SECONDS = {"supervised": 7, "pretrain": 45, "joint": 42}  # one thread, AMD EPYC, 400 steps


def _run(args: list[str], out: Path) -> dict:
    """`textebm ARGS --out OUT`, resumed when OUT holds an unfinished run; its metrics.json."""
    if not run_completed(out):
        resume = ["--resume"] if (out / "config.json").is_file() else []
        if textebm([*args, "--out", str(out), *resume]) != 0:
            raise TextebmError(f"{' '.join(args)} --out {out} failed")
    return read_json(out / "metrics.json")


def compute(cell: Cell, root: Path, common: list[str]) -> dict:
    s = cell.settings
    split = ["--labelled-proportion", str(s["proportion"]), "--seed", str(s["seed"]),
             "--split-seed", str(s["seed"]), *common]
    runs = root / "runs"
    out = runs / f"{cell.name}-{cell.key}"
    t = {}
    if s["method"] == "pretrain":
        ebm = runs / f"ebm-p{s['proportion']:g}-s{s['seed']}-{cell.key}"
        once(ebm, lambda: run_completed(ebm), lambda: _run(["ssl-images", "pretrain", *split], ebm))
        t["ebm_seconds"] = read_json(ebm / "metrics.json")["train"]["wall_seconds"]
        m = _run(["ssl-images", "train", "--method", "pretrain", "--init", str(ebm), *split], out)
    else:
        m = _run(["ssl-images", "train", "--method", s["method"], *split], out)
    cfg = read_json(out / "config.json")
    return {**m["eval"], **t, "seconds": m["train"]["wall_seconds"], "precision": m["train"]["precision"],
            "labelled_images": cfg["labelled_images"], "unlabelled_images": cfg["unlabelled_images"]}


def cells(proportions: list[float], seeds: int, steps: int) -> list[Cell]:
    out = [Cell(f"{m}-p{p:g}-s{s}", {"method": m, "proportion": p, "seed": s, "steps": steps, "v": 1},
                seconds=SECONDS[m] * steps / 400)
           for p in proportions for m in METHODS for s in range(seeds)]
    out += [Cell(f"supervised-p1-s{s}", {"method": "supervised", "proportion": 1.0, "seed": s, "steps": steps,
                                         "v": 1}, seconds=SECONDS["supervised"] * steps / 400) for s in range(seeds)]
    return out


def _pm(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{100 * statistics.mean(xs):.2f} ± {100 * sd:.2f}"


def report(root: Path, grid: Grid, all_cells: list[Cell], proportions: list[float]) -> str:
    unique = list({grid.file(c): c for c in all_cells}.values())  # 100 % in --proportions is the dashed line's cell too
    done = [(c, grid.result(c)) for c in unique if grid.done(c)]
    by: dict[tuple[str, float], list[tuple[int, dict]]] = {}
    for c, r in done:
        by.setdefault((c.settings["method"], c.settings["proportion"]), []).append((c.settings["seed"], r))
    prec = {r["precision"] for _, r in done}
    bf16 = "native bf16" if {"avx512_bf16", "amx_bf16"} & cpu_flags() else "no native bf16"
    about = (f"CPU: {cpu_name()} ({bf16}), torch CPU capability {cpu_capability()}, one thread; precision "
             f"{', '.join(sorted(prec)) or '-'}; {len(done)} of {len(unique)} cells finished. Mean ± standard "
             "deviation over seeds (each seed its own labelled set and initialisation); 359 held-out test images.\n")
    lines = ["# Figure 1 on digits: test error (%) against labelled proportion\n", about]
    rows = []
    for p in proportions:
        row = [f"{100 * p:g} %"]
        n_lab = next((r["labelled_images"] for m in METHODS for _, r in by.get((m, p), [])), "-")
        row.append(str(n_lab))
        for m in METHODS:
            rs = by.get((m, p), [])
            row.append(_pm([r["test_error"] for _, r in rs]) + f" (n={len(rs)})" if rs else "-")
        for base, m in (("supervised", "pretrain"), ("supervised", "joint"), ("pretrain", "joint")):
            a, b = dict(by.get((base, p), [])), dict(by.get((m, p), []))
            d = [b[s]["test_error"] - a[s]["test_error"] for s in sorted(set(a) & set(b))]
            row.append(f"{100 * statistics.mean(d):+.2f} ({sum(x < 0 for x in d)}/{len(d)} seeds lower)" if d else "-")
        rows.append(row)
    lines.append(table(["labelled", "images", "supervised", "pretrain", "joint", "pretrain − sup.", "joint − sup.",
                        "joint − pretrain"], rows, ["left"] + ["right"] * 7))
    full = by.get(("supervised", 1.0), [])
    if full:
        lines.append(f"\nSupervised on 100 % of the labels ({full[0][1]['labelled_images']} images): "
                     f"{_pm([r['test_error'] for _, r in full])} (n={len(full)}), the figure's dashed line.")
    lines.append("\nEach seed (test error %, wall seconds of the run; pretrain adds its EBM's):\n")
    seeds_rows = [[c.name, f"{100 * r['test_error']:.2f}",
                   f"{r['seconds']:.0f}" + (f" + {r['ebm_seconds']:.0f}" if "ebm_seconds" in r else "")]
                  for c, r in done]
    lines.append(table(["cell", "error", "seconds"], seeds_rows, ["left", "right", "right"]))
    text = "\n".join(lines) + "\n"
    with atomic_write(root / "figure1.md") as f:
        f.write(text)
    fig = new_figure(figsize=(5.5, 4))
    ax = fig.add_subplot()
    for m, mk in zip(METHODS, "osD"):
        ps = [p for p in proportions if by.get((m, p))]
        if not ps:
            continue
        mean = [100 * statistics.mean(r["test_error"] for _, r in by[(m, p)]) for p in ps]
        sd = [100 * (statistics.stdev([r["test_error"] for _, r in by[(m, p)]]) if len(by[(m, p)]) > 1 else 0)
              for p in ps]
        ax.errorbar([100 * p for p in ps], mean, yerr=sd, marker=mk, capsize=3, label=m)
    if full:
        ax.axhline(100 * statistics.mean(r["test_error"] for _, r in full), ls="--", c="grey",
                   label="supervised, 100 %")
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks([100 * p for p in proportions], [f"{100 * p:g}" for p in proportions])
    ax.set_xlabel("labelled proportion (%)")
    ax.set_ylabel("test error (%)")
    ax.set_title("digits: test error against labelled proportion\n(mean ± sd over seeds; fp32, CPU)", fontsize=10)
    ax.legend()
    save_png(fig, root / "figure1.png")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/ssl_images")
    ap.add_argument("--proportions", type=float, nargs="+", default=[0.02, 0.05, 0.1])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--report", action="store_true", help="only write the table and figure of finished cells")
    ap.add_argument("--shard", default="")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = Path(a.out)
    common = ["--max-steps", str(a.steps), "--threads", str(a.threads)]
    grid = Grid(root / "cells", lambda c: compute(c, root, common))
    all_cells = cells(a.proportions, a.seeds, a.steps)
    if a.plan:
        print(grid.plan(all_cells, shard_from(a.shard)))
        return 0
    if not a.report:
        grid.run(all_cells, shard_from(a.shard), keep_going=True,
                 on_result=lambda c, r: print(f"{c.name}: test error {100 * r['test_error']:.2f} %", flush=True))
    print(report(root, grid, all_cells, a.proportions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
