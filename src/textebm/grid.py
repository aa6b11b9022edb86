"""Experiment grids: one runner for every grid of textebm (the quickstart's seeds, the detection
matrix, the tagging grid, the calibration grid).

A grid is a list of `Cell`s: a readable name, the settings its result depends on, an estimate of
its CPU time, and a payload for the function that computes it. `Grid(folder, compute)` keeps one
file per finished cell, FOLDER/NAME-KEY.json, where KEY is a hash of the cell's settings, so

- a finished cell is never recomputed (its file is its cache), and a cell whose settings change
  gets a new key, so a result is never reused for other settings;
- an interrupted grid continues where it stopped (`Grid.run` skips finished cells);
- processes sharing FOLDER compute each cell once: a cell is computed under an exclusive file lock
  (`locked`), and `once` builds an artifact that several cells share (a generator, a negatives
  file) under the same kind of lock;
- `--shard I/N` runs every N-th cell from the I-th; without it, a Slurm job array
  (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN) gives each array task its
  shard (`shard_from`);
- `Grid.plan` lists the cells left with their estimated CPU time.

Backends: `local` computes the cells one after another in this process; `dask` submits them as
tasks to a Dask cluster (the optional extra `textebm[grid]`): a local one of `workers` processes,
or an existing one given by its scheduler address. See docs/grids.md.

The shell of a grid command (`tag grid`, `detect matrix`), which each grid fills with its own
cells, their computation and its tables: its options (`GridOptions`); its config file read and
checked against a dataclass schema (`read_config`, `check_section`, `check_command`), every error
naming the file and the key; its --out, a cache (`check_out`, `out_folder`); and what it does
with its cells: the plan, a report of those finished, or the run (`plan_or_run`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import time
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from textebm.errors import InputError, TextebmError, TrainingInterrupted
from textebm.inference import set_threads
from textebm.io import locked, once, read_json, read_json_object, write_json  # noqa: F401 (grid.once, grid.locked)
from textebm.options import check_config, refuse_unused, threads_field, type_problem
from textebm.outputs import check_output_dir, own_entries, read_marker, remove, write_marker

log = logging.getLogger(__name__)

BACKENDS = ("local", "dask")


@dataclass(kw_only=True)
class GridOptions:
    """How a grid command runs its cells: the options every grid command shares (the detection
    matrix, the tagging grid), mixed into its config."""

    plan: bool = field(default=False, metadata={"help": "print the cells left and their estimated CPU time, "
                                                        "then stop"})
    threads: int = threads_field("CPU threads per process (0: torch default; with --backend dask: the cores "
                                 "shared among the workers)")
    shard: str = field(default="", metadata={"help": "I/N: run every N-th cell from the I-th (1-based), for "
                                                      "N processes sharing --out; shared artifacts are built "
                                                      "once (default: from a Slurm job array when in one)"})
    backend: str = field(default="local", metadata={"help": "run the cells in this process, or as tasks on a "
                                                            "Dask cluster (pip install 'textebm[grid]')",
                                                    "choices": list(BACKENDS)})
    workers: int = field(default=2, metadata={"help": "--backend dask: worker processes of the local cluster",
                                              "min": 1})
    address: str = field(default="", metadata={"help": "--backend dask: scheduler address of an existing "
                                                       "cluster (default: start a local one)"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def check(self) -> None:
        if self.shard:
            parse_shard(self.shard)
        if self.backend != "dask":
            refuse_unused(self, ["workers", "address"], "without --backend dask")
        elif self.address:
            refuse_unused(self, ["workers"], "with --address (the cluster has its own workers)")

    def start(self) -> tuple[int, tuple[int, int]]:
        """Set this process's threads and return (threads per process, this process's shard).
        Threads: --threads, or with a local Dask cluster and 0 (torch's default) the machine's
        cores shared among its workers. Shard: --shard, or the Slurm job array's (`shard_from`)."""
        threads = self.threads
        if self.backend == "dask" and not self.address and not threads:
            threads = max(1, (os.cpu_count() or 1) // self.workers)
        set_threads(threads)
        return threads, shard_from(self.shard)


def key(obj: Any) -> str:
    """A short hash of a JSON-able object (dict keys sorted): the identity of a cell or artifact."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Cell:
    """One cell of a grid. `settings` (JSON) is everything its result depends on and is hashed into
    its file name; `task` is what the compute function needs (not hashed); `seconds` is the
    estimated CPU time, for the plan."""

    name: str
    settings: Any
    task: Any = None
    seconds: float = 0.0

    @property
    def key(self) -> str:
        return key(self.settings)


def parse_shard(value: str, option: str = "--shard") -> tuple[int, int]:
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise TextebmError(f"{option} must be I/N with 1 <= I <= N, got {value!r}")
    return i, n


def shard_from(value: str, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(I, N), 1-based: from `--shard I/N` when given, else from a Slurm job array, else (1, 1).

    Slurm numbers array tasks as `--array` says (0-3, 1-4, even 0-6:2): the task's place is
    (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP among
    SLURM_ARRAY_TASK_COUNT tasks."""
    if value:
        return parse_shard(value)
    env = os.environ if env is None else env
    if "SLURM_ARRAY_TASK_ID" not in env:
        return 1, 1
    names = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN")
    try:
        task, count, low = (int(env[n]) for n in names)
        step = int(env.get("SLURM_ARRAY_TASK_STEP", "1"))
    except (KeyError, ValueError):
        raise TextebmError("SLURM_ARRAY_TASK_ID is set, so the shard comes from the job array, but "
                           + ", ".join(f"{n}={env.get(n)!r}" for n in names)
                           + " do not give it; pass --shard I/N") from None
    i = (task - low) // max(step, 1) + 1
    if not 1 <= i <= count:
        raise TextebmError(f"SLURM_ARRAY_TASK_ID={task} is not one of the {count} tasks of the array "
                           f"from {low}; pass --shard I/N")
    return i, count


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9+_.=-]+", "-", name).strip("-")[:120] or "cell"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.2f} h"


class Grid:
    """Cells cached in `folder` and computed by `compute(cell) -> dict` (a JSON object)."""

    def __init__(self, folder: str | Path, compute: Callable[[Cell], dict]):
        self.folder, self.compute = Path(folder), compute

    def file(self, cell: Cell) -> Path:
        return self.folder / f"{_safe(cell.name)}-{cell.key}.json"

    def done(self, cell: Cell) -> bool:
        return self.file(cell).is_file()

    def result(self, cell: Cell) -> dict:
        return read_json(self.file(cell))["result"]

    def run_cell(self, cell: Cell, wait: bool = True) -> dict | None:
        """The cell's result: read from its file, or computed (under its lock) and written. With
        `wait=False`, None while another process computes it (holds its lock)."""
        path = self.file(cell)
        if not path.is_file():
            with locked(path, wait) as held:
                if not held:
                    return None
                if not path.is_file():
                    t0 = time.perf_counter()
                    try:
                        result = self.compute(cell)
                    except TrainingInterrupted:  # a cell's run says --resume; a grid takes none
                        raise TrainingInterrupted(f"cell {cell.name} of {self.folder}: stopped; run the same command "
                                                  "again to continue: the grid resumes each cell from what it "
                                                  "kept") from None
                    write_json(path, {"name": cell.name, "settings": cell.settings, "result": result,
                                      "seconds": round(time.perf_counter() - t0, 1)})
        return self.result(cell)

    def left(self, cells: list[Cell]) -> list[Cell]:
        """The unfinished cells, each once (two cells with the same name and settings are one)."""
        return list({self.file(c): c for c in cells if not self.done(c)}.values())

    def mine(self, cells: list[Cell], shard: tuple[int, int]) -> list[Cell]:
        """Every N-th distinct cell from the I-th (shard (I, N), 1-based)."""
        return list({self.file(c): c for c in cells}.values())[shard[0] - 1::shard[1]]

    def plan(self, cells: list[Cell], shard: tuple[int, int] = (1, 1),
             estimate: Callable[[list[Cell]], str] | None = None) -> str:
        """The cells this shard would still compute, then the estimated CPU time: the sum of the
        cells' own estimates, or `estimate(cells left)` for a grid whose cells share artifacts."""
        left = self.left(self.mine(cells, shard))
        distinct = len({self.file(c) for c in cells})
        head = f"{distinct} cells" + (f" ({len(cells)} entries, some the same cell)" if distinct < len(cells) else "")
        head += f", {distinct - len(self.left(cells))} cached"
        if shard != (1, 1):
            head += f"; shard {shard[0]}/{shard[1]} holds {len(self.mine(cells, shard))}"
        lines = [f"{head}, {len(left)} to run here:"]
        lines += [f"  {c.name}" + (f"  ~{_minutes(c.seconds)}" if c.seconds else "") for c in left]
        lines.append(estimate(left) if estimate else
                     f"estimated CPU time: {_minutes(sum(c.seconds for c in left))} on one thread")
        here = {self.file(c) for c in left}
        others = {self.file(c) for c in self.left(cells)} - here
        if shard != (1, 1) and others:
            lines.append(f"then, as `run` does, it helps with the other shards' {len(others)} "
                         "unfinished cells that no process has started (a cell is computed once, by whoever locks it "
                         "first)")
        return "\n".join(lines)

    def run(self, cells: list[Cell], shard: tuple[int, int] = (1, 1), backend: str = "local", workers: int = 2,
            address: str = "", on_result: Callable[[Cell, dict], None] | None = None,
            keep_going: bool = False) -> list[dict | None]:
        """Compute this shard's unfinished cells on `backend`, then help: compute the other shards'
        unfinished cells that nobody has started, and only then wait for those another process
        computes (their lock); return every cell's result in order.

        A user error (TextebmError) in a cell stops the grid, or with `keep_going` is logged and
        that cell's result is None (nothing is cached for it: the next run tries it again)."""
        if backend not in BACKENDS:
            raise TextebmError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        todo = self.left(self.mine(cells, shard))
        log.info("%d cells, %d to run here", len({self.file(c) for c in cells}), len(todo))
        failed: dict[Path, str] = {}

        def done(cell: Cell, result: dict | None, error: str | None) -> None:
            if error is not None:
                if not keep_going:
                    raise TextebmError(error)
                log.error("cell %s failed: %s (the grid goes on; run it again to retry)", cell.name, error)
                failed[self.file(cell)] = error
            elif on_result:
                on_result(cell, result)

        def attempt(cell: Cell) -> None:
            """Compute the cell here unless it is finished, failed, or another process holds it."""
            if self.file(cell) in failed or self.done(cell):
                return
            try:
                result, error = self.run_cell(cell, wait=False), None
            except TextebmError as e:
                result, error = None, str(e)
            if result is not None or error is not None:
                done(cell, result, error)

        if backend == "dask" and todo:
            for cell, result, error in run_dask(self, todo, workers, address, keep_going):
                done(cell, result, error)
        else:
            for cell in todo:  # a cell of this shard that a helping process holds is left to it
                attempt(cell)
        for cell in self.left(cells):  # help: the cells nobody has started
            attempt(cell)
        results: list[dict | None] = []
        for cell in cells:
            if self.file(cell) in failed:
                results.append(None)
                continue
            try:
                results.append(self.run_cell(cell))
            except TextebmError as e:
                if not keep_going:
                    raise
                log.error("cell %s failed: %s", cell.name, e)
                failed[self.file(cell)] = str(e)
                results.append(None)
        return results


def _remote(grid: Grid, cell: Cell) -> tuple[str, Any]:
    """Run on a Dask worker: the cell's result, or the user error it met (as text: an error object
    need not survive pickling)."""
    try:
        return "ok", grid.run_cell(cell)
    except TextebmError as e:
        return "error", str(e)


def run_dask(grid: Grid, cells: list[Cell], workers: int = 2, address: str = "",
             keep_going: bool = False) -> Iterator[tuple[Cell, dict | None, str | None]]:
    """Each cell as a Dask task, yielded as they finish with its result or its user error (the
    first error cancels the other tasks, unless `keep_going`): on the cluster at `address` (a scheduler
    started by the user, e.g. `dask scheduler` + `dask worker` on each machine, or dask-jobqueue)
    or on a local cluster of `workers` processes of one thread each. Cells share artifacts through
    the grid's folder and its file locks, so every worker must see the same file system."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise TextebmError("--backend dask needs Dask: pip install 'textebm[grid]' "
                           "(or dask[distributed])") from None
    with contextlib.ExitStack() as stack:
        if address:
            try:
                client = stack.enter_context(Client(address, timeout="30s"))
            except (OSError, TimeoutError) as e:
                raise TextebmError(f"--address {address}: no Dask scheduler answered ({e})") from None
        else:
            # processes, not threads: each cell trains with its own seeds in torch's global state
            cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                       dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        log.info("dask: %d cells on %s", len(cells), client.dashboard_link if address else f"{workers} local workers")
        futures = {client.submit(_remote, grid, c, key=f"{_safe(c.name)}-{c.key}", pure=False): c for c in cells}
        for fut in as_completed(futures):
            status, value = fut.result()
            if status == "error" and not keep_going:
                for other in futures:
                    other.cancel()
            yield (futures[fut], None, value) if status == "error" else (futures[fut], value, None)


# ---------------------------------------------------------------- the shell of a grid command


def _fits(tp: Any, v: Any) -> bool:
    """Whether the JSON value `v` is of the annotation `tp` (a whole number is a float too, a bool
    is no number, and None fits only an optional annotation)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, v) for a in args)
    if tp is type(None):
        return v is None
    if origin is list or tp is list:
        return isinstance(v, list) and all(_fits(args[0], x) for x in v) if args else isinstance(v, list)
    if origin is dict or tp is dict:
        return isinstance(v, dict) and all(_fits(args[1], x) for x in v.values()) if args else isinstance(v, dict)
    if tp in (int, float):
        number = isinstance(v, int if tp is int else (int, float)) and not isinstance(v, bool)
        return number and math.isfinite(v)
    return isinstance(v, tp)


def _within(meta: Mapping, v: Any) -> bool:
    """Whether `v` (a value or one item of a list) is among the field's `choices` and within its bounds."""
    if "choices" in meta and v not in meta["choices"]:
        return False
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return True
    return (("min" not in meta or v >= meta["min"]) and ("max" not in meta or v <= meta["max"])
            and ("gt" not in meta or v > meta["gt"]) and ("lt" not in meta or v < meta["lt"]))


def _words(tp: Any, meta: Mapping, plural: bool = False) -> str:
    """What a value of the annotation `tp` with the field's bounds and choices (`meta`) must be."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_words(a, meta, plural) for a in args if a is not type(None))
    if origin is list:
        items = _words(args[0] if args else Any, meta, plural=True)
        return f"a non-empty list of distinct {items}" if meta.get("distinct") else f"a list of {items}"
    if origin is dict:
        values = args[1] if len(args) == 2 else Any
        return ("objects" if plural else "an object") + (f" of {_words(values, {}, True)}" if values is not Any else "")
    if "choices" in meta:
        return ("values, each " if plural else "") + "one of " + ", ".join(map(str, meta["choices"]))
    names = {bool: ("true or false", "true or false"), int: ("a whole number", "whole numbers"),
             float: ("a number", "numbers"), str: ("a string", "strings")}
    bounds = [f"{op} {meta[k]}" for k, op in (("gt", ">"), ("min", ">="), ("lt", "<"), ("max", "<=")) if k in meta]
    return names.get(tp, ("a value", "values"))[plural] + (" " + " and ".join(bounds) if bounds else "")


def read_config(path: str | Path, schema: type, what: str) -> dict:
    """The JSON object in `path` checked against the dataclass `schema`, with its defaults, as a
    plain dict (what a grid keys its cells by and records in results.json).

    Each key must be a field of `schema`, each field without a default given, and each value of
    its field's annotation (int, float, str, bool, list[...], dict[str, ...], unions) within the
    field's metadata: `choices`, bounds `min` / `max` / `gt` / `lt` (for a list, of each item) and
    `distinct` (a non-empty list without repeats); else an InputError naming the file and the key.
    Then `schema.check(path)`, when it has one, checks what is the grid's own: the rules between
    keys and the folders they name (and may normalise values, e.g. sort a list)."""
    raw = read_json_object(path, what)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    for k in raw:
        if k not in fields:
            raise InputError(path, f"`{k}` is not a setting of the {what} (known: {', '.join(sorted(fields))})")
    for k, f in fields.items():
        if k not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(path, f"missing `{k}`")
            continue
        v, meta = raw[k], f.metadata
        if not (_fits(hints[k], v) and all(_within(meta, x) for x in (v if isinstance(v, list) else [v]))
                and (not meta.get("distinct") or (v and len(set(v)) == len(v)))):
            raise InputError(path, f"`{k}` must be {_words(hints[k], meta)}, got {v!r}")
    spec = schema(**raw)
    if hasattr(spec, "check"):
        spec.check(path)
    return dataclasses.asdict(spec)


def check_section(path: str | Path, where: str, spec: Mapping, command: type, keys: Mapping[str, str | None],
                  unknown: str = "a setting here") -> None:
    """Each key of the config section `where` (`spec`, an object of command options) is one of
    `keys` and of the type and choices of the option of `command` (a command's config dataclass)
    that it sets, keys[k] (None: no option of the command; the grid reads it itself); else an
    InputError naming the file and `where.key` (an unknown one "is not `unknown`")."""
    fields = {f.name: f for f in dataclasses.fields(command)}
    for k, v in spec.items():
        if k not in keys:
            raise InputError(path, f"`{where}.{k}` is not {unknown}")
        if keys[k] and (want := type_problem(fields[keys[k]], v)):
            raise InputError(path, f"`{where}.{k}` must be {want}, got {v!r}")


def check_command(path: str | Path, build: Callable[[], Any], head: str = "",
                  names: Iterable[tuple[str, str]] = ()) -> None:
    """The command's own bounds and rules (`check_config`) on the config `build()` makes of a grid
    config's settings, before any work: a failure is an InputError naming the file, its message
    headed `head` and each command flag of `names` (flag, config key; the first pair of a flag
    wins) replaced by the config key that set it."""
    try:
        check_config(build())
    except TextebmError as e:
        msg = str(e)
        for flag, key_ in names:
            msg = msg.replace(flag, key_)
        raise InputError(path, head + msg) from None


def mark(out: Path, kind: str, names: Iterable[str]) -> None:
    """Add `names` to the entries that the marker of --out lists (written only when they change)."""
    marker = read_marker(out)
    names, old = list(names), own_entries(marker)
    if marker is None or not set(names) <= set(old):
        write_marker(out, kind, [*old, *names])


def check_out(out: Path, kind: str, entries: Sequence[str], *, plan: bool = False, overwrite: bool = False) -> None:
    """The output rule for a grid's --out, a cache: a new or empty folder is written; a folder the
    grid wrote (its marker's `kind`) continues where it stopped, or with `overwrite` starts again
    (only the entries its marker lists are removed: a user's notes stay); anything else (a folder
    textebm did not write, another command's output) is refused, with or without `overwrite`.
    Then, unless `plan` (which writes nothing), --out is created and marked with `entries`, so an
    interrupted grid is recognised."""
    marker = read_marker(out) if out.is_dir() else None
    if marker is None or marker["kind"] != kind:
        check_output_dir(out, kind, False)  # refuses what the grid did not write, and a parent we cannot use
        marker = None
    if plan:
        return
    try:
        if marker is not None and overwrite:
            log.info("--overwrite: removing the earlier work of %s in %s", kind, out)
            for name in own_entries(marker):
                remove(out / name)
        out.mkdir(parents=True, exist_ok=True)
        mark(out, kind, entries)
    except OSError as e:
        raise TextebmError(f"--out {out}: cannot write there ({e.strerror or e})") from None


@contextlib.contextmanager
def out_folder(out: Path, kind: str, entries: Sequence[str], *, plan: bool = False, overwrite: bool = False,
               report: bool = False) -> Iterator[None]:
    """--out by the output rule for a grid (`check_out`), then the grid's set-up inside the block:
    a failure there leaves no half-made --out behind (a new one is removed whole). With `report`
    (tables of the cells finished so far), --out must hold cells already."""
    if report and not (out / "cells").is_dir():
        raise TextebmError(f"--report: {out} holds no cell of a grid yet (run the grid first; --plan lists the "
                           "cells)")
    fresh = not out.exists()
    check_out(out, kind, entries, plan=plan, overwrite=overwrite)
    try:
        yield
    except BaseException:
        if fresh and out.exists():
            remove(out)
        raise


def plan_or_run(opts: GridOptions, runner: Grid, cells: list[Cell], shard: tuple[int, int], plan: str, *,
                report: bool = False, on_result: Callable[[Cell, dict], None] | None = None
                ) -> tuple[list[dict | None], int] | None:
    """What a grid command does with its cells once set up. With --plan: print `plan` (`Grid.plan`'s
    text and the grid's notes) and return None. With `report`: the results of the cells finished so
    far, and how many distinct cells are not. Else: this shard's cells computed on the options'
    backend (`Grid.run`: then the other shards' read, waited for or computed) and every cell's
    result, 0 missing."""
    if opts.plan:
        print(plan)
        return None
    if report:
        results = [runner.result(c) for c in cells if runner.done(c)]
        missing = len(runner.left(cells))  # distinct cells not finished
        log.info("report of %d finished cells, %d not finished", len(results), missing)
        return results, missing
    log.info("before it starts:\n%s", plan)
    return runner.run(cells, shard, opts.backend, opts.workers, opts.address, on_result), 0
