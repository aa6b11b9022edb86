"""bench/generation/pipeline-v2.sh (paper d, issue 35) end to end on a toy corpus with tiny sizes:
every stage runs (base LM, negatives, the zero-shot probe, the MLM behind BiT, the energies with
the control energy, RALM and BALM, `residual ppl` with its bootstrap, table 3, Algorithm 1's generations), and a second run
finds everything cached and changes nothing (and refuses a finished run trained with other settings);
a table takes the rows of an energy scored on its own (PPL_REUSE) with the same numbers; and
two_lanes.sh, the same stages in two lanes, scores each energy once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import toy_corpus, walking_doc
from forked import served

PIPELINE = Path(__file__).resolve().parents[1] / "bench" / "generation" / "pipeline-v2.sh"
LANES = PIPELINE.with_name("two_lanes.sh")
TINY = {
    "CORPORA": "toy", "CURVE": "0", "ENERGIES": "lmstats-held bit-cont", "K": "2", "DEV_WINDOWS": "24",
    "PPL_NAME": "table1", "WINDOWS": "3", "SAMPLES": "8", "BOOT": "50", "ENERGY_EPOCHS": "1", "EBATCH": "8",
    "LM": "--arch transformer --layers 1 --width 32 --heads 2 --context 48 --chunk 32 --batch-size 8 --lr 3e-3",
    "STOP": "--epochs 1 --keep-best --patience 1",
    "WIN": "--length 20 --contexts 14 --stride 10",
    "MLM": "--layers 1 --width 32 --heads 2 --max-len 48 --batch-size 8 --lr 3e-3 --epochs 1 --keep-best --patience 1",
    "RALM": "--layers 1 --width 32 --heads 2 --context 48 --chunk 32 --batch-size 8 --lr 3e-3",
    "BALM": "--arch transformer --layers 1 --width 48 --heads 2 --context 48 --chunk 32 --batch-size 8 --lr 3e-3",
    "TABLE3": "--examples 2 --candidates 3 --completions 4",
    "GEN": "--windows 3 --n 4 --top-k 5",
}


@pytest.fixture(scope="module")
def textebm(tmp_path_factory):
    """`textebm` for the pipeline: each call a child forked from one server that imported torch once
    (tests/forked.py; as a fresh `python -m textebm` each of the pipeline's ~20 calls paid ~2.5 s)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path_factory.mktemp("hf"))}
    with served(env) as command:
        yield command


def _run(textebm: str, work: Path, *stages: str, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **TINY, **extra, "TEXTEBM": textebm, "PYTHON": sys.executable,
           "OMP_NUM_THREADS": "1", "HF_HOME": str(work.parent / "hf")}
    return subprocess.run(["bash", str(PIPELINE), str(work), *stages], env=env, capture_output=True, text=True, timeout=900)


def _toy_work(tmp_path: Path) -> Path:
    toy_corpus(tmp_path, walking_doc)
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    shutil.move(tmp_path / "data", work / "data" / "toy")
    shutil.move(tmp_path / "vocab", work / "vocab")
    return work


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, textebm):
    """A work folder where the pipeline ran every stage once: (work, its CompletedProcess)."""
    work = _toy_work(tmp_path_factory.mktemp("pipeline"))
    return work, _run(textebm, work)


def test_every_stage_runs_end_to_end_and_a_second_run_is_cached(first_run, textebm):
    work, first = first_run
    assert first.returncode == 0, first.stderr[-4000:]
    ppl = json.loads((work / "ppl" / "toy-table1-w0" / "metrics.json").read_text())
    assert ppl["precision"] == "fp32" and ppl["windows"] == 3
    assert sorted(m["energy"].split("/")[-2] for m in ppl["models"]) == [
        "toy-bit-cont-w0", "toy-lmstats-held-w0"]
    assert len(ppl["compare"]) == 2  # RALM and BALM, to their dev optimum
    held = json.loads((work / "energy" / "toy-lmstats-held-w0" / "config.json").read_text())
    assert held["train"] == ["neg/toy-held-train.jsonl"] and held["val"] == ["neg/toy-held-val.jsonl"]
    assert ppl["differences"] and all("lo" in d["upper"] and "hi" in d["upper"] for d in ppl["differences"])
    for name in ("toy-bit-cont",):
        assert json.loads((work / "table3" / name / "metrics.json").read_text())
        gen = json.loads((work / "gen" / name / "metrics.json").read_text())
        assert gen["prefixes"] == 3 and (work / "gen" / name / "density.png").is_file()
    assert (work / "probe" / "toy-fastdetectgpt" / "detector.json").is_file()
    stamp = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()}
    second = _run(textebm, work)
    assert second.returncode == 0, second.stderr[-4000:]
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()} == stamp
    # the same output name for another set of models: refused, not silently kept
    third = _run(textebm, work, "ppl", ENERGIES="bit-cont")
    assert third.returncode == 2 and "scored toy-balm, toy-bit-cont-w0, toy-lmstats-held-w0, toy-ralm" in third.stderr
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()} == stamp
    # a finished training run with other settings than the pipeline's: refused, naming them, not kept as if asked for
    fourth = _run(textebm, work, "mlm", MLM=TINY["MLM"].replace("--lr 3e-3", "--lr 1e-3"))
    assert fourth.returncode == 2 and "mlm/toy: --resume with different settings: lr=0.003->0.001" in fourth.stderr
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()} == stamp
    # one energy scored on its own (no baselines), then the table taking its rows (PPL_REUSE): the same numbers
    fifth = _run(textebm, work, "ppl", ENERGIES="bit-cont", BASELINES="", PPL_NAME="one")
    assert fifth.returncode == 0, fifth.stderr[-4000:]
    assert json.loads((work / "ppl" / "toy-one-w0" / "metrics.json").read_text())["compare"] == []
    sixth = _run(textebm, work, "ppl", PPL_NAME="reused", PPL_REUSE="one")
    assert sixth.returncode == 0, sixth.stderr[-4000:]
    reused = json.loads((work / "ppl" / "toy-reused-w0" / "metrics.json").read_text())
    assert reused["models"] == ppl["models"] and reused["differences"] == ppl["differences"]
    assert [r["energy"].split("/")[-2] for r in reused["reused"]] == ["toy-bit-cont-w0"]


def test_two_lanes_score_each_energy_once_and_the_table_takes_their_rows(tmp_path, first_run, textebm):
    """bench/generation/two_lanes.sh on a copy of the pipeline's trained models (its own tables
    removed): lane B scores the energies (PPL_NAME=energies) and table 1 takes their rows by
    --reuse, scoring only the LMs, with the numbers of the pipeline's table scored in one go. A lane
    that fails (from nothing: a bad LM option) stops the other and the script (exit 1), no table."""
    trained, first = first_run
    assert first.returncode == 0, first.stderr[-4000:]
    work = tmp_path / "work"
    shutil.copytree(trained, work, ignore=shutil.ignore_patterns("ppl", "table3", "gen", "probe"))
    env = {**os.environ, **TINY, "TEXTEBM": textebm, "PYTHON": sys.executable, "HF_HOME": str(tmp_path / "hf")}
    run = subprocess.run(["bash", str(LANES), str(work)], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    own = json.loads((work / "ppl" / "toy-energies-w0" / "metrics.json").read_text())
    table = json.loads((work / "ppl" / "toy-table1-w0" / "metrics.json").read_text())
    assert own["compare"] == [] and len(table["compare"]) == 2  # RALM and BALM only in the table
    assert sorted(r["from"] for r in table["reused"]) == ["ppl/toy-energies-w0"] * 2
    assert "ppl/toy-energies-w0" in (work / "lane-b.log").read_text()  # scored on lane B
    at_once = json.loads((trained / "ppl" / "toy-table1-w0" / "metrics.json").read_text())

    def rows(m):  # the figures, without the run folders' paths
        return ([{k: v for k, v in r.items() if k != "energy"} for r in m["models"]],
                [c["ppl"] for c in m["compare"]], m["differences"])
    assert rows(table) == rows(at_once)
    broken = _toy_work(tmp_path / "broken")
    failed = subprocess.run(["bash", str(LANES), str(broken)], env={**env, "LM": "--no-such-option"},
                            capture_output=True, text=True, timeout=900)
    assert failed.returncode == 1 and "a lane failed" in failed.stderr
    assert "the other lane failed" in (broken / "lane-b.log").read_text() and not (broken / "ppl").exists()


@pytest.mark.parametrize("over, message", [({"ENERGIES": "lmstats unit-sum"}, "unknown energy 'unit-sum'"),
                                           ({"BASELINES": "ralm ralmx"}, "unknown baseline 'ralmx'"),
                                           ({"MINILM_STEPS": "0"}, "MINILM_STEPS must be a positive number")])
def test_an_unknown_energy_or_baseline_stops_the_pipeline_before_it_writes(tmp_path, over, message):
    run = _run(f"{sys.executable} -m textebm", tmp_path / "work", "energies", "baselines", **over)
    assert run.returncode == 2 and message in run.stderr
    assert not (tmp_path / "work").exists()  # not even the work folder: the names are checked first
