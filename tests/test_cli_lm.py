"""`textebm lm sample | score | eval` end to end on tiny models, and their errors (exit 2)."""

from __future__ import annotations

import json
import math

import pytest

from test_lm_sampling import make_tiny_lm, sentence, write_data
from textebm.cli import main


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_lm")
    run = root / "run"
    make_tiny_lm(run / "model", seed=5)  # the layout `lm train` writes: RUN/model/
    (run / "metrics.json").write_text(json.dumps({"train": {"loss": 1.5}}), encoding="utf-8")
    data = root / "data"
    for split, n in (("train", 6), ("test", 4)):
        write_data(data / f"{split}.jsonl", [{"id": f"{split}-{i}", "text": sentence(i, 2 + i), "label": "a"}
                                              for i in range(n)])
    return {"root": root, "run": run, "data": data, "r2l": make_tiny_lm(root / "r2l", direction="r2l")}


def test_sample_writes_rows(setup):
    out = setup["root"] / "noise.jsonl"
    rc = main(["lm", "sample", "--model", str(setup["run"]), "--data", str(setup["data"]), "--split", "train",
               "--mode", "free", "--top-k", "5", "--per-example", "2", "--max-new-tokens", "4",
               "--batch-size", "3", "--seed", "1", "--out", str(out)])
    assert rc == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 12 and rows[1]["id"] == "train-0-n1" and rows[1]["source_label"] == "a"
    assert all(r["mode"] == "free" and r["top_k"] == 5 and r["context"] == "" for r in rows)
    assert all(1 <= len(r["text"].split()) <= 4 for r in rows)


def test_score_and_eval_agree(setup, capsys):
    run, data = setup["run"], setup["data"]
    scores = setup["root"] / "scores.jsonl"
    assert main(["lm", "score", "--model", str(run), "--input", str(data / "test.jsonl"),
                 "--out", str(scores), "--batch-size", "2"]) == 0
    rows = [json.loads(x) for x in scores.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"test-{i}" for i in range(4)]
    assert all(r["num_tokens"] == len(r["text"].split()) + 1 for r in rows)

    capsys.readouterr()
    assert main(["lm", "eval", "--model", str(run), "--data", str(data), "--split", "test"]) == 0
    printed = json.loads(capsys.readouterr().out)["eval_test"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["train"] == {"loss": 1.5}  # merged, not replaced
    ev = metrics["eval_test"]
    assert ev == printed
    nll, tokens = -sum(r["logprob"] for r in rows), sum(r["num_tokens"] for r in rows)
    assert ev["tokens"] == tokens and ev["perplexity"] == pytest.approx(math.exp(nll / tokens), rel=1e-5)
    assert ev["word_perplexity"] == pytest.approx(math.exp(nll / ev["words"]), rel=1e-5)

    other = setup["root"] / "elsewhere.json"
    assert main(["lm", "eval", "--model", str(run / "model"), "--data", str(data), "--split", "test",
                 "--metrics", str(other), "--precision", "bf16"]) == 0
    bf16 = json.loads(other.read_text())["eval_test"]
    assert bf16["precision"] == "bf16" and bf16["perplexity"] == pytest.approx(ev["perplexity"], rel=0.05)


@pytest.mark.parametrize("args, message", [
    (["--model", "{root}/no-such-model", "--mode", "free"], "model folder"),
    (["--model", "{run}", "--mode", "suffix"], "right-to-left"),
    (["--model", "{r2l}", "--mode", "prefix"], "left-to-right"),
    (["--model", "{run}", "--mode", "infill"], "objective infill"),
    (["--model", "{run}", "--mode", "free", "--top-k", "0"], "--top-k"),
])
def test_sample_errors_exit_2(setup, capsys, args, message):
    args = [a.format(root=setup["root"], run=setup["run"], r2l=setup["r2l"]) for a in args]
    rc = main(["lm", "sample", "--data", str(setup["data"]), "--out", str(setup["root"] / "x.jsonl"), *args])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_score_errors_exit_2(setup, capsys):
    assert main(["lm", "score", "--model", str(setup["root"] / "missing"), "--input", "x.txt",
                 "--out", "y.jsonl"]) == 2
    assert main(["lm", "score", "--model", str(setup["run"]), "--input", str(setup["root"] / "none.txt"),
                 "--out", str(setup["root"] / "y.jsonl")]) == 2
    assert "file not found" in capsys.readouterr().err
