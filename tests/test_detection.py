"""Real-vs-generated detection (Bakhtin et al. 2019) end to end on a tiny corpus: the gated
convolutional LM, windows, negatives, `detect train | fit | eval | score | threshold`, the
matrix and its cache, and their errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import same, toy_corpus, walking_doc

from textebm.cli import main

_doc = walking_doc


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A dataset folder split by document, a shared BPE vocabulary, and tiny l2r / r2l generators
    (transformer and gated conv) trained for a few steps by `lm train`."""
    root = tmp_path_factory.mktemp("residual")
    toy_corpus(root, _doc)
    gens = {}
    for arch, direction, seed in (("transformer", "l2r", 0), ("transformer", "r2l", 0), ("transformer", "l2r", 1),
                                  ("gcnn", "l2r", 0)):
        out = root / f"gen-{arch}-{direction}-{seed}"
        extra = ["--heads", "2"] if arch == "transformer" else ["--kernel", "3"]
        assert main(["lm", "train", "--data", str(root / "data"), "--tokenizer", str(root / "vocab"), "--arch", arch,
                     "--layers", "1", "--width", "32", *extra, "--context", "48", "--chunk", "32", "--max-steps", "3",
                     "--batch-size", "8", "--lr", "3e-3", "--direction", direction, "--seed", str(seed),
                     "--out", str(out), "--no-progress", "--eval-split", ""]) == 0
        gens[(arch, direction, seed)] = out
    return {"root": root, "data": root / "data", "vocab": root / "vocab", "gens": gens}


def corpus_vocab(corpus):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(corpus["vocab"])


def _negatives(corpus, split: str, gen, out: Path, *extra) -> list[dict]:
    rc = main(["negatives", "generate", "--data", str(corpus["data"]), "--generator", str(gen),
               "--vocab", str(corpus["vocab"]), "--split", split, "--length", "24", "--contexts", "16", "20",
               "--stride", "8", "--k", "2", "--out", str(out), "--no-progress", *extra])
    assert rc == 0
    return [json.loads(x) for x in out.read_text().splitlines()]


# ---------------------------------------------------------------- the gated convolutional LM


def test_gcnn_cached_sampling_equals_recomputation_and_is_causal(tmp_path):
    from transformers import AutoModelForCausalLM

    from textebm.lm.generate import generate
    from textebm.models.gcnn import build_gcnn

    m = build_gcnn(40, 16, 2, 3, 64, pad=0, bos=2, eos=3, seed=1).eval()
    ctx = [[2, 5, 6, 7], [2, 9], [2, 10, 11, 12, 13, 14]]
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(3)]
    fast = generate(m, ctx, [6, 6, 6], gens(), 3, 0, 8, use_cache=True)
    slow = generate(m, ctx, [6, 6, 6], gens(), 3, 0, 8, use_cache=False)
    assert [g.tokens for g in fast] == [g.tokens for g in slow]
    assert np.allclose([g.logprob for g in fast], [g.logprob for g in slow], atol=1e-5)
    x = torch.tensor([[2, 5, 6, 7, 8, 9]])
    y = x.clone()
    y[0, 4:] = torch.tensor([30, 31])
    with torch.no_grad():
        a, b = m(x).logits, m(y).logits
    assert torch.equal(a[:, :4], b[:, :4]) and not torch.equal(a[:, 4:], b[:, 4:])  # the future is unseen
    # left padding changes nothing for the real tokens
    pad = torch.tensor([[0, 0, 2, 5, 6, 7]])
    with torch.no_grad():
        padded = m(pad, attention_mask=torch.tensor([[0, 0, 1, 1, 1, 1]])).logits
    assert torch.allclose(padded[:, 2:], m(x[:, :4]).logits, atol=1e-5)
    m.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(again(x).logits, m(x).logits)


def test_lm_train_gcnn_learns_and_loads(corpus):
    from textebm.models.load import folder_kind, load_lm

    run = corpus["gens"][("gcnn", "l2r", 0)]
    assert folder_kind(run) == "causal-lm"
    model, _, meta = load_lm(run)
    assert type(model).__name__ == "GatedConvForCausalLM" and meta.direction == "l2r"
    hist = json.loads((run / "metrics.json").read_text())["train"]
    assert hist["steps"] == 3


# ---------------------------------------------------------------- windows and negatives


def test_windows_strides_contexts_and_splits():
    from textebm.data.streams import starts
    from textebm.detection.windows import (
        assemble,
        context_ids,
        generated_part,
        make_windows,
    )

    assert list(starts(10, 4, 2)) == [0, 2, 4, 6] and list(starts(3, 4, 1)) == []
    streams = [("d1", list(range(100, 120))), ("d2", list(range(200, 205)))]
    wins = make_windows(streams, "c", "dev", 8, 4, [5, 6], seed=0)
    assert [w.start for w in wins] == [0, 4, 8, 12] and all(w.doc == "d1" for w in wins)  # d2 is too short
    for w in wins:
        assert list(w.ids) == list(range(100 + w.start, 108 + w.start)) and w.context_len in (5, 6)
        assert w.key == f"c/dev/d1/{w.start}"
    assert {w.context_len for w in make_windows([("d", list(range(400)))], "c", "dev", 8, 1, [5, 6], 0)} == {5, 6}
    w = wins[0]
    assert context_ids(w, "l2r") == list(w.ids[:w.context_len])
    assert context_ids(w, "r2l") == list(w.ids[-w.context_len:])
    gen = [1] * (8 - w.context_len)
    assert assemble(w, "r2l", gen)[:len(gen)] == gen and generated_part(assemble(w, "l2r", gen), w.context_len, "l2r") == gen
    sub = make_windows(streams, "c", "dev", 8, 1, [5], seed=3, max_windows=5)
    assert len(sub) == 5 and [x.start for x in sub] == sorted(x.start for x in sub)
    assert sub == make_windows(streams, "c", "dev", 8, 1, [5], seed=3, max_windows=5)  # seeded


def test_negatives_keep_the_context_and_replace_only_the_rest(corpus, tmp_path):
    data_docs = {json.loads(x)["doc"] for x in (corpus["data"] / "dev.jsonl").read_text().splitlines()}
    for direction in ("l2r", "r2l"):
        rows = _negatives(corpus, "dev", corpus["gens"][("transformer", direction, 0)], tmp_path / f"{direction}.jsonl")
        assert rows and all(r["doc"] in data_docs and r["split"] == "dev" for r in rows)  # no window crosses a split
        for r in rows:
            c, pos = r["context_len"], r["positive"]
            assert r["direction"] == direction and len(r["negatives"]) == 2 and r["top_k"] == 10
            for neg in r["negatives"]:
                assert len(neg) == len(pos) == 24
                if direction == "l2r":
                    assert neg[:c] == pos[:c]
                else:
                    assert neg[len(pos) - c:] == pos[len(pos) - c:]
            assert any(neg != pos for neg in r["negatives"])


def _interrupted_negatives(corpus, monkeypatch, gen, out: Path, batches: int, *extra) -> Path:
    """`negatives generate` interrupted (as Ctrl-C) after `batches` batches; returns its .partial."""
    import textebm.lm.generate as generate_module

    real, calls = generate_module.generate, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) > batches:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(generate_module, "generate", flaky)
    rc = main(["negatives", "generate", "--data", str(corpus["data"]), "--generator", str(gen), "--vocab",
               str(corpus["vocab"]), "--split", "dev", "--length", "24", "--contexts", "16", "20", "--stride", "8",
               "--k", "2", "--out", str(out), "--no-progress", *extra])
    monkeypatch.undo()
    assert rc == 130 and not out.exists()
    return out.with_name(out.name + ".partial")


def test_negatives_are_resumable_and_independent_of_the_batch(corpus, tmp_path, monkeypatch):
    gen = corpus["gens"][("transformer", "l2r", 0)]
    full = _negatives(corpus, "dev", gen, tmp_path / "a.jsonl", "--batch-size", "64")
    out = tmp_path / "b.jsonl"
    partial = _interrupted_negatives(corpus, monkeypatch, gen, out, 2, "--batch-size", "6")
    assert partial.read_text().count("\n") == 1 + 2 * 3  # the header and two batches of three windows
    with open(partial, "a") as f:
        f.write('{"key": "torn')
    again = _negatives(corpus, "dev", gen, out, "--batch-size", "4")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "neg_logq"} for r in rows]
    assert strip(again) == strip(full)  # the same tokens; log q up to fp32 rounding of another batch
    assert np.allclose([r["neg_logq"] for r in again], [r["neg_logq"] for r in full], atol=1e-4)


def test_negatives_never_resume_from_another_generator_at_the_same_path(corpus, tmp_path, monkeypatch, capsys):
    """The .partial names the generator by content: one replaced at the same path is another run."""
    import shutil

    gen = tmp_path / "gen"
    shutil.copytree(corpus["gens"][("transformer", "l2r", 0)], gen)
    out = tmp_path / "n.jsonl"
    partial = _interrupted_negatives(corpus, monkeypatch, gen, out, 1, "--batch-size", "4")
    before = partial.read_bytes()
    shutil.rmtree(gen)
    shutil.copytree(corpus["gens"][("transformer", "l2r", 1)], gen)  # another seed's weights, the same config
    capsys.readouterr()
    assert main(["negatives", "generate", "--data", str(corpus["data"]), "--generator", str(gen), "--vocab",
                 str(corpus["vocab"]), "--split", "dev", "--length", "24", "--contexts", "16", "20", "--stride", "8",
                 "--k", "2", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{partial}: was written with other settings" in err and "generator_sha256" in err
    assert partial.read_bytes() == before and not out.exists()


def test_negatives_resume_from_the_same_generator_moved_to_another_path(corpus, tmp_path, monkeypatch):
    """The .partial names the generator by content: the same model under another path resumes, and
    the file equals an uninterrupted run's (each row's `generator` says where its model was read)."""
    import shutil

    gen, moved = tmp_path / "gen", tmp_path / "moved"
    shutil.copytree(corpus["gens"][("transformer", "l2r", 0)], gen)
    out, full = tmp_path / "n.jsonl", tmp_path / "full.jsonl"
    _interrupted_negatives(corpus, monkeypatch, gen, out, 1, "--batch-size", "4")
    gen.rename(moved)
    for o in (out, full):
        assert main(["negatives", "generate", "--data", str(corpus["data"]), "--generator", str(moved), "--vocab",
                     str(corpus["vocab"]), "--split", "dev", "--length", "24", "--contexts", "16", "20", "--stride",
                     "8", "--k", "2", "--out", str(o), "--no-progress", "--batch-size", "4"]) == 0
    rows = lambda f: [{k: v for k, v in json.loads(x).items() if k != "generator"} for x in f.read_text().splitlines()]
    assert rows(out) == rows(full) and len(rows(full)) > 4


def test_negatives_overwrite_never_replaces_the_data_or_a_users_file(corpus, tmp_path, capsys):
    split = corpus["data"] / "dev.jsonl"
    mine = tmp_path / "mine.jsonl"
    mine.write_text("my notes\n")
    before = split.read_bytes()
    for out, why in ((split, "is the input of --data"), (mine, "not written by textebm")):
        assert main(["negatives", "generate", "--data", str(corpus["data"]), "--generator",
                     str(corpus["gens"][("transformer", "l2r", 0)]), "--vocab", str(corpus["vocab"]), "--split", "dev",
                     "--out", str(out), "--overwrite", "--no-progress"]) == 2
        assert why in capsys.readouterr().err
    assert split.read_bytes() == before and mine.read_text() == "my notes\n"


def test_negatives_windows_and_rows_in_memory_equal_the_command(corpus, tmp_path):
    """The library path (no command config, no file): windows_of + NegativeSampler.sample_negatives
    give the command's rows."""
    from textebm.detection.negative_sampling import (
        NegativeSampler,
        NegativesSpec,
        windows_of,
    )
    from textebm.models.load import load_lm

    gen = corpus["gens"][("transformer", "l2r", 0)]
    rows = _negatives(corpus, "dev", gen, tmp_path / "n.jsonl", "--max-windows", "5", "--seed", "2")
    vocab = corpus_vocab(corpus)
    wins = windows_of(corpus["data"], "dev", vocab, 24, [16, 20], stride=8, seed=2, max_windows=5)
    model, tok, meta = load_lm(gen)
    mem = NegativeSampler(model, tok, meta, vocab).sample_negatives(wins, NegativesSpec(k=2, seed=2, batch_size=3))
    assert [r["negatives"] for r in mem] == [r["negatives"] for r in rows]
    assert [r["key"] for r in mem] == [r["key"] for r in rows] and len(mem) == 5


def test_detector_outputs_replace_only_their_own_files(corpus, trained, tmp_path, capsys):
    """--overwrite on a file output of `detect eval / score / threshold` replaces only what the same
    command wrote (its marker beside it): never an input, a run's metrics.json or another command's file."""
    texts = tmp_path / "t.txt"
    texts.write_text("".join(json.loads(x)["text"] + "\n" for x in (corpus["data"] / "test.jsonl").read_text().splitlines()))
    metrics = trained["run"] / "metrics.json"
    before = metrics.read_bytes()
    base = ["--model", str(trained["run"])]
    cmds = {"eval": ["detect", "eval", *base, "--test", str(trained["test"])],
            "score": ["detect", "score", *base, "--input", str(texts)],
            "threshold": ["detect", "threshold", *base, "--human", str(texts), "--fpr", "0.2"]}
    for name, argv in cmds.items():
        assert main([*argv, "--out", str(metrics), "--overwrite"]) == 2, name
        assert "not written by textebm" in capsys.readouterr().err
        own = tmp_path / f"{name}.out"
        assert main([*argv, "--out", str(own)]) == 0
        assert main([*argv, "--out", str(own), "--overwrite"]) == 0  # its own output: replaced
    assert metrics.read_bytes() == before
    assert main([*cmds["score"], "--out", str(tmp_path / "eval.out"), "--overwrite"]) == 2  # another command's
    assert "holds the output of `detect eval`" in capsys.readouterr().err
    assert main([*cmds["score"], "--out", str(texts), "--overwrite"]) == 2  # its own input
    assert "is the input of --input" in capsys.readouterr().err
    assert texts.read_text().count("\n") > 4


def test_foreign_generator_is_retokenised_and_cut_to_the_exact_length(corpus, tmp_path):
    """A generator with its own vocabulary (as SmolLM2): context ids unchanged, L - c shared tokens."""
    from textebm.models.build import SmallLMConfig, build_causal_lm
    from textebm.models.lm import ensure_special_tokens, save_lm
    from textebm.tokenizer import train_tokenizer

    texts = [json.loads(x)["text"] for x in (corpus["data"] / "train.jsonl").read_text().splitlines()]
    tok = train_tokenizer(texts, vocab_size=280)
    meta = ensure_special_tokens(tok)
    save_lm(build_causal_lm(SmallLMConfig(1, 32, 2, context=256), tok, seed=0), tok, meta, tmp_path / "foreign")
    rows = _negatives(corpus, "dev", tmp_path / "foreign", tmp_path / "f.jsonl")
    assert rows and all(r["foreign_vocab"] and r["neg_logq"] == [None, None] for r in rows)
    for r in rows:
        c = r["context_len"]
        assert all(len(n) == 24 and n[:c] == r["positive"][:c] for n in r["negatives"])


# ---------------------------------------------------------------- training, rules, scoring


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("residual_runs")
    gen = corpus["gens"][("transformer", "l2r", 0)]
    files = {s: root / f"{s}.jsonl" for s in ("train", "dev")}
    for s, f in files.items():
        _negatives(corpus, s, gen, f)
    _negatives(corpus, "test", gen, root / "test.jsonl")  # held-out windows, the training generator's
    run = root / "linear"
    assert main(["detect", "train", "--train", str(files["train"]), "--val", str(files["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "linear", "--max-steps", "40", "--batch-size", "8", "--lr", "0.05",
                 "--out", str(run), "--no-progress"]) == 0
    return {"root": root, "run": run, **files, "test": root / "test.jsonl"}


def test_residual_train_learns_to_tell_real_from_generated(trained, capsys):
    rule = json.loads((trained["run"] / "detector.json").read_text())
    # an almost untrained generator writes near-random tokens: a trained energy separates them
    assert rule["rule"]["val"]["balanced_accuracy"] > 0.8 and rule["detector"] == "energy"
    assert main(["detect", "eval", "--model", str(trained["run"]), "--test", str(trained["test"]),
                 "--out", str(trained["root"] / "eval.json")]) == 0
    m = json.loads((trained["root"] / "eval.json").read_text())
    assert m["accuracy"] > 0.8 and m["auroc"] > 0.85 and m["p_at_1"] > 0.8


def test_the_old_residual_names_still_run_and_say_where_the_command_moved(corpus, trained, tmp_path, caplog):
    """Issue 36: paper c's commands moved from `textebm residual` to `textebm detect`; the old names
    run the same command for one release with a warning, give the same figures, and a folder an
    older textebm wrote (marker kind `residual train`) is the same command's: --overwrite replaces
    it, another command's folder is still refused."""
    from textebm.outputs import MARKER, read_marker

    args = ["--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab", str(corpus["vocab"]),
            "--energy", "linear", "--max-steps", "6", "--batch-size", "8", "--lr", "0.05", "--no-progress"]
    old, new = tmp_path / "old", tmp_path / "new"
    with caplog.at_level("WARNING"):
        assert main(["residual", "train", *args, "--out", str(old)]) == 0
    assert "`textebm residual train` moved to `textebm detect train`" in caplog.text
    assert main(["detect", "train", *args, "--out", str(new)]) == 0
    assert json.loads((old / "detector.json").read_text())["rule"] == json.loads((new / "detector.json").read_text())["rule"]
    # a marker an older textebm wrote
    m = json.loads((old / MARKER).read_text())
    (old / MARKER).write_text(json.dumps({**m, "kind": "residual train"}))
    assert read_marker(old)["kind"] == "detect train"
    assert main(["detect", "train", *args, "--out", str(old)]) == 2  # earlier output: needs --overwrite
    assert main(["detect", "train", *args, "--out", str(old), "--overwrite"]) == 0
    assert main(["detect", "eval", "--model", str(new), "--test", str(trained["test"]), "--out", str(old)]) == 2


def test_score_and_threshold_read_a_users_csv_by_its_named_columns(trained, tmp_path, capsys):
    """A file whose text column has no auto-detected name: --text-field names it (and --id-field
    the ids); rows that carry a label only here and there are texts all the same."""
    texts = [json.loads(x)["positive"] for x in trained["dev"].read_text().splitlines()[:6]]
    words = [" ".join(f"w{i}" for i in t) for t in texts]  # any text: the scores only have to agree
    csv = tmp_path / "reviews.csv"
    csv.write_text("review,stars,ref\n" + "".join(f"{w},{i % 5},r{i}\n" for i, w in enumerate(words)))
    jsonl = tmp_path / "reviews.jsonl"
    jsonl.write_text("".join(json.dumps({"text": w, **({"label": "x"} if i == 0 else {}), "id": f"r{i}"}) + "\n"
                             for i, w in enumerate(words)))
    run = str(trained["run"])
    assert main(["detect", "score", "--model", run, "--input", str(csv), "--out", str(tmp_path / "no.jsonl")]) == 2
    assert "cannot tell which field holds the text" in capsys.readouterr().err
    for f, extra in ((csv, ["--text-field", "review", "--id-field", "ref"]), (jsonl, [])):
        out = tmp_path / f"{f.stem}-{f.suffix[1:]}.jsonl"
        assert main(["detect", "score", "--model", run, "--input", str(f), *extra, "--out", str(out)]) == 0
    a, b = ([json.loads(x) for x in (tmp_path / n).read_text().splitlines()] for n in ("reviews-csv.jsonl",
                                                                                      "reviews-jsonl.jsonl"))
    assert [r["id"] for r in a] == [f"r{i}" for i in range(6)]
    assert [r.pop("line") for r in a] == list(range(2, 8)) and [r.pop("line") for r in b] == list(range(1, 7))
    assert a == b
    assert main(["detect", "threshold", "--model", run, "--human", str(csv), "--text-field", "review", "--fpr",
                 "0.4", "--out", str(tmp_path / "t.json")]) == 0


def test_resume_compares_the_inputs_by_content_not_by_path(corpus, trained, tmp_path, capsys):
    """A run records the content of its inputs (config.json's inputs_sha256): --resume refuses
    other content under the same path, and takes the same files under another path (a copy); a
    run recorded before textebm kept their content compares their paths, as it did."""
    import shutil

    train = tmp_path / "in" / "train.jsonl"
    train.parent.mkdir()
    shutil.copy(trained["train"], train)
    run = tmp_path / "run"
    args = lambda t: ["detect", "train", "--train", str(t), "--val", str(trained["dev"]), "--vocab",
                      str(corpus["vocab"]), "--energy", "linear", "--max-steps", "3", "--batch-size", "8",
                      "--no-progress", "--out", str(run)]
    assert main(args(train)) == 0
    recorded = json.loads((run / "config.json").read_text())["inputs_sha256"]
    assert set(recorded) == {"train", "val", "vocab"}
    from textebm.fingerprint import file_sha256, folder_sha256
    assert recorded["train"] == file_sha256(train) and recorded["vocab"] == folder_sha256(corpus["vocab"])
    moved = tmp_path / "moved.jsonl"
    shutil.copy(train, moved)
    capsys.readouterr()
    assert main([*args(moved), "--resume"]) == 0  # the same content elsewhere: the finished run, nothing to do
    assert json.loads((run / "config.json").read_text())["train"] == [str(moved)]  # where it is read now
    assert main([*args(train), "--resume"]) == 0  # and back
    lines = train.read_text().splitlines()
    train.write_text("\n".join(lines[:-1]) + "\n")  # one window fewer, same path
    assert main([*args(train), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"--train {train}: other content than the run started with" in err and "Traceback" not in err
    cfg = json.loads((run / "config.json").read_text())
    del cfg["inputs_sha256"]  # as an older textebm wrote it
    (run / "config.json").write_text(json.dumps(cfg))
    assert main([*args(moved), "--resume"]) == 2
    assert f"train={[str(train)]!r}->{[str(moved)]!r}" in capsys.readouterr().err


@pytest.mark.parametrize("energy,extra", [("bilstm", ["--width", "16"]),
                                          ("unitransf", ["--layers", "1", "--width", "32", "--heads", "2"]),
                                          ("bitransf", ["--layers", "1", "--width", "32", "--heads", "2"])])
def test_every_energy_trains_saves_and_loads_back(corpus, trained, tmp_path, energy, extra):
    from textebm.detection.detect import EnergyScorer

    run = tmp_path / energy
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", energy, *extra, "--max-steps", "2", "--batch-size", "4",
                 "--out", str(run), "--no-progress"]) == 0
    rows = [json.loads(x) for x in trained["dev"].read_text().splitlines()][:3]
    scorer = EnergyScorer(run)
    s = scorer.score_ids([r["positive"] for r in rows])
    assert s.shape == (3,) and np.isfinite(s).all()


def test_continuation_pooling_trains_on_one_prefix_and_refuses_several(corpus, trained, tmp_path, capsys):
    """--pool continuation (issue 35): a unitransf energy pooling the positions after the prefix
    trains on windows of one prefix length, records it in energy.json, and scores as its training
    did after loading; windows with two prefix lengths are refused naming the option."""
    from textebm.detection.detect import EnergyScorer

    gen = corpus["gens"][("transformer", "l2r", 0)]
    files = {s: tmp_path / f"{s}.jsonl" for s in ("train", "dev")}
    for s, f in files.items():
        _negatives(corpus, s, gen, f, "--contexts", "16")
    run = tmp_path / "unit-cont"
    args = ["detect", "train", "--train", str(files["train"]), "--val", str(files["dev"]), "--vocab",
            str(corpus["vocab"]), "--energy", "unitransf", "--layers", "1", "--width", "32", "--heads", "2",
            "--pool", "continuation", "--dropout", "0.1", "--max-steps", "3", "--batch-size", "4",
            "--negatives", "random", "--no-progress"]
    assert main([*args, "--out", str(run)]) == 0
    spec = json.loads((run / "model" / "energy.json").read_text())
    assert (spec["pool"], spec["contexts"], spec["dropout"]) == ("continuation", [16], 0.1)
    sc = EnergyScorer(run)
    assert (sc.model.pool, sc.model.prefix_len) == ("continuation", 16)
    capsys.readouterr()
    two = [a if a not in (str(files["train"]), str(files["dev"])) else str(trained["train" if a == str(files["train"])
                                                                                    else "dev"]) for a in args]
    assert main([*two, "--out", str(tmp_path / "two")]) == 2
    err = capsys.readouterr().err
    assert "--pool continuation" in err and "16, 20" in err and not (tmp_path / "two").exists()
    # windows cut shorter than its prefix are not what it scores: eval has no length buckets, --buckets is refused
    assert main(["detect", "eval", "--model", str(run), "--test", str(files["dev"]), "--out",
                 str(tmp_path / "e.json")]) == 0
    assert [b["bucket"] for b in json.loads((tmp_path / "e.json").read_text())["by_length"]["buckets"]] == ["whole"]
    assert main(["detect", "eval", "--model", str(run), "--test", str(files["dev"]), "--buckets", "8-16"]) == 2
    assert "--buckets" in capsys.readouterr().err


def test_a_learning_curve_subset_is_nested_and_seeded():
    from textebm.detection.train import nested_subset

    rows = [{"i": i} for i in range(100)]
    small, large = nested_subset(rows, 10, 0), nested_subset(rows, 40, 0)
    assert len(small) == 10 and len(large) == 40 and all(r in large for r in small)
    assert [r["i"] for r in small] == sorted(r["i"] for r in small)  # file order kept
    assert small == nested_subset(rows, 10, 0) and small != nested_subset(rows, 10, 1)
    assert nested_subset(rows, 0 or 100, 0) == rows


def test_one_random_negative_per_row_is_the_full_batchs_loss_at_that_negative(corpus, trained):
    """--negatives random encodes a row's positive and the one negative it keeps this epoch: its
    loss equals eq. 1 on the full batch's energies at that negative (the slow path), and the kept
    negative changes with the epoch."""
    from textebm.detection.train import EnergyBuildSpec, WindowBatcher, build_energy_model, residual_step
    from textebm.losses.residual import residual_bce

    vocab = corpus_vocab(corpus)
    rows = [json.loads(x) for x in trained["train"].read_text().splitlines()][:6]
    torch.manual_seed(0)
    model, spec, tok = build_energy_model(EnergyBuildSpec(energy="bilstm", width=8, layers=1), vocab, 24)
    model.eval()
    items = list(enumerate(rows))
    fast, full = WindowBatcher(spec, tok, vocab, pick_one=True, seed=3), WindowBatcher(spec, tok, vocab)
    picks = []
    for epoch in (0, 1, 2):
        fast.set_epoch(epoch)
        batch = fast(items)
        assert batch.k == 1 and batch.input_ids.shape[0] == 2 * len(rows)
        j = torch.tensor([fast.picked(i, r) for i, r in items])  # (B,)
        picks.append(j.tolist())
        with torch.no_grad():
            loss, _ = residual_step(model, batch, "bce", "random", 1.0)
            e = model(full(items).input_ids, full(items).attention_mask).view(-1, 3)  # (B, 1 + k)
            want = residual_bce(e[:, 0], e[:, 1:].gather(1, j[:, None]), "all").loss
        assert abs(float(loss) - float(want)) < 1e-6
    assert len({tuple(p) for p in picks}) > 1  # another negative in another epoch


def test_bitransf_mean_pooled_trains_saves_and_loads_back(corpus, trained, tmp_path):
    """Paper d's BiT: `--pool mean` trains, energy.json records it, and the loaded energy projects
    the mean of its encoder's top states over the real tokens. Saved and loaded back in process,
    either pooling gives the very same energies; a first-position energy's energy.json has no
    "pool" (as before the field existed) and loads as first."""
    from textebm.detection.detect import EnergyScorer
    from textebm.detection.train import EnergyBuildSpec, build_energy_model
    from textebm.energy import pool
    from textebm.models.load import load_energy
    from textebm.models.seq_energy import encode_windows, save_energy

    rows = [json.loads(x) for x in trained["dev"].read_text().splitlines()][:3]
    run = tmp_path / "bit-mean"
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "bitransf", "--pool", "mean", "--layers", "1", "--width", "32",
                 "--heads", "2", "--max-steps", "2", "--batch-size", "4", "--out", str(run), "--no-progress"]) == 0
    assert json.loads((run / "model" / "energy.json").read_text())["pool"] == "mean"
    assert json.loads((run / "config.json").read_text())["spec"]["pool"] == "mean"
    sc = EnergyScorer(run)
    assert sc.model.pool == "mean"
    batch = encode_windows([r["positive"] for r in rows], sc.spec, sc.tokenizer, sc.vocab)
    with torch.no_grad():
        h = sc.model.encoder(**batch).last_hidden_state.float()  # (B, T, H)
        m = batch["attention_mask"].unsqueeze(-1).float()  # (B, T, 1)
        by_hand = ((h * m).sum(1) / m.sum(1)) @ sc.model.out.weight.float().T + sc.model.out.bias.float()  # (B, 1)
        torch.testing.assert_close(sc.model(**batch), by_hand.squeeze(-1), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(sc.model(**batch), sc.model.out(h[:, 0]).squeeze(-1))

    vocab = corpus_vocab(corpus)
    for how in ("first", "mean"):
        model, spec, tok = build_energy_model(EnergyBuildSpec(energy="bitransf", pool=how, layers=1, width=16,
                                                              heads=2, seed=3), vocab, 24)
        save_energy(model.eval(), spec, tok, tmp_path / how)
        loaded, spec2, _, _ = load_energy(tmp_path / how)
        assert spec2.pool == loaded.pool == how
        assert ("pool" in json.loads((tmp_path / how / "energy.json").read_text())) == (how == "mean")
        batch = encode_windows([r["positive"] for r in rows], spec, tok, vocab)
        with torch.no_grad():
            assert torch.equal(model(**batch), loaded(**batch))
            h = loaded.encoder(**batch).last_hidden_state
            want = h[:, 0] if how == "first" else pool(h, batch["attention_mask"], "mean")
            torch.testing.assert_close(loaded(**batch), loaded.out(want).squeeze(-1))


def test_unitransf_starts_from_the_lm_and_bitransf_from_an_encoder(corpus, trained, tmp_path, classify_fixture):
    from textebm.detection.detect import EnergyScorer

    run = tmp_path / "uni"
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "unitransf", "--init", str(corpus["gens"][("transformer", "l2r", 0)]),
                 "--max-steps", "1", "--lr", "1e-9", "--out", str(run), "--no-progress"]) == 0
    from textebm.models.load import load_lm

    lm, _, _ = load_lm(corpus["gens"][("transformer", "l2r", 0)])
    scorer = EnergyScorer(run)
    w = lm.model.embed_tokens.weight
    assert torch.allclose(scorer.model.body.embed_tokens.weight, w, atol=1e-4)
    # an encoder with its own (WordPiece) vocabulary: windows are decoded and re-tokenised
    enc = tmp_path / "enc"
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "bitransf", "--init", str(classify_fixture / "encoder"),
                 "--max-tokens", "40", "--max-steps", "1", "--out", str(enc), "--no-progress"]) == 0
    spec = json.loads((enc / "model" / "energy.json").read_text())
    assert spec["retokenize"] and (enc / "model" / "vocab" / "tokenizer.json").is_file()
    sc = EnergyScorer(enc)
    rows = [json.loads(x) for x in trained["dev"].read_text().splitlines()][:2]
    from textebm.models.seq_energy import encode_windows

    batch = encode_windows([r["positive"] for r in rows], sc.spec, sc.tokenizer, sc.vocab)
    want = sc.tokenizer(sc.vocab.decode(rows[0]["positive"]), truncation=True, max_length=40)["input_ids"]
    assert batch["input_ids"][0, :len(want)].tolist() == want and sc.vocab.get_vocab() != sc.tokenizer.get_vocab()
    assert np.isfinite(sc.score_ids([r["positive"] for r in rows])).all()


def test_bitransf_starts_from_a_masked_lm_trained_here_in_the_shared_vocabulary(corpus, trained, tmp_path):
    """Paper d's BiT starts from a BERT trained on the same data: here `cloze train --objective
    mlm` in the shared vocabulary. The energy takes the MLM's encoder as it is (no re-tokenising);
    a two-tower cloze model, which has no encoder, is refused naming the option."""
    from textebm.detection.detect import EnergyScorer
    from textebm.models.load import load_cloze

    mlm = tmp_path / "mlm"
    assert main(["cloze", "train", "--data", str(corpus["data"]), "--tokenizer", str(corpus["vocab"]), "--objective",
                 "mlm", "--layers", "1", "--width", "32", "--heads", "2", "--max-steps", "2", "--batch-size", "4",
                 "--max-len", "40", "--out", str(mlm), "--no-progress", "--eval-split", ""]) == 0
    run = tmp_path / "bit"
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "bitransf", "--pool", "mean", "--init", str(mlm),
                 "--max-steps", "1", "--lr", "1e-9", "--out", str(run), "--no-progress"]) == 0
    spec = json.loads((run / "model" / "energy.json").read_text())
    assert not spec["retokenize"] and spec["pool"] == "mean" and spec["vocab_size"] == len(corpus_vocab(corpus))
    cloze, _ = load_cloze(mlm)
    sc = EnergyScorer(run)
    w = cloze.encoder.embeddings.word_embeddings.weight
    assert torch.allclose(sc.model.encoder.embeddings.word_embeddings.weight, w, atol=1e-4)
    tt = tmp_path / "tt"
    assert main(["cloze", "train", "--data", str(corpus["data"]), "--tokenizer", str(corpus["vocab"]), "--objective",
                 "twotower", "--layers", "1", "--width", "32", "--heads", "2", "--max-steps", "1", "--batch-size",
                 "4", "--max-len", "40", "--out", str(tt), "--no-progress", "--eval-split", ""]) == 0
    out = tmp_path / "refused"
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "bitransf", "--init", str(tt), "--max-steps", "1",
                 "--out", str(out), "--no-progress"]) == 2
    assert not out.exists()


def test_zeroshot_fit_and_score_with_a_calibrated_probability(corpus, trained, tmp_path):
    det = tmp_path / "fd"
    gen = corpus["gens"][("transformer", "l2r", 0)]
    assert main(["detect", "fit", "--zeroshot", "fastdetectgpt", "--model", str(gen), "--val", str(trained["dev"]),
                 "--vocab", str(corpus["vocab"]), "--out", str(det)]) == 0
    info = json.loads((det / "detector.json").read_text())
    assert info["rule"]["sign"] == 1 and info["rule"]["temperature"] > 0
    texts = tmp_path / "t.jsonl"
    texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["the nation shall build roads.", "x y z q"]))
    for model in (det, trained["run"]):
        out = tmp_path / f"{model.name}.jsonl"
        assert main(["detect", "score", "--model", str(model), "--input", str(texts), "--out", str(out)]) == 0
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(rows) == 2 and all(0 <= r["p_generated"] <= 1 for r in rows)
        assert rows[0]["tokens"] == len(corpus_vocab(corpus)("the nation shall build roads.")["input_ids"])
        assert rows[0]["windows"] == 1


def test_binoculars_needs_an_observer_with_the_same_tokenizer(corpus, trained, tmp_path):
    gens = corpus["gens"]
    assert main(["detect", "fit", "--zeroshot", "binoculars", "--model", str(gens[("gcnn", "l2r", 0)]),
                 "--observer", str(gens[("transformer", "l2r", 0)]), "--val", str(trained["dev"]),
                 "--vocab", str(corpus["vocab"]), "--out", str(tmp_path / "b")]) == 0
    assert main(["detect", "fit", "--zeroshot", "binoculars", "--model", str(gens[("gcnn", "l2r", 0)]),
                 "--val", str(trained["dev"]), "--vocab", str(corpus["vocab"]), "--out", str(tmp_path / "c")]) == 2
    assert not (tmp_path / "c").exists()


def test_refitted_threshold_reaches_its_false_positive_rate_on_held_out_human_texts(corpus, trained, tmp_path):
    from textebm.detection.detect import Rule, refit_threshold

    rng = np.random.default_rng(0)
    human = rng.normal(size=4000)
    r = refit_threshold(human, Rule(), fpr=0.05, seed=1)
    assert r["fpr_fit"] <= 0.05 and abs(r["fpr_held_out"] - 0.05) < 0.015
    texts = tmp_path / "human.txt"  # the held-out human sentences of the fixture
    texts.write_text("".join(json.loads(x)["text"] + "\n" for x in (corpus["data"] / "test.jsonl").read_text().splitlines()))
    out = tmp_path / "thr.json"
    assert main(["detect", "threshold", "--model", str(trained["run"]), "--human", str(texts), "--fpr", "0.1",
                 "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    lines = texts.read_text().splitlines()
    assert got["fpr_fit"] <= 0.1 and got["n_fit"] + got["n_held_out"] == len(set(lines))
    assert got["n_duplicates"] == len(lines) - len(set(lines))
    scored = tmp_path / "s.jsonl"
    assert main(["detect", "score", "--model", str(trained["run"]), "--input", str(texts), "--threshold", str(out),
                 "--out", str(scored)]) == 0
    flagged = np.mean([json.loads(x)["generated"] for x in scored.read_text().splitlines()])
    assert flagged <= 0.25  # about the rate asked for (0.1 on the fitted half, near it held out)


def test_a_repeated_human_text_counts_once_in_the_thresholds_split(corpus, trained, tmp_path):
    """Copies of one text on both sides of the fit / held-out split would make the held-out rate
    repeat the fitted one: the threshold of texts given three times each is that of the texts given
    once, with a warning counting the repeats."""
    texts = tmp_path / "human.txt"
    once = list(dict.fromkeys(json.loads(x)["text"] for x in (corpus["data"] / "test.jsonl").read_text().splitlines()))
    texts.write_text("".join(t + "\n" for t in once))
    tripled = tmp_path / "tripled.txt"
    tripled.write_text("".join(t + "\n" for t in once * 3))
    got = {}
    for f in (texts, tripled):
        assert main(["detect", "threshold", "--model", str(trained["run"]), "--human", str(f), "--fpr", "0.1",
                     "--out", str(tmp_path / f"{f.stem}.json")]) == 0
        got[f.stem] = json.loads((tmp_path / f"{f.stem}.json").read_text())
    a, b = got["human"], got["tripled"]
    assert (a["threshold"], a["n_fit"], a["fpr_held_out"]) == (b["threshold"], b["n_fit"], b["fpr_held_out"])
    assert a["n_duplicates"] == 0 and b["n_duplicates"] == 2 * len(set(once))
    assert any(f"{2 * len(set(once))} of the {3 * len(once)} texts repeat" in w for w in b["warnings"])
    four = tmp_path / "four.txt"
    four.write_text("".join(t + "\n" for t in once[:2] * 4))
    assert main(["detect", "threshold", "--model", str(trained["run"]), "--human", str(four), "--out",
                 str(tmp_path / "f.json")]) == 2


# ---------------------------------------------------------------- one decision rule (issue 37)


def _human_texts(corpus, tmp_path) -> Path:
    texts = tmp_path / "human.txt"  # the held-out human sentences of the fixture, 6-12 words each
    texts.write_text("".join(json.loads(x)["text"] + "\n"
                             for x in (corpus["data"] / "test.jsonl").read_text().splitlines()))
    return texts


def test_a_rules_probability_is_above_one_half_exactly_where_it_decides_generated():
    """P(generated) = σ((sign·s − t) / T) by hand, for the rule and for it re-fitted at another
    threshold (the logistic shifted, T kept); P > 1/2 iff generated, also at the threshold itself
    and a few ulps around it, where σ rounds to 1/2."""
    from textebm.detection.detect import Rule

    rule = Rule(sign=-1, threshold=0.3, temperature=50.0, threshold_fpr=0.9)
    t = 7.25
    s = np.concatenate([np.random.default_rng(0).normal(size=500) * 10,
                        -np.array([t, np.nextafter(t, 10), np.nextafter(t, -10), t + 1e-15, t - 1e-15])])
    for r, thr in ((rule, 0.3), (rule.with_threshold(t), t)):
        p, g = r.prob_generated(s), r.generated(s)
        assert r.temperature == 50.0 and r.threshold == thr and r.threshold_fpr == 0.9
        np.testing.assert_allclose(p, 1 / (1 + np.exp(-(-s - thr) / 50.0)), rtol=1e-12)
        np.testing.assert_array_equal(g, -s > thr)
        np.testing.assert_array_equal(p > 0.5, g)
    assert rule.with_threshold(t).prob_generated([-t])[0] == 0.5


def test_score_with_a_refitted_threshold_takes_p_generated_and_the_decision_from_it(corpus, trained, tmp_path,
                                                                                     caplog):
    """Issue 37: after `detect score --threshold`, p_generated > 0.5 exactly on the rows called
    generated (p the detector's logistic shifted to 1/2 at the re-fitted threshold), and no
    warning asks to re-fit the threshold; without one, both come from the detector's own rule."""
    import logging

    texts = _human_texts(corpus, tmp_path)
    info = json.loads((trained["run"] / "detector.json").read_text())["rule"]
    thr = tmp_path / "thr.json"
    assert main(["detect", "threshold", "--model", str(trained["run"]), "--human", str(texts), "--fpr", "0.1",
                 "--out", str(thr)]) == 0
    t = json.loads(thr.read_text())["threshold"]
    assert abs(t - info["threshold"]) > 1e-6  # the re-fit moved it
    for threshold, used in (([], info["threshold"]), (["--threshold", str(thr)], t)):
        out = tmp_path / f"s{len(threshold)}.jsonl"
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert main(["detect", "score", "--model", str(trained["run"]), "--input", str(texts), *threshold,
                         "--out", str(out)]) == 0
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(rows) == len(texts.read_text().splitlines())
        assert all((r["p_generated"] > 0.5) == r["generated"] for r in rows)
        assert all(r["generated"] == (r["energy"] > used) for r in rows)  # a linear energy's sign is +1
        want = [1 / (1 + np.exp(-(r["energy"] - used) / info["temperature"])) for r in rows]
        np.testing.assert_allclose([r["p_generated"] for r in rows], want, rtol=1e-9, atol=1e-12)
        assert ("re-fit the threshold" in caplog.text) == (not threshold)  # the texts are under L/2 = 12 tokens


def test_threshold_cost_by_hand():
    from textebm.detection.detect import Rule, threshold_cost

    rule = Rule(sign=-1, threshold=0.0)
    real, fake = np.array([1.0, 2.0, -0.5, 3.0]), -np.array([1.0, 2.0, 3.0, 4.0, -1.0])  # oriented: fake 1..4, -1
    got = threshold_cost(rule, real, fake, 2.5)
    assert got == {"val_tpr_before": 0.8, "val_tpr_after": 0.4, "val_fpr_before": 0.25, "val_fpr_after": 0.0,
                   "val_windows": 4, "val_negatives": 5, "tpr_lost_over_half": False}
    assert threshold_cost(rule, real, fake, 3.5)["tpr_lost_over_half"]  # 0.2 < 0.8 / 2


def test_threshold_reports_its_tpr_cost_on_the_validation_windows_and_what_its_texts_can_show(corpus, trained,
                                                                                               tmp_path, caplog):
    """The re-fit scores the detector's validation windows (detector.json's `val`) and reports
    the TPR and FPR there at the detector's own threshold and at the new one (checked by hand),
    warns when more than half the detection is lost (here: "human" texts that are the generated
    validation windows themselves), says how many texts it fitted on and held out and the smallest
    FPR they can show, and warns when --fpr is below it."""
    import logging

    from textebm.detection.detect import EnergyScorer, window_scores

    rule = json.loads((trained["run"] / "detector.json").read_text())["rule"]
    rows = [json.loads(x) for x in trained["dev"].read_text().splitlines()]
    real, fake = window_scores(EnergyScorer(trained["run"] / "model").score_ids, rows, 64)
    vocab = corpus_vocab(corpus)
    fakes = tmp_path / "generated.txt"  # whole generated windows, decoded: what the energy flags
    fakes.write_text("".join(vocab.decode(r["negatives"][0]).replace("\n", " ").strip() + "\n" for r in rows[:40]))
    for texts, fpr in ((_human_texts(corpus, tmp_path), "0.1"), (fakes, "0.01")):
        out = tmp_path / f"{texts.stem}.json"
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert main(["detect", "threshold", "--model", str(trained["run"]), "--human", str(texts), "--fpr", fpr,
                         "--out", str(out)]) == 0
        got = json.loads(out.read_text())
        n = len(set(texts.read_text().splitlines()))  # distinct texts
        assert got["n_fit"] + got["n_held_out"] == n and got["n_held_out"] == round(n / 2)
        assert got["smallest_reachable_fpr"] == 1 / got["n_fit"]
        assert got["smallest_held_out_fpr"] == 1 / got["n_held_out"]
        assert got["previous_threshold"] == rule["threshold"]  # the rule `score` decides with, not threshold_fpr
        t = got["threshold"]
        assert got["val_tpr_before"] == pytest.approx((fake > rule["threshold"]).mean())
        assert got["val_tpr_after"] == pytest.approx((fake > t).mean())
        assert got["val_fpr_before"] == pytest.approx((real > rule["threshold"]).mean())
        assert got["val_fpr_after"] == pytest.approx((real > t).mean())
        assert got["val_windows"] == len(rows) and got["val_negatives"] == fake.size
        lost = got["val_tpr_after"] < got["val_tpr_before"] / 2
        assert got["tpr_lost_over_half"] == lost and lost == (texts == fakes)
        assert any("more than half" in w for w in got["warnings"]) == lost == ("more than half" in caplog.text)
        below = float(fpr) < 1 / got["n_fit"]  # 0.01 of 20 texts: below 1/20
        assert any("smallest" in w for w in got["warnings"]) == below == (texts == fakes)


def test_eval_by_length_bucket_equals_a_hand_computation_with_sklearn(corpus, trained, tmp_path):
    """`detect eval --threshold --buckets`: per bucket of text tokens, the test windows cut to
    lo, lo + 1, ..., hi - 1, lo, ... tokens (row order; an l2r window keeps its last n tokens, its
    generated end), AUROC (sklearn) and TPR / FPR at the threshold file's threshold; the whole
    windows last; without --buckets the default ones below the window length (24: 8-16, 16-24)."""
    from sklearn.metrics import roc_auc_score

    from textebm.detection.detect import EnergyScorer, window_scores

    thr = tmp_path / "thr.json"
    human = _human_texts(corpus, tmp_path)
    assert main(["detect", "threshold", "--model", str(trained["run"]), "--human", str(human), "--fpr", "0.1",
                 "--out", str(thr)]) == 0
    t = json.loads(thr.read_text())["threshold"]
    out = tmp_path / "eval.json"
    assert main(["detect", "eval", "--model", str(trained["run"]), "--test", str(trained["test"]), "--threshold",
                 str(thr), "--buckets", "2-6", "6-24", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["by_length"]["threshold"] == t and got["by_length"]["fpr_target"] == 0.1
    rows = [json.loads(x) for x in trained["test"].read_text().splitlines()]
    assert {r["direction"] for r in rows} == {"l2r"} and len(rows[0]["positive"]) == 24
    score = EnergyScorer(trained["run"] / "model").score_ids
    for b, (lo, hi) in zip(got["by_length"]["buckets"], ((2, 6), (6, 24), (24, 25))):
        cut = [{"positive": r["positive"][-n:], "negatives": [x[-n:] for x in r["negatives"]]}
               for i, r in enumerate(rows) for n in [lo + i % (hi - lo)]]
        real, fake = window_scores(score, cut, 64)
        fake = fake.ravel()
        assert (b["bucket"], b["min_tokens"], b["max_tokens"]) == ((f"{lo}-{hi}", lo, hi - 1) if hi < 25
                                                                  else ("whole", 24, 24))
        want = roc_auc_score(np.r_[np.zeros(real.size), np.ones(fake.size)], np.r_[real, fake])
        assert b["auroc"] == pytest.approx(want, abs=1e-12)
        assert b["tpr"] == pytest.approx((fake > t).mean()) and b["fpr"] == pytest.approx((real > t).mean())
        assert b["accuracy"] == pytest.approx(((real <= t).mean() + (fake > t).mean()) / 2)
        assert (b["n_real"], b["n_generated"]) == (len(rows), fake.size)
    whole = got["by_length"]["buckets"][-1]
    assert whole["auroc"] == pytest.approx(got["auroc"]) and len(got["by_length"]["buckets"]) == 3
    assert main(["detect", "eval", "--model", str(trained["run"]), "--test", str(trained["test"]),
                 "--out", str(tmp_path / "default.json")]) == 0
    d = json.loads((tmp_path / "default.json").read_text())["by_length"]
    rule = json.loads((trained["run"] / "detector.json").read_text())["rule"]
    assert [b["bucket"] for b in d["buckets"]] == ["8-16", "16-24", "whole"]
    assert d["threshold"] == rule["threshold_fpr"] and d["fpr_target"] == rule["fpr"]
    assert d["buckets"][-1]["tpr"] == pytest.approx(json.loads((tmp_path / "default.json").read_text())
                                                     ["tpr_at_0.01_fpr"])


def test_length_buckets_and_threshold_files_are_checked_naming_the_option(trained, tmp_path):
    from textebm.detection.commands import read_threshold_file
    from textebm.detection.detect import detector_id, length_buckets
    from textebm.errors import TextebmError

    assert length_buckets([], 64) == [(8, 16), (16, 32), (32, 64)]
    assert length_buckets([], 160)[-2:] == [(64, 128), (128, 160)] and length_buckets([], 8) == []
    assert length_buckets(["1-2", "3-24"], 24) == [(1, 2), (3, 24)]
    for bad in ("8", "16-8", "0-4", "a-b", "8-25", "-3-4", "8-16-32"):
        with pytest.raises(TextebmError, match="--buckets"):
            length_buckets([bad], 24)
    info = json.loads((trained["run"] / "detector.json").read_text())
    f = tmp_path / "t.json"
    for t in ("NaN", "Infinity", "true", '"0.5"'):
        f.write_text(f'{{"threshold": {t}, "detector_sha256": "{detector_id(info)}"}}')
        with pytest.raises(TextebmError, match="--threshold .*finite numeric"):
            read_threshold_file(str(f), info, "RUN")
    f.write_text(json.dumps({"threshold": 0.5, "detector_sha256": "0" * 64}))
    with pytest.raises(TextebmError, match="another detector") as e:
        read_threshold_file(str(f), info, "RUN", forceable=False)
    assert "--force-threshold" not in str(e.value)


# ---------------------------------------------------------------- the matrix


def _matrix_config(corpus, tmp_path) -> Path:
    cfg = {"corpora": {"a": str(corpus["data"])}, "vocab_size": 300,
           "generators": {"tf": {"arch": "transformer", "layers": 1, "width": 32, "heads": 2, "steps": 2},
                          "gcnn": {"arch": "gcnn", "layers": 1, "width": 32, "kernel": 3, "steps": 2}},
           "lm": {"context": 48, "chunk": 32, "batch_size": 8},
           "windows": {"length": 24, "contexts": [16, 20], "stride": 8, "k": 2,
                       "max_windows": {"train": 30, "dev": 16, "test": 16}},
           "energies": {"linear": {"energy": "linear", "steps": 3, "lr": 0.05}},
           "tables": [{"kind": "in-domain", "energies": ["linear"], "corpora": ["a"], "generators": ["tf"],
                       "directions": ["l2r", "r2l"]},
                      {"kind": "zeroshot", "detectors": ["loglik"], "corpora": ["a"], "generators": ["tf"]},
                      {"kind": "cross-arch", "energy": "linear", "corpus": "a", "generators": ["tf", "gcnn"]},
                      {"kind": "negatives", "energy": "linear", "corpus": "a", "generator": "tf",
                       "negatives": ["random", "worst"]},
                      {"kind": "unseen", "energy": "linear", "train": "all", "generator": "tf",
                       "test_generator": "gcnn"}]}
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(cfg))
    return path


def test_tiny_matrix_end_to_end_and_a_resumed_one_recomputes_nothing(corpus, tmp_path, monkeypatch):
    import textebm.detection.commands
    import textebm.detection.negatives
    import textebm.detection.train
    import textebm.lm.train

    cfg, out = _matrix_config(corpus, tmp_path), tmp_path / "m"
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert len(res["cells"]) == 2 + 1 + 4 + 2 + 2
    tables = (out / "tables.md").read_text()
    assert tables.count("|") > 20 and (out / "heatmap-cross-arch.png").stat().st_size > 1000
    assert "where train and test match" in tables and "Drop from the seen to the unseen generator" in tables
    # the test negatives come from the second seed, the training ones from the first
    negs = sorted(p.name for p in (out / "neg").glob("*.jsonl"))
    assert any("-s1-test-" in n for n in negs) and any("-s0-train-" in n for n in negs)
    assert not any("-s0-test-" in n for n in negs)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.suffix != ".lock"}

    def boom(*a, **k):
        raise AssertionError("a cached artifact was recomputed")

    import textebm.detection.matrix as matrix

    for name in ("lm_train", "detect_train", "generate_negatives", "fit_zeroshot"):  # where the matrix calls them
        assert callable(getattr(matrix, name))
        monkeypatch.setattr(matrix, name, boom)
    (out / "heatmap-my-own.png").write_bytes(b"mine")  # a user's file in the folder
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    assert "heatmap-my-own.png" not in json.loads((out / ".textebm-output.json").read_text())["entries"]
    after = {p: p.stat().st_mtime_ns for p in before}
    changed = [p.name for p in before if after[p] != before[p] and p.name not in ("results.json", "tables.md")
               and not p.name.endswith(".png")]
    assert changed == []


def test_matrix_plan_prints_the_estimate_and_runs_nothing(corpus, tmp_path, capsys):
    cfg = _matrix_config(corpus, tmp_path)
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(tmp_path / "p"), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "estimated CPU time" in out and "generators to train:   6" in out  # tf l2r/r2l and gcnn l2r, seeds 0 and 1
    assert not (tmp_path / "p").exists()


def _small_matrix(corpus, tmp_path, energy_steps: int = 5, gen_steps: int = 7) -> Path:
    """One in-domain cell: a linear energy on the tf generator's negatives."""
    cfg = json.loads(_matrix_config(corpus, tmp_path).read_text())
    cfg["generators"] = {"tf": {**cfg["generators"]["tf"], "steps": gen_steps}}
    cfg["energies"]["linear"]["steps"] = energy_steps
    cfg["tables"] = [{"kind": "in-domain", "energies": ["linear"], "corpora": ["a"], "generators": ["tf"]}]
    path = tmp_path / "small.json"
    path.write_text(json.dumps(cfg))
    return path


def test_the_matrix_length_axis_gives_each_cell_its_buckets_and_a_table(corpus, tmp_path, capsys):
    """Issue 37: `"buckets"` in the config evaluates every cell on its test windows cut to each
    bucket (detect eval's `by_length`, the same figures), reported in tables.md; a bucket past the
    window is refused naming the file and key."""
    from textebm.detection import detect
    from textebm.detection.windows import read_window_files

    cfg = json.loads(_small_matrix(corpus, tmp_path).read_text())
    cfg["buckets"] = ["4-8", "8-16"]
    path, out = tmp_path / "len.json", tmp_path / "m"
    path.write_text(json.dumps(cfg))
    assert main(["detect", "matrix", "--config", str(path), "--out", str(out), "--no-progress"]) == 0
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert [b["bucket"] for b in cell["by_length"]] == ["4-8", "8-16", "whole"]
    scorer, rule, _ = detect.load_detector(cell["detector_dir"])
    rows = read_window_files(sorted((out / "neg").glob("*-s1-test-*.jsonl")), "test")
    real, fake = detect.window_scores(scorer.score_ids, rows, 64)
    want = detect.by_length(scorer.score_ids, rule, rows, real, fake, [(4, 8), (8, 16)], rule.threshold_fpr)
    assert [b["auroc"] for b in cell["by_length"]] == pytest.approx([b["auroc"] for b in want], abs=1e-12)
    assert "## By length" in (out / "tables.md").read_text()
    cfg["buckets"] = ["8-40"]
    path.write_text(json.dumps(cfg))
    assert main(["detect", "matrix", "--config", str(path), "--out", str(tmp_path / "m2")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: buckets" in err and not (tmp_path / "m2").exists()


def test_matrix_steps_are_optimiser_steps_and_the_dask_backend_gives_the_same_cells(corpus, tmp_path):
    """Issue 21 item 9: `"steps": 5` trains 5 steps, though 30 windows at batch 16 make 2 steps per
    epoch (it used to stop after one epoch); the generator's 7 steps are more than one epoch too.
    The same matrix as Dask tasks gives the same numbers."""
    import shutil

    from textebm.outputs import remove

    cfg = _small_matrix(corpus, tmp_path)
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(tmp_path / "m"), "--no-progress"]) == 0
    steps = lambda run: json.loads((run / "metrics.json").read_text())["train"]["steps"]
    runs = lambda d: [p for p in (tmp_path / "m" / d).iterdir() if p.is_dir()]
    (energy,), gens = runs("energy"), runs("gen")
    assert steps(energy) == 5 and json.loads((energy / "metrics.json").read_text())["train"]["epochs_completed"] > 2
    assert len(gens) == 2 and all(steps(g) == 7 for g in gens)
    # the same folder's generators and negatives, its energy trained again and its cell evaluated
    # as Dask tasks (the runner's two-worker grid is tests/test_grid.py)
    shutil.copytree(tmp_path / "m", tmp_path / "d")
    for name in ("cells", "energy", "results.json"):
        remove(tmp_path / "d" / name)
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(tmp_path / "d"), "--backend", "dask",
                 "--workers", "1"]) == 0
    assert [p for p in (tmp_path / "d" / "energy").iterdir() if p.is_dir()]
    local, dask = (json.loads((tmp_path / d / "results.json").read_text())["cells"] for d in ("m", "d"))
    drop = lambda c: {k: v for k, v in c.items() if k not in ("seconds", "detector_dir")}
    assert [drop(c) for c in dask] == [drop(c) for c in local]


def test_matrix_out_follows_the_output_rule(corpus, tmp_path, capsys):
    """Issue 21 item 1: a user's folder or another command's output is refused (exit 2, untouched),
    with or without --overwrite; so are an --out under a file and one that cannot be made."""
    from textebm.outputs import write_marker

    cfg = _small_matrix(corpus, tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.json").write_text('{"my": 1}')
    (mine / "tables.md").write_text("mine")
    run = tmp_path / "cloze-run"
    run.mkdir()
    (run / "model.safetensors").write_text("weights")
    write_marker(run, "cloze train", ["model.safetensors"])
    before = {p: p.read_bytes() for d in (mine, run) for p in d.iterdir()}
    for out, extra, why in ((mine, [], "not written by textebm"), (mine, ["--overwrite"], "not written by textebm"),
                            (run, [], "cloze train"), (run, ["--overwrite"], "cloze train"),
                            (tmp_path / "small.json" / "x", [], "is a file"), (Path("/proc/textebm-matrix"), [], "")):
        capsys.readouterr()
        assert main(["detect", "matrix", "--config", str(cfg), "--out", str(out), *extra]) == 2, out
        err = capsys.readouterr().err
        assert str(out) in err and why in err and "Traceback" not in err
    assert {p: p.read_bytes() for d in (mine, run) for p in d.iterdir()} == before
    assert not (tmp_path / "m").exists()


def test_a_matrix_folder_continues_and_overwrite_removes_only_the_matrix_work(tmp_path):
    """The matrix is a cache: its own folder continues without --overwrite; --overwrite removes
    what its marker lists (earlier cells and artifacts), never a user's file beside them."""
    from textebm.detection.matrix import KIND, check_out
    from textebm.outputs import read_marker, write_marker

    out = tmp_path / "m"
    check_out(out, overwrite=False)  # new: created and marked
    assert read_marker(out)["kind"] == KIND
    (out / "cells").mkdir()
    (out / "cells" / "c.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    check_out(out, overwrite=False)  # continues: nothing removed
    assert (out / "cells" / "c.json").is_file()
    write_marker(out, KIND, [*read_marker(out)["entries"], "heatmap-x.png"])
    (out / "heatmap-x.png").write_text("png")
    check_out(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [".textebm-output.json", "notes.txt"]


@pytest.mark.parametrize("change, names", [
    (lambda c: c["energies"]["linear"].update(steps="many"), "`energies.linear.steps` must be an integer"),
    (lambda c: c["generators"]["tf"].update(steps=2.5), "`generators.tf.steps` must be an integer"),
    (lambda c: c["generators"]["tf"].update(width=30, heads=4),
     "`generators.tf.width` 30 must be divisible by `generators.tf.heads`"),
    (lambda c: c["windows"].update(length=2, contexts=[1]), "`windows.length` must be at least 4"),
    (lambda c: c["windows"].update(contexts=[24]),
     "`windows.contexts` 24 leaves nothing to generate in a window of `windows.length` 24"),
    (lambda c: c["windows"].update(max_windows={"train": -1}), "`windows.max_windows`"),
    (lambda c: c["energies"]["linear"].update(epochs=2), "give `steps`"),
    (lambda c: c["energies"]["linear"].update(steps=0), "`energies.linear.steps` must be at least 1"),
    (lambda c: c["energies"]["linear"].update(width=64), "`energies.linear.width` has no effect"),
    (lambda c: c["energies"]["linear"].update(stepz=3), "`energies.linear.stepz` is not a setting"),
    (lambda c: c["lm"].update(lr="fast"), "`lm.lr` must be a number"),
    (lambda c: c.update(lm=[1]), "`lm` must be an object"),
])
def test_matrix_config_settings_are_checked_naming_the_file_and_key(corpus, tmp_path, capsys, change, names):
    """Issue 21 items 11-12: a bad setting is a one-line error naming the config file and its key
    (not a TypeError, not a command's --flag), before any work."""
    cfg = json.loads(_small_matrix(corpus, tmp_path).read_text())
    change(cfg)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(cfg))
    assert main(["detect", "matrix", "--config", str(path), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and names in err and "--" not in err.split(str(path))[1], err
    assert not (tmp_path / "m").exists()


def test_matrix_plan_takes_its_shard_from_a_slurm_array(corpus, tmp_path, capsys, monkeypatch):
    cfg = _matrix_config(corpus, tmp_path)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(tmp_path / "p"), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "7 cells (11 entries, some the same cell), 0 cached; shard 2/3 holds 2, 2 to run here" in out
    assert "estimated CPU time" in out


# ---------------------------------------------------------------- bad input


def test_bad_inputs_exit_2_naming_the_file(corpus, trained, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"positive": [1, 2], "negatives": [[1]], "direction": "l2r", "context_len": 1}) + "\n")
    assert main(["detect", "train", "--train", str(bad), "--val", str(trained["dev"]), "--vocab", str(corpus["vocab"]),
                 "--energy", "linear", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1" in err and "negatives" in err and not (tmp_path / "r").exists()
    assert main(["detect", "score", "--model", str(corpus["gens"][("gcnn", "l2r", 0)]), "--input", str(bad),
                 "--out", str(tmp_path / "s.jsonl")]) == 2
    assert "detector.json" in capsys.readouterr().err and not (tmp_path / "s.jsonl").exists()
    assert main(["negatives", "generate", "--data", str(corpus["data"]), "--generator", str(trained["run"]),
                 "--vocab", str(corpus["vocab"]), "--out", str(tmp_path / "n.jsonl")]) == 2
    assert "causal LM" in capsys.readouterr().err
    assert main(["negatives", "generate", "--data", str(corpus["data"]), "--generator",
                 str(corpus["gens"][("transformer", "l2r", 0)]), "--vocab", str(corpus["vocab"]),
                 "--length", "10", "--contexts", "10", "--out", str(tmp_path / "n.jsonl")]) == 2
    assert "--contexts" in capsys.readouterr().err
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps({"corpora": ["x"], "generators": {}, "tables": [{"kind": "nope"}]}))
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(tmp_path / "m")]) == 2
    assert f"{cfg}" in capsys.readouterr().err
    assert main(["detect", "matrix", "--config", str(cfg), "--out", str(tmp_path / "m"), "--shard", "3/2"]) == 2
    good = json.loads(_matrix_config(corpus, tmp_path).read_text())
    for table, why in (({"kind": "cross-arch", "energy": "linear", "generators": ["tf"]}, "missing corpus"),
                       ({"kind": "zeroshot", "detectors": ["gptzero"], "corpora": ["a"], "generators": ["tf"]},
                        "gptzero"),
                       ({"kind": "cross-corpus", "energy": "linear", "generator": "tf", "train": ["a+z"],
                         "test": ["a"]}, "a+z")):
        cfg.write_text(json.dumps({**good, "tables": [table]}))
        capsys.readouterr()
        assert main(["detect", "matrix", "--config", str(cfg), "--out", str(tmp_path / "m")]) == 2
        err = capsys.readouterr().err
        assert str(cfg) in err and why in err and "Traceback" not in err
    assert main(["lm", "train", "--data", str(corpus["data"]), "--arch", "gcnn", "--heads", "2",
                 "--out", str(tmp_path / "g")]) == 2
    assert "--heads" in capsys.readouterr().err


# ---------------------------------------------------------------- analyses


def test_perturbations_by_hand():
    from textebm.detection.analysis import perturb

    w = ["a", "b", "c"]
    assert perturb(w, 1, "john") == ["a", "John", "c"] and perturb(w, 0, "the") == ["the", "b", "c"]
    assert perturb(w, 1, "swap") == ["a", "c", "b"] and w == ["a", "b", "c"]
    with pytest.raises(ValueError):
        perturb(w, 2, "swap")


def test_analyze_per_context_length_and_perturbation(corpus, trained, tmp_path):
    from textebm.detection.analysis import by_context
    from textebm.detection.detect import Rule

    rows = [{"context_len": c, "positive": [0] * 24} for c in (16, 16, 20, 20)]
    real, fake = np.array([0.0, 0.0, 0.0, 2.0]), np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    got = by_context(Rule(threshold=0.5), rows, real, fake)
    assert [(g["context_len"], g["generated_tokens"], g["accuracy"]) for g in got] == [(16, 8, 1.0), (20, 4, 0.75)]
    out = tmp_path / "an"
    assert main(["detect", "analyze", "--model", str(trained["run"]), "--test", str(trained["test"]),
                 "--lm", str(corpus["gens"][("transformer", "l2r", 0)]), "--windows", "5", "--positions", "3",
                 "--bins", "4", "--out", str(out)]) == 0
    res = json.loads((out / "analysis.json").read_text())
    assert {p["context_len"] for p in res["context"]} == {16, 20}
    pert = res["perturbations"]
    assert pert["windows"] == 5 and sum(pert["swap"]["count"]) == 15 and len(pert["john"]["energy"]) == 4
    assert (out / "perturbations.png").stat().st_size > 1000


def test_fit_rule_calibrates_at_even_odds_on_a_known_logistic_model():
    """Scores drawn so that P(generated | s) = σ(2 s): the fitted rule recovers threshold 0 and
    T = 1/2 whatever the number of negatives per window, and is calibrated."""
    from textebm.detection.detect import fit_rule

    rng = np.random.default_rng(0)
    s = rng.uniform(-4, 4, 200_000)
    gen = rng.random(s.size) < 1 / (1 + np.exp(-2 * s))
    real, fake = s[~gen], s[gen]
    k = 3  # three negatives a window: the calibration must not learn the 3:1 prior
    fake = np.concatenate([fake] * k)[: k * real.size]
    rule = fit_rule(real, fake)
    assert abs(rule.threshold) < 0.05 and abs(rule.temperature - 0.5) < 0.03 and rule.val["ece"] < 0.01


def test_doc_streams_join_a_documents_texts_and_chunks_cut_them():
    from textebm.data.streams import chunks, doc_streams

    class Tok:  # one id per character: the joins are visible
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[ord(c) for c in t] for t in texts]}

    rows = [{"text": "ab", "doc": "x"}, {"text": "c", "doc": "y"}, {"text": "de", "doc": "x"}]
    streams = doc_streams(rows, Tok())
    assert streams == [("x", [ord(c) for c in "ab de"]), ("y", [ord("c")])]
    assert chunks(streams, 2) == [[97, 98], [32, 100], [101], [99]]


def test_report_drop_lines_by_hand():
    from textebm.detection.report import _drop_line, _unseen_line

    cells = [{"train": "a/tf/l2r", "test": "a/tf/l2r", "accuracy": 0.9},
             {"train": "a/tf/l2r", "test": "b/tf/l2r", "accuracy": 0.6},
             {"train": "a+b/tf/l2r", "test": "b/tf/l2r", "accuracy": 0.1},  # multi-source: left out
             {"train": "b/tf/l2r", "test": "b/tf/l2r", "accuracy": 0.8},
             {"train": "b/tf/l2r", "test": "a/tf/l2r", "accuracy": 0.7}]
    assert _drop_line(cells).endswith("85.0 %; where they differ (single-source training): 65.0 %; drop 20.0 points.")
    unseen = [{"train": "a+b/tf/l2r", "test": "a/tf/l2r", "accuracy": 0.9},
              {"train": "a+b/tf/l2r", "test": "a/smollm2/l2r", "accuracy": 0.55}]
    assert _unseen_line(unseen) == "Drop from the seen to the unseen generator (points): a 35.0."


def test_the_stored_rule_equals_one_fitted_on_the_saved_model(trained):
    """The rule comes from the final evaluation's fp32 scores of the in-memory model: the same as
    scoring the saved model again."""
    from textebm.detection import detect
    from textebm.detection.windows import read_window_file

    _, rule = detect.read_rule(trained["run"] / "detector.json")
    scorer = detect.EnergyScorer(trained["run"] / "model")
    real, fake = detect.window_scores(scorer.score_ids, read_window_file(trained["dev"]), 64)
    again = detect.fit_rule(real, fake.ravel())
    assert rule.threshold == pytest.approx(again.threshold, abs=same(1e-9))
    assert rule.temperature == pytest.approx(again.temperature, rel=1e-6)
    metrics = json.loads((trained["run"] / "metrics.json").read_text())["eval"]
    assert metrics["val_balanced_accuracy"] == pytest.approx(again.val["balanced_accuracy"])


def test_overwrite_replaces_the_decision_rule_with_the_run(corpus, trained, tmp_path):
    """detector.json is part of the run (its marker lists it): `--overwrite` with other settings
    writes the new model's rule, never keeps the earlier model's."""
    import shutil

    from textebm.detection import detect
    from textebm.detection.windows import read_window_file

    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    old_rule = (run / "detector.json").read_text()
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "linear", "--max-steps", "3", "--batch-size", "8", "--lr", "0.01",
                 "--out", str(run), "--no-progress", "--overwrite"]) == 0
    assert (run / "detector.json").read_text() != old_rule
    _, rule = detect.read_rule(run / "detector.json")
    real, fake = detect.window_scores(detect.EnergyScorer(run / "model").score_ids, read_window_file(trained["dev"]), 64)
    assert rule.threshold == pytest.approx(detect.fit_rule(real, fake.ravel()).threshold, abs=same(1e-9))
    assert not (run / ".textebm-replaced").exists()


def test_matrix_out_continues_only_from_the_same_vocabulary_and_corpora(corpus, tmp_path, capsys):
    """Every artifact's key holds its own settings, not the shared vocabulary's or the corpora's:
    an --out built from other ones is refused (exit 2, naming what differs) instead of reused."""
    from textebm.detection.matrix import ENTRIES, KIND, matrix_inputs, read_config
    from textebm.outputs import write_marker

    cfg_path = _small_matrix(corpus, tmp_path)
    out = tmp_path / "mx"
    out.mkdir()
    write_marker(out, KIND, list(ENTRIES))
    inputs = matrix_inputs(read_config(cfg_path))
    (out / "inputs.json").write_text(json.dumps(inputs))
    args = ["detect", "matrix", "--config", str(cfg_path), "--out", str(out), "--plan"]
    assert main(args) == 0  # the same inputs: the plan continues
    for change in ({"vocab_size": inputs["vocab_size"] + 1}, {"corpora": {"a": {"folder_sha256": "0" * 64}}}):
        (out / "inputs.json").write_text(json.dumps({**inputs, **change}))
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "another vocabulary or other corpora" in err and next(iter(change)) in err
        assert main([*args, "--overwrite"]) == 0  # starting again is allowed


def test_keep_best_validates_by_eq1_on_the_val_windows_and_saves_the_kept_weights(corpus, trained, tmp_path):
    from textebm.detection.detect import EnergyScorer

    run = tmp_path / "best"
    assert main(["detect", "train", "--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab",
                 str(corpus["vocab"]), "--energy", "linear", "--epochs", "3", "--batch-size", "8", "--lr", "0.05",
                 "--keep-best", "--out", str(run), "--no-progress"]) == 0
    m = json.loads((run / "metrics.json").read_text())["train"]
    assert [v["epoch"] for v in m["validation"]] == [0, 1, 2]
    assert m["kept"]["loss"] == min(v["loss"] for v in m["validation"])
    # eq. (1) over all negatives, by hand, on the saved model: the kept validation loss
    rows = [json.loads(x) for x in trained["dev"].read_text().splitlines()]
    scorer = EnergyScorer(run)
    e = scorer.score_ids([s for r in rows for s in [r["positive"], *r["negatives"]]])
    e = np.asarray(e, dtype=np.float64).reshape(len(rows), -1)
    softplus = lambda x: np.logaddexp(0.0, x)
    assert np.isclose(softplus(e[:, 0]).mean() + softplus(-e[:, 1:]).mean(), m["kept"]["loss"], rtol=1e-5)


# ---------------------------------------------------------------- lengths (issue 37)


def test_text_windows_by_hand():
    """A text longer than a window is scored by full windows, the last one ending at its end."""
    from textebm.detection.detect import text_windows

    ids = list(range(10))
    assert text_windows(ids, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [6, 7, 8, 9]]
    assert text_windows(ids[:8], 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert text_windows(ids[:3], 4) == [[0, 1, 2]] and text_windows(ids[:4], 4) == [[0, 1, 2, 3]]


def test_cut_rows_cut_a_window_and_its_negatives_alike():
    """--min-length: each row cut to n in [MIN, L], the end holding the continuation kept (the last n
    of an l2r window, the first n of an r2l one), its negatives alike, the context shrinking first;
    the same key gives the same cuts."""
    from textebm.detection.train import cut_rows

    L = 12
    rows = [{"positive": list(range(L)), "negatives": [list(range(100, 100 + L)), list(range(200, 200 + L))],
             "context_len": 8, "direction": d} for d in ("l2r", "r2l") * 50]
    cut = cut_rows(rows, 3, L, [0, "length", 0])
    ns = [len(r["positive"]) for r in cut]
    assert min(ns) == 3 and max(ns) == L and len(set(ns)) > 5  # uniform over [3, 12]
    for r, c in zip(rows, cut):
        n = len(c["positive"])
        assert all(len(x) == n for x in c["negatives"])
        if r["direction"] == "l2r":
            assert c["positive"] == list(range(L - n, L)) and c["negatives"][0] == list(range(100 + L - n, 100 + L))
        else:
            assert c["positive"] == list(range(n)) and c["negatives"][1] == list(range(200, 200 + n))
        assert c["context_len"] == max(0, n - 4)  # the 4 generated tokens are kept while n >= 4
    assert cut == cut_rows(rows, 3, L, [0, "length", 0]) and cut != cut_rows(rows, 3, L, [0, "length", 1])
    half = cut_rows(rows, 3, L, [0, "length", 0], fraction=0.5)  # about half cut, the rest whole (the same rows)
    whole = sum(h is r for h, r in zip(half, rows))
    assert 30 <= whole <= 70 and all(h == c for h, c, r in zip(half, cut, rows) if h is not r)


def test_min_length_trains_on_cut_windows_records_it_and_score_warns_or_refuses_shorter_texts(
        corpus, trained, tmp_path, caplog, capsys):
    """`detect train --min-length`: the windows of a batch have varied lengths, detector.json
    records MIN; `detect score` warns with the count of texts under it, and --strict refuses them
    (exit 2, nothing written). A MIN past the window, or with a one-prefix energy, is exit 2."""
    import logging

    from textebm.detection.train import WindowBatcher

    args = ["--train", str(trained["train"]), "--val", str(trained["dev"]), "--vocab", str(corpus["vocab"]),
            "--energy", "bilstm", "--width", "16", "--max-steps", "6", "--batch-size", "8", "--no-progress"]
    run = tmp_path / "varied"
    assert main(["detect", "train", *args, "--min-length", "4", "--out", str(run)]) == 0
    info = json.loads((run / "detector.json").read_text())
    assert info["min_length"] == 4 and info["length"] == 24
    rows = [json.loads(x) for x in trained["train"].read_text().splitlines()][:16]
    b = WindowBatcher(None, None, None, min_length=4, seed=0)  # rows() cuts; it encodes nothing
    lengths = {len(r["positive"]) for r in b.rows(list(enumerate(rows)))}
    assert len(lengths) > 3 and min(lengths) >= 4
    texts = tmp_path / "t.txt"
    texts.write_text("the quick brown fox jumps over the lazy dog " * 4 + "\n\na\n")
    out = tmp_path / "s.jsonl"
    with caplog.at_level(logging.WARNING):
        assert main(["detect", "score", "--model", str(run), "--input", str(texts), "--out", str(out)]) == 0
    tokens = [json.loads(x)["tokens"] for x in out.read_text().splitlines()]
    assert tokens[1] < 4 <= tokens[0]
    assert "1 of 2 texts have fewer than 4 tokens" in caplog.text
    out2 = tmp_path / "s2.jsonl"
    caplog.clear()
    assert main(["detect", "score", "--model", str(run), "--input", str(texts), "--strict", "--out", str(out2)]) == 2
    assert not out2.exists() and "(the first: line 3)" in caplog.text + capsys.readouterr().err
    for bad, name in ((["--min-length", "25"], "--min-length 25"),
                      (["--min-length", "4", "--energy", "unitransf", "--layers", "1", "--heads", "2",
                        "--pool", "continuation"], "--pool continuation")):
        assert main(["detect", "train", *args, *bad, "--out", str(tmp_path / "bad")]) == 2
        assert not (tmp_path / "bad").exists()
