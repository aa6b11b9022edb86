"""How long a matrix generator or energy trains: its config's `steps` or `epochs` as the training
command's `--epochs` and `--max-steps` (used by the matrix and by its plan's estimate)."""

from __future__ import annotations

DEFAULT_STEPS = 300  # of a generator or energy that names neither `steps` nor `epochs`


def train_length(spec: dict) -> dict:
    """`epochs` and `max_steps` of the training command for a generator's or energy's settings:
    `steps` N is exactly N optimiser steps (as many passes over the data as that takes: every pass
    has at least one step, so N passes never end before step N); `epochs` E is E passes, cut at
    `max_steps` when that is given."""
    if "epochs" in spec:
        return {"epochs": float(spec["epochs"]), "max_steps": spec.get("max_steps", 0)}
    steps = spec.get("steps", DEFAULT_STEPS)
    return {"epochs": float(steps), "max_steps": steps}
