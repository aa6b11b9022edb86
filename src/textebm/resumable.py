"""OUT.partial: the finished rows of an unfinished run, resumed only by the same run.

The commands that write rows as they go (`lm sample`, `negatives generate`, `score`) append them
to OUT.partial, flushed and synced batch by batch, and write OUT (through `textebm.outputs`, marked
as their output) only at the end. The partial's first line is a header recording the run's
identity: the model by content (`textebm.fingerprint.folder_sha256`, not its path), the inputs by
content, and every option that changes a row. A later run with the same OUT continues from the
rows already there only when its identity is the same; otherwise it stops with exit status 2,
naming the file and what differs, before any work, so rows of two runs are never mixed.

A torn last line (a crash in mid-write) is dropped (`textebm.io.read_partial`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from textebm.errors import TextebmError
from textebm.io import atomic_write, read_partial
from textebm.outputs import output_file

HEADER = "textebm_partial"


def partial_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".partial")


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) > 40:
        return value[:12] + "…"  # a hash or a long path: its start tells them apart
    return json.dumps(value, ensure_ascii=False)


def differences(was: dict, now: dict) -> list[str]:
    """`key: old -> new` for every key whose value differs (a missing key shows as null)."""
    return [f"{k}: {_short(was.get(k))} -> {_short(now.get(k))}" for k in sorted(set(was) | set(now), key=str)
            if was.get(k) != now.get(k)]


def _header(path: Path) -> dict | None:
    """The textebm header on the first line of `path`, read without changing the file (None: the
    file is not a partial textebm wrote)."""
    with open(path, "rb") as f:
        first = f.readline()
    try:
        obj = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return obj.get(HEADER) if isinstance(obj, dict) else None


class PartialFile:
    """OUT.partial of one run of command `kind` (recorded in OUT's marker): `check()` before any
    work, `start(identity)` (the rows already written), `append(rows)` inside `with`, then
    `finish()` writes OUT. `identity` is a JSON object of everything the rows depend on."""

    def __init__(self, out: str | Path, kind: str, *, ensure_ascii: bool = True, option: str = "--out"):
        self.out = Path(out)
        self.path = partial_path(out)
        self.kind, self.ensure_ascii, self.option = kind, ensure_ascii, option
        self.identity: dict = {}
        self._sink = None
        self._created = False
        self._appended = 0

    def check(self) -> None:
        """Before any work: OUT.partial, if present, is a file."""
        if self.path.is_dir():
            raise TextebmError(f"{self.option} {self.out}: {self.path} is a folder; textebm writes the rows "
                               "of an unfinished run there")

    def start(self, identity: dict, informative: Sequence[str] = ()) -> list[dict]:
        """The rows an interrupted run with the same identity left (none for a new file, which is
        created with its header); TextebmError when the file was written by another run. The keys
        `informative` are recorded but not compared: where an input was read (its path), when its
        content is in the identity by hash, so that the same input moved elsewhere resumes."""
        self.check()
        self.identity = json.loads(json.dumps(identity))  # as it reads back (tuples become lists)
        if self.path.is_file():
            if not isinstance(_header(self.path), dict):  # checked before anything (a torn line) is cut
                raise TextebmError(f"{self.path}: does not say which run wrote it (no textebm header on its first "
                                   f"line: an older textebm's file, or not textebm's); delete {self.path} to start "
                                   "over")
            rows = read_partial(self.path)  # ours: a torn last line may be dropped
            drop = lambda d: {k: v for k, v in d.items() if k not in informative}  # noqa: E731
            diff = differences(drop(rows[0][HEADER]), drop(self.identity))
            if diff:
                raise TextebmError(f"{self.path}: was written with other settings than this run's "
                                   f"({'; '.join(diff)}); its rows cannot be mixed with this run's: delete "
                                   f"{self.path} to start over, or rerun with the model, inputs and options it "
                                   "was written with")
            return rows[1:]
        with atomic_write(self.path) as f:
            f.write(json.dumps({HEADER: self.identity}, ensure_ascii=False) + "\n")
        self._created = True
        return []

    def keep(self, n: int) -> None:
        """Cut the file back to its header and its first `n` rows."""
        raw = self.path.read_bytes()
        end = -1
        for _ in range(n + 1):
            end = raw.index(b"\n", end + 1)
        if end + 1 != len(raw):
            with open(self.path, "r+b") as f:
                f.truncate(end + 1)

    def __enter__(self) -> "PartialFile":
        self._sink = open(self.path, "a", encoding="utf-8")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._sink.close()
        self._sink = None
        if exc_type is not None and self._created and self._appended == 0:
            self.path.unlink(missing_ok=True)  # this run made it and wrote no row: leave nothing behind

    def append(self, rows: Iterable[dict]) -> None:
        """Append rows as JSON lines, flushed and synced (a kill loses at most the batch in flight)."""
        lines = [json.dumps(row, ensure_ascii=self.ensure_ascii) + "\n" for row in rows]
        self._sink.write("".join(lines))
        self._sink.flush()
        os.fsync(self._sink.fileno())
        self._appended += len(lines)

    def rows(self) -> list[dict]:
        """The rows written so far (the header left out)."""
        return read_partial(self.path)[1:]

    def finish(self, order: Callable[[dict], Any] | None = None, keep: Callable[[dict], bool] | None = None) -> int:
        """Write OUT from the rows (those `keep(row)` accepts, when given; sorted by `order(row)`
        when given; the lines' bytes as written), mark it as this command's output, and remove
        OUT.partial. Returns the number of rows written."""

        lines = self.path.read_bytes().split(b"\n")[1:-1]
        lines = [line for line in lines if line.strip()]
        if keep is not None:
            lines = [line for line in lines if keep(json.loads(line))]
        if order is not None:
            lines.sort(key=lambda line: order(json.loads(line)))
        with output_file(self.out, self.kind, "wb") as f:
            f.write(b"".join(line + b"\n" for line in lines))
        self.path.unlink()
        return len(lines)
