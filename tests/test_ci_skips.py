"""Under CI=true a skipped test, or a module skipped at collection, fails the run (tests/conftest.py):
the reference tests must run in CI, not vanish. Checked on a copy of the conftest in a scratch folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SKIPS = {
    "test_a_skip.py": "import pytest\n\ndef test_skipped():\n    pytest.skip('no reference here')\n",
    "test_module_skip.py": "import pytest\npytest.importorskip('no_such_module_xyz')\n\ndef test_never():\n    pass\n",
    "test_fine.py": "def test_passes():\n    assert 1 + 1 == 2\n",
}


def _pytest(root: Path, ci: bool, *args: str) -> subprocess.CompletedProcess:
    """pytest on ROOT with `args` (options, then the files to run; all of ROOT without files)."""
    outer = ("CI", "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS")
    env = {k: v for k, v in os.environ.items() if k not in outer} | ({"CI": "true"} if ci else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ci_skips")
    shutil.copy(Path(__file__).with_name("conftest.py"), root / "conftest.py")
    for name, text in SKIPS.items():
        (root / name).write_text(text)
    return root


FAILS = {"test_a_skip.py": "test_a_skip.py::test_skipped - skipped under CI=true",
         "test_module_skip.py": "test_module_skip.py - module skipped under CI=true"}


@pytest.mark.parametrize("files,workers", [(["test_a_skip.py"], "0"), (["test_module_skip.py"], "0"),
                                           (list(FAILS), "2")])
def test_under_ci_a_skip_and_a_module_skip_each_fail_the_run(scratch, files, workers):
    # in one process a module skipped at collection stops the run (exit 2), as any collection error
    run = _pytest(scratch, True, "-n", workers, *files)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    for name in files:
        assert FAILS[name] in out, out


def test_outside_ci_they_are_plain_skips(scratch):
    run = _pytest(scratch, False, "-n", "0", *SKIPS)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 2 skipped" in run.stdout, run.stdout
