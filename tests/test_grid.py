"""The grid runner (textebm.grid): cells cached by a hash of their settings, computed once by
processes sharing a folder (file locks), shards from --shard or a Slurm job array, the plan, and
the Dask backend on a local two-worker cluster; and the shell of a grid command: a config checked
against its dataclass schema, the --out rule for a cache."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from textebm import grid
from textebm.errors import InputError, TextebmError
from textebm.outputs import read_marker, write_marker


def _cells(n: int = 4, seconds: float = 60.0) -> list[grid.Cell]:
    return [grid.Cell(f"c{i}", {"x": i, "what": "square"}, i, seconds) for i in range(n)]


def _square(cell: grid.Cell) -> dict:
    return {"y": cell.task ** 2}


class _Logged:
    """A compute that appends each cell's name to LOG (one line per computation, O_APPEND)."""

    def __init__(self, log: Path, sleep: float = 0.0):
        self.log, self.sleep = log, sleep

    def __call__(self, cell: grid.Cell) -> dict:
        time.sleep(self.sleep)
        with open(self.log, "a") as f:
            f.write(f"{cell.name} {os.getpid()}\n")
        return {"y": cell.task ** 2, "pid": os.getpid()}


def _computed(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.is_file() else []


def test_key_is_the_settings_not_their_order():
    assert grid.key({"a": 1, "b": [1, 2]}) == grid.key({"b": [1, 2], "a": 1}) != grid.key({"a": 1, "b": [2, 1]})
    assert len(grid.key({})) == 10


def test_a_finished_cell_is_never_recomputed_and_new_settings_make_a_new_cell(tmp_path):
    log = tmp_path / "log"
    g = grid.Grid(tmp_path / "cells", _Logged(log))
    cells = _cells(3)
    assert [r["y"] for r in g.run(cells)] == [0, 1, 4]
    assert _computed(log) == ["c0", "c1", "c2"]
    saved = json.loads(g.file(cells[1]).read_text())
    assert saved["settings"] == {"x": 1, "what": "square"} and saved["result"]["y"] == 1
    assert [r["y"] for r in g.run(cells)] == [0, 1, 4] and len(_computed(log)) == 3  # all cached
    changed = grid.Cell("c1", {"x": 1, "what": "square", "v": 2}, 1)  # same name, other settings
    assert g.file(changed) != g.file(cells[1])
    g.run([changed])
    assert _computed(log) == ["c0", "c1", "c2", "c1"]


def test_an_interrupted_grid_continues_where_it_stopped(tmp_path):
    log = tmp_path / "log"

    class Dies(_Logged):
        def __call__(self, cell):
            if cell.task == 2:
                raise KeyboardInterrupt
            return super().__call__(cell)

    with pytest.raises(KeyboardInterrupt):
        grid.Grid(tmp_path / "cells", Dies(log)).run(_cells(4))
    assert _computed(log) == ["c0", "c1"]
    assert [r["y"] for r in grid.Grid(tmp_path / "cells", _Logged(log)).run(_cells(4))] == [0, 1, 4, 9]
    assert _computed(log) == ["c0", "c1", "c2", "c3"]


def _run_grid(folder: str, log: str, shard: tuple[int, int]) -> None:
    grid.Grid(folder, _Logged(Path(log), sleep=0.05)).run(_cells(6), shard)


def _build_once(path: str, log: str) -> None:
    def build():
        time.sleep(0.2)
        with open(log, "a") as f:
            f.write(f"built {os.getpid()}\n")
        Path(path).write_text("artifact")

    grid.once(Path(path), Path(path).is_file, build)


def test_two_processes_sharing_a_folder_compute_each_cell_and_artifact_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    log = tmp_path / "log"
    for shards in (((1, 1), (1, 1)), ((1, 2), (2, 2))):  # the same cells, then two shards
        folder = tmp_path / f"cells-{shards[1][0]}"
        procs = [ctx.Process(target=_run_grid, args=(str(folder), str(log), s)) for s in shards]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        names = _computed(log)
        assert sorted(names) == [f"c{i}" for i in range(6)], names  # each cell once, none lost
        log.unlink()
    procs = [ctx.Process(target=_build_once, args=(str(tmp_path / "artifact"), str(log))) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert len(log.read_text().splitlines()) == 1 and (tmp_path / "artifact").read_text() == "artifact"


def test_a_shard_computes_its_own_cells_first_then_finishes_the_others(tmp_path):
    log = tmp_path / "log"
    cells = _cells(5)
    g = grid.Grid(tmp_path / "cells", _Logged(log))
    assert [c.name for c in g.mine(cells, (2, 2))] == ["c1", "c3"]
    assert [c.name for c in g.mine([cells[0], *cells], (2, 2))] == ["c1", "c3"]  # a repeated cell counts once
    results = g.run(cells, (2, 2))
    assert [r["y"] for r in results] == [0, 1, 4, 9, 16]
    assert _computed(log) == ["c1", "c3", "c0", "c2", "c4"]


@pytest.mark.parametrize("env, want", [
    ({}, (1, 1)),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, (1, 4)),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, (4, 4)),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}, (1, 4)),
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}, (4, 4)),
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",  # --array=0-6:2
      "SLURM_ARRAY_TASK_STEP": "2"}, (3, 4)),
])
def test_the_shard_comes_from_a_slurm_job_array(env, want):
    assert grid.shard_from("", env) == want
    assert grid.shard_from("2/5", env) == (2, 5)  # --shard wins


@pytest.mark.parametrize("env", [
    {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"},
    {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "x", "SLURM_ARRAY_TASK_MIN": "1"},
    {"SLURM_ARRAY_TASK_ID": "1"},
])
def test_a_job_array_that_gives_no_shard_is_refused(env):
    with pytest.raises(TextebmError, match="--shard"):
        grid.shard_from("", env)


@pytest.mark.parametrize("value", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_bad_shards_are_refused(value):
    with pytest.raises(TextebmError, match="--shard"):
        grid.shard_from(value, {})


def test_the_plan_lists_the_cells_left_and_their_cpu_time(tmp_path):
    g = grid.Grid(tmp_path / "cells", _square)
    cells = _cells(4, seconds=90)
    plan = g.plan(cells)
    assert "4 cells, 0 cached, 4 to run here" in plan and "  c3  ~1.5 min" in plan
    assert "estimated CPU time: 6.0 min" in plan and not (tmp_path / "cells").exists()
    g.run_cell(cells[0])
    plan = g.plan(cells, (1, 2))
    assert "1 cached; shard 1/2 holds 2, 1 to run here" in plan and "c2" in plan and "c1" not in plan
    assert "estimated CPU time: 1.5 min" in plan
    assert "then, as `run` does, it helps with the other shards' 2 unfinished cells" in plan  # c1, c3
    assert "helps" not in g.plan(cells)  # one shard holds every cell
    assert g.plan(cells, estimate=lambda left: f"{len(left)} left by my own estimate").endswith("3 left by my own estimate")
    assert g.plan([*cells, cells[3]]).startswith("4 cells (5 entries, some the same cell), 1 cached, 3 to run")


def test_a_tiny_grid_on_a_local_two_worker_dask_cluster(tmp_path):
    """The Dask backend (the `grid` extra, part of `dev`): each cell a task on one of two worker
    processes; the same results as the local backend; a finished grid submits nothing."""
    log = tmp_path / "log"
    cells = _cells(6)
    g = grid.Grid(tmp_path / "cells", _Logged(log, sleep=0.3))
    seen = []
    results = g.run(cells, backend="dask", workers=2, on_result=lambda c, r: seen.append(c.name))
    assert [r["y"] for r in results] == [c.task ** 2 for c in cells] and sorted(seen) == sorted(c.name for c in cells)
    pids = {r["pid"] for r in results}
    assert os.getpid() not in pids and len(pids) == 2  # two worker processes, not this one
    assert sorted(_computed(log)) == sorted(c.name for c in cells)  # each once
    assert g.run(cells, backend="dask") == results and len(_computed(log)) == 6  # cached: no cluster started


class _Fails:
    def __call__(self, cell):
        raise TextebmError(f"cell {cell.name}: bad input")


def test_a_user_error_in_a_dask_task_is_a_user_error_here(tmp_path):
    with pytest.raises(TextebmError, match="cell c0: bad input"):
        grid.Grid(tmp_path / "cells", _Fails()).run(_cells(1), backend="dask", workers=1)


class _FailsOn:
    def __init__(self, bad: int):
        self.bad = bad

    def __call__(self, cell):
        if cell.task == self.bad:
            raise TextebmError(f"cell {cell.name}: bad input")
        return {"y": cell.task ** 2}


@pytest.mark.parametrize("backend", ["local", "dask"])
def test_keep_going_skips_a_failed_cell_and_caches_nothing_for_it(tmp_path, backend):
    g = grid.Grid(tmp_path / "cells", _FailsOn(1))
    results = g.run(_cells(3), backend=backend, workers=1, keep_going=True)
    assert [r and r["y"] for r in results] == [0, None, 4] and not g.done(_cells(3)[1])
    with pytest.raises(TextebmError, match="cell c1: bad input"):
        g.run(_cells(3))


def _calibration_grid():
    """bench/calibration_grid.py, the runner's second user (a script, loaded from its path)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "calibration_grid.py"
    spec = importlib.util.spec_from_file_location("calibration_grid", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_calibration_grid_runs_its_cells_on_the_runner(tmp_path, monkeypatch, capsys):
    """Each cell one quickstart (faked here: it records its command and writes what a finished
    quickstart leaves); a cell that reuses another's steps runs after it; a failed cell is reported
    and the grid goes on; a finished grid runs nothing again; --plan runs nothing."""
    import subprocess
    import sys

    cg = _calibration_grid()
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset.json").write_text("{}")
    calls = []

    def fake_run(cmd, **kw):
        out = Path(cmd[cmd.index("--out") + 1])
        cell = out.name
        calls.append((cell, cmd[cmd.index("--reuse") + 1] if "--reuse" in cmd else None))
        if cell == "k4":
            return subprocess.CompletedProcess(cmd, 1)
        out.mkdir(parents=True, exist_ok=True)
        (out / "settings.json").write_text("{}")
        (out / "results.json").write_text(json.dumps({"seeds": [0]}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(cg.subprocess, "run", fake_run)
    monkeypatch.setattr(cg, "report", lambda out, cells: "report\n")
    argv = ["calibration_grid.py", "--out", str(tmp_path / "g"), "--data", str(data), "--seeds", "1",
            "--cells", "lm4w", "k4", "lm4", "default"]
    monkeypatch.setattr(sys, "argv", [*argv, "--plan"])
    cg.main()
    assert "4 cells, 0 cached, 4 to run here" in capsys.readouterr().out and calls == []
    monkeypatch.setattr(sys, "argv", argv)
    cg.main()
    g = str(tmp_path / "g")
    assert calls == [("default", None), ("lm4", f"{g}/default"), ("lm4w", f"{g}/lm4"), ("k4", f"{g}/default")]
    calls.clear()
    cg.main()
    assert calls == [("k4", f"{g}/default")]  # only the failed cell is tried again


@dataclass(kw_only=True)
class _Spec:
    """A grid config's schema, as `tag grid` and `detect matrix` declare theirs."""

    data: str
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"min": 0, "distinct": True})
    method: str = field(default="a", metadata={"choices": ("a", "b")})
    rate: float = field(default=0.5, metadata={"gt": 0, "max": 1})
    corpora: list[str] | dict[str, str | None] = field(default_factory=list)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check(self, path) -> None:
        if self.data == "missing":
            raise InputError(path, "`data`: no such folder")
        self.seeds = sorted(self.seeds)


@pytest.mark.parametrize("raw, says", [
    ({"data": "d", "sedes": [1]}, "`sedes` is not a setting of the toy config (known: corpora, data, method, "),
    ({"seeds": [1]}, "missing `data`"),
    ({"data": 3}, "`data` must be a string, got 3"),
    ({"data": "d", "seeds": [1, 1]}, "`seeds` must be a non-empty list of distinct whole numbers >= 0, got [1, 1]"),
    ({"data": "d", "seeds": []}, "`seeds` must be a non-empty list of distinct"),
    ({"data": "d", "seeds": [0, -1]}, "`seeds` must be"),
    ({"data": "d", "seeds": [0, True]}, "`seeds` must be"),  # a bool is no number
    ({"data": "d", "method": "c"}, "`method` must be one of a, b, got 'c'"),
    ({"data": "d", "rate": 0}, "`rate` must be a number > 0 and <= 1, got 0"),
    ({"data": "d", "rate": "x"}, "`rate` must be a number > 0 and <= 1"),
    ({"data": "d", "corpora": 5}, "`corpora` must be a list of strings or an object of strings, got 5"),
    ({"data": "d", "options": {"all": 1}}, "`options` must be an object of objects"),
    ({"data": None}, "`data` must be a string, got None"),
    ({"data": "missing"}, "`data`: no such folder"),  # the schema's own check
])
def test_a_grid_config_is_checked_against_its_schema_naming_the_file_and_key(tmp_path, raw, says):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError) as e:
        grid.read_config(path, _Spec, "toy config")
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value)


def test_a_good_grid_config_comes_back_as_a_dict_with_its_defaults(tmp_path):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({"data": "d", "seeds": [2, 0], "rate": 1, "corpora": {"a": None, "b": "f"}}))
    assert grid.read_config(path, _Spec, "toy config") == {
        "data": "d", "seeds": [0, 2], "method": "a", "rate": 1, "corpora": {"a": None, "b": "f"}, "options": {}}
    path.write_text("[1]")
    with pytest.raises(InputError, match="expected a JSON object"):
        grid.read_config(path, _Spec, "toy config")


def test_a_section_of_command_options_is_checked_against_the_command(tmp_path):
    @dataclass(kw_only=True)
    class Command:
        steps: int = field(default=1, metadata={"min": 1})
        lr: float = 0.1

        def check(self) -> None:
            if self.steps > 100:
                raise TextebmError(f"--steps {self.steps}: too many")

    keys = {"steps": "steps", "lr": "lr", "note": None}
    grid.check_section("c.json", "gen.tf", {"steps": 2, "note": "x"}, Command, keys)
    with pytest.raises(InputError, match=r"c.json: `gen.tf.stepz` is not a setting here"):
        grid.check_section("c.json", "gen.tf", {"stepz": 2}, Command, keys)
    with pytest.raises(InputError, match=r"c.json: `gen.tf.lr` must be a number, got 'fast'"):
        grid.check_section("c.json", "gen.tf", {"lr": "fast"}, Command, keys)
    with pytest.raises(InputError, match=r"c.json: `gen.tf.steps` 500: too many"):
        grid.check_command("c.json", lambda: Command(steps=500), names=[("--steps", "`gen.tf.steps`")])
    with pytest.raises(InputError, match=r"c.json: `options` of joint: --steps must be at least 1, got 0"):
        grid.check_command("c.json", lambda: Command(steps=0), head="`options` of joint: ")


def test_a_grid_out_is_a_cache_and_a_failed_set_up_leaves_no_new_folder(tmp_path):
    """--out: new, or the grid's own (continued; --overwrite removes only what its marker lists),
    never another command's or a user's folder; a set-up that fails removes a new --out whole and
    leaves an existing one; --report needs cells already; --plan writes nothing."""
    out = tmp_path / "g"
    with grid.out_folder(out, "toy grid", ["cells"], plan=True):
        pass
    assert not out.exists()
    with pytest.raises(RuntimeError):
        with grid.out_folder(out, "toy grid", ["cells", "results.json"]):
            assert read_marker(out)["kind"] == "toy grid"
            raise RuntimeError("set-up failed")
    assert not out.exists()
    with pytest.raises(TextebmError, match="--report: .* holds no cell"):
        with grid.out_folder(out, "toy grid", ["cells"], report=True):
            pass
    grid.check_out(out, "toy grid", ["cells"])
    (out / "cells").mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError):
        with grid.out_folder(out, "toy grid", ["cells"], report=True):
            raise RuntimeError("set-up failed")
    assert (out / "cells").is_dir()  # an existing --out stays
    grid.mark(out, "toy grid", ["plot.png"])
    assert read_marker(out)["entries"] == ["cells", "plot.png"]
    grid.check_out(out, "toy grid", ["cells"], overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [".textebm-output.json", "notes.txt"]
    other = tmp_path / "other"
    other.mkdir()
    write_marker(other, "cloze train", ["model"])
    with pytest.raises(TextebmError, match="cloze train"):
        grid.check_out(other, "toy grid", ["cells"], overwrite=True)


def _another_process_holds(g: grid.Grid, cells: list[grid.Cell], seen: dict):
    """A thread standing for another process that holds c1's lock (flock is per open file, so this
    process's own open waits or is refused) until this process has finished c3 (up to 3 s), then
    writes c1's result and releases it; `seen` records whether c3 was done while c1 was held."""
    import fcntl
    import threading

    g.folder.mkdir(exist_ok=True)
    held = open(g.file(cells[1]).with_name(g.file(cells[1]).name + ".lock"), "w")
    fcntl.flock(held, fcntl.LOCK_EX)

    def other_process():
        try:
            for _ in range(300):
                if g.done(cells[3]):
                    break
                time.sleep(0.01)
            seen["c3 done while c1 held"] = g.done(cells[3])
            grid.write_json(g.file(cells[1]), {"name": "c1", "settings": cells[1].settings, "result": {"y": -1}})
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            held.close()

    t = threading.Thread(target=other_process)
    t.start()
    return t


def test_a_shard_helps_with_unstarted_cells_before_waiting_on_a_held_one(tmp_path):
    """Shard 1 of 2 (c0, c2) is done with its own cells while another process holds c1's lock: it
    computes c3, which nobody has started, and only then waits for c1, which the other process
    finishes (its file) and releases."""
    log = tmp_path / "log"
    cells = _cells(4)
    g = grid.Grid(tmp_path / "cells", _Logged(log))
    seen = {}
    t = _another_process_holds(g, cells, seen)
    results = g.run(cells, (1, 2))
    t.join(10)
    assert seen == {"c3 done while c1 held": True}  # helped before waiting
    assert _computed(log) == ["c0", "c2", "c3"]  # c1 not computed here
    assert [r["y"] for r in results] == [0, -1, 4, 9]  # c1's result is the other process's
    with grid.locked(g.file(cells[0]), wait=False) as got:
        assert got  # a free lock is taken without waiting


def test_a_shard_leaves_its_own_cell_to_a_process_that_holds_it(tmp_path):
    """Shard 2 of 2 (c1, c3): another process helping with c1 holds it, so this shard goes on to c3
    instead of waiting, then reads c1 when that process has written it."""
    log = tmp_path / "log"
    cells = _cells(4)
    g = grid.Grid(tmp_path / "cells", _Logged(log))
    for c in (cells[0], cells[2]):  # shard 1's cells, finished
        g.run_cell(c)
    log.unlink()
    seen = {}
    t = _another_process_holds(g, cells, seen)
    results = g.run(cells, (2, 2))
    t.join(10)
    assert seen == {"c3 done while c1 held": True}
    assert _computed(log) == ["c3"]
    assert [r["y"] for r in results] == [0, -1, 4, 9]
