"""One rule for every file and folder a command writes: never lose a user's work.

- A target that does not exist, or an empty folder, is written.
- An existing, non-empty target is refused, naming it, unless the user passes `--overwrite`.
- With `--overwrite`, a file is replaced (atomically) only when textebm wrote it for the same
  command: its marker beside it, `.NAME.textebm.json`, records the command and a hash of the
  content written, so a file the user made, edited or copied there, another command's output (a
  run's metrics.json) and an input of the same command are never replaced. A folder is replaced
  only when textebm made it, for the same command: its marker file `.textebm-output.json`
  records what wrote it and which entries are textebm's. Only those entries are replaced; any
  other file in the folder (a user's notes) is left where it is. A folder textebm did not make,
  or one made by another command (a training run given as a report folder), is never touched.
- Two outputs of one command never name the same file (`check_output_files`).
- The checks run before any work (`check_output_dir` / `check_output_file`); the writing itself
  is atomic (`output_dir` and `output_file` below), so a failure leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from textebm.version import __version__
from textebm.errors import TextebmError
from textebm.fingerprint import file_sha256, folder_sha256
from textebm.io import atomic_write, held, ordinary_modes, temporary_dir, write_json

MARKER = ".textebm-output.json"
log = logging.getLogger(__name__)


def _json_object(f: Path) -> dict | None:
    """The JSON object in textebm's own file `f` (a marker, a journal), or None (missing,
    unreadable or damaged)."""
    if not f.is_file():
        return None
    try:
        obj = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


# Commands that moved: paper c's `residual train / fit / ...` became `detect ...` (textebm 0.x; the
# old names still run, for one release). A folder an older textebm wrote reads under the new kind.
RENAMED_KINDS = {f"residual {c}": f"detect {c}"
                 for c in ("train", "fit", "eval", "score", "threshold", "analyze", "matrix")}


def _read_marker_file(f: Path) -> dict | None:
    """A marker's JSON object with a string `kind` (a moved command's under its new name), or None
    (missing, unreadable or damaged)."""
    obj = _json_object(f)
    if obj is None or not isinstance(obj.get("kind"), str):
        return None
    return {**obj, "kind": RENAMED_KINDS.get(obj["kind"], obj["kind"])}


def read_marker(path: str | Path) -> dict | None:
    """The marker of a folder textebm wrote, or None (no marker, or an unreadable one)."""
    return _read_marker_file(Path(path) / MARKER)


def write_marker(path: str | Path, kind: str, entries: list[str], sealed: bool = False) -> None:
    """Mark `path` as `kind`'s output owning `entries`; with `sealed`, record the content hash of
    each entry that exists (`seal_marker`)."""
    write_json(Path(path) / MARKER, {"kind": kind, "entries": sorted(set(entries)), "textebm": __version__})
    if sealed:
        seal_marker(path)


def entry_sha256(path: Path) -> str:
    """The content hash of a file, or of a folder (every file under it, by relative name)."""
    return folder_sha256(path) if path.is_dir() else file_sha256(path)


def seal_marker(path: str | Path, names: Iterable[str] | None = None) -> None:
    """Record in `path`'s marker the content hash of its entries (`names`, default all it owns
    that exist), so that `--overwrite` refuses an entry changed since (`changed_entries`). A
    command that updates an entry of another's folder (`lm eval` into a run's metrics.json)
    seals that entry again."""
    path = Path(path)
    marker = read_marker(path)
    if marker is None:
        return
    hashes = dict(marker.get("sha256") or {}) if names is not None else {}
    for name in (own_entries(marker) if names is None else names):
        if name in own_entries(marker) and (path / name).exists():
            hashes[name] = entry_sha256(path / name)
    write_json(path / MARKER, {**marker, "sha256": hashes})


def changed_entries(path: str | Path, marker: dict | None) -> list[str]:
    """The entries of a sealed marker whose content differs from the hash it recorded (a user's
    edit); an entry since removed is not a change to protect."""
    path, hashes = Path(path), (marker or {}).get("sha256")
    if not isinstance(hashes, dict):
        return []
    own = set(own_entries(marker))
    return sorted(n for n, h in hashes.items()
                  if n in own and os.path.lexists(path / n) and entry_sha256(path / n) != h)


def _non_empty(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def plain_name(n) -> bool:
    """Whether `n` is a plain entry name (no folder above, no path): what a marker or a journal
    may name for textebm to move or remove inside its folder."""
    return isinstance(n, str) and n not in ("", ".", "..") and "/" not in n and "\\" not in n


def own_entries(marker: dict | None) -> list[str]:
    """The entries a marker lists, keeping only plain names: a damaged or hand-edited marker must
    never make textebm delete outside its folder."""
    return [n for n in (marker or {}).get("entries", []) if plain_name(n) and n != MARKER]


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


def check_not_input(path: str | Path, inputs: Iterable[tuple[str, str | Path]], option: str = "--out") -> None:
    """Refuse an output folder that is, or holds, an input of the same command: replacing it
    would replace the input (`inputs`: (option, path) pairs; empty paths are skipped)."""
    out = Path(path).resolve()
    flat = [(o, g) for o, v in inputs for g in (v if isinstance(v, (list, tuple)) else [v])]
    for in_option, given in flat:
        if not given or not isinstance(given, (str, Path)) or not Path(given).exists():
            continue
        inp = Path(given).resolve()
        if inp == out or out in inp.parents:
            what = "is" if inp == out else "holds"
            raise TextebmError(f"{option} {path}: {what} the input of {in_option} ({given}); textebm never writes "
                               f"over an input of the command: choose another {option}")


def check_output_dir(path: str | Path, kind: str, overwrite: bool, option: str = "--out") -> bool:
    """Check before any work that folder `path` may be written by a `kind` command.

    Returns True when it exists with earlier output of the same kind (to be replaced), False
    when it is new or empty. Raises TextebmError (exit 2) naming the folder and the option."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise TextebmError(f"{option} {path}: exists and is a file; {option} must be a folder")
    if not path.exists():
        _check_parent(path, option)
    if recover_interrupted(path):
        log.warning("%s %s: a replacement of its earlier `%s` output was interrupted; the earlier output is back",
                    option, path, (read_marker(path) or {}).get("kind", "textebm"))
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
    edited = changed_entries(path, marker)
    if edited:
        raise TextebmError(f"{option} {path}: {', '.join(edited[:3])} changed since `{kind}` wrote "
                           f"{'it' if len(edited) == 1 else 'them'} (edited or replaced); textebm does not replace "
                           "a changed file: move it away yourself, or choose another folder")
    return True


def file_marker(path: str | Path) -> Path:
    """The marker beside an output file: `.NAME.textebm.json` in the same folder."""
    path = Path(path)
    return path.with_name(f".{path.name}.textebm.json")


def read_file_marker(path: str | Path) -> dict | None:
    """The marker of a file textebm wrote, or None (no marker, or an unreadable one)."""
    obj = _read_marker_file(file_marker(path))
    return obj if obj is not None and isinstance(obj.get("sha256"), str) else None


def mark_file(path: str | Path, kind: str) -> None:
    """Record beside `path` that textebm's `kind` command wrote it, with the hash of its content."""

    write_json(file_marker(path), {"kind": kind, "sha256": file_sha256(path), "textebm": __version__})


@contextlib.contextmanager
def output_file(path: str | Path, kind: str, mode: str = "w") -> Iterator:
    """Write file `path` atomically (`textebm.io.atomic_write`) and mark it as `kind`'s output."""

    with atomic_write(path, mode) as f:
        yield f
    mark_file(path, kind)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_file_target(path: str | Path, option: str = "--out") -> None:
    """`path` can be a file: it is not a folder and the nearest existing folder above it is writable."""
    path = Path(path)
    if path.is_dir():
        raise TextebmError(f"{option} {path}: is a folder; {option} must name a file")
    _check_parent(path, option)


def check_output_file(path: str | Path, overwrite: bool, option: str = "--out", *, kind: str,
                      inputs: Iterable[tuple[str, str | Path]] = ()) -> None:
    """Check before any work that file `path` may be written by a `kind` command.

    Refuses a folder, an input of the same command (`inputs`: (option, path) pairs) and, without
    --overwrite, any existing file. With --overwrite an existing file is replaced only when its
    marker says `kind` wrote it and its content is still what was written."""

    path = Path(path)
    check_file_target(path, option)
    for in_option, given in inputs:
        if given and _same_file(path, Path(given)):
            raise TextebmError(f"{option} {path}: is the input of {in_option}; textebm never writes over its own "
                               "input: choose another file")
    if not path.exists() and not path.is_symlink():
        return
    if not overwrite:
        raise TextebmError(f"{option} {path}: exists; pass --overwrite to replace it, or choose another file")
    marker = read_file_marker(path)
    if marker is None or not path.is_file():
        raise TextebmError(f"{option} {path}: exists and was not written by textebm (no marker "
                           f"{file_marker(path).name} beside it); textebm never replaces files it did not "
                           "write: choose another file, or move it away yourself")
    if marker["kind"] != kind:
        raise TextebmError(f"{option} {path}: holds the output of `{marker['kind']}`, not of `{kind}`; choose "
                           "another file (--overwrite only replaces output of the same command)")
    if marker["sha256"] != file_sha256(path):
        raise TextebmError(f"{option} {path}: has changed since `{kind}` wrote it (edited or replaced); textebm "
                           "does not replace it: choose another file, or move it away yourself")


def check_output_files(outputs: Iterable[tuple[str, str | Path]], overwrite: bool, *, kind: str,
                       inputs: Iterable[tuple[str, str | Path]] = ()) -> None:
    """`check_output_file` for each (option, path) of a command's file outputs (empty paths are
    left out), and no two of them may name the same file."""
    named = [(option, Path(p)) for option, p in outputs if p]
    inputs = list(inputs)
    seen: dict[str, str] = {}

    def real(p: Path) -> str:
        return os.path.normcase(os.path.realpath(p))

    for option, path in named:  # each output, and the files textebm keeps beside it
        seen.update({real(path.with_name(path.name + ".partial")): f"the unfinished rows of {option}",
                     real(file_marker(path)): f"the marker of {option}"})
    for option, path in named:
        where = real(path)
        if where in seen:
            raise TextebmError(f"{option} {path}: names the same file as {seen[where]}; give each output its "
                               "own file")
        seen[where] = option
    for option, path in named:
        check_output_file(path, overwrite, option, kind=kind, inputs=inputs)


@contextlib.contextmanager
def output_dir(path: str | Path, kind: str, overwrite: bool, option: str = "--out") -> Iterator[Path]:
    """Yield an empty temporary folder beside `path`; on success its entries become `path`.

    Runs `check_output_dir` first. A new target is moved into place whole; earlier output of the
    same kind is replaced all or nothing (only the entries its marker lists: files that textebm
    did not write stay). On failure the temporary folder is removed and `path` is as it was.
    """
    path = Path(path)
    replacing = check_output_dir(path, kind, overwrite, option)
    path.parent.mkdir(parents=True, exist_ok=True)
    with temporary_dir(path) as tmp:  # held locked; removed afterwards unless moved into place
        yield tmp
        ordinary_modes(tmp)
        entries = [p.name for p in tmp.iterdir() if p.name != MARKER]
        write_marker(tmp, kind, entries, sealed=True)
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
        _swap_entries(path, tmp, [n for n in old if os.path.lexists(path / n)], entries)


SWAP_JOURNAL = ".textebm-swap.json"  # OUT/SWAP_JOURNAL: a replacement in progress (`_swap_entries`)
ASIDE_PREFIX = ".textebm-old."  # OUT/.textebm-old.XXXX: the earlier output's entries while they are replaced


def _swap_entries(path: Path, tmp: Path, old: list[str], new: list[str]) -> None:
    """Replace `path`'s entries `old` (and its marker) by `tmp`'s entries `new` (and marker), all or
    nothing: the old ones are first moved into a fresh folder inside `path`, then the new ones
    moved in; if a move fails, what moved comes back, so `path` never holds a mix of two runs.

    A kill cannot run that rollback, so a journal (`SWAP_JOURNAL`, written atomically before the
    first move and removed after the last) names the moves: the next command that checks or writes
    `path` rolls an interrupted replacement back (`recover_interrupted`)."""
    aside = path / f"{ASIDE_PREFIX}{secrets.token_hex(4)}"  # a fresh name: never a user's
    write_json(path / SWAP_JOURNAL, {"aside": aside.name, "tmp": str(tmp), "old": [*old, MARKER],
                                     "new": [*new, MARKER]})
    aside.mkdir()  # after the journal: a folder aside without one holds an output replaced for good
    away: list[str] = []
    moved_in: list[str] = []
    try:
        for name in [*old, MARKER]:
            if os.path.lexists(path / name):
                os.replace(path / name, aside / name)
                away.append(name)
        for name in [*new, MARKER]:
            os.replace(tmp / name, path / name)
            moved_in.append(name)
    except BaseException:
        for name in reversed(moved_in):  # the new run's entries go back where they were
            os.replace(path / name, tmp / name)
        for name in reversed(away):
            os.replace(aside / name, path / name)
        (path / SWAP_JOURNAL).unlink()
        shutil.rmtree(aside, ignore_errors=True)
        raise
    (path / SWAP_JOURNAL).unlink()  # the commit point: from here on `path` is the new output
    shutil.rmtree(aside, ignore_errors=True)


def recover_interrupted(path: str | Path) -> bool:
    """Undo a replacement of `path` that a kill cut short (`_swap_entries`): the new entries that
    had moved in are removed, every earlier entry comes back from its folder aside. Without a
    journal, in a folder textebm marked, folders aside are leftovers of a finished replacement (its
    earlier output, replaced) and are removed; a folder with neither journal nor marker is not
    textebm's and is left alone. Returns True when it rolled one back."""
    path = Path(path)
    if not path.is_dir():
        return False
    journal = path / SWAP_JOURNAL
    plan = _json_object(journal)
    if plan is None and read_marker(path) is None:
        return False  # no folder textebm wrote: nothing in it is ours to move or remove
    asides = [p for p in path.iterdir() if p.name.startswith(ASIDE_PREFIX) and p.is_dir() and not p.is_symlink()]
    if plan is None:
        for p in asides:  # made after the journal, so without one it holds an output replaced for good
            shutil.rmtree(p, ignore_errors=True)
        return False
    name = plan.get("aside")
    if not (plain_name(name) and name.startswith(ASIDE_PREFIX)):
        log.warning("%s: %s names no folder of its own (%r); nothing rolled back: check the folder by hand",
                    path, SWAP_JOURNAL, name)
        return False
    tmp = plan.get("tmp")
    if isinstance(tmp, str) and tmp and held(tmp):  # the replacement is live in another process: not ours to undo
        return False
    aside = path / name
    if not aside.is_dir():  # killed before the folder aside was made: nothing had moved
        journal.unlink()
        return False
    old = [n for n in plan.get("old", []) if plain_name(n)]
    new = [n for n in plan.get("new", []) if plain_name(n)]
    for name in new:  # a new entry is in `path` when its old namesake went aside, or it had none
        if os.path.lexists(path / name) and (os.path.lexists(aside / name) or name not in old):
            remove(path / name)
    for name in old:
        if os.path.lexists(aside / name):
            os.replace(aside / name, path / name)
    journal.unlink()
    for p in asides:
        shutil.rmtree(p, ignore_errors=True)
    return True


def remove(p: Path) -> None:
    """Remove a file or folder that textebm wrote (missing is fine)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
