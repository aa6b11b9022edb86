"""User-facing errors. Anything raised as `TextebmError` ends the CLI with exit status 2 and a
one-line message; `InputError` names the offending file and line."""

from __future__ import annotations

from pathlib import Path


class TextebmError(Exception):
    """An error caused by the user's input or settings (exit status 2, no traceback)."""


class InputError(TextebmError):
    """Bad content in a user file: the message names the file and, where known, the line."""

    def __init__(self, path: str | Path, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class ArgumentError(TextebmError, ValueError):
    """A bad argument of a Python call (`textebm.api`): the message names the argument and, for
    one item of a list, its index (`texts[3]: ...`). A ValueError too, as Python code expects."""

    def __init__(self, argument: str, message: str, index: int | None = None):
        self.argument, self.index = argument, index
        where = f"{argument}[{index}]" if index is not None else argument
        super().__init__(f"{where}: {message}")


class TrainingDiverged(TextebmError):
    """A NaN or infinite loss: the run stops, the last good checkpoint is kept."""


class TextTooLong(TextebmError):
    """Text `index` (0-based, of the list given) has `tokens` tokens; the model takes at most `limit`.
    The message names it as `ArgumentError` names an item (`texts[3]`); the commands turn it into
    the file and line of the text."""

    def __init__(self, index: int, tokens: int, limit: int, argument: str = "texts"):
        self.index, self.tokens, self.limit = index, tokens, limit
        super().__init__(f"{argument}[{index}]: {tokens} tokens; the model takes at most {limit}")


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; the message says how to continue the run (--resume)."""
