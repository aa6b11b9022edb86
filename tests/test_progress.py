"""Progress without a terminal: a log line every 30 s and one at the end, never a bar's redraws
(textebm.progress)."""

from __future__ import annotations

import logging

from textebm import progress as P


def test_log_progress_writes_a_line_per_window_and_one_at_the_end(caplog):
    now = {"t": 0.0}
    with caplog.at_level(logging.INFO, logger="textebm"):
        with P.LogProgress(300, "scoring", "text", every=30, clock=lambda: now["t"]) as bar:
            for _ in range(300):
                now["t"] += 0.5  # 150 s in all: a line at 30, 60, 90, 120 s, then the last
                bar.update(1)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5, lines
    assert lines[0].startswith("scoring: 60/300 texts (20%), 2 texts/s, about 2.0 min left")
    assert lines[-1] == "scoring: 300/300 texts (100%), 2 texts/s"


def test_without_a_terminal_the_bar_is_log_lines_and_off_is_silent(monkeypatch, capsys):
    monkeypatch.setattr(P, "on_terminal", lambda: False)
    assert isinstance(P.progress_bar(10, "x", "it", True), P.LogProgress)
    off = P.progress_bar(10, "x", "it", False)
    with off as bar:
        bar.update(5)
        bar.set_postfix(loss=1)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(P, "on_terminal", lambda: True)
    from tqdm.std import tqdm

    assert isinstance(P.progress_bar(10, "x", "it", True), tqdm)


def test_the_training_loop_draws_no_bar_into_a_log(monkeypatch):
    """With --progress and no terminal the loop takes its log-line path (`_progress` is None)."""
    from types import SimpleNamespace

    from textebm import train

    monkeypatch.setattr(train, "on_terminal", lambda: False)
    opts = SimpleNamespace(progress=True)
    assert train._progress(opts, SimpleNamespace(is_main_process=True), 10, 0) is None
    monkeypatch.setattr(train, "on_terminal", lambda: True)
    bar = train._progress(opts, SimpleNamespace(is_main_process=True), 10, 0)
    assert bar is not None
    bar.close()
