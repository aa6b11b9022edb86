"""Progress of long work: a bar on a terminal, a log line now and then elsewhere.

`progress_bar(total, desc, unit, enabled)` is tqdm where standard error is a terminal. Where it is
not (a log file, a job scheduler, CI) a bar would write every carriage-return update into the log
(1,284 lines for the quickstart's noise LM), so it logs one line every `LOG_EVERY_S` seconds and
one at the end instead: "scoring: 120/300 texts (40%), 2.1 texts/s, about 1.4 min left".
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("textebm")

LOG_EVERY_S = 30.0


def on_terminal() -> bool:
    """Whether standard error is a terminal (where a bar redraws in place)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class LogProgress:
    """tqdm's `update` / `set_postfix` / `close` and context manager, as a log line every
    `every` seconds and one when the work is done."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int = 0, every: float = LOG_EVERY_S,
                 clock=time.monotonic):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.every, self.clock = every, clock
        self.start = self.last = clock()
        self.first = initial
        self.postfix = ""
        self.closed = False

    def line(self) -> str:
        done = self.n - self.first
        secs = max(self.clock() - self.start, 1e-9)
        rate = done / secs
        text = f"{self.desc}: {self.n}"
        if self.total:
            text += f"/{self.total} {self.unit}s ({100 * self.n / self.total:.0f}%)"
        else:
            text += f" {self.unit}s"
        text += f", {rate:.3g} {self.unit}s/s"
        if self.total and 0 < done and self.n < self.total:
            text += f", about {(self.total - self.n) / rate / 60:.1f} min left"
        return text + (f", {self.postfix}" if self.postfix else "")

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every and not (self.total and self.n >= self.total):
            self.last = now
            log.info(self.line())

    def set_postfix(self, refresh: bool = True, **kw) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kw.items())

    def close(self) -> None:
        if not self.closed and self.n > self.first:
            log.info(self.line())
        self.closed = True

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()


def progress_bar(total: int | None, desc: str, unit: str = "it", enabled: bool = True, initial: int = 0, **tqdm_kw):
    """A tqdm bar on a terminal, `LogProgress` lines elsewhere, nothing (a disabled tqdm) when not
    `enabled`."""
    if enabled and not on_terminal():
        return LogProgress(total, desc, unit, initial)
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled, **tqdm_kw)
