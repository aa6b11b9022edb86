"""Calibration figures as PNG files (matplotlib, Agg canvas, no pyplot state).

- `plot_reliability`: reliability diagram, one column per method: accuracy per confidence bin
  against the diagonal, with the bin counts below and the ECE in the title (He et al. fig. 2/6);
  `mode="classwise"` pools all n × |Y| predictions, `mode="toplabel"` uses the max probability.
- `plot_energy_histogram`: histograms of energies Ê(x), several methods overlaid or one panel
  each (fig. 5).
- `plot_entropy_vs_energy`: entropy of P(·|x) against Ê(x), one panel per method (fig. 4).
- `plot_tradeoff`: accuracy against ECE, one point per method or setting, mean over seeds with
  ± one standard deviation (the trade-off of fig. 3, right), a line through a chosen series
  (such as the baseline trained for more and more epochs).

Each function checks its inputs before drawing and writes the PNG through
`textebm.figures.save_png` (temporary file + `os.replace`), so a failure leaves no file behind.
Returns the path written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from textebm.calibration.metrics import as_numpy, entropy, reliability_bins
from textebm.calibration.uncertainty import seed_summary
from textebm.figures import new_figure, save_png

DPI = 110


def _nonempty(mapping: Mapping, what: str) -> None:
    if not mapping:
        raise ValueError(f"{what}: nothing to plot")


def plot_reliability(
    methods: Mapping[str, tuple[Any, Any]], path: str | Path, *, mode: str = "toplabel", n_bins: int = 20
) -> Path:
    """methods: {name: (probs (n, C), labels (n,))}, drawn left to right."""
    _nonempty(methods, "plot_reliability")
    stats = {name: reliability_bins(p, y, n_bins, mode) for name, (p, y) in methods.items()}  # validates
    m = len(stats)
    fig = new_figure(figsize=(3.2 * m, 4.6))
    axes = fig.subplots(2, m, squeeze=False, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    label = "class-wise" if mode == "classwise" else "top-label"
    for j, (name, s) in enumerate(stats.items()):
        centers = (s.edges[:-1] + s.edges[1:]) / 2
        width = 1.0 / n_bins
        top, bottom = axes[0, j], axes[1, j]
        acc = np.nan_to_num(s.accuracy, nan=0.0)
        top.bar(centers, acc, width=width, edgecolor="black", linewidth=0.5, color="tab:blue", label="accuracy")
        gap = np.where(s.counts > 0, s.confidence - s.accuracy, 0.0)
        top.bar(centers, gap, bottom=acc, width=width, color="tab:red", alpha=0.3, label="gap")
        top.plot([0, 1], [0, 1], "--", color="gray", linewidth=1)
        top.set_xlim(0, 1)
        top.set_ylim(0, 1)
        top.set_title(f"{name}\n{label} ECE = {s.ece:.3f}", fontsize=9)
        bottom.bar(centers, s.counts, width=width, color="gray", edgecolor="black", linewidth=0.5)
        bottom.set_xlabel("confidence")
        if j == 0:
            top.set_ylabel("accuracy")
            bottom.set_ylabel("count")
            top.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return save_png(fig, path, DPI)


def plot_energy_histogram(
    energies: Mapping[str, Any], path: str | Path, *, bins: int = 50, overlay: bool = True
) -> Path:
    """energies: {name: Ê (n,)}; one shared set of bin edges across methods."""
    _nonempty(energies, "plot_energy_histogram")
    data = {name: as_numpy(e).reshape(-1) for name, e in energies.items()}
    for name, e in data.items():
        if e.size == 0 or not np.isfinite(e).all():
            raise ValueError(f"energies of {name!r} are empty or not finite")
    lo = min(float(e.min()) for e in data.values())
    hi = max(float(e.max()) for e in data.values())
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    if overlay:
        fig = new_figure(figsize=(5.5, 3.8))
        ax = fig.subplots()
        for name, e in data.items():
            ax.hist(e, bins=edges, alpha=0.45, label=name)
        ax.set_xlabel("energy Ê(x)")
        ax.set_ylabel("count")
        ax.legend(fontsize=8)
    else:
        fig = new_figure(figsize=(3.2 * len(data), 3.4))
        axes = fig.subplots(1, len(data), squeeze=False, sharex=True)[0]
        for ax, (name, e) in zip(axes, data.items()):
            ax.hist(e, bins=edges, color="tab:blue")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("energy Ê(x)")
        axes[0].set_ylabel("count")
    fig.tight_layout()
    return save_png(fig, path, DPI)


def plot_entropy_vs_energy(points: Mapping[str, tuple[Any, Any]], path: str | Path) -> Path:
    """points: {name: (Ê (n,), probs (n, C))}; entropy H(P(·|x)) is computed from probs."""
    _nonempty(points, "plot_entropy_vs_energy")
    data = {}
    for name, (e, p) in points.items():
        e = as_numpy(e).reshape(-1)
        h = entropy(p)
        if e.shape != h.shape or e.size == 0 or not (np.isfinite(e).all() and np.isfinite(h).all()):
            raise ValueError(f"{name!r}: need finite energies (n,) and probs (n, C) of the same n")
        data[name] = (e, h)
    fig = new_figure(figsize=(3.4 * len(data), 3.4))
    axes = fig.subplots(1, len(data), squeeze=False)[0]
    for ax, (name, (e, h)) in zip(axes, data.items()):
        ax.scatter(e, h, s=4, alpha=0.5)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("energy Ê(x)")
    axes[0].set_ylabel("entropy of P(·|x) (nats)")
    fig.tight_layout()
    return save_png(fig, path, DPI)


def plot_tradeoff(points: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, *,
                  line: Sequence[str] = (), ylabel: str = "class-wise ECE") -> Path:
    """points: {name: (accuracies (n_seeds,), ECEs (n_seeds,))}, one marker each at the means with
    ± one standard deviation bars (none from a single seed); `line`: names of points joined in this
    order (a series, e.g. the baseline at 1.5, 2, 3 and 4 epochs). Lower right is better."""
    _nonempty(points, "plot_tradeoff")
    stats = {}
    for name, (acc, ece) in points.items():
        a, e = np.asarray(acc, dtype=np.float64), np.asarray(ece, dtype=np.float64)
        if a.ndim != 1 or a.shape != e.shape or a.size == 0 or not (np.isfinite(a).all() and np.isfinite(e).all()):
            raise ValueError(f"{name!r}: need as many finite accuracies as ECEs, one per seed")
        sa, se = seed_summary(a), seed_summary(e)  # std is None from one seed: no bar
        stats[name] = (sa["mean"], se["mean"], sa["std"] or 0.0, se["std"] or 0.0)
    if missing := [n for n in line if n not in stats]:
        raise ValueError(f"plot_tradeoff: the line names points that are not given: {', '.join(missing)}")
    fig = new_figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    if line:
        ax.plot([stats[n][0] for n in line], [stats[n][1] for n in line], "-", color="gray", linewidth=1, zorder=1)
    for name, (a, e, sa, se) in stats.items():
        if name in line:  # the series: black, named beside each point
            ax.errorbar(a, e, xerr=sa, yerr=se, fmt="o", color="black", markersize=5, capsize=2, zorder=2)
            ax.annotate(name, (a, e), textcoords="offset points", xytext=(5, 5), fontsize=7)
        else:
            ax.errorbar(a, e, xerr=sa, yerr=se, fmt="s", markersize=5, capsize=2, label=name, zorder=2)
    ax.margins(x=0.15, y=0.1)  # room for the names beside the series' points
    ax.set_xlabel("accuracy")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(line) < len(stats):
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    return save_png(fig, path, DPI)
