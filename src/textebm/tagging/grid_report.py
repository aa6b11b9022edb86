"""The report of `tag grid` (paper e's tables 3 and 4): the statistics over seeds, table 4's
relative error reduction paired by seed, tables.md with the paper's claims counted on the finished
cells, and accuracy.png; `write_report` writes them with results.json into the grid's --out."""

from __future__ import annotations

import statistics
from pathlib import Path

from textebm.figures import new_figure, save_png
from textebm.io import atomic_write, write_json
from textebm.markdown import table
from textebm.tagging.metrics import SCORE_NAMES


def relative_error_reduction(accuracy: float, reference: float) -> float | None:
    """Table 4's relative improvement, in %: the share of the reference's errors removed,
    100 (e_ref - e) / e_ref with e = 1 - accuracy (negative when `accuracy` is below the reference);
    None where the reference makes no error (nothing to remove: no share of it is defined)."""
    if reference >= 1.0:
        return None
    return 100.0 * (accuracy - reference) / (1.0 - reference)


def mean_sd(xs: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """'mean ± sd' of `xs` times `scale` ('-' for none; the mean alone for one)."""
    if not xs:
        return "-"
    m = statistics.fmean(xs) * scale
    if len(xs) == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {statistics.stdev(xs) * scale:.{digits}f}"


def summarise(results: list[dict], ratios: dict[float, list[int]]) -> dict:
    """Per (method, proportion, U/L): the seeds' accuracies and out-of-domain accuracies; per
    (proportion, U/L, seed), the relative error reductions (table 4), paired by seed, of the
    grid's metric: span F1 when every cell has it (a BIO tag set: the paper's figure for chunking
    and NER, where accuracy would count the tagger of all O as a win), accuracy otherwise."""
    metric = "f1" if results and all("f1" in r for r in results) else "accuracy"
    acc: dict[tuple, dict[int, dict]] = {}
    for r in results:
        acc.setdefault((r["method"], r["proportion"], r["ratio"]), {})[r["seed"]] = r
    reductions: dict[tuple, dict[str, list[float]]] = {}
    for p, rs in ratios.items():
        sup = acc.get(("supervised", p, 0), {})
        for ratio in rs:
            pre, joint = acc.get(("pretrain", p, ratio), {}), acc.get(("joint", p, ratio), {})
            frozen = acc.get(("frozen", p, ratio), {})
            pairs = {"pretrain over sup.": (pre, sup), "joint over sup.": (joint, sup), "joint over pre.": (joint, pre),
                     "frozen over sup.": (frozen, sup)}
            # the seeds of both, but those where the reference makes no error (no reduction is defined)
            paired = {name: [s for s in sorted(x) if s in ref and ref[s][metric] < 1.0]
                      for name, (x, ref) in pairs.items()}
            red = {name: [relative_error_reduction(x[s][metric], ref[s][metric]) for s in paired[name]]
                   for name, (x, ref) in pairs.items()}
            red["seeds"] = paired
            reductions[(p, ratio)] = red
    return {"accuracy": acc, "reductions": reductions, "metric": metric}


METRIC_NAMES = {"accuracy": SCORE_NAMES["accuracy"], "f1": SCORE_NAMES["span_f1"]}  # a cell's keys


def tables(summary: dict, cfg: dict, ratios: dict[float, list[int]], deviations: list[str], missing: int = 0) -> str:
    """tables.md: table 3 (and span F1 for a BIO tag set), table 4, the out-of-domain accuracy,
    the paper's claims (`claims`) and the deviations from the config; `missing` heads a partial one."""
    acc, red = summary["accuracy"], summary["reductions"]
    get = lambda m, p, r, k="accuracy": [c[k] for c in acc.get((m, p, r), {}).values() if k in c]
    rows3 = []
    ssl = [m for m in ("pretrain", "frozen", "joint") if m in cfg["methods"]]
    for p in cfg["proportions"]:
        rows3.append([f"{p * 100:g}% ({round(p * cfg['labelled']):,})", "0", mean_sd(get("supervised", p, 0), 100),
                      *[""] * len(ssl)])
        for r in ratios[p]:
            rows3.append(["", str(r), "", *(mean_sd(get(m, p, r), 100) for m in ssl)])
    heads = {"pretrain": "pre.", "frozen": "pre. (frozen)", "joint": "joint"}
    seeds = ", ".join(map(str, cfg["seeds"]))
    text = [f"# Semi-supervised tagging grid ({cfg['data']}, labelled set {cfg['labelled']:,})", ""]
    if missing:
        text += [f"**Partial (`--report`): {missing} cells not finished yet.** A mean is over the seeds finished; "
                 "'-' where none is.", ""]
    text += [f"## Table 3: test accuracy (%), mean ± sd over seeds {seeds}", "",
            "labelled: proportion (sentences). U/L = 0 is the supervised baseline; pre.: pre-training + fine-tuning "
            "every weight; pre. (frozen): the ablation, only the output layer and A trained in stage 2; joint: joint "
            f"training (from {'the pre-trained TRF' if cfg.get('joint_start') == 'pretrained' else 'the supervised tagger'}).",
            "",
            table(["labelled", "U/L", "supervised", *(heads[m] for m in ssl)], rows3,
                  ["left", "right", "right", *["right"] * len(ssl)]), "",
            f"## Table 4: relative error reduction (%) in {METRIC_NAMES[summary['metric']]}, mean ± sd over seeds "
            "(paired by seed)", "",
            f"100 (e_ref − e) / e_ref, e = 1 − {METRIC_NAMES[summary['metric']]}: the share of the reference's "
            "errors removed (a seed whose reference makes no error is left out: no share is defined).", ""]
    cols = ["pretrain over sup.", "joint over sup.", "joint over pre."] + (["frozen over sup."]
                                                                            if "frozen" in cfg["methods"] else [])
    rows4 = [[f"{p * 100:g}%", str(r), *(mean_sd(red[(p, r)][c], 1, 1) for c in cols)]
             for p in cfg["proportions"] for r in ratios[p]]
    text += [table(["labelled", "U/L", *cols], rows4, ["left", "right", *["right"] * len(cols)]), ""]
    if any("f1" in c for cells in acc.values() for c in cells.values()):
        rows_f1 = []
        for p in cfg["proportions"]:
            rows_f1.append([f"{p * 100:g}% ({round(p * cfg['labelled']):,})", "0",
                            mean_sd(get("supervised", p, 0, "f1"), 100), *[""] * len(ssl)])
            rows_f1 += [["", str(r), "", *(mean_sd(get(m, p, r, "f1"), 100) for m in ssl)] for r in ratios[p]]
        text += [f"## Span F1 (%), mean ± sd over seeds {seeds} (a BIO tag set: the paper's figure for chunking and "
                 "NER)", "", table(["labelled", "U/L", "supervised", *(heads[m] for m in ssl)], rows_f1,
                                    ["left", "right", "right", *["right"] * len(ssl)]), ""]
    if cfg["ood"]:
        p = cfg["ood_proportion"]
        rows = [["supervised", "0", mean_sd(get("supervised", p, 0, "ood_accuracy"), 100)]]
        rows += [[m, str(r), mean_sd(get(m, p, r, "ood_accuracy"), 100)] for m in ("pretrain", "frozen", "joint")
                 if m in cfg["methods"] for r in ratios[p]]
        text += [f"## Out of domain: {cfg['ood']} ({cfg['ood_split']}) accuracy (%) at {p * 100:g}% labelled", "",
                 table(["method", "U/L", "accuracy"], rows, ["left", "right", "right"]), ""]
    if "joint" in cfg["methods"]:
        text += ["## The paper's claims on this grid (sec. 4; tables 3 and 4)", "",
                 *[f"- {line}" for line in claims(summary, cfg, ratios)], ""]
    if deviations:
        text += ["## Deviations from the config", "", *[f"- {d}" for d in deviations], ""]
    return "\n".join(text)


def claims(summary: dict, cfg: dict, ratios: dict[float, list[int]]) -> list[str]:
    """The paper's claims counted on the finished cells, by the mean over seeds of each cell (and,
    for joint against supervised, by seed pairs): joint beats supervised; joint beats pre-training;
    at a fixed labelled size joint's score rises with U/L; where joint's gain over supervised
    (relative error reduction) is largest. On the grid's metric (`summarise`): span F1 for a BIO
    tag set, accuracy otherwise."""
    acc, red, key = summary["accuracy"], summary["reductions"], summary["metric"]
    name = METRIC_NAMES[key]
    mean = lambda m, p, r: (statistics.fmean(c[key] for c in acc[(m, p, r)].values())
                            if acc.get((m, p, r)) else None)
    cells = [(p, r) for p in cfg["proportions"] for r in ratios[p]]

    def beats(m, ref_of):
        pairs = [(mean(m, p, r), mean(*ref_of(p, r))) for p, r in cells]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        return sum(a > b for a, b in pairs), len(pairs)

    out = [] if key == "accuracy" else [f"counted on {name}, the paper's figure for chunking and NER (test accuracy "
                                        "would count a tagger of all O as a win)"]
    won, n = beats("joint", lambda p, r: ("supervised", p, 0))
    by_seed = [x for p, r in cells for x in red[(p, r)]["joint over sup."]]
    out.append(f"joint beats supervised in {won} of {n} cells by the mean over seeds, and in "
               f"{sum(x > 0 for x in by_seed)} of {len(by_seed)} (cell, seed) pairs (paper: 9 of 9 for POS)")
    pair_count = lambda name: (lambda xs: f"{sum(x > 0 for x in xs)} of {len(xs)}")(
        [x for p, r in cells for x in red[(p, r)][name]])
    if "pretrain" in cfg["methods"]:
        won, n = beats("joint", lambda p, r: ("pretrain", p, r))
        out.append(f"joint beats pre-training in {won} of {n} cells by the mean over seeds, and in "
                   f"{pair_count('joint over pre.')} (cell, seed) pairs (paper: 9 of 9 for POS, \"marginally\")")
        won, n = beats("pretrain", lambda p, r: ("supervised", p, 0))
        out.append(f"pre-training beats supervised in {won} of {n} cells by the mean over seeds, and in "
                   f"{pair_count('pretrain over sup.')} (cell, seed) pairs (paper: 8 of 9 for POS)")
    if "frozen" in cfg["methods"]:
        won, n = beats("frozen", lambda p, r: ("supervised", p, 0))
        out.append(f"the frozen ablation beats supervised in {won} of {n} cells, and in "
                   f"{pair_count('frozen over sup.')} (cell, seed) pairs")
    for p in cfg["proportions"]:
        seq = [(r, mean("joint", p, r)) for r in ratios[p] if mean("joint", p, r) is not None]
        if len(seq) > 1:
            rising = all(b[1] > a[1] for a, b in zip(seq, seq[1:]))
            out.append(f"labelled {p * 100:g}%: joint's {name} by U/L "
                       + ", ".join(f"{r}: {a * 100:.2f}" for r, a in seq)
                       + (" (rises with U/L)" if rising else " (does not rise throughout)"))
    gains = {p: statistics.fmean(x for r in ratios[p] for x in red[(p, r)]["joint over sup."])
             for p in cfg["proportions"] if any(red[(p, r)]["joint over sup."] for r in ratios[p])}
    if gains:
        best = max(gains, key=gains.get)
        out.append("joint's mean relative error reduction over supervised by labelled size: "
                   + ", ".join(f"{p * 100:g}%: {g:.1f}" for p, g in gains.items())
                   + (f"; largest at {best * 100:g}% (paper, POS: at 2 %)" if len(gains) > 1 else
                      " (one labelled size so far: where the gain is largest cannot be told yet)"))
    return out or ["no finished cell to count yet"]


def plot_lines(cfg: dict, ratios: dict[float, list[int]]) -> list[tuple[str, str, dict[float, int]]]:
    """The lines of accuracy.png: (method, label, {proportion: U/L run there}). One line per
    method and configured U/L; where the pool replaced the largest configured U/L by a smaller
    one (`TagGrid.ratios_by_proportion`), that line takes the replacement's point and its label says so."""

    lines = [("supervised", "supervised", {p: 0 for p in cfg["proportions"]})]
    top = max(cfg["ratios"])
    for m in ("pretrain", "joint"):
        if m not in cfg["methods"]:
            continue
        for r in sorted(cfg["ratios"]):
            points, notes = {}, []
            for p in cfg["proportions"]:
                if r in ratios.get(p, []):
                    points[p] = r
                elif r == top and ratios.get(p):
                    points[p] = max(ratios[p])
                    notes.append(f"{points[p]} at {p * 100:g}%")
            label = f"{m}, U/L={r}" + (f" ({', '.join(notes)})" if notes else "")
            lines.append((m, label, points))
    return lines


def plot(summary: dict, cfg: dict, ratios: dict[float, list[int]], path: Path) -> Path:
    """Accuracy against labelled proportion (log scale), one panel per semi-supervised method, each
    with the supervised baseline: each U/L a line (`plot_lines`), the mean over seeds with the sd
    as error bars."""

    lines = plot_lines(cfg, ratios)
    methods = [m for m in ("pretrain", "joint") if m in cfg["methods"]] or ["supervised"]
    fig = new_figure(figsize=(4.2 * len(methods), 4))
    axes = fig.subplots(1, len(methods), sharey=True, squeeze=False)[0]
    titles = {"pretrain": "pre-training + fine-tuning", "joint": "joint training", "supervised": "supervised"}
    for ax, method in zip(axes, methods):
        for m, label, points in lines:
            if m not in ("supervised", method):
                continue
            xs, ys, es = [], [], []
            for p, r in points.items():
                vals = [c["accuracy"] * 100 for c in summary["accuracy"].get((m, p, r), {}).values()]
                if vals:
                    xs.append(p * 100)
                    ys.append(statistics.fmean(vals))
                    es.append(statistics.stdev(vals) if len(vals) > 1 else 0.0)
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label,
                            linestyle="--" if m == "supervised" else "-", color="black" if m == "supervised" else None)
        ax.set_xscale("log")
        ax.set_xticks([p * 100 for p in cfg["proportions"]], [f"{p * 100:g}" for p in cfg["proportions"]])
        ax.minorticks_off()
        ax.set_xlabel("labelled proportion (%)")
        ax.set_title(titles[method], fontsize=10)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a panel with no cell finished yet has none
            ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("test accuracy (%)")
    fig.tight_layout()
    return save_png(fig, path)


def write_report(out: Path, cfg: dict, ratios: dict[float, list[int]], deviations: list[str], results: list[dict],
                 missing: int = 0) -> dict:
    """OUT/results.json (the config, the ratios run, the deviations, every cell, tables 3 and 4 by
    seed), OUT/tables.md and OUT/accuracy.png from the cells' `results` (`missing`: how many are
    not finished, for a partial report); returns what results.json holds."""
    summary = summarise(results, ratios)
    report = {"config": cfg, "ratios": {f"{p:g}": rs for p, rs in ratios.items()}, "deviations": deviations,
              "cells_missing": missing, "cells": results,
              "table3": [{"method": m, "proportion": p, "ratio": r, "seeds": sorted(v),
                          "accuracy": [v[s]["accuracy"] for s in sorted(v)],
                          **({"ood_accuracy": [v[s]["ood_accuracy"] for s in sorted(v)]}
                             if all("ood_accuracy" in c for c in v.values()) else {})}
                         for (m, p, r), v in summary["accuracy"].items()],
              "table4": [{"proportion": p, "ratio": r, **red} for (p, r), red in summary["reductions"].items()]}
    write_json(out / "results.json", report)
    with atomic_write(out / "tables.md") as f:
        f.write(tables(summary, cfg, ratios, deviations, missing))
    plot(summary, cfg, ratios, out / "accuracy.png")
    return report
