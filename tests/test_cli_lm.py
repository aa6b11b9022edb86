"""`textebm lm sample | score | eval` end to end on tiny models, and their errors (exit 2)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import patch_everywhere

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


# ---------------------------------------------------------------- outputs, precision, option rules


def _no_work(monkeypatch):
    """Make any model lookup, model load or data read fail the test: the command must stop first."""
    import textebm.data.readers as readers
    import textebm.models.load as load

    def boom(*args, **kwargs):
        raise AssertionError("work started before the output target was checked")

    for module, name in ((load, "find_model"), (load, "load_lm"), (readers, "read_examples"), (readers, "load_split")):
        patch_everywhere(monkeypatch, module, name, boom)


@pytest.mark.parametrize("command", ["score", "sample", "eval"])
def test_existing_output_is_refused_before_any_work(setup, capsys, monkeypatch, command):
    root, run, data = setup["root"], setup["run"], setup["data"]
    target = root / f"existing-{command}.json"
    target.write_text(json.dumps({"eval_test": {"perplexity": 1.0}}), encoding="utf-8")
    argv = {"score": ["lm", "score", "--model", str(run), "--input", str(data / "test.jsonl"), "--out", str(target)],
            "sample": ["lm", "sample", "--model", str(run), "--data", str(data), "--mode", "free",
                       "--out", str(target)],
            "eval": ["lm", "eval", "--model", str(run), "--data", str(data), "--metrics", str(target)]}[command]
    _no_work(monkeypatch)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(target) in err and "--overwrite" in err and "Traceback" not in err
    assert json.loads(target.read_text()) == {"eval_test": {"perplexity": 1.0}}  # untouched
    folder = root / f"a-folder-{command}"
    folder.mkdir()
    argv[argv.index(str(target))] = str(folder)
    assert main(argv) == 2
    assert "is a folder" in capsys.readouterr().err and not any(folder.iterdir())


def test_overwrite_replaces_and_precision_is_recorded(setup, capsys):
    root, run, data = setup["root"], setup["run"], setup["data"]
    out = root / "scores-again.jsonl"
    out.write_text("old\n", encoding="utf-8")  # the user's file: --overwrite does not replace it
    argv = ["lm", "score", "--model", str(run), "--input", str(data / "test.jsonl"), "--out", str(out),
            "--overwrite", "--precision", "fp32"]
    assert main(argv) == 2 and out.read_text() == "old\n"
    out.unlink()
    assert main(argv) == 0 and main(argv) == 0  # textebm's own `lm score` output is replaced
    assert len(out.read_text().splitlines()) == 4

    samples = root / "samples-fp32.jsonl"
    assert main(["lm", "sample", "--model", str(run), "--data", str(data), "--mode", "free", "--limit", "2",
                 "--max-new-tokens", "3", "--precision", "fp32", "--out", str(samples), "--no-progress"]) == 0
    assert {json.loads(x)["precision"] for x in samples.read_text().splitlines()} == {"fp32"}

    metrics = root / "m.json"
    metrics.write_text(json.dumps({"eval_dev": {"perplexity": 3.0}}), encoding="utf-8")
    assert main(["lm", "eval", "--model", str(run), "--data", str(data), "--split", "test", "--metrics",
                 str(metrics), "--precision", "fp32"]) == 0  # another key: merged without --overwrite
    m = json.loads(metrics.read_text())
    assert m["eval_dev"] == {"perplexity": 3.0}
    choice = m["eval_test"]["precision_choice"]
    assert m["eval_test"]["precision"] == "fp32" and choice["requested"] == "fp32" and choice["reason"]
    assert main(["lm", "eval", "--model", str(run), "--data", str(data), "--split", "test", "--metrics",
                 str(metrics), "--overwrite"]) == 0
    assert json.loads(metrics.read_text())["eval_test"]["precision_choice"]["requested"] == "auto"


@pytest.mark.parametrize("args, message", [
    (["--mode", "free", "--temperature", "0"], "--temperature must be greater than 0"),
    (["--mode", "free", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["--mode", "infill", "--mask-ratio", "1.5"], "--mask-ratio must be at most 1"),
    (["--mode", "prefix", "--mask-ratio", "0.3"], "--mask-ratio has no effect with --mode prefix"),
    (["--mode", "infill", "--context-ratio", "0.3"], "--context-ratio has no effect with --mode infill"),
    (["--mode", "free", "--context-tokens", "2"], "--context-tokens has no effect with --mode free"),
    (["--mode", "prefix", "--context-tokens", "2", "--context-ratio", "0.3"],
     "--context-ratio has no effect with --context-tokens"),
    (["--mode", "free", "--seed", "-1"], "--seed must be at least 0"),
])
def test_sample_option_rules_exit_2(setup, capsys, monkeypatch, args, message):
    _no_work(monkeypatch)
    rc = main(["lm", "sample", "--model", str(setup["run"]), "--data", str(setup["data"]),
               "--out", str(setup["root"] / "never.jsonl"), *args])
    assert rc == 2 and message in capsys.readouterr().err


def test_eval_refuses_out_with_metrics(setup, capsys, monkeypatch):
    _no_work(monkeypatch)
    assert main(["lm", "eval", "--model", str(setup["run"]), "--data", str(setup["data"]), "--out", "x",
                 "--metrics", "y.json"]) == 2
    assert "--out has no effect with --metrics" in capsys.readouterr().err


def test_lm_score_and_eval_name_a_too_long_text_by_file_and_line(tmp_path, capsys):
    """Like `score`: a text longer than the model takes is FILE:LINE, exit 2, nothing written."""
    make_tiny_lm(tmp_path / "lm")
    inp = tmp_path / "in.txt"
    inp.write_text("w1 w2\n\nw3\n" + " ".join(["w5"] * 10_000) + "\nw4\n")  # the long text on line 4
    out = tmp_path / "s.jsonl"
    assert main(["lm", "score", "--model", str(tmp_path / "lm"), "--input", str(inp), "--out", str(out)]) == 2
    assert f"{inp}:4: this text has 10000 tokens" in capsys.readouterr().err and not out.exists()
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"text": "w1 w2", "text_pair": "w3"}, {"text": "w4", "text_pair": " ".join(["w5"] * 10_000)}]
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["lm", "eval", "--model", str(tmp_path / "lm"), "--data", str(data), "--split", "test"]) == 2
    assert f"{data / 'test.jsonl'}:2: its text_pair has 10000 tokens" in capsys.readouterr().err
