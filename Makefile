# Two entry points for a fresh machine: `make quickstart` and `make test`.
# Both create .venv with torch==2.13.0 (CPU wheel) and textebm, idempotently.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
WHEELS := $(wildcard /opt/wheels)
PIP_INSTALL := $(PY) -m pip install --disable-pip-version-check -q $(if $(WHEELS),--find-links $(WHEELS))
QUICKSTART_OUT ?= runs/quickstart
# The cores (GNU nproc alone would answer OMP_NUM_THREADS: 1 where a user exported it for jobs)
NPROC := $(shell env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
export OMP_NUM_THREADS ?= $(NPROC)
# The suite runs on one pytest-xdist worker per core, each on one thread, each test file on one
# worker (its module fixtures built once): 1.9x faster than one process on two threads
# (bench/results/performance/suite_time.md). TEST_WORKERS=0 (or 1, or a 1-core machine) runs it
# in one process on OMP_NUM_THREADS threads.
TEST_WORKERS ?= $(NPROC)
SERIAL := $(filter 0 1,$(TEST_WORKERS))

.PHONY: venv dev quickstart test bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) "$(TORCH)"
	$(PIP_INSTALL) -e .
	touch $@

# The dev extra holds pytest and the independent reference implementations the tests compare
# against (netcal, uncertainty-calibration); under CI=true a skipped test fails the run.
$(VENV)/.dev-installed: $(VENV)/.installed pyproject.toml Makefile
	$(PIP_INSTALL) -e ".[dev]"
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.dev-installed

quickstart: venv
	$(PY) -m textebm quickstart --out $(QUICKSTART_OUT)

test: dev
	OMP_NUM_THREADS=$(if $(SERIAL),$(OMP_NUM_THREADS),1) \
	  $(PY) -m pytest -q $(if $(SERIAL),-n 0,-n $(TEST_WORKERS) --dist loadfile) --durations=20

bench: venv
	$(PY) bench/bench_lm.py

clean:
	rm -rf $(VENV) .pytest_cache
