"""One rule for every file and folder a command writes: never lose a user's work.

- A target that does not exist, or an empty folder, is written.
- An existing, non-empty target is refused, naming it, unless the user passes `--overwrite`.
- With `--overwrite`, a file named by the user is replaced (atomically). A folder is replaced
  only when textebm made it, for the same command: its marker file `.textebm-output.json`
  records what wrote it and which entries are textebm's. Only those entries are replaced; any
  other file in the folder (a user's notes) is left where it is. A folder textebm did not make,
  or one made by another command (a training run given as a report folder), is never touched.
- The checks run before any work (`check_output_dir` / `check_output_file`); the writing itself
  is atomic (`output_dir` below, `textebm.io.atomic_write` for files), so a failure leaves
  nothing half-written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from textebm.errors import TextebmError
from textebm.io import current_umask

MARKER = ".textebm-output.json"


def read_marker(path: str | Path) -> dict | None:
    """The marker of a folder textebm wrote, or None (no marker, or an unreadable one)."""
    import json

    f = Path(path) / MARKER
    if not f.is_file():
        return None
    try:
        obj = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("kind"), str) else None


def write_marker(path: str | Path, kind: str, entries: list[str]) -> None:
    from textebm import __version__
    from textebm.io import write_json

    write_json(Path(path) / MARKER, {"kind": kind, "entries": sorted(set(entries)), "textebm": __version__})


def _non_empty(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def own_entries(marker: dict | None) -> list[str]:
    """The entries a marker lists, keeping only plain names (no folders above, no paths): a
    damaged or hand-edited marker must never make textebm delete outside its folder."""
    names = (marker or {}).get("entries", [])
    return [n for n in names if isinstance(n, str) and n and n not in (".", "..") and "/" not in n
            and "\\" not in n and n != MARKER]


def _check_parent(path: Path, option: str) -> None:
    """The nearest existing folder above `path` must be a folder (not a file) we can write in."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise TextebmError(f"{option} {path}: {parent} is a file, not a folder")
    try:  # permission bits do not tell (root, read-only mounts, /proc): make and remove an entry
        if not os.access(parent, os.W_OK):
            raise PermissionError
        os.rmdir(tempfile.mkdtemp(prefix=".textebm-probe.", dir=parent))
    except OSError:
        raise TextebmError(f"{option} {path}: cannot write in {parent}") from None


def check_output_dir(path: str | Path, kind: str, overwrite: bool, option: str = "--out") -> bool:
    """Check before any work that folder `path` may be written by a `kind` command.

    Returns True when it exists with earlier output of the same kind (to be replaced), False
    when it is new or empty. Raises TextebmError (exit 2) naming the folder and the option."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise TextebmError(f"{option} {path}: exists and is a file; {option} must be a folder")
    if not path.exists():
        _check_parent(path, option)
    if not _non_empty(path):
        return False
    marker = read_marker(path)
    if marker is None:
        raise TextebmError(f"{option} {path}: exists, is not empty and was not written by textebm; "
                           "textebm never replaces files it did not write: choose a new or empty folder")
    if marker["kind"] != kind:
        raise TextebmError(f"{option} {path}: holds the output of `{marker['kind']}`, not of `{kind}`; "
                           "choose another folder (--overwrite only replaces output of the same command)")
    if not overwrite:
        raise TextebmError(f"{option} {path}: exists and holds earlier `{kind}` output; pass --overwrite "
                           "to replace it, or choose another folder")
    return True


def check_output_file(path: str | Path, overwrite: bool, option: str = "--out") -> None:
    """Check before any work that file `path` may be written (refuse folders and, without
    --overwrite, existing files)."""
    path = Path(path)
    if path.is_dir():
        raise TextebmError(f"{option} {path}: is a folder; {option} must name a file")
    if path.exists() and not overwrite:
        raise TextebmError(f"{option} {path}: exists; pass --overwrite to replace it, or choose another file")
    _check_parent(path, option)


@contextlib.contextmanager
def output_dir(path: str | Path, kind: str, overwrite: bool, option: str = "--out") -> Iterator[Path]:
    """Yield an empty temporary folder beside `path`; on success its entries become `path`.

    Runs `check_output_dir` first. A new target is moved into place whole; earlier output of the
    same kind is replaced entry by entry (only the entries its marker lists), so files that
    textebm did not write stay. On failure the temporary folder is removed and `path` is as it was.
    """
    path = Path(path)
    replacing = check_output_dir(path, kind, overwrite, option)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes it private; outputs are ordinary folders
        yield tmp
        entries = [p.name for p in tmp.iterdir() if p.name != MARKER]
        write_marker(tmp, kind, entries)
        if not path.exists() or not any(path.iterdir()):
            if path.exists():
                path.rmdir()
            os.replace(tmp, path)
            return
        if replacing is False:  # became non-empty while we worked: re-check
            check_output_dir(path, kind, overwrite, option)
        old = own_entries(read_marker(path))
        foreign = sorted(n for n in entries if (path / n).exists() and n not in old)
        if foreign:  # checked before anything is moved: the folder stays as it was
            raise TextebmError(f"{option} {path}: holds {', '.join(foreign[:3])}, which textebm did not write "
                               "and would have to replace; move it away or choose another folder")
        for name in old:
            if name not in entries:
                remove(path / name)
        for name in entries:
            target = path / name
            if target.is_dir() and not target.is_symlink():
                aside = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".old", dir=path))  # a fresh name: never a user's
                os.replace(target, aside / name)
                os.replace(tmp / name, target)
                shutil.rmtree(aside)
            else:
                os.replace(tmp / name, target)
        os.replace(tmp / MARKER, path / MARKER)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def remove(p: Path) -> None:
    """Remove a file or folder that textebm wrote (missing is fine)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
