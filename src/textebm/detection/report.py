"""The matrix's report: Markdown tables per slice, heatmaps, and the plan with its estimated CPU
time (from per-unit rates measured by bench/bench_detection.py, or the config's `rates`)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

from textebm.detection.detect import ZEROSHOT
from textebm.detection.steps import train_length
from textebm.figures import new_figure, save_png
from textebm.io import atomic_write
from textebm.markdown import table
from textebm.runfolder import run_completed

# Seconds per unit on one CPU thread (AVX512 + avx512_bf16 EPYC, fp32 inference / bf16 training),
# measured by bench/bench_detection.py (bench/results/detection/bench_detection.json); generator steps
# (113 s per 300-step generator) and foreign (SmolLM2) negatives from the matrix run. A config's
# "rates" overrides them.
DEFAULT_RATES = {"generator_step": 0.38, "negative_window": 0.008, "foreign_negative_window": 0.25,
                 "energy_step": {"linear": 0.001, "bilstm": 0.037, "unitransf": 0.112, "bitransf": 0.093,
                                 "bitransf-init": 0.72},
                 "eval_window": {"linear": 0.00001, "bilstm": 0.00035, "unitransf": 0.0011, "bitransf": 0.0007,
                                 "bitransf-init": 0.026, "zeroshot": 0.002}}


def _fmt(r: dict | None) -> str:
    return "–" if r is None else f"{100 * r['accuracy']:.1f} ({r['auroc']:.3f})"


def _heatmap(title: str, rows: list[str], cols: list[str], values, path: Path) -> None:
    import numpy as np
    v = np.array(values, dtype=float)
    fig = new_figure(figsize=(1.6 + 1.1 * len(cols), 1.2 + 0.5 * len(rows)))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(v, vmin=0.5, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("test")
    ax.set_ylabel("train")
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(v[i, j]):
                ax.text(j, i, f"{100 * v[i, j]:.1f}", ha="center", va="center",
                        color="white" if v[i, j] < 0.8 else "black", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    save_png(fig, path, 120)


def _drop_line(cells: list[dict]) -> str:
    """Mean accuracy where training and test sides are the same, where they differ (single-source
    training only), and the drop between them."""
    same = [c["accuracy"] for c in cells if c["train"] == c["test"]]
    other = [c["accuracy"] for c in cells if c["train"] != c["test"] and "+" not in c["train"].split("/")[0]]
    if not same or not other:
        return ""
    a, b = sum(same) / len(same), sum(other) / len(other)
    return (f"Mean accuracy where train and test match: {100 * a:.1f} %; where they differ (single-source "
            f"training): {100 * b:.1f} %; drop {100 * (a - b):.1f} points.")


def _unseen_line(cells: list[dict]) -> str:
    """Per test corpus, the drop from the training generator's architecture to the unseen one."""
    by: dict[str, dict[str, float]] = defaultdict(dict)
    train_gen = cells[0]["train"].split("/")[1]
    for c in cells:
        corpus, gen = c["test"].split("/")[:2]
        by[corpus]["seen" if gen == train_gen else "unseen"] = c["accuracy"]
    drops = [f"{k} {100 * (v['seen'] - v['unseen']):.1f}" for k, v in by.items() if {"seen", "unseen"} <= set(v)]
    return "Drop from the seen to the unseen generator (points): " + ", ".join(drops) + "." if drops else ""


def write_report(summary: dict, out: Path) -> list[str]:
    """tables.md (accuracy % and AUROC per cell, grouped per slice) and a heatmap per matrix;
    returns the names of the files written."""

    by_table: dict[str, list[dict]] = defaultdict(list)
    for r in summary["cells"]:
        by_table[r["table"]].append(r)
    kinds = {t.get("name", t["kind"]): t["kind"] for t in summary["config"]["tables"]}
    parts = ["# Real vs generated: the matrix\n",
             "Class-balanced accuracy % at the threshold fitted on validation (AUROC in brackets); "
             "test negatives come from another seed of the generator (or another generator).\n"]
    written = ["tables.md"]
    for name, cells in by_table.items():
        kind = kinds.get(name, name)
        parts.append(f"\n## {name} ({kind})\n")
        if kind in ("cross-arch", "cross-corpus"):
            trains = list(dict.fromkeys(c["train"] for c in cells))
            tests = list(dict.fromkeys(c["test"] for c in cells))
            get = {(c["train"], c["test"]): c for c in cells}
            parts.append(table(["train \\ test", *tests], [[tr, *(_fmt(get.get((tr, te))) for te in tests)]
                                                           for tr in trains]))
            parts.append("\n\n" + _drop_line(cells))
            safe = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
            _heatmap(f"{name}: accuracy %", trains, tests,
                     [[get[(tr, te)]["accuracy"] if (tr, te) in get else float("nan") for te in tests] for tr in trains],
                     out / f"heatmap-{safe}.png")
            written.append(f"heatmap-{safe}.png")
            parts.append(f"\n![{name}](heatmap-{safe}.png)\n")
        else:
            cols = list(dict.fromkeys(c["test"] for c in cells))
            rows = list(dict.fromkeys((c["detector"], c["negatives"] if kind == "negatives" else "", c["train"]
                                       if kind == "unseen" else "") for c in cells))
            get = {(c["detector"], c["negatives"] if kind == "negatives" else "",
                    c["train"] if kind == "unseen" else "", c["test"]): c for c in cells}
            label = lambda r: " ".join(x for x in r if x)
            parts.append(table(["detector", *cols], [[label(r), *(_fmt(get.get((*r, col))) for col in cols)]
                                                      for r in rows]))
            if kind == "unseen":
                parts.append("\n\n" + _unseen_line(cells))
            tpr = [c for c in cells if any(k.startswith("tpr_at_") for k in c)]
            if tpr:
                key = next(k for k in tpr[0] if k.startswith("tpr_at_"))
                parts.append(f"\n\nTrue-positive rate at the validation threshold for 1 % false positives "
                             f"({key}; the false-positive rate it reached on test in brackets):\n")
                parts.append(table(["detector", *cols], [[label(r), *(
                    f"{100 * g[key]:.1f} ({100 * g['fpr_reached']:.1f})" if (g := get.get((*r, col))) else "–"
                    for col in cols)] for r in rows]))
        parts.append("\n")
    parts += _length_axis(summary["cells"])
    with atomic_write(out / "tables.md") as f:
        f.write("\n".join(parts))
    return written


def _length_axis(cells: list[dict]) -> list[str]:
    """The matrix's length axis (config `buckets`): each cell's AUROC on its test windows cut to each
    bucket of text tokens, then whole (`detect.by_length`)."""
    with_axis = [c for c in cells if c.get("by_length")]
    if not with_axis:
        return []
    buckets = [b["bucket"] for b in with_axis[0]["by_length"]]
    rows = [[c["table"], c["detector"], c["train"], c["test"], *(f"{b['auroc']:.3f}" for b in c["by_length"])]
            for c in with_axis]
    return ["\n## By length\n", "AUROC on the test windows cut to each bucket of text tokens (the end holding the "
            "generated continuation kept; `detect eval --buckets`), then on the whole windows.\n",
            table(["table", "detector", "train", "test", *buckets], rows), "\n"]


def _steps(spec: dict, per_epoch: float) -> float:
    """Optimiser steps of a generator's or energy's settings (`steps`, or `epochs` of `per_epoch`
    steps cut at `max_steps`)."""

    t = train_length(spec)
    steps = t["epochs"] * per_epoch if "epochs" in spec else t["max_steps"]
    return min(steps, t["max_steps"]) if t["max_steps"] else steps


def plan_report(matrix, cells, left) -> str:
    """The work a run would still do and its estimated CPU time."""

    cfg = matrix.cfg
    rates = {**DEFAULT_RATES, **cfg.get("rates", {})}
    gens, negs, energies, zs = set(), set(), set(), set()
    for c in left:
        for side, splits in ((c.train, ("train", "dev")), (c.test, ("test",))):
            for corpus in side.corpora:
                for split in splits:
                    if c.detector in ZEROSHOT and split == "train":
                        continue
                    if not matrix.negatives(corpus, side.generator, side.direction, split).is_file():
                        negs.add((corpus, side.generator, side.direction, split))
                        seed = 1 if split == "test" else 0
                        if not matrix.foreign(side.generator) and not run_completed(
                                matrix.gen(corpus, side.generator, side.direction, seed)):
                            gens.add((corpus, side.generator, side.direction, seed))
        if c.detector in ZEROSHOT:
            zs.add((c.detector, c.train))
        elif not run_completed(matrix.energy_dir(c.detector, c.train, c.negatives)):
            energies.add((c.detector, c.train, c.negatives))
    w = cfg["windows"]
    t_gen = sum(_steps(cfg["generators"][g], 300) * rates["generator_step"] for _, g, _, _ in gens)  # epochs: ~300 each
    t_neg = sum(w["max_windows"].get(s, 1000) * w["k"] / 3 * (rates["foreign_negative_window"] if matrix.foreign(g)
                                                              else rates["negative_window"]) for _, g, _, s in negs)
    t_en = 0.0
    for e, side, _ in energies:
        spec = cfg["energies"][e]
        kind = spec["energy"] + ("-init" if spec["energy"] == "bitransf" and spec.get("init") else "")
        per_epoch = math.ceil((w["max_windows"].get("train") or 2000) * len(side.corpora) / spec.get("batch_size", 16))
        t_en += _steps(spec, per_epoch) * rates["energy_step"].get(kind, 0.2)
    def eval_rate(detector: str) -> float:
        table = rates["eval_window"]
        if not isinstance(table, dict):
            return float(table)
        if detector in ZEROSHOT:
            return table.get("zeroshot", 0.002)
        spec = cfg["energies"][detector]
        kind = spec["energy"] + ("-init" if spec["energy"] == "bitransf" and spec.get("init") else "")
        return table.get(kind, 0.002)

    t_eval = sum(w["max_windows"].get("test", 500) * (1 + w["k"]) * eval_rate(c.detector) for c in left)
    total = t_gen + t_neg + t_en + t_eval
    return "\n".join([  # after the grid runner's list of the cells left
        "shared artifacts and evaluations left:",
        f"  generators to train: {len(gens):3d}   ~{t_gen / 60:6.1f} min",
        f"  negatives files:     {len(negs):3d}   ~{t_neg / 60:6.1f} min",
        f"  energies to train:   {len(energies):3d}   ~{t_en / 60:6.1f} min",
        f"  zero-shot fits:      {len(zs):3d}",
        f"  cell evaluations:    {len(left):3d}   ~{t_eval / 60:6.1f} min",
        f"estimated CPU time: {total / 3600:.2f} h on one thread (rates: bench/bench_detection.py; "
        "override with the config's \"rates\")"])
