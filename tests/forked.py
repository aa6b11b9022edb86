"""Run a script's `main(argv)` as its own process, without paying Python's and torch's start-up
each time: the child is forked from a server process that imported torch and the script once
(multiprocessing's forkserver, started before any OpenMP pool exists). It is still a process of
its own, so a hard exit (`os._exit(137)`, a kill) ends it alone and nothing leaks between runs.

    res = run_main("toy_train", [str(out), "--kill-at", "7"])   # a subprocess.CompletedProcess
    res = run_main("textebm.cli", ["lm", "train", ...], env={"OMP_NUM_THREADS": "1"})
    res = run_main("kill_at_step", ["10", "lm", "train", ...], entry="run")

The toy loop's tests start 52 such runs; as subprocesses each one paid about 2.5 s of start-up.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import subprocess
import sys
import tempfile

_CONTEXT = None


PRELOAD = ["torch", "textebm.cli", "toy_train", "kill_at_step"]


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def _child(module: str, entry: str, argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    os.chdir(cwd)  # the caller's, not the server's (started wherever the first run was)
    os.environ.clear()  # the caller's environment now, as a subprocess would inherit it
    os.environ.update(env)
    if "OMP_NUM_THREADS" in env:  # torch read it when the server imported it
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    # what a fresh `python script.py` has: stdout and stderr of its own, line-buffered text
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.exit(getattr(importlib.import_module(module), entry)(argv))


def run_main(module: str, argv: list[str], env: dict[str, str] | None = None, entry: str = "main",
             timeout: float = 600) -> subprocess.CompletedProcess:
    """`module.entry(argv)` (its `main`: `python -m module argv...`) as a forked child, with `env`
    added to the environment: its exit status, stdout and stderr."""
    with tempfile.TemporaryDirectory() as d:
        out, err = os.path.join(d, "out"), os.path.join(d, "err")
        open(out, "w").close(), open(err, "w").close()
        p = _context().Process(target=_child, args=(module, entry, argv, {**os.environ, **(env or {})}, os.getcwd(), out, err))
        p.start()
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
            raise TimeoutError(f"{module} {argv} ran past {timeout} s")
        with open(out) as f_out, open(err) as f_err:
            return subprocess.CompletedProcess([module, *argv], p.exitcode, f_out.read(), f_err.read())
