"""What each energy of a paper-d work folder learned, finished or not, as one JSON for
bench/results/generation (issue 35: every dev AUROC and kept epoch the docs cite has a file).

    python bench/generation/energy_summary.py runs/gen-v2 --out bench/results/generation/v2/energies.json

Per `energy/NAME` run: its training and validation files, windows, trained parameters, the dev
(eq. 1) loss after each epoch (from metrics.json, or from the checkpoint of a run still going),
the epoch kept, the wall time of its training (every resumed part together), and, for a finished run, the decision rule's validation AUROC and balanced
accuracy (detector.json).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

CHANCE = 2 * math.log(2)  # eq. (1) of an energy of 0: softplus(0) + softplus(0)


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def summary(run: Path) -> dict:
    cfg = _read(run / "config.json") or {}
    metrics = _read(run / "metrics.json")
    state = _read(run / "checkpoint" / "state.json")
    train = (metrics or {}).get("train", {})
    validation = train.get("validation") or (state or {}).get("validation", [])
    out = {
        "energy": cfg.get("energy"), "pool": cfg.get("pool"), "init": cfg.get("init") or cfg.get("base"),
        "train": cfg.get("train"), "val": cfg.get("val"), "parameters": cfg.get("parameters"),
        "max_windows": cfg.get("max_windows"), "lr": cfg.get("lr"), "batch_size": cfg.get("batch_size"),
        "finished": bool(metrics and metrics.get("completed")),
        "steps": train.get("steps", (state or {}).get("step")),
        "wall_seconds": _rounded(train.get("wall_seconds", (state or {}).get("wall_seconds"))),
        "dev_loss_by_epoch": [round(v["loss"], 5) for v in validation],
        "dev_loss_of_zero_energy": round(CHANCE, 5),
    }
    if validation:
        best = min(validation, key=lambda v: v["loss"])
        out["best_epoch"] = best["epoch"] + 1
        out["best_dev_loss"] = round(best["loss"], 5)
    rule = _read(run / "detector.json")
    if rule:
        val = rule["rule"]["val"]
        out["dev_auroc"] = round(val["auroc"], 4)
        out["dev_balanced_accuracy"] = round(val["balanced_accuracy"], 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    runs = sorted(p for p in (Path(args.work) / "energy").iterdir() if (p / "config.json").is_file())
    text = json.dumps({r.name: summary(r) for r in runs}, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
