"""Kills at every rename of the two crash windows (issue 33, item 4): `outputs.output_dir`
replacing an earlier output, and `train.set_aside` / `bring_back` moving an earlier run aside and
back. A forked child process does the work and dies (os._exit, as SIGKILL: no rollback runs) just before
its k-th rename; the parent then does what the next command does first, and the folder must hold
one whole output (the earlier one, or the new one once the replacement committed), never a mix,
and no file of the earlier run may be lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from textebm.outputs import MARKER, SWAP_JOURNAL, check_output_dir, read_marker
from textebm.runfolder import recover_run_folder, RESTORING, SET_ASIDE, SETTING_ASIDE

def _child(k: int, what: str, target: Path) -> bool:
    """Run `what` on `target` in a forked child that dies (os._exit) just before its k-th rename
    (os.replace or Path.rename); True when it finished before a k-th rename came."""
    import os
    import pathlib

    pid = os.fork()
    if pid == 0:  # the child: no pytest, no rollback, no atexit
        try:
            count = {"n": 0}
            real_replace, real_rename = os.replace, pathlib.Path.rename

            def tick():
                count["n"] += 1
                if count["n"] == k:
                    os._exit(9)  # killed just before this rename: nothing rolls back

            def replace(src, dst, **kw):
                tick()
                return real_replace(src, dst, **kw)

            def rename(self, target_):
                tick()
                return real_rename(self, target_)

            os.replace, pathlib.Path.rename = replace, rename
            if what == "swap":
                from textebm.outputs import output_dir

                with output_dir(target, "residual ppl", overwrite=True) as tmp:
                    (tmp / "a").mkdir()
                    (tmp / "a" / "y.txt").write_text("new a")
                    (tmp / "b").write_text("new b")
                    (tmp / "d.json").write_text("new d")
            elif what == "set_aside":
                from textebm.runfolder import set_aside

                set_aside(target)
            else:
                from textebm.outputs import write_marker
                from textebm.runfolder import abandon_failed_start, set_aside

                count["n"] = -10**6  # the new run's start is not the window under test
                set_aside(target)
                write_marker(target, "lm train", ["config.json", "checkpoint", "metrics.json", "model"])
                (target / "config.json").write_text('{"new": true}')
                count["n"] = 0
                abandon_failed_start(target, created=False)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 9), f"the child failed (exit {code})"
    return code == 0


def _tree(root: Path) -> dict[str, str]:
    """Every entry and its content; the marker aside, and textebm's own temporaries
    (`.NAME.textebm-XXXXXXXX.tmp` of an atomic write the kill cut: removed by the next write)."""
    import re

    temporary = re.compile(r"\..+\.textebm-[a-z0-9_]{8}\.tmp")
    return {str(p.relative_to(root)): p.read_text() if p.is_file() else "/"
            for p in sorted(root.rglob("*")) if p.name != MARKER and not temporary.fullmatch(p.name)}


def _earlier_output(out: Path) -> dict[str, str]:
    from textebm.outputs import output_dir

    with output_dir(out, "residual ppl", overwrite=False) as tmp:
        (tmp / "a").write_text("old a")
        (tmp / "b").mkdir()
        (tmp / "b" / "x.txt").write_text("old b")
        (tmp / "c.json").write_text("old c")
    (out / "notes.txt").write_text("mine")
    return _tree(out)


def test_a_replacement_killed_at_any_rename_leaves_one_whole_output(tmp_path):
    new = {"a": "/", "a/y.txt": "new a", "b": "new b", "d.json": "new d", "notes.txt": "mine"}
    outcomes = set()
    for k in range(1, 40):
        out = tmp_path / f"k{k}" / "report"
        old = _earlier_output(out)
        finished = _child(k, "swap", out)
        check_output_dir(out, "residual ppl", overwrite=True)  # what the next command does first
        now = _tree(out)
        assert now in (old, new), f"killed before rename {k}: a mix of two outputs: {now}"
        assert not (out / SWAP_JOURNAL).exists() and not any(p.name.startswith(".textebm-old.") for p in out.iterdir())
        assert read_marker(out)["entries"] == sorted(k for k in (old if now == old else new)
                                                     if "/" not in k and k != "notes.txt")
        outcomes.add("old" if now == old else "new")
        if finished:  # k went past the last rename: the window is covered
            break
    assert outcomes == {"old", "new"} and k > 6  # both sides of the commit point were hit


def _earlier_run(run: Path) -> dict[str, str]:
    from textebm.outputs import write_marker

    run.mkdir(parents=True)
    (run / "config.json").write_text('{"old": true}')
    (run / "metrics.json").write_text('{"completed": true}')
    (run / "model").mkdir()
    (run / "model" / "model.safetensors").write_text("weights")
    (run / "notes.txt").write_text("mine")
    write_marker(run, "lm train", ["config.json", "checkpoint", "metrics.json", "model"])
    return _tree(run)


@pytest.mark.parametrize("what", ["set_aside", "abandon"])
def test_an_earlier_run_survives_a_kill_at_any_rename_of_set_aside_and_bring_back(tmp_path, what):
    """set_aside: the kill comes while the earlier run moves aside (the new run never wrote its
    marker); abandon: after the new run failed, while the earlier run moves back."""
    for k in range(1, 30):
        run = tmp_path / f"k{k}" / "run"
        old = _earlier_run(run)
        finished = _child(k, what, run)
        recover_run_folder(run)  # what the next training command does first (check_run_dir)
        # the new run never wrote its marker (set_aside) or gave up (abandon): the earlier one is back
        assert _tree(run) == old, f"killed before rename {k}: the earlier run is not whole: {_tree(run)}"
        assert read_marker(run)["kind"] == "lm train"
        assert not any((run / n).exists() for n in (SET_ASIDE, SETTING_ASIDE, RESTORING))
        if finished:
            break
    assert k > 3  # several renames were each interrupted


def test_a_folder_with_a_rolled_back_replacement_is_replaced_cleanly_next_time(tmp_path):
    from textebm.outputs import output_dir

    out = tmp_path / "report"
    _earlier_output(out)
    assert not _child(5, "swap", out)
    with output_dir(out, "residual ppl", overwrite=True) as tmp:
        (tmp / "z.json").write_text("z")
    assert sorted(_tree(out)) == ["notes.txt", "z.json"]


def test_a_journal_that_names_no_folder_of_its_own_rolls_nothing_back(tmp_path):
    import json

    from textebm.outputs import recover_interrupted

    out = tmp_path / "report"
    old = _earlier_output(out)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "a").write_text("someone else's")
    for aside in ("../outside", None, "."):
        (out / SWAP_JOURNAL).write_text(json.dumps({"aside": aside, "old": ["a"], "new": ["a", "notes.txt"]}))
        assert recover_interrupted(out) is False
        assert _tree(out) == {**old, SWAP_JOURNAL: (out / SWAP_JOURNAL).read_text()}
        assert (tmp_path / "outside" / "a").read_text() == "someone else's"
    # a journal whose folder aside was never made (killed between the two): nothing had moved
    (out / SWAP_JOURNAL).write_text(json.dumps({"aside": ".textebm-old.00000000", "old": ["a"], "new": ["a"]}))
    assert recover_interrupted(out) is False and not (out / SWAP_JOURNAL).exists() and _tree(out) == old


def test_a_live_replacement_is_not_rolled_back_by_another_command(tmp_path):
    """The writer holds its temporary folder locked; a second command checking OUT meanwhile
    leaves the replacement alone."""
    import json
    import os

    from textebm.io import _hold
    from textebm.outputs import recover_interrupted

    out = tmp_path / "report"
    _earlier_output(out)
    tmp = tmp_path / ".report.textebm-abcdefgh.tmp"
    tmp.mkdir()
    (out / ".textebm-old.1234abcd").mkdir()
    os.replace(out / "a", out / ".textebm-old.1234abcd" / "a")
    (out / SWAP_JOURNAL).write_text(json.dumps({"aside": ".textebm-old.1234abcd", "tmp": str(tmp),
                                                "old": ["a"], "new": ["a"]}))
    fd = os.open(tmp, os.O_RDONLY)
    try:
        _hold(fd)
        assert recover_interrupted(out) is False and (out / SWAP_JOURNAL).exists()
    finally:
        os.close(fd)
    assert recover_interrupted(out) is True and (out / "a").read_text() == "old a"  # the writer died: undone
