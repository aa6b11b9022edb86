"""Why pre-training trails supervised at 1 % (issue 34): the DNCE budget of stage 1, as a control.

The grid-v2 cells `pretrain-p0.01-r10-s*` fine-tune every weight from a TRF trained one pass over the
unlabelled pool (141 DNCE steps). This reruns them with the same settings but stage 1 trained

  * 1 DNCE step: the pre-training path with (almost) untrained weights, a control for stage 2 itself;
  * 5 passes (the paper's code: `run_trf_pretrain.sh`, 5 epochs over the pool);
  * the remedy the word groups point to, on the grid's stage 1 (one pass, the grid's own cache) and
    on the 5 passes: stage 2 keeps the labelled sentences' words (`--stage2-words labelled`), so a
    word only the unlabelled pool has reads as the unknown word, as the supervised tagger reads it;

and reports test accuracy beside the grid's cell and the supervised cell of the same seed, and for
the first seed the accuracy by word group (words of the labelled sentences, words only the
unlabelled pool has, words of neither): where the errors are.

    OMP_NUM_THREADS=1 python bench/tagging/pretrain_budget.py --grid runs/tag-grid-v2 \
        --work runs/tag-pretrain-budget --out bench/results/tagging/pretrain-budget.json [--seeds 0 1 2]
    # another cell, some variants: --proportion 0.02 --variants one-pass-labelled-words
    # the CRF budget at 10 % (each row its own --work and --out):
    OMP_NUM_THREADS=1 python bench/tagging/pretrain_budget.py --proportion 0.1 --ratio 25 \
        --variants crf-2400-steps supervised-crf-2400-steps --work runs/tag-stage2-budget-p0.1-r25 \
        --out bench/results/tagging/stage2-budget-p0.1-r25.json        # and --ratio 10, crf-2400-steps

Every run is cached (a finished one is skipped; an interrupted one resumes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
from pathlib import Path

import numpy as np

from textebm.data.tagging import load_tagged
from textebm.tagging.commands import TagEvalConfig, tag_eval
from textebm.tagging.folder import load_tagging_model
from textebm.tagging.train import TagTrainConfig
from textebm.training import tag_train
from word_groups import finished_cell, tagged_correct, token_groups  # bench/tagging/word_groups.py

# name: (the options it changes, whether stage 1 comes from the grid's own cache, the cell it starts
# from: the pretrain cell or the supervised cell of the same seed)
VARIANTS = {"dnce-1-step": ({"pretrain_steps": 1, "pretrain_epochs": 1}, False, "pretrain"),
            "dnce-5-passes": ({"pretrain_steps": 0, "pretrain_epochs": 5}, False, "pretrain"),
            "one-pass-labelled-words": ({"stage2_words": "labelled"}, True, "pretrain"),
            "dnce-5-passes-labelled-words": ({"pretrain_steps": 0, "pretrain_epochs": 5, "stage2_words": "labelled"},
                                             False, "pretrain"),
            # the CRF budget (the grid's 600 steps, where stage 2 still improved at its last epoch), for
            # pre-training and, as its control, for the supervised tagger alike
            "crf-2400-steps": ({"max_steps": 2400}, True, "pretrain"),
            "supervised-crf-2400-steps": ({"max_steps": 2400}, True, "supervised")}


def cell(grid: Path, name: str) -> dict:
    """The grid's newest finished cell `name` (its result: test accuracy, run folder)."""
    result = finished_cell(grid, name)
    if result is None:
        raise SystemExit(f"no finished cell {grid}/cells/{name}-*.json: run the grid first")
    return result


def check_variant(out: Path, name: str, want: dict, change: dict) -> None:
    """Stop unless OUT is empty or holds the run of these settings (another proportion, ratio or
    seed in the same --work, or a variant of another definition, is not reused), and unless the
    variant's step budget is what bounds the run (a `max_steps` beyond `epochs` passes is no budget)."""
    if "max_steps" in change:
        per_epoch = -(-round(want["labelled"] * want["proportion"]) // want["batch_size"])
        if want["epochs"] * per_epoch < change["max_steps"]:
            raise SystemExit(f"{name}: at {want['proportion']:.0%} ({per_epoch} batches an epoch) the cell's "
                             f"{want['epochs']} epochs stop at {want['epochs'] * per_epoch} steps, before "
                             f"{change['max_steps']}: this variant is for the 10 % row")
    if (out / "config.json").is_file():
        have = json.loads((out / "config.json").read_text())
        differ = [k for k in ("data", "method", "proportion", "ratio", "seed", *change) if have.get(k) != want.get(k)]
        if differ:
            raise SystemExit(f"{out} holds a run with another {', '.join(differ)}: give this row its own --work")


def test_accuracy(run: Path, data: str) -> float:
    return float(tag_eval(TagEvalConfig(model=str(run), data=data, split="test"))["test_accuracy"])


def by_word_group(runs: dict[str, Path], data: str, sup_words: set[str], ssl_words: set[str]) -> dict:
    """Test accuracy of each run on three groups of tokens: words of the supervised vocabulary (seen
    in the labelled sentences), words only the pre-training vocabulary has (seen in the unlabelled
    pool alone: their embeddings come from stage 1 and no labelled sentence trains them), and
    words of neither (the unknown word; the character CNN reads their spelling). word_groups.py's
    groups, its two of the labelled sentences' words counted as one."""
    rows = load_tagged(data, "test")
    gold = np.array([t for r in rows for t in r["tags"]])
    index = token_groups([w for r in rows for w in r["tokens"]], sup_words, ssl_words)
    group = np.array(["labelled", "labelled", "pool-only", "unknown"])[index]
    out = {"tokens": {g: int((group == g).sum()) for g in ("labelled", "pool-only", "unknown")}}
    for name, run in runs.items():
        ok = tagged_correct(run, rows, gold)[0]
        out[name] = {g: float(ok[group == g].mean()) for g in ("labelled", "pool-only", "unknown")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="runs/tag-grid-v2")
    ap.add_argument("--work", default="runs/tag-pretrain-budget")
    ap.add_argument("--out", default="bench/results/tagging/pretrain-budget.json")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ratio", type=int, default=10)
    ap.add_argument("--proportion", type=float, default=0.01, help="the grid row (0.01, 0.02, 0.1)")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS)[:4])
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    grid, work = Path(args.grid), Path(args.work)
    fields = {f.name for f in dataclasses.fields(TagTrainConfig)}
    rows = []
    for seed in args.seeds:
        pre = cell(grid, f"pretrain-p{args.proportion}-r{args.ratio}-s{seed}")
        row = {"seed": seed, "grid_one_pass": pre["accuracy"], "dnce_steps_one_pass": pre["dnce_steps"],
               "supervised": cell(grid, f"supervised-p{args.proportion}-r0-s{seed}")["accuracy"]}
        base = grid / pre["run"]
        starts = {"pretrain": base, "supervised": grid / cell(grid, f"supervised-p{args.proportion}-r0-s{seed}")["run"]}
        for name in args.variants:
            change, grids_stage1, start = VARIANTS[name]
            opts = {k: v for k, v in json.loads((starts[start] / "config.json").read_text()).items() if k in fields}
            out = work / f"{name}-s{seed}"
            check_variant(out, name, {**opts, **change}, change)
            if not (out / "metrics.json").is_file() or not json.loads((out / "metrics.json").read_text()).get(
                    "completed"):
                cache = opts["stage1_cache"] if grids_stage1 else str(work / "stage1")
                cfg = TagTrainConfig(**{**opts, **change, "out": str(out), "stage1_cache": cache,
                                        "resume": (out / "config.json").is_file(), "overwrite": False,
                                        "progress": False})
                tag_train(cfg)
            row[name] = test_accuracy(out, opts["data"])
            kept = json.loads((out / "metrics.json").read_text())["train"].get("kept", {}).get("epoch")
            row[f"{name}_kept_epoch"] = None if kept is None else kept + 1  # counted from 1, as the grid's cells
        rows.append(row)
        print(json.dumps(row), flush=True)
        if seed == args.seeds[0]:  # where the errors are: by word group, for the first seed
            sup_run = grid / cell(grid, f"supervised-p{args.proportion}-r0-s{seed}")["run"]
            runs = {"supervised": sup_run, "grid_one_pass": base, **{v: work / f"{v}-s{seed}" for v in args.variants}}
            words = {k: set(load_tagging_model(r, "cpu")[1].words) for k, r in (("sup", sup_run), ("ssl", base))}
            groups = by_word_group(runs, opts["data"], words["sup"], words["ssl"])
            print(json.dumps(groups), flush=True)
    keys = ["supervised", "grid_one_pass", *args.variants]
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    res = {"what": f"test accuracy (brown-pos test) at {args.proportion:.0%} labelled, U/L "
                   f"{args.ratio}: the grid's pre-training cell (every weight fine-tuned) and supervised cell "
                   "beside the variants, each the grid cell's settings with one thing changed",
           "variants": {v: {"changes": VARIANTS[v][0], "stage1": "the grid's cache" if VARIANTS[v][1] else
                            "trained here", "from": f"the grid's {VARIANTS[v][2]} cell"} for v in args.variants},
           "cpu": platform.processor() or platform.machine(), "threads": os.environ.get("OMP_NUM_THREADS"),
           "precision": "bf16 training where the CPU multiplies bf16 natively (--precision auto), fp32 evaluation",
           "rows": rows, "mean": mean, "by_word_group_first_seed": groups}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(mean))


if __name__ == "__main__":
    main()
