"""Content hashes: what a resumed run and an output marker compare instead of paths.

`folder_sha256` hashes a model folder by content (every file's relative name and bytes: weights,
config, tokenizer), so a model replaced at the same path is told apart and a copied one is not.
A file's hash is kept for the process, keyed by (path, inode, size, mtime), so a folder is read
once per process.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

_FILE_CACHE: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (cached within the process by path, inode, size and mtime)."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _FILE_CACHE:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _FILE_CACHE[key] = digest.hexdigest()
    return _FILE_CACHE[key]


def folder_sha256(path: str | Path) -> str:
    """sha256 over the files of a folder and its subfolders (relative name and content of each;
    hidden entries such as textebm's markers are left out)."""
    root = Path(path)
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(n for n in filenames if not n.startswith(".")):
            f = Path(dirpath) / name
            if f.is_file():
                digest.update(f"{f.relative_to(root).as_posix()}\0{file_sha256(f)}\n".encode())
    return digest.hexdigest()


def json_sha256(obj: Any) -> str:
    """sha256 of a JSON-able value (keys sorted): the identity of inputs held in memory."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
