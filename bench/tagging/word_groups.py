"""Where a grid row's errors are (issue 34): test accuracy of its cells by word group, every seed.

A test token belongs to one of four groups, by the supervised tagger's vocabulary (the words of the
labelled sentences) and the cell's own (a pretrain or joint cell builds its vocabulary from the
labelled sentences and the unlabelled pool together, the `max_words` most frequent):

  * labelled: a word of the labelled sentences that the cell's vocabulary kept;
  * labelled, cut: a word of the labelled sentences that the cell's vocabulary lost to the
    `max_words` cap (the pool's frequent words crowd it out; the cell reads it as the unknown word,
    where the supervised tagger has a vector trained on it);
  * pool-only: a word only the unlabelled pool has (its vector comes from stage 1 alone);
  * neither: the unknown word for both (the character CNN reads its spelling).

The supervised cell's groups are the same tokens, so each group's accuracy compares like with like.

    OMP_NUM_THREADS=1 python bench/tagging/word_groups.py --grid runs/tag-grid-v2 --proportion 0.1 \\
        --ratios 10 25 --out bench/results/tagging/word-groups-p0.1.json

Only evaluation: it tags the test split with the grid's finished models and trains nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import numpy as np

from textebm.data.tagging import load_tagged
from textebm.tagging.folder import load_tagging_model, tag_sentences

GROUPS = ("labelled", "labelled, cut", "pool-only", "neither")


def finished_cell(grid: Path, name: str) -> dict | None:
    """The grid's newest finished cell `name` (its result), or None when it has not finished."""
    files = sorted((grid / "cells").glob(f"{name}-*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(files[-1].read_text())["result"] if files else None


def token_groups(tokens: list[str], sup_words: set[str], cell_words: set[str]) -> np.ndarray:
    """(N,) the group (an index into GROUPS) of each test token."""
    return np.array([(0 if w in cell_words else 1) if w in sup_words else 2 if w in cell_words else 3
                     for w in tokens])


def tagged_correct(run: Path, rows: list[dict], gold: np.ndarray) -> tuple[np.ndarray, set[str]]:
    """(N,) whether the tagger of RUN tags each token of `rows` as `gold` (N,), and its vocabulary."""
    tagger, vocab, _ = load_tagging_model(run, "cpu")
    return np.array([t for p in tag_sentences(tagger, vocab, rows, 64) for t in p]) == gold, set(vocab.words)


def group_accuracy(ok: np.ndarray, group: np.ndarray) -> dict:
    """Accuracy and token count of each group ((N,) correct, (N,) group index)."""
    return {g: {"tokens": int((group == i).sum()),
                "accuracy": float(ok[group == i].mean()) if (group == i).any() else None}
            for i, g in enumerate(GROUPS)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="runs/tag-grid-v2")
    ap.add_argument("--proportion", type=float, default=0.1)
    ap.add_argument("--ratios", type=int, nargs="+", default=[10, 25])
    ap.add_argument("--methods", nargs="+", default=["pretrain", "joint"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--data", default="data/brown-pos")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    grid = Path(args.grid)
    rows = load_tagged(args.data, "test")
    tokens = [w for r in rows for w in r["tokens"]]
    gold = np.array([t for r in rows for t in r["tags"]])
    taggings: dict[Path, tuple[np.ndarray, set[str]]] = {}

    def correct(run: Path) -> tuple[np.ndarray, set[str]]:  # each run tagged once
        if run not in taggings:
            taggings[run] = tagged_correct(run, rows, gold)
        return taggings[run]

    cells = []
    for seed in args.seeds:
        sup = finished_cell(grid, f"supervised-p{args.proportion}-r0-s{seed}")
        if sup is None:
            continue
        sup_ok, sup_words = correct(grid / sup["run"])
        for method in args.methods:
            for ratio in args.ratios:
                name = f"{method}-p{args.proportion}-r{ratio}-s{seed}"
                res = finished_cell(grid, name)
                if res is None:
                    print(f"{name}: not finished; left out", flush=True)
                    continue
                ok, words = correct(grid / res["run"])
                group = token_groups(tokens, sup_words, words)
                cell = {"cell": name, "seed": seed, "method": method, "ratio": ratio, "words": len(words),
                        "labelled_words": len(sup_words), "accuracy": float(ok.mean()),
                        "supervised_accuracy": float(sup_ok.mean()),
                        "groups": group_accuracy(ok, group), "supervised_groups": group_accuracy(sup_ok, group)}
                cells.append(cell)
                print(json.dumps(cell), flush=True)
    res = {"what": f"brown-pos test accuracy by word group at {args.proportion:.0%} labelled: each grid cell "
                   "beside the supervised cell of its seed, on the same tokens", "groups": list(GROUPS),
           "grid": str(grid), "cpu": platform.processor() or platform.machine(),
           "threads": os.environ.get("OMP_NUM_THREADS"), "precision": "fp32 evaluation", "cells": cells}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
