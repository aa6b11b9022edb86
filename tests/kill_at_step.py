"""Run the textebm CLI, ending the process hard (status 137, as a kill would) right after
optimizer step N, or (--interrupt) raising KeyboardInterrupt there as Ctrl-C would: a test-only
wrapper around the recipe's `end_step` in `textebm.train.train`.

usage: python kill_at_step.py N [--interrupt] textebm-arguments...
"""

from __future__ import annotations

import functools
import os
import sys

import textebm.train
from textebm.cli import main


def kill_at(n: int, interrupt: bool = False) -> None:
    """Make every later `textebm.train.train(...)` call end the process after step `n`."""
    inner = textebm.train.train

    @functools.wraps(inner)
    def train(opts, config, recipe, *args, **kwargs):
        own = recipe.end_step

        def end_step(step: int) -> None:
            own(step)
            if step == n:
                if interrupt:
                    raise KeyboardInterrupt
                os._exit(137)

        recipe.end_step = end_step
        return inner(opts, config, recipe, *args, **kwargs)

    textebm.train.train = train


if __name__ == "__main__":
    interrupt = sys.argv[2] == "--interrupt"
    kill_at(int(sys.argv[1]), interrupt)
    raise SystemExit(main(sys.argv[3 if interrupt else 2:]))
