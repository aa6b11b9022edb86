"""What the commands print when they finish: a training run's evaluation on one line, an
evaluation's metrics as one line of JSON."""

from __future__ import annotations

import json


def eval_line(metrics: dict) -> str:
    """`name=value` of the numbers of metrics.json's `eval`, to 4 significant digits; without any
    (no evaluation split), the steps trained."""
    line = ", ".join(f"{k}={v:.4g}" for k, v in metrics.get("eval", {}).items() if isinstance(v, (int, float)))
    steps = metrics.get("train", {}).get("steps")
    return line or (f"trained {steps} steps; no evaluation split" if steps is not None else "no evaluation split")


def metrics_json(metrics: dict, leave_out: tuple[str, ...] = ()) -> str:
    """`metrics` as one line of JSON, floats to 4 decimals, without the keys `leave_out` (paths, hashes)."""
    return json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()
                       if k not in leave_out})
