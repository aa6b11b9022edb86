# Two entry points for a fresh machine: `make quickstart` and `make test`.
# Both create .venv with torch==2.13.0 (CPU wheel) and textebm, idempotently.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
WHEELS := $(wildcard /opt/wheels)
PIP_INSTALL := $(PY) -m pip install --disable-pip-version-check -q $(if $(WHEELS),--find-links $(WHEELS))
QUICKSTART_OUT ?= runs/quickstart
export OMP_NUM_THREADS ?= $(shell nproc 2>/dev/null || echo 2)

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
	$(PY) -m pytest -q --durations=20

bench: venv
	$(PY) bench/bench_lm.py

clean:
	rm -rf $(VENV) .pytest_cache
