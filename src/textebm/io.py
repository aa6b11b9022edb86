"""Atomic file writing and small JSON/JSONL helpers.

Every output of textebm is written to a temporary name beside its target and moved into place
with `os.replace`, so a crash or a bad input never leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from textebm.errors import InputError

try:
    import fcntl
except ImportError:  # not POSIX: temporaries are not locked, and none is removed as stale
    fcntl = None

log = logging.getLogger(__name__)


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


STALE_AFTER_S = 2.0  # a temporary no one holds and older than this was left by a killed process


def _hold(fd: int) -> None:
    """Lock a temporary textebm is writing (released when the process ends, even by SIGKILL)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def held(path: str | Path) -> bool:
    """Whether a live process holds `path` locked (`_hold`): a temporary still being written."""
    if fcntl is None or not Path(path).exists():
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporaries of `path` that a killed textebm process left beside it: only names
    of textebm's pattern (`.NAME.textebm-XXXXXXXX.tmp`, made by `atomic_write`, `atomic_dir` and
    `textebm.outputs.output_dir`) that no live process holds locked. Returns what was removed."""
    path = Path(path)
    if fcntl is None or not path.parent.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(path.name)}\.textebm-[a-z0-9_]{{8}}\.tmp")
    removed = []
    for cand in path.parent.iterdir():
        if not pattern.fullmatch(cand.name) or cand.is_symlink():
            continue
        try:
            fd = os.open(cand, os.O_RDONLY)
        except OSError:
            continue
        try:
            if time.time() - os.fstat(fd).st_mtime < STALE_AFTER_S:
                continue  # just made: its writer may not hold it yet
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live writer holds it
            if cand.is_dir():
                shutil.rmtree(cand, ignore_errors=True)
            else:
                cand.unlink(missing_ok=True)
            removed.append(cand)
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d temporary file(s) of %s left by an interrupted run", len(removed), path)
    return removed


@contextlib.contextmanager
def locked(path: str | Path, wait: bool = True, what: str = "") -> Iterator[bool]:
    """Hold an exclusive lock on PATH.lock, so that processes sharing a folder (a grid's, the
    download cache) build each thing once: a second one waits (saying so, when `what` names the
    thing), then finds it finished. With `wait=False` it does not wait: the block gets False (and
    holds nothing) while another process holds the lock. Not re-entrant: a second `locked` of one
    path in one process waits for ever. Without POSIX locks (fcntl: Windows) nothing is locked and
    the block gets True; textebm's folders assume a POSIX system."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield True
        return
    with open(path.with_name(path.name + ".lock"), "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            got = True
        except BlockingIOError:
            got = False
        if not got and wait:
            if what:
                log.info("waiting for another process making %s", what)
            fcntl.flock(f, fcntl.LOCK_EX)
            got = True
        if not got:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def once(path: str | Path, done: Callable[[], bool], build: Callable[[], Any], what: str = "") -> Path:
    """PATH, built by `build()` unless `done()`; under its lock (`locked`), checked again once held,
    so that of processes asking at once one builds and the others find it built."""
    if not done():
        with locked(path, what=what):
            if not done():
                build()
    return Path(path)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temporary file beside `path`; on success fsync and rename it onto `path`. Temporaries
    of `path` left by a killed process are removed first (`remove_stale_temporaries`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.textebm-", suffix=".tmp", dir=path.parent)
    try:
        _hold(fd)
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes it private; an output is an ordinary file
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)  # while still held: no cleaner takes it for a killed run's
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; on success it replaces `path` as a whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with temporary_dir(path) as tmp:
        yield tmp
        ordinary_modes(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)


def ordinary_modes(folder: str | Path) -> None:
    """Give every file under `folder` 0666 and every folder 0777, less the umask, as an ordinary
    write would: libraries that write through private temporary files (safetensors shards of
    transformers' save_pretrained came out 0600) would otherwise leave outputs others cannot read."""
    mask = current_umask()
    for dirpath, dirnames, filenames in os.walk(folder):
        for d in dirnames:
            p = Path(dirpath) / d
            if not p.is_symlink():
                p.chmod(0o777 & ~mask)
        for f in filenames:
            p = Path(dirpath) / f
            if not p.is_symlink():
                p.chmod(0o666 & ~mask)


@contextlib.contextmanager
def temporary_dir(path: str | Path) -> Iterator[Path]:
    """An empty folder `.NAME.textebm-XXXXXXXX.tmp` beside `path`, held locked while in use and removed
    afterwards unless moved away; stale ones of `path` are removed first."""
    path = Path(path)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.textebm-", suffix=".tmp", dir=path.parent))
    fd = os.open(tmp, os.O_RDONLY)
    try:
        _hold(fd)
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes it private; an output is an ordinary folder
        yield tmp
    finally:
        os.close(fd)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_write(path) as f:
        json.dump(obj, f, indent=2, sort_keys=False, default=_json_default)
        f.write("\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON: {e.msg}", line=e.lineno) from None


def read_json_object(path: str | Path, what: str) -> dict:
    """A JSON object from `path`; InputError naming the file (and `what` it should be) otherwise."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"not a readable {what} ({e})") from None
    if not isinstance(raw, dict):
        raise InputError(path, f"expected a JSON object, got {type(raw).__name__}")
    return raw


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> int:
    """Write all rows atomically; returns the number written."""
    n = 0
    with atomic_write(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # \\ud800..\\udfff: a surrogate, paired or not


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line; errors name file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a byte-order mark, as editors on Windows write it (CSV and text files take it too)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})", lineno) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line.rstrip("\r\n"))  # a column past the line's end is its end
            except json.JSONDecodeError as e:
                raise InputError(path, f"malformed JSON: {e.msg} (column {e.colno})", lineno) from None
            if not isinstance(obj, dict):
                raise InputError(path, f"expected a JSON object, got {type(obj).__name__}", lineno)
            if _SURROGATE_ESCAPE.search(line):  # an escaped lone surrogate is valid JSON but no text
                try:
                    json.dumps(obj, ensure_ascii=False).encode("utf-8")
                except UnicodeEncodeError as e:
                    raise InputError(path, f"invalid Unicode: a lone surrogate {e.object[e.start:e.end]!r} (an "
                                           "escape such as \\ud800 without its pair)", lineno) from None
            yield lineno, obj


def read_partial(path: str | Path) -> list[dict]:
    """Rows of an interrupted run. A torn last line (no final newline, or unparsable) is dropped and
    the file rewritten without it, atomically (a crash during the rewrite leaves the old file, every
    finished sample in it), so appending continues on a clean line."""
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    torn = lines[-1] != b""  # the last write stopped before its newline
    lines = lines[:-1]
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError):
            if lineno != len(lines):
                raise InputError(path, "malformed line in the file of an unfinished run; delete it to "
                                       "start over", lineno) from None
            torn, lines = True, lines[:-1]
    if torn:
        log.info("%s: dropping a truncated last line", path)
        with atomic_write(path, "wb") as f:
            f.write(b"".join(line + b"\n" for line in lines))
    return rows
