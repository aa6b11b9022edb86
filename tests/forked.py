"""Run a script's `main(argv)` as its own process, without paying Python's and torch's start-up
each time: the child is forked from a server process that imported torch and the script once
(multiprocessing's forkserver, started before any OpenMP pool exists). It is still a process of
its own, so a hard exit (`os._exit(137)`, a kill) ends it alone and nothing leaks between runs.

    res = run_main("toy_train", [str(out), "--kill-at", "7"])   # a subprocess.CompletedProcess
    res = run_main("textebm.cli", ["lm", "train", ...], env={"OMP_NUM_THREADS": "1"})
    res = run_main("kill_at_step", ["10", "lm", "train", ...], entry="run")

The toy loop's tests start 52 such runs; as subprocesses each one paid about 2.5 s of start-up.

A script that calls `textebm` as a command (bench/generation/pipeline-v2.sh) gets the same through a
server of its own: `served(env)` starts one (a fresh process that imports torch and textebm.cli,
listening on a Unix socket) and gives the command line to use for `textebm`,
`python tests/forked.py --client SOCKET`, a client without torch that sends its argv, environment,
working folder and stdout / stderr to the server, which forks a child to run `textebm.cli.main`
and answers with its exit status.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

_CONTEXT = None


PRELOAD = ["torch", "textebm.cli", "toy_train", "kill_at_step"]


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def _become(env: dict[str, str], cwd: str, out_fd: int, err_fd: int) -> None:
    """Turn a forked child into the caller's process: its folder, environment, stdout and stderr."""
    os.chdir(cwd)  # the caller's, not the server's (started wherever the first run was)
    os.environ.clear()  # the caller's environment now, as a subprocess would inherit it
    os.environ.update(env)
    if "OMP_NUM_THREADS" in env:  # torch read it when the server imported it
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    # what a fresh `python script.py` has: stdout and stderr of its own, line-buffered text
    for fd, f in ((1, out_fd), (2, err_fd)):
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def _child(module: str, entry: str, argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    _become(env, cwd, os.open(out, os.O_WRONLY | os.O_TRUNC), os.open(err, os.O_WRONLY | os.O_TRUNC))
    sys.exit(getattr(importlib.import_module(module), entry)(argv))


def _exit_status(e: SystemExit) -> int:
    """The status `python -m` ends with after SystemExit(e.code)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _serve(path: str) -> None:
    """Answer `--client` requests on the Unix socket PATH, one at a time, each in a forked child. A
    request that fails (a client killed mid-way) is dropped; the server goes on."""
    for name in ("torch", "textebm.cli"):
        importlib.import_module(name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".new")
    server.listen()
    os.rename(path + ".new", path)  # the path appears only once it listens
    while True:
        conn, _ = server.accept()
        with conn:
            try:
                _, fds, _, _ = socket.recv_fds(conn, 1, 2)  # the client's stdout and stderr
                request = json.loads(b"".join(iter(lambda: conn.recv(1 << 16), b"")))
            except (OSError, ValueError):
                continue
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                try:
                    _become(request["env"], request["cwd"], *fds)
                    status = getattr(importlib.import_module("textebm.cli"), "main")(request["argv"]) or 0
                except SystemExit as e:
                    status = _exit_status(e)
                except BaseException:
                    traceback.print_exc()
                    status = 1
                atexit._run_exitfuncs()  # what a fresh interpreter runs at its end (logging's flush among them)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
            for f in fds:
                os.close(f)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            with contextlib.suppress(OSError):
                conn.sendall(str(128 - code if code < 0 else code).encode())  # killed by signal N: 128 + N, as a shell says


def _client(path: str, argv: list[str]) -> int:
    """`textebm ARGV` run by the server at PATH: its exit status (stdout and stderr are this process's)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        socket.send_fds(conn, [b"."], [1, 2])
        conn.sendall(json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode())
        conn.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: conn.recv(64), b""))
    if not reply:
        sys.exit(f"forked.py: the textebm server at {path} gave no exit status for {argv}")
    return int(reply)


@contextlib.contextmanager
def served(env: dict[str, str]):
    """A server for `--client` started with ENV (torch reads OMP_NUM_THREADS at import; the child
    takes the caller's environment, folder, stdout and stderr, but stdin, umask and sys.path are
    the server's): yields the command line that runs `textebm` through it. Its end kills the server
    and any child still running (one process group)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "textebm.sock")
        server = subprocess.Popen([sys.executable, __file__, "--serve", path], env=env, start_new_session=True)
        try:
            start = time.monotonic()
            while not os.path.exists(path):
                if server.poll() is not None or time.monotonic() - start > 120:
                    raise RuntimeError(f"the textebm server did not start (exit status {server.poll()})")
                time.sleep(0.05)
            yield f"{sys.executable} {__file__} --client {path}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()


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


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2])
    elif sys.argv[1:2] == ["--client"]:
        sys.exit(_client(sys.argv[2], sys.argv[3:]))
    else:
        sys.exit("usage: forked.py --serve SOCKET | --client SOCKET ARGS...")
