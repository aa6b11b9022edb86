"""Stop a run right after optimizer step N, when the loop asks the recipe for the next batch's
loss (everything of step N, its checkpoint included, is done by then):

    python kill_at_step.py N [--interrupt | --sigterm] textebm-arguments...

runs the textebm CLI, ending the process hard (status 137, as a kill would) there, with
--interrupt raising KeyboardInterrupt as Ctrl-C would, or with --sigterm sending the process
SIGTERM (as `kill` or a batch scheduler would); `stop_after` does the second inside a test.
"""

from __future__ import annotations

import functools
import os
import signal
import sys

import textebm.train
from textebm.cli import main


def kill_at(n: int, interrupt: bool = False, sigterm: bool = False) -> None:
    """Make every later loop (`textebm.train.optimise`) end the process after step `n`."""
    inner = textebm.train.optimise

    @functools.wraps(inner)
    def optimise(opts, recipe, *args, **kwargs):
        own = recipe.loss

        def loss(model, batch, at):
            if at.step == n:
                if interrupt:
                    raise KeyboardInterrupt
                if sigterm:
                    os.kill(os.getpid(), signal.SIGTERM)  # its Python handler runs at the next bytecode
                os._exit(137)
            return own(model, batch, at)

        recipe.loss = loss
        return inner(opts, recipe, *args, **kwargs)

    textebm.train.optimise = optimise


def stop_after(step: int, recipe: type, monkeypatch) -> None:
    """KeyboardInterrupt (Ctrl-C) right after optimizer `step` of every run of the Recipe class
    `recipe`, until `monkeypatch.undo()`."""
    own = recipe.loss

    def loss(self, model, batch, at):
        if at.step == step:
            raise KeyboardInterrupt
        return own(self, model, batch, at)

    monkeypatch.setattr(recipe, "loss", loss)


def run(argv: list[str]) -> int:
    """`python kill_at_step.py ARGV...` as a function (tests/forked.py runs it in a child)."""
    flag = argv[1] if len(argv) > 1 and argv[1] in ("--interrupt", "--sigterm") else ""
    kill_at(int(argv[0]), flag == "--interrupt", flag == "--sigterm")
    return main(argv[2 if flag else 1:])


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
