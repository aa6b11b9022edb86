"""The paper's two analyses of a trained energy (Bakhtin et al. 2019, figures 1 and 2).

- `by_context`: accuracy and AUROC of a detector per context length (figure 1: energies trained
  on windows whose contexts vary, tested per length; longer contexts leave less generated text
  and make the task harder).
- `perturbations`: how the energy and the generator's negative log-likelihood of a REAL window move
  when a single word at position i is perturbed (figure 2), for the paper's three perturbations:
  the word replaced by "John", replaced by "the", or swapped with the next word. Positions are
  word indices of the decoded window, pooled into `bins` equal bins of relative position.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from textebm.detection.detect import evaluate
from textebm.figures import new_figure, save_png

PERTURBATIONS = ("john", "the", "swap")


def perturb(words: Sequence[str], i: int, kind: str) -> list[str]:
    """The words with position i perturbed ("john" / "the": replaced; "swap": with word i+1)."""
    out = list(words)
    if kind == "john":
        out[i] = "John"
    elif kind == "the":
        out[i] = "the"
    elif kind == "swap":
        if i + 1 >= len(out):
            raise ValueError("swap needs a next word")
        out[i], out[i + 1] = out[i + 1], out[i]
    else:
        raise ValueError(f"perturbation must be one of {', '.join(PERTURBATIONS)}, got {kind!r}")
    return out


def by_context(rule, rows: list[dict], real: np.ndarray, fake: np.ndarray) -> list[dict]:
    """Test metrics (`detect.evaluate`) per context length of the rows."""

    lengths = np.array([r["context_len"] for r in rows])
    out = []
    for c in sorted(set(lengths.tolist())):
        sel = lengths == c
        m = evaluate(rule, real[sel], fake[sel].ravel(), fake[sel])
        out.append({"context_len": int(c), "generated_tokens": int(len(rows[int(np.argmax(sel))]["positive"]) - c), **m})
    return out


def perturbations(windows: Sequence[Sequence[int]], vocab, energy: Callable, nll: Callable, bins: int = 8,
                  max_positions: int = 0, seed: int = 0) -> dict:
    """Mean change of the energy and of the generator NLL (perturbed − original) per relative
    position bin and perturbation. `energy(seqs)` and `nll(seqs)` score shared-vocabulary ids."""
    rng = np.random.default_rng(seed)
    originals, perturbed, meta = [], [], []
    for w, ids in enumerate(windows):
        words = vocab.decode(list(ids)).split(" ")
        n = len(words)
        if n < 3:
            continue
        positions = np.arange(n - 1)
        if max_positions and positions.size > max_positions:
            positions = np.sort(rng.choice(positions, max_positions, replace=False))
        originals.append(list(ids))
        for kind in PERTURBATIONS:
            for i in positions.tolist():
                new = vocab(" ".join(perturb(words, i, kind)), add_special_tokens=False)["input_ids"]
                perturbed.append(new)
                meta.append((len(originals) - 1, kind, min(int(bins * i / (n - 1)), bins - 1)))
    e0, l0 = np.asarray(energy(originals)), np.asarray(nll(originals))
    e1, l1 = np.asarray(energy(perturbed)), np.asarray(nll(perturbed))
    out = {kind: {"energy": [[] for _ in range(bins)], "nll": [[] for _ in range(bins)]} for kind in PERTURBATIONS}
    for (o, kind, b), de, dl in zip(meta, e1 - e0[[m[0] for m in meta]], l1 - l0[[m[0] for m in meta]]):
        out[kind]["energy"][b].append(de)
        out[kind]["nll"][b].append(dl)
    summary = {"bins": bins, "windows": len(originals), "perturbed": len(perturbed)}
    for kind, d in out.items():
        summary[kind] = {key: [float(np.mean(v)) if v else None for v in d[key]] for key in ("energy", "nll")}
        summary[kind]["count"] = [len(v) for v in d["energy"]]
    return summary


def plot_context(points: list[dict], path) -> None:
    fig = new_figure(figsize=(4.5, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([p["context_len"] for p in points], [100 * p["accuracy"] for p in points], "o-")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("class-balanced accuracy %")
    ax.set_title("accuracy against context length", fontsize=9)
    fig.tight_layout()
    save_png(fig, path, 120)


def plot_perturbations(summary: dict, path) -> None:
    fig = new_figure(figsize=(8, 3.2))
    x = (np.arange(summary["bins"]) + 0.5) / summary["bins"]
    for j, key in enumerate(("energy", "nll")):
        ax = fig.add_subplot(1, 2, j + 1)
        for kind in PERTURBATIONS:
            y = [np.nan if v is None else v for v in summary[kind][key]]
            ax.plot(x, y, "o-", label={"john": 'word -> "John"', "the": 'word -> "the"', "swap": "swap"}[kind])
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xlabel("relative position of the perturbed word")
        ax.set_ylabel("Δ energy" if key == "energy" else "Δ generator NLL (nats)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path, 120)
