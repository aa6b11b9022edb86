"""Run the textebm CLI, ending the process hard (status 137, as a kill would) right after
optimizer step N: a test-only wrapper that passes `on_step_end` to `textebm.train.train`.

usage: python kill_at_step.py N textebm-arguments...
"""

from __future__ import annotations

import functools
import os
import sys

import textebm.train
from textebm.cli import main


def kill_at(n: int) -> None:
    """Make every later `textebm.train.train(...)` call end the process after step `n`."""
    inner = textebm.train.train

    @functools.wraps(inner)
    def train(*args, on_step_end=None, **kwargs):
        def step_end(step: int) -> None:
            if on_step_end is not None:
                on_step_end(step)
            if step == n:
                os._exit(137)

        return inner(*args, on_step_end=step_end, **kwargs)

    textebm.train.train = train


if __name__ == "__main__":
    kill_at(int(sys.argv[1]))
    raise SystemExit(main(sys.argv[2:]))
