"""Every command, driven with a table of bad option values and bad folders.

Each case must end with exit status 2, a message naming the option or the path at fault, no
traceback, and nothing written: the tree under the test's folder is the same before and after.
The cases run in-process through `textebm.cli.main`, on tiny fixtures (a dataset, a noise file,
a tiny encoder, a tiny causal LM, a tiny trained classifier, negatives files and two tiny
detectors), built once per module. Every command has a case; every option of the newer commands
has one (the option a case exercises is the word after the command in its id). The last tests
cover bad values found only once a run has started (a diverging noise model, Ctrl-C).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import json

import pytest

from test_lm_sampling import make_tiny_lm
from textebm.cli import main


@pytest.fixture(scope="module")
def world(classify_fixture, tmp_path_factory) -> dict[str, Path]:
    """Folders of every kind a command may be handed, made once for the module."""
    root = tmp_path_factory.mktemp("bad_inputs")
    d = classify_fixture
    w = {"data": d / "data", "noise": d / "noise.jsonl", "encoder": d / "encoder", "root": root}
    w["lm"] = make_tiny_lm(root / "lm" / "model")  # a run folder holding model/
    w["infill"] = make_tiny_lm(root / "infill", objective="infill")
    clf = root / "clf"
    assert main(["classify", "train", "--data", str(w["data"]), "--encoder", str(w["encoder"]), "--out", str(clf),
                 "--max-steps", "2", "--no-progress", "--precision", "fp32", "--eval-split", ""]) == 0
    w["clf"] = clf
    broken = root / "broken-clf"
    broken.mkdir()
    for f in (clf / "model").iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "classifier.json").write_text('{"labels": ["a", "b"], "energy": "none", "bogus": 1}\n')
    w["broken"] = broken
    noweights = root / "noweights-clf"
    noweights.mkdir()
    for f in (clf / "model").iterdir():
        if f.name != "model.safetensors":
            (noweights / f.name).write_bytes(f.read_bytes())
    w["noweights"] = noweights
    foreign = root / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("my own notes\n")
    w["foreign"] = foreign
    w["file"] = w["data"] / "train.jsonl"
    w["adir"] = root / "adir"
    w["adir"].mkdir()
    (w["adir"] / "keep.txt").write_text("x\n")
    w["conll"] = root / "ragged.conll"
    w["conll"].write_text("EU NNP B-ORG\nrejects VBZ\n")
    from textebm.data.layout import write_dataset

    rows = [{"text": f"w{i} w{i % 3}", "label": "a" if i % 2 else "b"} for i in range(12)]
    write_dataset(root / "unseen", {"train": rows, "dev": rows[:3] + [{"text": "x y", "label": "c"}],
                                    "test": rows[:2]}, {"name": "unseen"})
    write_dataset(root / "unlabelled", {"train": rows, "dev": rows[:3] + [{"text": "x y"}], "test": rows[:2]},
                  {"name": "unlabelled"})
    w["unseen"], w["unlabelled"] = root / "unseen", root / "unlabelled"
    existing = root / "existing.jsonl"
    existing.write_text('{"text": "mine"}\n')
    w["existing"] = existing
    cloze = root / "cloze"
    assert main(["cloze", "train", "--data", str(w["data"]), "--out", str(cloze), "--layers", "1", "--width", "16",
                 "--heads", "2", "--vocab-size", "300", "--max-steps", "1", "--no-progress", "--precision", "fp32",
                 "--eval-split", ""]) == 0
    w["cloze"] = cloze
    return w


def _lm_train(w, *extra):
    return ["lm", "train", "--data", w["data"], "--out", w["root"] / "new-lm", "--layers", "1", "--width", "16",
            "--heads", "2", "--vocab-size", "300", "--max-steps", "1", "--no-progress", *extra]


def _ralm_train(w, base, *extra):
    return ["lm", "train", "--data", w["data"], "--out", w["root"] / "new-lm", "--residual-of", base, "--layers", "1",
            "--width", "16", "--heads", "2", "--max-steps", "1", "--no-progress", *extra]


def _clf_train(w, *extra):
    return ["classify", "train", "--data", w["data"], "--encoder", w["encoder"], "--out", w["root"] / "new-clf",
            "--max-steps", "1", "--no-progress", *extra]


def _three_class_clf(w) -> Path:
    """The trained classifier copied, its classifier.json naming three classes (a run of another
    label set, refused before its weights are read)."""
    import shutil

    d = w["root"] / "three-clf"
    if not d.is_dir():
        shutil.copytree(w["clf"], d)
        spec = d / "model" / "classifier.json"
        meta = json.loads(spec.read_text())
        spec.write_text(json.dumps({**meta, "labels": [*meta["labels"], "other"]}))
    return d


def _bad_noise(w, kind: str) -> Path:
    """The fixture's noise file with line 2 changed: a text pair ("pair") or a text that is a number ("number")."""
    f = w["root"] / f"noise-{kind}.jsonl"
    if not f.is_file():
        rows = [json.loads(x) for x in w["noise"].read_text().splitlines()]
        rows[1] = {**rows[1], "text_pair": "a second text"} if kind == "pair" else {**rows[1], "text": 5}
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def _one_dev(w) -> Path:
    """The classifier's dataset with a dev split of one example."""
    import shutil

    d = w["root"] / "one-dev"
    if not d.is_dir():
        shutil.copytree(w["data"], d)
        (d / "dev.jsonl").write_text((d / "dev.jsonl").read_text().splitlines()[0] + "\n")
    return d


def _clf_eval(w, *extra, model=None, out=None):
    return ["classify", "eval", "--model", model or w["clf"], "--data", w["data"],
            "--out", out or w["root"] / "report", *extra]


def _sample(w, *extra, model=None, out=None):
    return ["lm", "sample", "--model", model or w["lm"], "--data", w["data"], "--mode", "free",
            "--max-new-tokens", "2", "--out", out or w["root"] / "s.jsonl", "--no-progress", *extra]


def _score(w, *extra, model=None, out=None):
    return ["lm", "score", "--model", model or w["lm"], "--input", w["file"], "--out",
            out or w["root"] / "scores.jsonl", *extra]


def _eval(w, *extra, model=None):
    return ["lm", "eval", "--model", model or w["lm"], "--data", w["data"], "--split", "test",
            "--metrics", w["root"] / "m.json", *extra]


def _cloze_train(w, *extra):
    return ["cloze", "train", "--data", w["data"], "--out", w["root"] / "new-cloze", "--layers", "1", "--width", "16",
            "--heads", "2", "--vocab-size", "300", "--max-steps", "1", "--no-progress", *extra]


def _score_texts(w, *extra, model=None, out=None):
    return ["score", "--model", model or w["cloze"], "--input", w["file"], "--out",
            out or w["root"] / "pll.jsonl", "--no-progress", *extra]


def _tag(w) -> dict[str, Path]:
    """A tiny tagged dataset, broken variants of it, and a tagger trained on it for one step
    (made once, before the case's snapshot)."""
    d = w["root"] / "tag"
    if not d.is_dir():
        from textebm.data.layout import write_dataset

        rows = [{"text": f"the w{i % 4} runs", "tokens": ["the", f"w{i % 4}", "runs"], "tags": ["DET", "NOUN", "VERB"]}
                for i in range(12)]
        write_dataset(d / "data", {"train": rows, "dev": rows[:3], "test": rows[:3]}, {"name": "tag"})
        unseen = {"text": "the w1", "tokens": ["the", "w1"], "tags": ["DET", "PROPN"]}
        write_dataset(d / "unseen", {"train": rows, "dev": [*rows[:2], unseen], "test": [*rows[:2], unseen]},
                      {"name": "unseen"})
        (d / "empty.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps({"text": "-", "tokens": [], "tags": []})
                                       + "\n")
        (d / "ragged.conll").write_text("the DET\nw1 NOUN\n\na DET x\n")
        (d / "good.conll").write_text("the DET\nw1 NOUN\n\nthe DET\nw2 NOUN\n")
        assert main(["tag", "train", "--data", str(d / "data"), "--out", str(d / "run"), "--embed", "4", "--hidden",
                     "4", "--max-steps", "1", "--no-progress", "--precision", "fp32"]) == 0
        (d / "nowords").mkdir()
        for f in (d / "run" / "model").iterdir():
            if f.name != "words.json":
                (d / "nowords" / f.name).write_bytes(f.read_bytes())
    return {k: d / v for k, v in (("data", "data"), ("unseen", "unseen"), ("empty", "empty.jsonl"),
                                  ("ragged", "ragged.conll"), ("conll", "good.conll"), ("run", "run"),
                                  ("nowords", "nowords"))}


def _tag_train(w, *extra):
    return ["tag", "train", "--data", _tag(w)["data"], "--out", w["root"] / "new-tagger", "--embed", "4", "--hidden",
            "4", "--max-steps", "1", "--no-progress", *extra]


def _tag_eval(w, *extra, model=None):
    return ["tag", "eval", "--model", model or _tag(w)["run"], "--data", _tag(w)["data"], *extra]


def _tag_predict(w, *extra, model=None, out=None):
    return ["tag", "predict", "--model", model or _tag(w)["run"], "--input", _tag(w)["data"] / "test.jsonl",
            "--out", out or w["root"] / "tagged.conll", *extra]


def _img(w) -> dict[str, Path]:
    """ssl-images: an EBM (stage 1 of pre-training) and a classifier, one step each, and an .npz of
    images of the wrong shape (made once, before the case's snapshot)."""
    import numpy as np

    d = w["root"] / "img"
    if not d.is_dir():
        d.mkdir()
        quick = ["--max-steps", "1", "--threads", "1", "--sgld-steps", "1", "--samples", "4", "--buffer-size", "8"]
        assert main(["ssl-images", "pretrain", "--out", str(d / "ebm"), *quick]) == 0
        assert main(["ssl-images", "train", "--out", str(d / "sup"), "--max-steps", "1", "--threads", "1"]) == 0
        np.savez(d / "wrong.npz", X=np.zeros((10, 64), np.float32), y=np.zeros(10, np.int64))
    return {"ebm": d / "ebm", "sup": d / "sup", "wrong": d / "wrong.npz"}


def _img_train(w, *extra):
    return ["ssl-images", "train", "--out", w["root"] / "new-img", "--max-steps", "1", "--threads", "1", *extra]


def _img_pretrain(w, *extra):
    return ["ssl-images", "pretrain", "--out", w["root"] / "new-ebm", "--max-steps", "1", "--threads", "1", *extra]


def _img_eval(w, *extra, model=None):
    return ["ssl-images", "eval", "--model", model or _img(w)["sup"], *extra]


def _tag_grid(w, *extra, config="grid.json"):
    """`tag grid` on the tiny tagged dataset: grid.json a good config, grid-bad.json one with a bad value."""
    d = _tag(w)["data"].parent
    if not (d / "grid.json").is_file():
        good = {"data": str(_tag(w)["data"]), "labelled": 4, "proportions": [0.5], "ratios": [1], "seeds": [0]}
        (d / "grid.json").write_text(json.dumps(good))
        (d / "grid-bad.json").write_text(json.dumps({**good, "options": {"all": {"epochs": "two"}}}))
    return ["tag", "grid", "--config", d / config, "--out", w["root"] / "tag-grid", *extra]


def _quickstart(w, *extra):
    return ["quickstart", "--data", w["data"], "--encoder", w["encoder"], "--out", w["root"] / "qs",
            "--no-progress", *extra]


def _nbest(w) -> dict[str, Path]:
    """Tiny n-best files and a score file for `rerank` (written once, before the case's snapshot)."""
    d = w["root"] / "nbest"
    if not d.is_dir():
        d.mkdir()
        good = '{"u1": {"ref": "a b", "hyp_1": {"text": "a b", "score": -1}, "hyp_2": {"text": "a c", "score": -2}}}\n'
        (d / "dev.json").write_text(good)
        (d / "test.json").write_text(good)
        (d / "bad.json").write_text('{"u1": {"ref": "a b",\n "hyp_1": {"score": -1}}}\n')
        (d / "scores.jsonl").write_text('{"text": "a b", "score": -3.0, "method": "electric"}\n'
                                        '{"text": "a c", "score": -4.0, "method": "electric"}\n')
        (d / "few-scores.jsonl").write_text('{"text": "a b", "score": -3.0, "method": "electric"}\n')
    return {"dev": d / "dev.json", "test": d / "test.json", "bad": d / "bad.json", "scores": d / "scores.jsonl",
            "few": d / "few-scores.jsonl"}


def _res(w) -> dict[str, Path]:
    """A vocabulary (the tiny LM's tokenizer, 96 entries), negatives files in it (valid; broken; with a
    negative token id on line 2; of 3-token windows), one cut in another vocabulary (the tiny
    encoder's WordPiece), a matrix config."""
    d = w["root"] / "res"
    if not d.is_dir():
        d.mkdir()
        good = {"positive": [5, 6, 7, 8], "negatives": [[5, 6, 9, 9]], "direction": "l2r", "context_len": 2}
        rows = [{**good, "positive": [5 + i, 6, 7, 8], "negatives": [[5 + i, 6, 9 + i, 9]]} for i in range(4)]
        (d / "neg.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "bad.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "negatives": [[5]]}) + "\n")
        (d / "negid.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "negatives": [[5, 6, -1, 9]]})
                                       + "\n")
        (d / "ctx.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "context_len": 4}) + "\n")
        (d / "kmix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
            good, good, {**good, "negatives": [[5, 6, 9, 9], [5, 6, 9, 8]]})))
        short = {**good, "positive": [5, 6, 7], "negatives": [[5, 6, 9]]}
        (d / "short.jsonl").write_text(json.dumps(short) + "\n")
        from textebm.models.load import load_tokenizer

        wordpiece = load_tokenizer(w["encoder"])
        text = " ".join(json.loads(x)["text"] for x in w["file"].read_text().splitlines())
        ids = wordpiece(text, add_special_tokens=False)["input_ids"]
        first = next(i for i, t in enumerate(ids) if t >= 96)  # beyond the 96 entries of the tiny LM's vocabulary
        ids = ids[first:first + 8]
        (d / "foreign.jsonl").write_text(json.dumps({**good, "positive": ids[:4], "negatives": [ids[4:8]]}) + "\n")
        (d / "matrix.json").write_text(json.dumps({"corpora": ["sotu"], "generators": {"tf": {"arch": "rnn"}},
                                                   "tables": []}))
        (d / "matrix-ok.json").write_text(json.dumps({"corpora": ["sotu"], "generators": {"tf": {"arch": "transformer"}},
                                                      "tables": []}))
    return {"vocab": w["lm"], **{f: d / f"{f}.jsonl" for f in ("neg", "bad", "negid", "short", "foreign", "ctx",
                                                               "kmix")},
            "matrix": d / "matrix.json", "matrix-ok": d / "matrix-ok.json"}


def _det(w) -> dict[str, Path]:
    """Two tiny detectors (a linear energy trained one step, a zero-shot loglik one), a threshold
    file of `detect threshold` for the energy, and 16 human texts (the test split)."""
    d = w["root"] / "det"
    r = _res(w)
    if not d.is_dir():
        d.mkdir()
        assert main(["detect", "train", "--train", str(r["neg"]), "--val", str(r["neg"]), "--vocab", str(r["vocab"]),
                     "--energy", "linear", "--max-steps", "1", "--out", str(d / "energy"), "--no-progress",
                     "--precision", "fp32"]) == 0
        assert main(["detect", "fit", "--zeroshot", "loglik", "--model", str(w["lm"]), "--val", str(r["neg"]),
                     "--vocab", str(r["vocab"]), "--out", str(d / "zs")]) == 0
        assert main(["detect", "threshold", "--model", str(d / "energy"), "--human", str(w["data"] / "test.jsonl"),
                     "--fpr", "0.1", "--out", str(d / "thr.json")]) == 0
        (d / "hand.json").write_text('{"threshold": 0.5}\n')  # written by hand: for no detector
    return {"energy": d / "energy", "zs": d / "zs", "thr": d / "thr.json", "hand": d / "hand.json",
            "human": w["data"] / "test.jsonl"}


def _pair_clf(w) -> Path:
    """The trained classifier copied, its classifier.json saying it was trained on text pairs."""
    import shutil

    d = w["root"] / "pair-clf"
    if not d.is_dir():
        shutil.copytree(w["clf"], d)
        spec = d / "model" / "classifier.json"
        spec.write_text(json.dumps({**json.loads(spec.read_text()), "pairs": True}))
    return d


def _written(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _moved_zs(w) -> Path:
    """`_det`'s zero-shot detector copied, its detector.json naming an LM that is no longer there."""
    d = w["root"] / "moved-zs"
    if not d.is_dir():
        d.mkdir()
        raw = json.loads((_det(w)["zs"] / "detector.json").read_text())
        (d / "detector.json").write_text(json.dumps({**raw, "model": str(w["root"] / "gone-lm")}))
    return d


def _joint(w) -> dict[str, Path]:
    """For `residual generate` / `ppl` (over the tiny LM and `_det`'s linear energy of 4-token windows,
    prefix 2): the tiny LM with 3 positions (shorter than [bos] + 2 + 2), the tiny LM with one token
    renamed (another vocabulary), a detector of 3-token windows, one in the encoder's WordPiece
    vocabulary, --prefixes files (one whose line 2 is shorter than the prefix, one valid), a `residual
    ppl` output, OUT.partial files of another run (stale) and a folder in OUT.partial's place (dir), a
    dataset whose test split holds an [eos] inside a window's continuation (a token the base LM never
    writes), an r2l tiny LM."""
    d = w["root"] / "joint"
    if not d.is_dir():
        d.mkdir()
        for name in ("short-lm", "other-vocab-lm"):
            (d / name).mkdir()
            for f in w["lm"].iterdir():
                (d / name / f.name).write_bytes(f.read_bytes())
        config = json.loads((d / "short-lm" / "config.json").read_text())
        (d / "short-lm" / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 3}))
        tok = json.loads((d / "other-vocab-lm" / "tokenizer.json").read_text())
        tok["model"]["vocab"] = {("v89" if t == "w89" else t): i for t, i in tok["model"]["vocab"].items()}
        (d / "other-vocab-lm" / "tokenizer.json").write_text(json.dumps(tok))
        r = _res(w)
        assert main(["detect", "train", "--train", str(r["short"]), "--val", str(r["short"]), "--vocab",
                     str(r["vocab"]), "--energy", "linear", "--max-steps", "1", "--out", str(d / "det3"),
                     "--no-progress", "--precision", "fp32"]) == 0
        assert main(["detect", "train", "--train", str(r["foreign"]), "--val", str(r["foreign"]), "--vocab",
                     str(w["encoder"]), "--energy", "linear", "--max-steps", "1", "--out", str(d / "det-wordpiece"),
                     "--no-progress", "--precision", "fp32"]) == 0
        (d / "stale.partial").write_text(json.dumps({"textebm_partial": {"command": "residual ppl", "samples": 9}})
                                         + "\n")  # rows of an interrupted run with other options
        (d / "dir.partial").mkdir()
        make_tiny_lm(d / "r2l-lm", direction="r2l", seed=1)
        from textebm.data.layout import write_dataset

        rows = [{"text": "w1 w2 w3 w4 w5 w6 w7 w8", "doc": "d0"}, {"text": "w1 w2 </s> w3 w4 w5 w6 w7", "doc": "d1"}]
        write_dataset(d / "eos-data", {"train": rows, "dev": rows, "test": rows}, {"name": "eos"})
        # energies the joint model cannot take: a ranking loss, truncated negatives, a control of another LM
        assert main(["detect", "train", "--train", str(r["neg"]), "--val", str(r["neg"]), "--vocab", str(r["vocab"]),
                     "--energy", "linear", "--loss", "ranking", "--max-steps", "1", "--out", str(d / "det-ranking"),
                     "--no-progress", "--precision", "fp32"]) == 0
        rows = [{**json.loads(x), "top_k": 10, "temperature": 1.0} for x in r["neg"].read_text().splitlines()]
        (d / "neg-top10.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
        assert main(["detect", "train", "--train", str(d / "neg-top10.jsonl"), "--val", str(r["neg"]), "--vocab",
                     str(r["vocab"]), "--energy", "linear", "--max-steps", "1", "--out", str(d / "det-top10"),
                     "--no-progress", "--precision", "fp32"]) == 0
        assert main(["detect", "train", "--train", str(r["neg"]), "--val", str(r["neg"]), "--vocab", str(r["vocab"]),
                     "--energy", "lmstats", "--base", str(w["lm"]), "--max-steps", "1", "--out", str(d / "ctrl"),
                     "--no-progress", "--precision", "fp32"]) == 0
        make_tiny_lm(d / "other-lm", seed=1)  # the same vocabulary, other weights
        (d / "prefixes.txt").write_text("w1 w2 w3\nw4\nw5 w6\n")
        (d / "good-prefixes.txt").write_text("w1 w2 w3\nw5 w6\n")
        (d / "dup-prefixes.csv").write_text("id,start\na,w1 w2 w3\n\nb,w4 w5\na,w5 w6\n")  # "a" again on line 5
        assert main([str(a) for a in _jppl(w, out=d / "ppl-out")]) == 0
    return {"short-lm": d / "short-lm", "other-vocab-lm": d / "other-vocab-lm", "det3": d / "det3",
            "det-wordpiece": d / "det-wordpiece", "stale": d / "stale", "dir": d / "dir",
            "eos-data": d / "eos-data", "r2l-lm": d / "r2l-lm", "prefixes": d / "prefixes.txt",
            "good-prefixes": d / "good-prefixes.txt", "dup-prefixes": d / "dup-prefixes.csv",
            "ppl-out": d / "ppl-out", "det-ranking": d / "det-ranking",
            "det-top10": d / "det-top10", "ctrl": d / "ctrl", "other-lm": d / "other-lm"}


def _jgen(w, *extra, base=None, energy=None, out=None):
    return ["residual", "generate", "--base", base or w["lm"], "--energy", energy or _det(w)["energy"], "--data",
            w["data"], "--windows", "2", "--n", "2", "--out", out or w["root"] / "jg", "--no-progress", *extra]


def _jppl(w, *extra, base=None, energy=None, out=None):
    return ["residual", "ppl", "--base", base or w["lm"], "--energy", energy or _det(w)["energy"], "--data",
            w["data"], "--windows", "2", "--samples", "2", "--out", out or w["root"] / "jp", "--no-progress", *extra]


def _jrep(w, *extra, base=None, energy=None, out=None):
    """The real continuations: words the tiny LM's vocabulary lacks, so every token is <unk>, a repetition."""
    return ["residual", "repetitions", "--base", base or w["lm"], "--energy", energy or _det(w)["energy"], "--data",
            w["data"], "--source", "real", "--windows", "4", "--examples", "1", "--candidates", "2", "--completions",
            "2", "--out", out or w["root"] / "jr", "--no-progress", *extra]


def _drop(argv: list, flag: str) -> list:
    """argv without `flag` and its value."""
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:]


def _set(argv: list, flag: str, value) -> list:
    """argv with `flag`'s value replaced by `value` (or `flag value` appended)."""
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return argv
    return [*argv, flag, value]


def _neg(w, *extra, generator=None, out=None):
    return ["negatives", "generate", "--data", w["data"], "--generator", generator or w["lm"], "--vocab",
            _res(w)["vocab"], "--out", out or w["root"] / "neg.jsonl", "--no-progress", *extra]


def _res_train(w, *extra, train=None, val=None, out=None):
    r = _res(w)
    return ["detect", "train", "--train", train or r["neg"], "--val", val or r["neg"], "--vocab", r["vocab"],
            "--out", out or w["root"] / "new-det", "--max-steps", "1", "--no-progress", *extra]


def _fit(w, *extra, val=None, out=None):
    return ["detect", "fit", "--zeroshot", "loglik", "--model", w["lm"], "--val", *(val or [_res(w)["neg"]]),
            "--vocab", _res(w)["vocab"], "--out", out or w["root"] / "fit", *extra]


def _res_eval(w, *extra, test=None):
    return ["detect", "eval", "--model", _det(w)["energy"], "--test", test or _res(w)["neg"], *extra]


def _res_score(w, *extra, model=None):
    return ["detect", "score", "--model", model or _det(w)["energy"], "--input", _det(w)["human"], "--out",
            w["root"] / "p.jsonl", *extra]


def _res_threshold(w, *extra):
    return ["detect", "threshold", "--model", _det(w)["energy"], "--human", _det(w)["human"], "--out",
            w["root"] / "t.json", *extra]


def _analyze(w, *extra, model=None, test=None, out=None):
    return ["detect", "analyze", "--model", model or _det(w)["energy"], "--test", test or _res(w)["neg"],
            "--out", out or w["root"] / "an", *extra]


def _rerank(w, *extra, dev=None, scores=None, out=None):
    f = _nbest(w)
    return ["rerank", "--dev", dev or f["dev"], "--test", f["test"], "--scores", scores or f["scores"],
            "--out", out or w["root"] / "rr", *extra]


def _unwritable(w, where: str, flag: str) -> str | Path:
    """An output path nothing can be written at: in /proc (a pseudo file system that refuses new
    entries, even to root), or under a file."""
    name = "x.txt" if flag == "--write-texts" else "x"  # --write-texts names a .txt or .jsonl file
    return f"/proc/{name}" if where == "/proc/x" else w["existing"] / name


# (case id, argv builder, option): every command's outputs
OUTPUTS = [
    ("lm-train", _lm_train, "--out"), ("classify-train", _clf_train, "--out"), ("cloze-train", _cloze_train, "--out"),
    ("detect-train", _res_train, "--out"), ("classify-eval", _clf_eval, "--out"), ("lm-sample", _sample, "--out"),
    ("lm-score", _score, "--out"), ("lm-eval", _eval, "--metrics"), ("score", _score_texts, "--out"),
    ("score", _score_texts, "--html"), ("negatives-generate", _neg, "--out"), ("detect-fit", _fit, "--out"),
    ("detect-eval", _res_eval, "--out"), ("detect-score", _res_score, "--out"),
    ("detect-threshold", _res_threshold, "--out"), ("detect-analyze", _analyze, "--out"),
    ("rerank", _rerank, "--out"), ("residual-generate", _jgen, "--out"), ("residual-ppl", _jppl, "--out"),
    ("residual-repetitions", _jrep, "--out"),
    ("detect-matrix", lambda w: ["detect", "matrix", "--config", _res(w)["matrix-ok"]], "--out"),
    ("rerank", lambda w: ["rerank", "--dev", _nbest(w)["dev"], "--test", _nbest(w)["test"]], "--write-texts"),
    ("tokenizer-train", lambda w: ["tokenizer", "train", "--data", w["data"], "--vocab-size", "100"], "--out"),
    ("data-prepare", lambda w: ["data", "prepare", "rt-polarity"], "--out"),
    ("data-convert", lambda w: ["data", "convert", "--input", w["file"]], "--out"),
    ("models-fetch", lambda w: ["models", "fetch", "minilm-l6"], "--out"),
    ("quickstart", _quickstart, "--out"),
    ("tag-train", _tag_train, "--out"), ("tag-eval", _tag_eval, "--out"), ("tag-predict", _tag_predict, "--out"),
    ("ssl-images-train", _img_train, "--out"), ("ssl-images-pretrain", _img_pretrain, "--out"),
    ("ssl-images-eval", lambda w: _img_eval(w, "--out", w["root"] / "img-eval.json"), "--out"),
    ("tag-grid", lambda w: _tag_grid(w)[:4], "--out"),
]

# (case id, argv builder, the text the message must contain)
def _command_configs() -> dict[str, type]:
    import importlib

    from textebm.cli import GROUPS

    out = {}
    for group, (module_name, _) in GROUPS.items():
        module = importlib.import_module(module_name)
        if hasattr(module, "COMMAND"):
            out[group] = module.COMMAND[0]
        else:
            out.update({f"{group}-{c}": cls for c, (cls, _) in module.COMMANDS.items()})
    return out


def _missing_corpus(w, named: bool = False) -> Path:
    """A matrix config whose corpus is a folder that does not exist (or an unknown dataset name)."""
    f = w["root"] / f"matrix-missing{'-named' if named else ''}.json"
    if not f.is_file():
        corpora = ["no-such-dataset"] if named else {"mine": str(w["root"] / "no-such-corpus")}
        f.write_text(json.dumps({"corpora": corpora, "generators": {"tf": {"arch": "transformer"}}, "tables": []}))
    return f


def _unfinished(w) -> Path:
    """A cloze run killed before it wrote model/: its marker and config.json, a checkpoint only."""
    run = w["root"] / "unfinished-cloze"
    if not run.is_dir():
        from textebm.outputs import write_marker

        (run / "checkpoint").mkdir(parents=True)
        (run / "config.json").write_text('{"objective": "electric"}')
        write_marker(run, "cloze train", ["config.json", "checkpoint", "metrics.json", "model"])
    return run


def _with_out(w, argv: list) -> list:
    """argv with an --out (a new folder) where it has none."""
    return argv if "--out" in argv else [*argv, "--out", w["root"] / "never-written"]


def _takes_threads() -> set[str]:
    """The commands with a --threads option."""
    return {cmd for cmd, cls in _command_configs().items() if "threads" in {f.name for f in dataclasses.fields(cls)}}


CASES = [
    # shared training options, on both training commands
    *[(f"lm-train {flag} {val}", lambda w, f=flag, v=val: _lm_train(w, f, v), flag)
      for flag, val in [("--batch-size", "0"), ("--grad-accum", "0"), ("--log-every", "0"),
                        ("--checkpoint-every", "0"), ("--threads", "-1"), ("--lr", "nan"), ("--lr", "-1"),
                        ("--lr", "inf"), ("--max-len", "0"), ("--seed", "-1"), ("--epochs", "0"),
                        ("--warmup", "1.5"), ("--schedule", "step"), ("--weight-decay", "-0.1"), ("--grad-clip", "-1"),
                        ("--max-steps", "-3"), ("--precision", "fp17"), ("--vocab-size", "0"),
                        ("--layers", "0"), ("--objective", "mlm"), ("--direction", "up")]],
    ("lm-train --mask-ratio 1.5", lambda w: _lm_train(w, "--objective", "infill", "--mask-ratio", "1.5"),
     "--mask-ratio"),
    ("lm-train --mask-ratio for a causal LM", lambda w: _lm_train(w, "--mask-ratio", "0.3"), "--mask-ratio"),
    ("lm-train size flags with --init", lambda w: _lm_train(w, "--init", w["lm"] / "model", "--layers", "2"),
     "--layers"),
    ("lm-train width not divisible by heads", lambda w: _lm_train(w, "--width", "30", "--heads", "4"), "--width"),
    ("lm-train --patience without --keep-best", lambda w: _lm_train(w, "--patience", "2"), "--patience"),
    ("cloze-train --patience without --keep-best", lambda w: _cloze_train(w, "--patience", "2"), "--patience"),
    ("cloze-train --keep-best without an evaluation split",
     lambda w: _cloze_train(w, "--keep-best", "--eval-split", ""), "--keep-best"),
    ("lm-train --keep-best without an evaluation split", lambda w: _lm_train(w, "--keep-best", "--eval-split", ""),
     "--keep-best"),
    ("lm-train --resume --overwrite", lambda w: _lm_train(w, "--resume", "--overwrite"), "--resume"),
    ("lm-train missing data", lambda w: _lm_train(w)[:2] + ["--data", w["root"] / "nope"] + _lm_train(w)[4:],
     "nope"),
    ("lm-train --eval-split dev on a file",
     lambda w: ["lm", "train", "--data", w["file"], "--out", w["root"] / "new-lm", "--eval-split", "dev",
                "--max-steps", "1", "--vocab-size", "300", "--no-progress"], "train.jsonl"),
    ("lm-train --out a foreign folder", lambda w: _lm_train(w)[:4] + ["--out", w["foreign"]] + _lm_train(w)[6:],
     "mine"),
    ("lm-train --out a trained classifier run",
     lambda w: _lm_train(w)[:4] + ["--out", w["clf"], "--overwrite"] + _lm_train(w)[6:], "clf"),
    ("lm-train --init an encoder", lambda w: _lm_train(w)[:4] + _lm_train(w)[4:6] + ["--init", w["encoder"],
                                                                                      "--max-steps", "1"],
     "expected a causal LM"),
    ("lm-train --residual-of an encoder", lambda w: _ralm_train(w, w["encoder"]),
     "encoder, not a causal LM"),
    ("lm-train --residual-of an infill LM", lambda w: _ralm_train(w, w["infill"]), "causal base"),
    ("lm-train --residual-of with --objective infill",
     lambda w: _ralm_train(w, w["lm"], "--objective", "infill"), "--residual-of trains a causal RALM"),
    ("lm-train --residual-of an l2r base with --direction r2l",
     lambda w: _ralm_train(w, w["lm"], "--direction", "r2l"), "--direction"),
    ("lm-train --residual-of with a --tokenizer of another vocabulary",
     lambda w: _ralm_train(w, w["lm"], "--tokenizer", w["encoder"]), "--tokenizer"),
    ("lm-train a missing --tokenizer", lambda w: _lm_train(w)[:6] + ["--tokenizer", w["root"] / "no-tok",
                                                                     "--max-steps", "1"], "no-tok"),
    ("lm-train a broken --tokenizer", lambda w: _lm_train(w)[:6] + ["--tokenizer", w["adir"], "--max-steps", "1"],
     "no tokenizer in the folder"),
    ("classify-train a missing --data file", lambda w: _clf_train(w)[:2] + ["--data", w["root"] / "none.jsonl"]
     + _clf_train(w)[4:], "none.jsonl: not found"),
    ("models-fetch --overwrite without --out", lambda w: ["models", "fetch", "minilm-l6", "--overwrite"],
     "--overwrite"),
    ("lm-eval --overwrite with nothing to write",
     lambda w: ["lm", "eval", "--model", w["lm"] / "model", "--data", w["data"], "--split", "test", "--overwrite"],
     "--overwrite"),
    *[(f"classify-train {flag} {val}", lambda w, f=flag, v=val: _clf_train(w, f, v), flag)
      for flag, val in [("--batch-size", "0"), ("--lr", "nan"), ("--lr", "-1"), ("--limit", "-1"),
                        ("--max-len", "0"), ("--seed", "-1"), ("--noise-ratio", "0"), ("--energy", "magic"),
                        ("--head", "deep"), ("--pooling", "max"), ("--checkpoint-every", "0")]],
    ("classify-train --poscal-bins 0", lambda w: _clf_train(w, "--poscal", "--poscal-bins", "0"), "--poscal-bins"),
    ("classify-train PosCal option without --poscal", lambda w: _clf_train(w, "--poscal-bins", "5"),
     "--poscal-bins"),
    ("classify-train --energy without --noise", lambda w: _clf_train(w, "--energy", "hidden"), "--noise"),
    *[(f"classify-train --noise {what}", lambda w, k=kind: _clf_train(w, "--energy", "hidden", "--noise",
                                                                       _bad_noise(w, k)), expected)
      for what, kind, expected in (("a text pair for single-text data", "pair", "noise-pair.jsonl:2: a text pair"),
                                   ("a text that is a number", "number", "noise-number.jsonl:2: noise line has no 'text'"))],
    ("classify-train --max-len beyond the encoder's positions", lambda w: _clf_train(w, "--max-len", "100000"),
     "--max-len 100000: the encoder"),
    ("classify-train --poscal with --energy", lambda w: _clf_train(w, "--poscal", "--energy", "hidden", "--noise",
                                                                   w["noise"]), "--poscal with --energy hidden"),
    ("classify-train --noise-ratio without --energy", lambda w: _clf_train(w, "--noise-ratio", "2"),
     "--noise-ratio"),
    ("classify-train an LM as encoder", lambda w: _clf_train(w, "--encoder", w["lm"]),
     "expected a pretrained text encoder"),
    ("classify-train a missing encoder", lambda w: _clf_train(w, "--encoder", w["root"] / "nope"), "nope"),
    ("classify-train --eval-split test on a file",
     lambda w: ["classify", "train", "--data", w["file"], "--encoder", w["encoder"], "--out", w["root"] / "c2",
                "--eval-split", "test", "--no-progress"], "train.jsonl"),
    ("classify-train a dev label unseen in training",
     lambda w: _clf_train(w)[:2] + ["--data", w["unseen"]] + _clf_train(w)[4:], "dev.jsonl"),
    ("classify-train a dev split without labels",
     lambda w: _clf_train(w)[:2] + ["--data", w["unlabelled"]] + _clf_train(w)[4:], "dev.jsonl"),
    # classify eval
    ("classify-eval a label unseen in training", lambda w: _clf_eval(w)[:4] + ["--data", w["unseen"]]
     + _clf_eval(w)[6:], "dev.jsonl"),
    *[(f"classify-eval {flag} {val}", lambda w, f=flag, v=val: _clf_eval(w, f, v), flag)
      for flag, val in [("--bins", "0"), ("--batch-size", "0"), ("--seed", "-1"), ("--precision", "fp17")]],
    ("classify-eval --out the trained run", lambda w: _clf_eval(w, out=w["clf"]), "clf"),
    ("classify-eval runs of two label sets", lambda w: _clf_eval(w)[:4] + [_three_class_clf(w)] + _clf_eval(w)[4:],
     "runs evaluated together need one label set"),
    ("classify-eval a split of one example", lambda w: _set(_clf_eval(w), "--data", _one_dev(w)),
     "dev.jsonl: 1 example"),
    ("classify-eval a pair classifier on single texts", lambda w: _clf_eval(w, model=_pair_clf(w)),
     "train.jsonl: the classifier was trained on text pairs"),
    ("classify-eval --out the trained run --overwrite", lambda w: _clf_eval(w, "--overwrite", out=w["clf"]),
     "clf"),
    ("classify-eval --out a foreign folder", lambda w: _clf_eval(w, out=w["foreign"]), "mine"),
    ("classify-eval --out a file", lambda w: _clf_eval(w, out=w["existing"]), "existing.jsonl"),
    ("classify-eval an LM", lambda w: _clf_eval(w, model=w["lm"]), "expected a classifier trained with"),
    ("classify-eval an encoder", lambda w: _clf_eval(w, model=w["encoder"]), "expected a classifier trained with"),
    ("classify-eval a broken classifier.json", lambda w: _clf_eval(w, model=w["broken"]), "classifier.json"),
    ("classify-eval missing weights", lambda w: _clf_eval(w, model=w["noweights"]), "noweights-clf"),
    ("classify-eval --split on a file",
     lambda w: ["classify", "eval", "--model", w["clf"], "--data", w["file"], "--split", "dev",
                "--out", w["root"] / "report"], "train.jsonl"),
    # lm sample / score / eval
    *[(f"lm-sample {flag} {val}", lambda w, f=flag, v=val: _sample(w, f, v), flag)
      for flag, val in [("--top-k", "0"), ("--per-example", "0"), ("--temperature", "0"),
                        ("--temperature", "nan"), ("--limit", "-1"), ("--batch-size", "0"), ("--seed", "-1"),
                        ("--max-new-tokens", "-1"), ("--mode", "sideways")]],
    ("lm-sample --mask-ratio 2", lambda w: _sample(w, "--mask-ratio", "2", model=w["infill"]), "--mask-ratio"),
    ("lm-sample an encoder", lambda w: _sample(w, model=w["encoder"]), "expected a causal LM"),
    ("lm-sample a classifier", lambda w: _sample(w, model=w["clf"]), "expected a causal LM"),
    ("lm-sample --out a folder", lambda w: _sample(w, out=w["adir"]), "adir"),
    ("lm-sample --out an existing file", lambda w: _sample(w, out=w["existing"]), "existing.jsonl"),
    ("lm-sample infill with a causal LM", lambda w: _sample(w)[:6] + ["--mode", "infill"] + _sample(w)[8:],
     "--mode infill"),
    ("lm-sample --split dev on a file",
     lambda w: ["lm", "sample", "--model", w["lm"], "--data", w["file"], "--split", "dev", "--mode", "free",
                "--out", w["root"] / "s.jsonl"], "train.jsonl"),
    ("lm-score --batch-size 0", lambda w: _score(w, "--batch-size", "0"), "--batch-size"),
    ("lm-score --precision fp17", lambda w: _score(w, "--precision", "fp17"), "--precision"),
    ("lm-score an encoder", lambda w: _score(w, model=w["encoder"]), "expected a causal LM"),
    ("lm-score a classifier", lambda w: _score(w, model=w["clf"]), "expected a causal LM"),
    ("lm-score --out a folder", lambda w: _score(w, out=w["adir"]), "adir"),
    ("lm-score --out an existing file", lambda w: _score(w, out=w["existing"]), "existing.jsonl"),
    ("lm-score a missing input",
     lambda w: ["lm", "score", "--model", w["lm"], "--input", w["root"] / "nope.jsonl", "--out",
                w["root"] / "scores.jsonl"], "nope.jsonl"),
    ("lm-eval --batch-size 0", lambda w: _eval(w, "--batch-size", "0"), "--batch-size"),
    ("lm-eval --chunk -1", lambda w: _eval(w, "--chunk", "-1"), "--chunk"),
    ("lm-eval --metrics a folder",
     lambda w: ["lm", "eval", "--model", w["lm"], "--data", w["data"], "--split", "test", "--metrics", w["adir"]],
     "adir"),
    ("lm-eval a classifier", lambda w: _eval(w, model=w["clf"]), "expected a causal LM"),
    ("lm-eval an infill LM", lambda w: _eval(w, model=w["infill"]), "infill"),
    ("lm-eval --split dev on a file",
     lambda w: ["lm", "eval", "--model", w["lm"], "--data", w["file"], "--split", "dev", "--metrics",
                w["root"] / "m.json"], "train.jsonl"),
    # data, tokenizer, models
    ("data-prepare --seed -1", lambda w: ["data", "prepare", "rt-polarity", "--out", w["root"] / "d", "--seed", "-1"],
     "--seed"),
    ("data-prepare unknown name", lambda w: ["data", "prepare", "imdb", "--out", w["root"] / "d"], "imdb"),
    ("data-prepare --out a file", lambda w: ["data", "prepare", "rt-polarity", "--out", w["existing"]],
     "existing.jsonl"),
    ("data-prepare --out a foreign folder", lambda w: ["data", "prepare", "rt-polarity", "--out", w["foreign"]],
     "mine"),
    ("data-prepare --out a dataset without --overwrite",
     lambda w: ["data", "prepare", "rt-polarity", "--out", w["data"]], "--overwrite"),
    ("data-convert a missing input",
     lambda w: ["data", "convert", "--input", w["root"] / "nope.csv", "--out", w["root"] / "d"], "nope.csv"),
    ("data-convert two items to split three ways",
     lambda w: ["data", "convert", "--input", _written(w["root"] / "two.tsv", "text\tlabel\na b\t1\nc d\t0\n"),
                "--out", w["root"] / "d"], "two.tsv: too few items (2) to split into train, dev, test; give at least 3"),
    ("data-convert --out a foreign folder",
     lambda w: ["data", "convert", "--input", w["file"], "--out", w["foreign"]], "mine"),
    ("data-convert --seed -1",
     lambda w: ["data", "convert", "--input", w["file"], "--out", w["root"] / "d", "--seed", "-1"], "--seed"),
    ("data-convert a ragged CoNLL row",
     lambda w: ["data", "convert", "--input", w["conll"], "--out", w["root"] / "d"], "ragged.conll:2:"),
    ("data-convert --tag-column beyond the columns",
     lambda w: ["data", "convert", "--input", w["conll"], "--tag-column", "5", "--out", w["root"] / "d"],
     "ragged.conll:1: has 3 column(s); no tag column 5"),
    ("data-convert --tag-column for a JSONL file",
     lambda w: ["data", "convert", "--input", w["file"], "--tag-column", "1", "--out", w["root"] / "d"],
     "--tag-column"),
    ("data-convert --format conllu",
     lambda w: ["data", "convert", "--input", w["conll"], "--format", "conllu", "--out", w["root"] / "d"],
     "--format"),
    ("tokenizer-train --vocab-size 0",
     lambda w: ["tokenizer", "train", "--data", w["data"], "--vocab-size", "0", "--out", w["root"] / "t"],
     "--vocab-size"),
    ("tokenizer-train --out a foreign folder",
     lambda w: ["tokenizer", "train", "--data", w["data"], "--vocab-size", "100", "--out", w["foreign"]], "mine"),
    ("tokenizer-train --data missing",
     lambda w: ["tokenizer", "train", "--data", w["root"] / "nope", "--vocab-size", "100", "--out", w["root"] / "t"],
     "nope"),
    ("models-fetch unknown id", lambda w: ["models", "fetch", "gpt-5"], "gpt-5"),
    ("models-fetch --out a foreign folder", lambda w: ["models", "fetch", "minilm-l6", "--out", w["foreign"]],
     "mine"),
    ("models-fetch --out a trained run", lambda w: ["models", "fetch", "minilm-l6", "--out", w["clf"]], "clf"),
    # quickstart
    *[(f"quickstart {flag} {val}", lambda w, f=flag, v=val: _quickstart(w, f, v), flag)
      for flag, val in [("--train-limit", "-1"), ("--epochs", "0"), ("--noise-ratio", "0"), ("--batch-size", "0"),
                        ("--seed", "-1"), ("--lm-epochs", "0"), ("--max-len", "1"), ("--precision", "fp16")]],
    ("quickstart --full with --train-limit", lambda w: _quickstart(w, "--full", "--train-limit", "5"),
     "--train-limit"),
    ("quickstart --out a foreign folder", lambda w: _quickstart(w)[:5] + ["--out", w["foreign"]], "mine"),
    ("quickstart --out a trained run", lambda w: _quickstart(w)[:5] + ["--out", w["clf"]], "clf"),
    # cloze train
    *[(f"cloze-train {flag} {val}", lambda w, f=flag, v=val: _cloze_train(w, f, v), flag)
      for flag, val in [("--objective", "bert"), ("--mask-fraction", "1.5"), ("--mask-fraction", "0"),
                        ("--noise-scale", "0"), ("--disc-weight", "-1"), ("--flops", "-1"),
                        ("--estimator", "exact"), ("--max-len", "3")]],
    ("cloze-train --estimator with electra", lambda w: _cloze_train(w, "--objective", "electra", "--estimator",
                                                                    "naive"), "--estimator"),
    ("cloze-train --disc-weight with mlm", lambda w: _cloze_train(w, "--objective", "mlm", "--disc-weight", "5"),
     "--disc-weight"),
    ("cloze-train --flops with --max-steps", lambda w: _cloze_train(w, "--flops", "1e9"), "--flops"),
    ("cloze-train size flags with --init", lambda w: _cloze_train(w, "--init", w["encoder"]), "--layers"),
    ("cloze-train --init a causal LM", lambda w: ["cloze", "train", "--data", w["data"], "--out",
                                                  w["root"] / "new-cloze", "--init", w["lm"], "--max-steps", "1"],
     "expected a pretrained text encoder"),
    ("cloze-train --out a foreign folder", lambda w: _cloze_train(w)[:4] + ["--out", w["foreign"]]
     + _cloze_train(w)[6:], "mine"),
    ("cloze-train --data missing", lambda w: _cloze_train(w)[:2] + ["--data", w["root"] / "nope"] + _cloze_train(w)[4:],
     "nope"),
    # score
    *[(f"score {flag} {val}", lambda w, f=flag, v=val: _score_texts(w, f, v), flag)
      for flag, val in [("--batch-size", "0"), ("--token-budget", "0"), ("--chunk", "0"), ("--method", "bert"),
                        ("--precision", "fp17")]],
    ("score --method mlm for an electric model", lambda w: _score_texts(w, "--method", "mlm"), "--method"),
    ("score --method electric for a causal LM", lambda w: _score_texts(w, "--method", "electric", model=w["lm"]),
     "--method"),
    ("score --model an encoder", lambda w: _score_texts(w, model=w["encoder"]), "expected a cloze model"),
    ("score --text-field a column the file lacks", lambda w: _score_texts(w, "--text-field", "review"),
     "no text field 'review'; the file has"),
    ("score --id-field a column the file lacks", lambda w: _score_texts(w, "--id-field", "ref"),
     "no id field 'ref'; the file has"),
    ("detect-score --text-field a column the file lacks", lambda w: _res_score(w, "--text-field", "review"),
     "no text field 'review'; the file has"),
    ("detect-score --id-field a column the file lacks", lambda w: _res_score(w, "--id-field", "ref"),
     "no id field 'ref'; the file has"),
    ("detect-threshold --text-field a column the file lacks", lambda w: _res_threshold(w, "--text-field", "review"),
     "no text field 'review'; the file has"),
    ("score --model a classifier", lambda w: _score_texts(w, model=w["clf"]), "expected a cloze model"),
    ("score --model a missing folder", lambda w: _score_texts(w, model=w["root"] / "nomodel"), "nomodel"),
    ("score --input missing", lambda w: _score_texts(w)[:3] + ["--input", w["root"] / "none.txt"]
     + _score_texts(w)[5:], "none.txt"),
    ("score --out an existing file", lambda w: _score_texts(w, out=w["existing"]), "existing.jsonl"),
    ("score --html an existing file", lambda w: _score_texts(w, "--html", w["existing"]), "--html"),
    ("quickstart --reuse a trained run", lambda w: _quickstart(w, "--reuse", w["clf"]), "--reuse"),
    # rerank
    ("rerank --grid fine", lambda w: _rerank(w, "--grid", "fine"), "--grid"),
    ("rerank --dev a bad n-best file", lambda w: _rerank(w, dev=_nbest(w)["bad"]), "bad.json:2"),
    ("rerank a missing n-best file", lambda w: _rerank(w, dev=w["root"] / "none.json"), "none.json"),
    ("rerank --out a foreign folder", lambda w: _rerank(w, out=w["foreign"]), "mine"),
    ("rerank --out a trained run", lambda w: _rerank(w, "--overwrite", out=w["clf"]), "clf"),
    ("rerank --out a file", lambda w: _rerank(w, out=w["existing"]), "existing.jsonl"),
    ("rerank --scores a text without a score", lambda w: _rerank(w, scores=_nbest(w)["few"]), "few-scores.jsonl"),
    ("rerank --scores a file that is not JSONL", lambda w: _rerank(w, scores=_nbest(w)["dev"]), "dev.json"),
    ("rerank --write-texts with --scores",
     lambda w: ["rerank", "--dev", _nbest(w)["dev"], "--test", _nbest(w)["test"], "--scores", _nbest(w)["scores"],
                "--write-texts", w["root"] / "texts.txt"], "--scores"),
    # negatives generate
    *[(f"negatives-generate {flag} {val}", lambda w, f=flag, v=val: _neg(w, f, v), flag)
      for flag, val in [("--length", "3"), ("--k", "0"), ("--top-k", "-1"), ("--batch-size", "0"),
                        ("--temperature", "0"), ("--max-windows", "-1"), ("--precision", "fp17")]],
    ("negatives-generate --contexts as long as the window", lambda w: _neg(w, "--length", "8", "--contexts", "8"),
     "--contexts"),
    ("negatives-generate --generator an encoder", lambda w: _neg(w, generator=w["encoder"]), "expected a causal LM"),
    ("negatives-generate --generator a classifier", lambda w: _neg(w, generator=w["clf"]), "expected a causal LM"),
    ("negatives-generate --generator an infill LM", lambda w: _neg(w, "--length", "6", "--contexts", "3",
                                                                    generator=w["infill"]), "causal"),
    ("negatives-generate --vocab missing", lambda w: _neg(w)[:6] + ["--vocab", w["root"] / "no-vocab"] + _neg(w)[8:],
     "no-vocab"),
    ("negatives-generate documents shorter than the window", lambda w: _neg(w), "no document of 64 tokens"),
    ("negatives-generate --out an existing file", lambda w: _neg(w, out=w["existing"]), "existing.jsonl"),
    ("negatives-generate --data missing", lambda w: _neg(w)[:2] + ["--data", w["root"] / "nope"] + _neg(w)[4:], "nope"),
    # detect train
    *[(f"detect-train {flag} {val}", lambda w, f=flag, v=val: _res_train(w, f, v), flag)
      for flag, val in [("--energy", "cnn"), ("--loss", "hinge"), ("--negatives", "best"), ("--lr", "0"),
                        ("--batch-size", "0"), ("--eval-batch-size", "0")]],
    ("detect-train --margin with bce", lambda w: _res_train(w, "--margin", "0.1"), "--margin"),
    ("detect-train --patience -1", lambda w: _res_train(w, "--patience", "-1"), "--patience"),
    ("detect-train --base with another energy", lambda w: _res_train(w, "--energy", "linear", "--base", w["lm"]),
     "--base"),
    ("detect-train --dropout 1", lambda w: _res_train(w, "--energy", "unitransf", "--dropout", "1"), "--dropout"),
    ("detect-train --dropout with a linear energy", lambda w: _res_train(w, "--energy", "linear", "--dropout", "0.1"),
     "--dropout"),
    ("detect-train --max-windows -1", lambda w: _res_train(w, "--max-windows", "-1"), "--max-windows"),
    ("detect-train --min-length -1", lambda w: _res_train(w, "--min-length", "-1"), "--min-length"),
    ("detect-train --cut-fraction 1.5", lambda w: _res_train(w, "--min-length", "2", "--cut-fraction", "1.5"),
     "--cut-fraction"),
    ("detect-train --cut-fraction without --min-length", lambda w: _res_train(w, "--cut-fraction", "0.3"),
     "--cut-fraction"),
    ("detect-train --min-length past the window", lambda w: _res_train(w, "--min-length", "5"),
     "--min-length 5: the --train windows have 4 tokens"),
    ("detect-train --min-length with --pool continuation",
     lambda w: _res_train(w, "--energy", "unitransf", "--pool", "continuation", "--min-length", "2"), "--min-length 2"),
    ("detect-train --patience without --keep-best", lambda w: _res_train(w, "--patience", "2"),
     "patience (stopping when the validation loss stops improving) needs keep_best"),
    ("detect-train --init with a linear energy", lambda w: _res_train(w, "--energy", "linear", "--init",
                                                                        w["lm"]), "--init"),
    ("detect-train --max-tokens without an encoder", lambda w: _res_train(w, "--max-tokens", "64"), "--max-tokens"),
    ("detect-train width not divisible by heads", lambda w: _res_train(w, "--width", "30", "--heads", "4"),
     "--width"),
    ("detect-train --train a broken negatives file", lambda w: _res_train(w, train=_res(w)["bad"]), "bad.jsonl:2"),
    ("detect-train a missing negatives file", lambda w: _res_train(w, train=w["root"] / "none.jsonl"), "none.jsonl"),
    ("detect-train unitransf --init an encoder", lambda w: _res_train(w, "--init", w["encoder"]),
     "expected a causal LM"),
    ("detect-train --out a foreign folder", lambda w: _res_train(w, out=w["foreign"]), "mine"),
    ("detect-train --out a trained classifier", lambda w: _res_train(w, "--overwrite", out=w["clf"]), "clf"),
    # detect fit / eval / score / threshold / analyze / matrix
    ("detect-fit --zeroshot gptzero",
     lambda w: ["detect", "fit", "--zeroshot", "gptzero", "--model", w["lm"], "--val", _res(w)["neg"],
                "--vocab", _res(w)["vocab"], "--out", w["root"] / "fit"], "--zeroshot"),
    ("detect-fit --observer missing for binoculars",
     lambda w: ["detect", "fit", "--zeroshot", "binoculars", "--model", w["lm"], "--val", _res(w)["neg"],
                "--vocab", _res(w)["vocab"], "--out", w["root"] / "fit"], "--observer"),
    ("detect-fit --model an encoder",
     lambda w: ["detect", "fit", "--zeroshot", "loglik", "--model", w["encoder"], "--val", _res(w)["neg"],
                "--vocab", _res(w)["vocab"], "--out", w["root"] / "fit"], "expected a causal LM"),
    ("detect-fit --out a foreign folder",
     lambda w: ["detect", "fit", "--zeroshot", "loglik", "--model", w["lm"], "--val", _res(w)["neg"],
                "--vocab", _res(w)["vocab"], "--out", w["foreign"]], "mine"),
    ("detect-eval --model a classifier",
     lambda w: ["detect", "eval", "--model", w["clf"], "--test", _res(w)["neg"]], "detector.json"),
    ("detect-eval --test a broken file", lambda w: _res_eval(w, test=_res(w)["bad"]), "bad.jsonl:2"),
    ("detect-eval --out an existing file",
     lambda w: ["detect", "eval", "--model", w["clf"], "--test", _res(w)["neg"], "--out", w["existing"]],
     "existing.jsonl"),
    ("detect-score --model an LM",
     lambda w: ["detect", "score", "--model", w["lm"], "--input", w["file"], "--out", w["root"] / "p.jsonl"],
     "detector.json"),
    ("detect-score --out an existing file",
     lambda w: ["detect", "score", "--model", w["lm"], "--input", w["file"], "--out", w["existing"]],
     "existing.jsonl"),
    ("detect-score --batch-size 0",
     lambda w: ["detect", "score", "--model", w["lm"], "--input", w["file"], "--out", w["root"] / "p.jsonl",
                "--batch-size", "0"], "--batch-size"),
    *[(f"detect-threshold {flag} {val}",
       lambda w, f=flag, v=val: ["detect", "threshold", "--model", w["clf"], "--human", w["file"],
                                 "--out", w["root"] / "t.json", f, v], flag)
      for flag, val in [("--fpr", "0"), ("--fpr", "1.5"), ("--held-out", "1")]],
    ("detect-threshold --out an existing file",
     lambda w: ["detect", "threshold", "--model", w["clf"], "--human", w["file"], "--out", w["existing"]],
     "existing.jsonl"),
    ("detect-analyze --bins 0",
     lambda w: ["detect", "analyze", "--model", w["clf"], "--test", _res(w)["neg"], "--out", w["root"] / "an",
                "--bins", "0"], "--bins"),
    ("detect-analyze --lm an energy, not an LM", lambda w: _analyze(w, "--lm", _det(w)["energy"]),
     "--lm "),
    ("detect-score a zero-shot detector whose LM is gone", lambda w: ["detect", "score", "--model", _moved_zs(w),
                                                                      "--input", w["file"], "--out", w["root"] / "s.jsonl"],
     "moved-zs/detector.json: model"),
    ("detect-analyze --out a foreign folder",
     lambda w: ["detect", "analyze", "--model", w["clf"], "--test", _res(w)["neg"], "--out", w["foreign"]], "mine"),
    ("detect-matrix --config a bad one",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix"], "--out", w["root"] / "mx"], "matrix.json"),
    ("detect-matrix --shard 3/2",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix"], "--out", w["root"] / "mx", "--shard", "3/2"],
     "--shard"),
    ("detect-matrix --workers without --backend dask",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix"], "--out", w["root"] / "mx", "--workers", "4"],
     "--workers"),
    ("score --normalize a preset that does not exist",
     lambda w: _set(_score_texts(w), "--normalize", "nfkc"), "--normalize"),
    ("score --threads -1", lambda w: _set(_score_texts(w), "--threads", "-1"), "--threads"),
    ("rerank --top -1", lambda w: [*_rerank(w), "--top", "-1"], "--top"),
    ("rerank --normalize a preset that does not exist", lambda w: [*_rerank(w), "--normalize", "nfkc"], "--normalize"),
    ("negatives-generate --threads -1", lambda w: [*_neg(w), "--threads", "-1"], "--threads"),
    ("detect-fit --threads -1", lambda w: [*_fit(w), "--threads", "-1"], "--threads"),
    ("detect-eval --threads -1", lambda w: [*_res_eval(w), "--threads", "-1"], "--threads"),
    ("detect-score --threads -1", lambda w: [*_res_score(w), "--threads", "-1"], "--threads"),
    ("detect-threshold --threads -1", lambda w: [*_res_threshold(w), "--threads", "-1"], "--threads"),
    ("detect-analyze --threads -1", lambda w: [*_analyze(w), "--threads", "-1"], "--threads"),
    ("detect-matrix --address without --backend dask",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix-ok"], "--out", w["root"] / "mx", "--address",
                "tcp://127.0.0.1:1"], "--address"),
    ("detect-matrix --overwrite a folder textebm did not write",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix-ok"], "--out", w["foreign"], "--overwrite"],
     "was not written by textebm"),
    ("detect-matrix --backend ray",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix"], "--out", w["root"] / "mx", "--backend", "ray"],
     "--backend"),
    ("detect-matrix --backend dask --workers 0",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix"], "--out", w["root"] / "mx", "--backend", "dask",
                "--workers", "0"], "--workers"),
    ("detect-matrix --config missing",
     lambda w: ["detect", "matrix", "--config", w["root"] / "none.json", "--out", w["root"] / "mx"], "none.json"),
    ("rerank --write-texts an existing file",
     lambda w: ["rerank", "--dev", _nbest(w)["dev"], "--test", _nbest(w)["test"], "--write-texts", w["existing"]],
     "existing.jsonl"),
    # one bad value for every option of the newer commands (test_the_table_has_a_bad_value_for_every_option...)
    ("score --overwrite a folder", lambda w: _score_texts(w, "--overwrite", out=w["adir"]), "adir"),
    ("rerank --test missing", lambda w: _set(_rerank(w), "--test", w["root"] / "no-test.json"), "no-test.json"),
    ("rerank --versus a method not scored", lambda w: _rerank(w, "--versus", "mlm"), "--versus"),
    ("rerank --bootstrap -1", lambda w: _rerank(w, "--bootstrap", "-1"), "--bootstrap"),
    ("rerank --seed -1", lambda w: _rerank(w, "--seed", "-1"), "--seed"),
    ("rerank --overwrite a foreign folder", lambda w: _rerank(w, "--overwrite", out=w["foreign"]), "mine"),
    ("negatives-generate --split unknown", lambda w: _neg(w, "--split", "holdout"), "holdout"),
    ("negatives-generate --stride -1", lambda w: _neg(w, "--stride", "-1"), "--stride"),
    ("negatives-generate --seed -1", lambda w: _neg(w, "--seed", "-1"), "--seed"),
    ("negatives-generate --overwrite a folder", lambda w: _neg(w, "--overwrite", out=w["adir"]), "adir"),
    *[(f"detect-train {flag} {val}", lambda w, f=flag, v=val: _res_train(w, f, v), flag)
      for flag, val in [("--seed", "-1"), ("--epochs", "0"), ("--max-steps", "-3"), ("--batch-size", "0"),
                        ("--grad-accum", "0"), ("--weight-decay", "-0.1"), ("--warmup", "1.5"), ("--grad-clip", "-1"),
                        ("--schedule", "step"), ("--precision", "fp17"), ("--checkpoint-every", "0"), ("--log-every", "0"),
                        ("--threads", "-1"), ("--lr", "nan"), ("--layers", "0"), ("--width", "4"), ("--heads", "0")]],
    ("detect-train --val windows of another length", lambda w: _res_train(w, val=_res(w)["short"]),
     "short.jsonl:1: a window of 3 tokens where 4 are expected (the --train windows"),
    ("detect-train --vocab another vocabulary than the windows'", lambda w: _res_train(w, train=_res(w)["foreign"]),
     "foreign.jsonl:1: token id"),
    ("detect-train --train a negative token id", lambda w: _res_train(w, train=_res(w)["negid"]), "negid.jsonl:2"),
    ("detect-train --train a context_len past the window", lambda w: _res_train(w, train=_res(w)["ctx"]),
     "ctx.jsonl:2: `context_len` 4 is not a prefix"),
    ("detect-train --train a window with another number of negatives", lambda w: _res_train(w, train=_res(w)["kmix"]),
     "kmix.jsonl:3: this window has 2 negatives where the first has 1"),
    ("detect-train --resume --overwrite", lambda w: _res_train(w, "--resume", "--overwrite"), "--resume"),
    ("detect-train --pool mean with --energy bilstm", lambda w: _res_train(w, "--pool", "mean", "--energy",
                                                                             "bilstm"), "--pool"),
    ("detect-train --pool max", lambda w: _res_train(w, "--energy", "bitransf", "--pool", "max"), "--pool"),
    ("detect-train --overwrite a foreign folder", lambda w: _res_train(w, "--overwrite", out=w["foreign"]), "mine"),
    ("detect-fit --vocab another vocabulary than the windows'", lambda w: _fit(w, val=[_res(w)["foreign"]]),
     "foreign.jsonl:1: token id"),
    ("detect-fit --val a negative token id", lambda w: _fit(w, val=[_res(w)["negid"]]), "negid.jsonl:2"),
    ("detect-fit --val windows of two lengths", lambda w: _fit(w, val=[_res(w)["neg"], _res(w)["short"]]),
     "short.jsonl:1: a window of 3 tokens where 4 are expected"),
    ("detect-fit --batch-size 0", lambda w: _fit(w, "--batch-size", "0"), "--batch-size"),
    ("detect-fit --overwrite a foreign folder", lambda w: _fit(w, "--overwrite", out=w["foreign"]), "mine"),
    ("detect-eval --test windows of another length", lambda w: _res_eval(w, test=_res(w)["short"]),
     "short.jsonl:1: a window of 3 tokens where 4 are expected (the detector --model"),
    ("detect-eval --test an out-of-vocabulary id", lambda w: _res_eval(w, test=_res(w)["foreign"]),
     "foreign.jsonl:1: token id"),
    ("detect-eval --test a negative token id", lambda w: _res_eval(w, test=_res(w)["negid"]), "negid.jsonl:2"),
    ("detect-eval --batch-size 0", lambda w: _res_eval(w, "--batch-size", "0"), "--batch-size"),
    ("detect-eval --overwrite a folder", lambda w: _res_eval(w, "--out", w["adir"], "--overwrite"), "adir"),
    ("detect-eval --threshold of another detector",
     lambda w: ["detect", "eval", "--model", _det(w)["zs"], "--test", _res(w)["neg"], "--threshold", _det(w)["thr"],
                "--out", w["root"] / "e.json"], "--threshold"),
    ("detect-eval --threshold naming no detector",
     lambda w: _res_eval(w, "--threshold", _det(w)["hand"], "--out", w["root"] / "e.json"),
     "does not name the detector"),
    ("detect-eval --threshold missing", lambda w: _res_eval(w, "--threshold", w["root"] / "none.json"), "none.json"),
    ("detect-eval --buckets not LO-HI", lambda w: _res_eval(w, "--buckets", "8:16", "--out", w["root"] / "e.json"),
     "--buckets '8:16'"),
    ("detect-eval --buckets LO above HI", lambda w: _res_eval(w, "--buckets", "3-2"), "--buckets '3-2'"),
    ("detect-eval --buckets beyond the 4-token windows", lambda w: _res_eval(w, "--buckets", "2-8"),
     "--buckets '2-8': the detector's windows have 4 tokens"),
    ("detect-score --input missing", lambda w: _set(_res_score(w), "--input", w["root"] / "none.txt"), "none.txt"),
    ("detect-score --threshold of another detector",
     lambda w: _res_score(w, "--threshold", _det(w)["thr"], model=_det(w)["zs"]), "--force-threshold"),
    ("detect-score --threshold naming no detector", lambda w: _res_score(w, "--threshold", _det(w)["hand"]),
     "does not name the detector"),
    ("detect-score --force-threshold without --threshold", lambda w: _res_score(w, "--force-threshold"),
     "--force-threshold"),
    ("detect-score --overwrite a folder", lambda w: _set(_res_score(w, "--overwrite"), "--out", w["adir"]), "adir"),
    ("detect-threshold --held-out 0.99 of 16 texts", lambda w: _res_threshold(w, "--held-out", "0.99"),
     "--held-out 0.99 of 16 human texts"),
    ("detect-threshold --model an LM", lambda w: _set(_res_threshold(w), "--model", w["lm"]), "detector.json"),
    ("detect-threshold --human missing", lambda w: _set(_res_threshold(w), "--human", w["root"] / "none.txt"),
     "none.txt"),
    ("detect-threshold --seed -1", lambda w: _res_threshold(w, "--seed", "-1"), "--seed"),
    ("detect-threshold --batch-size 0", lambda w: _res_threshold(w, "--batch-size", "0"), "--batch-size"),
    ("detect-threshold --overwrite a folder", lambda w: _set(_res_threshold(w, "--overwrite"), "--out", w["adir"]),
     "adir"),
    ("detect-analyze --model an LM", lambda w: _analyze(w, model=w["lm"]), "detector.json"),
    ("detect-analyze --test windows of another length", lambda w: _analyze(w, test=_res(w)["short"]),
     "short.jsonl:1"),
    ("detect-analyze --lm with a zero-shot detector", lambda w: _analyze(w, "--lm", w["lm"], model=_det(w)["zs"]),
     "--lm"),
    *[(f"detect-analyze {flag} {val}", lambda w, f=flag, v=val: _analyze(w, f, v), flag)
      for flag, val in [("--windows", "0"), ("--positions", "-1"), ("--batch-size", "0")]],
    ("detect-analyze --overwrite a trained run", lambda w: _analyze(w, "--overwrite", out=w["clf"]), "clf"),
    ("detect-matrix --threads -1",
     lambda w: ["detect", "matrix", "--config", _res(w)["matrix"], "--out", w["root"] / "mx", "--threads", "-1"],
     "--threads"),
    *[(f"cloze-train {flag} {val}", lambda w, f=flag, v=val: _cloze_train(w, f, v), flag)
      for flag, val in [("--seed", "-1"), ("--epochs", "0"), ("--max-steps", "-3"), ("--batch-size", "0"),
                        ("--grad-accum", "0"), ("--weight-decay", "-0.1"), ("--warmup", "1.5"), ("--grad-clip", "-1"),
                        ("--schedule", "step"), ("--precision", "fp17"), ("--checkpoint-every", "0"), ("--log-every", "0"),
                        ("--threads", "-1"), ("--lr", "nan"), ("--vocab-size", "10"), ("--layers", "0"),
                        ("--width", "4"), ("--heads", "0"), ("--ffn", "-1"), ("--twotower-scale", "2"), ("--mle-weight", "0"),
                        ("--noise-lr", "0")]],
    ("cloze-train --tokenizer missing", lambda w: _cloze_train(w, "--tokenizer", w["root"] / "no-tok"), "no-tok"),
    ("cloze-train --eval-split dev on a file", lambda w: _set(_cloze_train(w, "--eval-split", "dev"), "--data",
                                                              w["file"]), "train.jsonl"),
    ("cloze-train --resume --overwrite", lambda w: _cloze_train(w, "--resume", "--overwrite"), "--resume"),
    ("cloze-train --overwrite a foreign folder",
     lambda w: _set(_cloze_train(w, "--overwrite"), "--out", w["foreign"]), "mine"),
    ("tokenizer-train --kind sentencepiece",
     lambda w: ["tokenizer", "train", "--data", w["data"], "--vocab-size", "100", "--out", w["root"] / "t", "--kind",
                "sentencepiece"], "--kind"),
    ("tokenizer-train --overwrite a foreign folder",
     lambda w: ["tokenizer", "train", "--data", w["data"], "--vocab-size", "100", "--out", w["foreign"],
                "--overwrite"], "mine"),
    # residual generate / ppl (paper d): the same bad value on both where both take the option
    *[(f"residual-{cmd} {flag} {val}", lambda w, b=build, f=flag, v=val: _set(b(w), f, v), flag)
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))
      for flag, val in [("--windows", "-1"), ("--batch-size", "0"), ("--precision", "fp17"), ("--threads", "-1"),
                        ("--seed", "-1"), ("--length", "-1")]],
    *[(f"residual-{cmd} {flag} {val}", lambda w, b=build, f=flag, v=val: _set(b(w), f, v), flag)
      for cmd, build, flag, val in [("generate", _jgen, "--n", "0"), ("generate", _jgen, "--top-k", "-1"),
                                    ("ppl", _jppl, "--samples", "1"), ("ppl", _jppl, "--positions", "-1"),
                                    ("ppl", _jppl, "--chunk", "0"), ("ppl", _jppl, "--position-samples", "-1"),
                                    ("ppl", _jppl, "--bootstrap", "-1")]],
    *[(f"residual-{cmd} --prefix-len 1 where the energy was trained on prefixes of 2",
       lambda w, b=build: b(w, "--prefix-len", "1"), "--prefix-len 1: the energy")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --length 3 where the energy's windows are 2 + 2",
       lambda w, b=build: b(w, "--length", "3"), "--prefix-len 2 + --length 3 = 5 tokens")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --base of 3 positions, shorter than [bos] + prefix + continuation",
       lambda w, b=build: b(w, base=_joint(w)["short-lm"]), "--prefix-len 2 + 2 generated tokens (and [bos]) exceed the 3 positions of --base")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --energy {what}", lambda w, b=build, k=key, o=other: b(w, energy=_joint(w)[k], base=o and
                                                                             _joint(w)[o]), expected)
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))
      for what, key, other, expected in (
          ("trained with --loss ranking", "det-ranking", None, "trained with --loss ranking"),
          ("trained on top-k 10 negatives", "det-top10", None, "top-k 10, temperature 1.0"),
          ("a control (lmstats) of another LM than --base", "ctrl", "other-lm", "a control energy (lmstats) that weighs the statistics of another LM"))],
    *[(f"residual-{cmd} --base of another vocabulary than the energy's",
       lambda w, b=build: b(w, base=_joint(w)["other-vocab-lm"]), "vocabulary differs from the energy's")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --base {what}", lambda w, b=build, k=key: b(w, base=w[k] if k in w else _det(w)[k]),
       "expected a causal LM")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))
      for what, key in (("an encoder", "encoder"), ("a classifier", "clf"), ("an energy", "energy"))],
    *[(f"residual-{cmd} --base an infill LM", lambda w, b=build: b(w, base=w["infill"]), "causal")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --energy {what}", lambda w, b=build, k=key: b(w, energy=w[k]), "--energy")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))
      for what, key in (("an LM", "lm"), ("a classifier", "clf"))],
    *[(f"residual-{cmd} --data missing", lambda w, b=build: _set(b(w), "--data", w["root"] / "nope"), "nope")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --split unknown", lambda w, b=build: b(w, "--split", "holdout"), "holdout")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --out an existing file", lambda w, b=build: b(w, out=w["existing"]), "existing.jsonl")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --out a foreign folder", lambda w, b=build: b(w, out=w["foreign"]), "mine")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    *[(f"residual-{cmd} --overwrite a trained classifier run", lambda w, b=build: b(w, "--overwrite", out=w["clf"]),
       "clf") for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    ("residual-generate --overwrite the output of residual ppl",
     lambda w: _jgen(w, "--overwrite", out=_joint(w)["ppl-out"]), "ppl-out"),
    *[(f"residual-{cmd} --out whose OUT.partial {what}", lambda w, b=build, k=key: b(w, out=_joint(w)[k]), msg)
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))
      for what, key, msg in (("holds rows of another run", "stale", "stale.partial: was written with other settings"),
                             ("is a folder", "dir", "dir.partial is a folder"))],
    *[(f"residual-{cmd} --data a window continuing with [eos]",
       lambda w, b=build: _set(_set(b(w), "--data", _joint(w)["eos-data"]), "--windows", "0"),
       "test/d1/0 of split 'test' continues with '</s>'")
      for cmd, build in (("generate", _jgen), ("ppl", _jppl), ("repetitions", _jrep))],
    ("residual-ppl --data left out", lambda w: _drop(_jppl(w), "--data"), "--data is required"),
    ("residual-repetitions --data left out", lambda w: _drop(_jrep(w), "--data"), "--data is required"),
    *[(f"residual-repetitions {flag} {val}", lambda w, f=flag, v=val: _set(_jrep(w), f, v), flag)
      for flag, val in [("--examples", "0"), ("--candidates", "0"), ("--completions", "1"), ("--chunk", "0"),
                        ("--bootstrap", "-1"), ("--top-k", "-1"), ("--source", "mine")]],
    ("residual-repetitions --candidates beyond the base LM's vocabulary",
     lambda w: _set(_jrep(w), "--candidates", "100000"), "--candidates 100000: --base"),
    ("residual-repetitions --top-k with --source real", lambda w: _jrep(w, "--top-k", "3"),
     "--top-k has no effect with --source real"),
    ("residual-repetitions --overwrite the output of residual ppl",
     lambda w: _jrep(w, "--overwrite", out=_joint(w)["ppl-out"]), "ppl-out"),
    ("residual-generate --data and --prefixes both", lambda w: _jgen(w, "--prefixes", _joint(w)["prefixes"]),
     "--prefixes"),
    ("residual-generate --prefixes and --data both left out", lambda w: _drop(_jgen(w), "--data"), "--prefixes"),
    ("residual-generate --prefixes a line shorter than the prefix",
     lambda w: _drop(_drop(_jgen(w, "--prefixes", _joint(w)["prefixes"]), "--data"), "--windows"),
     "prefixes.txt:2: a prefix of 1 tokens"),
    *[(f"residual-generate {flag} {what}", lambda w, f=flag, v=value: _drop(_drop(_jgen(
        w, "--prefixes", _joint(w)["dup-prefixes"], *f), "--data"), "--windows"), expected)
      for flag, what, value, expected in (
          (("--text-field", "start"), "an id given twice", None, "dup-prefixes.csv:5: the id 'a' again (first on line 2)"),
          (("--text-field", "text"), "a column the file lacks", None, "'text'"),
          (("--text-field", "start", "--id-field", "ref"), "--id-field a column the file lacks", None, "'ref'"))],
    ("residual-generate --text-field with --data", lambda w: _jgen(w, "--text-field", "start"),
     "--text-field has no effect with --data"),
    ("residual-generate --id-field with --data", lambda w: _jgen(w, "--id-field", "ref"),
     "--id-field has no effect with --data"),
    ("residual-generate --prefixes with --windows",
     lambda w: _drop(_jgen(w, "--prefixes", _joint(w)["good-prefixes"]), "--data"), "--windows"),
    ("residual-generate --split with --prefixes",
     lambda w: _drop(_drop(_jgen(w, "--prefixes", _joint(w)["good-prefixes"], "--split", "dev"), "--data"),
                     "--windows"),
     "--split has no effect with --prefixes"),
    *[(f"residual-{cmd} --{opt} an LM that reads right to left", lambda w, b=build, o=opt: (
        b(w, base=_joint(w)["r2l-lm"]) if o == "base" else b(w, "--compare", _joint(w)["r2l-lm"])),
       "the base LM must read left to right")
      for cmd, build, opt in (("generate", _jgen, "base"), ("ppl", _jppl, "base"), ("ppl", _jppl, "compare"),
                              ("repetitions", _jrep, "base"))],
    ("residual-generate --prefixes missing",
     lambda w: _drop(_drop(_jgen(w, "--prefixes", w["root"] / "none.txt"), "--data"), "--windows"), "none.txt"),
    ("residual-generate --judge an LM", lambda w: _jgen(w, "--judge", w["lm"]), "--judge"),
    ("residual-generate --judge of 3-token windows", lambda w: _jgen(w, "--judge", _joint(w)["det3"]),
     "scores windows of 3 tokens, these are 4"),
    ("residual-generate --judge in another vocabulary", lambda w: _jgen(w, "--judge", _joint(w)["det-wordpiece"]),
     "another vocabulary than the energy's"),
    ("residual-ppl --compare a classifier", lambda w: _jppl(w, "--compare", w["clf"]), "expected a causal LM"),
    ("residual-ppl --compare of another vocabulary", lambda w: _jppl(w, "--compare", _joint(w)["other-vocab-lm"]),
     "vocabulary differs from the energy's"),
    ("residual-ppl --compare of 3 positions", lambda w: _jppl(w, "--compare", _joint(w)["short-lm"]),
     "--prefix-len 2 + 2 generated tokens (and [bos]) exceed the 3 positions of --compare"),
    ("residual-ppl --position-samples without --positions", lambda w: _jppl(w, "--position-samples", "3"),
     "--position-samples"),
    ("residual-ppl --energy two of different windows", lambda w: _jppl(w, "--energy", _det(w)["energy"],
                                                                        _joint(w)["det3"]), "--energy"),
    ("residual-ppl --reuse a folder that is not a ppl output", lambda w: _jppl(w, "--reuse", w["lm"]),
     "not a finished `residual ppl` output"),
    # tag train / eval / predict (paper e's tagger)
    *[(f"tag-train {flag} {val}", lambda w, f=flag, v=val: _tag_train(w, f, v), flag)
      for flag, val in [("--seed", "-1"), ("--epochs", "0"), ("--max-steps", "-3"), ("--batch-size", "0"),
                        ("--grad-accum", "0"), ("--weight-decay", "-0.1"), ("--warmup", "1.5"), ("--grad-clip", "-1"),
                        ("--schedule", "step"), ("--precision", "fp17"), ("--checkpoint-every", "0"),
                        ("--log-every", "0"), ("--threads", "-1"), ("--lr", "nan"), ("--method", "semi"),
                        ("--labelled", "-1"), ("--proportion", "0"), ("--proportion", "1.5"), ("--split-seed", "-1"),
                        ("--min-count", "0"), ("--embed", "0"), ("--hidden", "0"), ("--layers", "0"),
                        ("--dropout", "1"), ("--ratio", "0"), ("--dnce-alpha", "0"), ("--dnce-alpha", "1.5"),
                        ("--noise-ratio", "0"), ("--noise-lr", "-1"), ("--noise-embed", "0"), ("--noise-hidden", "0"),
                        ("--pretrain-epochs", "0"), ("--pretrain-steps", "-1"), ("--pretrain-lr", "0"),
                        ("--unlabelled-weight", "-1"), ("--ramp-steps", "-1"), ("--max-words", "-1"),
                        ("--unlabelled-max-tokens", "-2")]],
    ("tag-train --unlabelled-max-tokens with --method supervised",
     lambda w: _tag_train(w, "--unlabelled-max-tokens", "20"), "--unlabelled-max-tokens"),
    ("tag-train --init not a folder", lambda w: _tag_train(w, "--method", "joint", "--init", w["root"] / "nope"),
     "--init"),
    ("tag-train --ratio past the pool", lambda w: _tag_train(w, "--method", "pretrain", "--labelled", "4"),
     "--ratio 50: U/L = 50 with 4 labelled sentences"),
    ("tag-train --unlabelled not a dataset",
     lambda w: _tag_train(w, "--method", "pretrain", "--ratio", "1", "--unlabelled", w["root"] / "nope"),
     "--unlabelled: not a dataset folder"),
    ("tag-train --keep-best without a dev split", lambda w: _tag_train(w, "--keep-best", "--eval-split", ""),
     "--keep-best chooses the epoch by dev accuracy"),
    ("tag-train --unlabelled with --method supervised",
     lambda w: _tag_train(w, "--unlabelled", _tag(w)["data"]), "--unlabelled"),
    ("tag-train --labelled more than the training sentences", lambda w: _tag_train(w, "--labelled", "100"),
     "--labelled 100: "),
    ("tag-train --proportion leaving no sentence", lambda w: _tag_train(w, "--labelled", "10", "--proportion", "0.01"),
     "--proportion 0.01 of 10 sentences leaves no sentence"),
    ("tag-train --split-seed without --labelled", lambda w: _tag_train(w, "--split-seed", "3"), "--split-seed"),
    ("tag-train --tag-column on a JSONL dataset", lambda w: _tag_train(w, "--tag-column", "1"), "--tag-column"),
    ("tag-train --tag-column a CoNLL file does not have",
     lambda w: _set(_tag_train(w, "--tag-column", "5"), "--data", _tag(w)["conll"]),
     "good.conll:1: has 2 column(s); no tag column 5"),
    ("tag-train --data a ragged CoNLL file", lambda w: _set(_tag_train(w), "--data", _tag(w)["ragged"]),
     "ragged.conll:4: 3 columns"),
    ("tag-train --data with a dev tag unseen in training", lambda w: _set(_tag_train(w), "--data", _tag(w)["unseen"]),
     "dev.jsonl:3: tag 'PROPN'"),
    ("tag-train --data with an empty sentence", lambda w: _set(_tag_train(w), "--data", _tag(w)["empty"]),
     "empty.jsonl:2: an empty sentence"),
    ("tag-train --data missing", lambda w: _set(_tag_train(w), "--data", w["root"] / "nope"), "nope"),
    ("tag-train --data a plain-text dataset", lambda w: _set(_tag_train(w), "--data", w["data"]), "no 'tokens' list"),
    ("tag-train --eval-split holdout", lambda w: _tag_train(w, "--eval-split", "holdout"), "holdout"),
    ("tag-train --resume --overwrite", lambda w: _tag_train(w, "--resume", "--overwrite"), "--resume"),
    ("tag-train --resume with nothing to resume", lambda w: _tag_train(w, "--resume"), "nothing to resume"),
    ("tag-train --out a foreign folder", lambda w: _set(_tag_train(w), "--out", w["foreign"]), "mine"),
    ("tag-train --overwrite a trained classifier run", lambda w: _set(_tag_train(w, "--overwrite"), "--out", w["clf"]),
     "clf"),
    ("tag-eval --model a classifier", lambda w: _tag_eval(w, model=w["clf"]), "expected a tagger trained with"),
    ("tag-eval --model an LM", lambda w: _tag_eval(w, model=w["lm"]), "expected a tagger trained with"),
    ("tag-eval --model without words.json", lambda w: _tag_eval(w, model=_tag(w)["nowords"]), "words.json: not found"),
    ("tag-eval --data with a tag unseen in training", lambda w: _set(_tag_eval(w), "--data", _tag(w)["unseen"]),
     "test.jsonl:3: tag 'PROPN'"),
    ("tag-eval --data missing", lambda w: _set(_tag_eval(w), "--data", w["root"] / "nope"), "nope"),
    ("tag-eval --split holdout", lambda w: _tag_eval(w, "--split", "holdout"), "holdout"),
    ("tag-eval --tag-column on a JSONL dataset", lambda w: _tag_eval(w, "--tag-column", "1"), "--tag-column"),
    ("tag-eval --out an existing file", lambda w: _tag_eval(w, "--out", w["existing"]), "existing.jsonl: exists"),
    ("tag-eval --out a folder", lambda w: _tag_eval(w, "--out", w["adir"]), "is a folder"),
    ("tag-eval --overwrite without --out", lambda w: _tag_eval(w, "--overwrite"), "--overwrite"),
    *[(f"tag-eval {flag} {val}", lambda w, f=flag, v=val: _tag_eval(w, f, v), flag)
      for flag, val in [("--batch-size", "0"), ("--threads", "-1")]],
    ("tag-predict --model an encoder", lambda w: _tag_predict(w, model=w["encoder"]), "expected a tagger trained with"),
    ("tag-predict --input a dataset folder",
     lambda w: ["tag", "predict", "--model", _tag(w)["run"], "--input", _tag(w)["data"], "--out",
                w["root"] / "tagged.conll"], "a folder; give the file to tag"),
    ("tag-predict --model without words.json", lambda w: _tag_predict(w, model=_tag(w)["nowords"]),
     "words.json: not found"),
    ("tag-predict --input with an empty sentence", lambda w: _set(_tag_predict(w), "--input", _tag(w)["empty"]),
     "empty.jsonl:2: an empty sentence"),
    ("tag-predict --input a ragged CoNLL file", lambda w: _set(_tag_predict(w), "--input", _tag(w)["ragged"]),
     "ragged.conll:4"),
    ("tag-predict --input missing", lambda w: _set(_tag_predict(w), "--input", w["root"] / "nope.jsonl"), "nope.jsonl"),
    ("tag-predict --out an existing file", lambda w: _tag_predict(w, out=w["existing"]), "existing.jsonl: exists"),
    ("tag-predict --out its own input", lambda w: _tag_predict(w, "--overwrite", out=_tag(w)["data"] / "test.jsonl"),
     "is the input of --input"),
    ("tag-predict --overwrite a file textebm did not write",
     lambda w: _tag_predict(w, "--overwrite", out=w["existing"]),
     "was not written by textebm"),
    *[(f"tag-predict {flag} {val}", lambda w, f=flag, v=val: _tag_predict(w, f, v), flag)
      for flag, val in [("--batch-size", "0"), ("--threads", "-1")]],
    # ssl-images train / pretrain / eval (paper e's image methods)
    *[(f"ssl-images-train {flag} {val}", lambda w, f=flag, v=val: _img_train(w, f, v), flag)
      for flag, val in [("--seed", "-1"), ("--epochs", "0"), ("--max-steps", "0"), ("--batch-size", "0"),
                        ("--grad-accum", "0"), ("--weight-decay", "-0.1"), ("--warmup", "1.5"), ("--grad-clip", "-1"),
                        ("--schedule", "step"), ("--precision", "fp17"), ("--checkpoint-every", "0"),
                        ("--log-every", "0"), ("--threads", "-1"), ("--lr", "nan"), ("--test-fraction", "1"),
                        ("--test-seed", "-1"), ("--labelled-proportion", "0"), ("--labelled-proportion", "1.5"),
                        ("--split-seed", "-1"), ("--channels", "0"), ("--hidden", "0"), ("--method", "ebm")]],
    *[(f"ssl-images-train {flag} {val} (joint)", lambda w, f=flag, v=val: _img_train(w, "--method", "joint", f, v), flag)
      for flag, val in [("--sgld-steps", "0"), ("--sgld-step-size", "0"), ("--sgld-noise", "-1"), ("--buffer-size", "0"),
                        ("--reinit", "1.5"), ("--samples", "0"), ("--data-noise", "-1"), ("--energy-reg", "-1"),
                        ("--max-energy", "0"), ("--unlabelled-batch-size", "0"), ("--ebm-weight", "0")]],
    ("ssl-images-train --sgld-steps with --method supervised", lambda w: _img_train(w, "--sgld-steps", "5"),
     "--sgld-steps has no effect with --method supervised"),
    ("ssl-images-train --ebm-weight with --method pretrain",
     lambda w: _img_train(w, "--method", "pretrain", "--init", _img(w)["ebm"], "--ebm-weight", "2"), "--ebm-weight"),
    ("ssl-images-train --init with --method joint", lambda w: _img_train(w, "--method", "joint", "--init", _img(w)["ebm"]),
     "--init has no effect with --method joint"),
    ("ssl-images-train --init a classifier run", lambda w: _img_train(w, "--method", "pretrain", "--init", _img(w)["sup"]),
     "a classifier, not an EBM"),
    ("ssl-images-train --init a tagger", lambda w: _img_train(w, "--method", "pretrain", "--init", _tag(w)["run"]),
     "--init"),
    ("ssl-images-train --init of another split",
     lambda w: _img_train(w, "--method", "pretrain", "--init", _img(w)["ebm"], "--labelled-proportion", "0.05"),
     "another split"),
    ("ssl-images-train --method pretrain without --init", lambda w: _img_train(w, "--method", "pretrain"), "needs --init"),
    ("ssl-images-train --hidden with --method pretrain",
     lambda w: _img_train(w, "--method", "pretrain", "--init", _img(w)["ebm"], "--hidden", "8"), "--hidden"),
    ("ssl-images-train --data images of the wrong shape", lambda w: _img_train(w, "--data", _img(w)["wrong"]),
     "wrong.npz: X has shape (10, 64)"),
    ("ssl-images-train --data missing", lambda w: _img_train(w, "--data", w["root"] / "nope.npz"), "nope.npz"),
    ("ssl-images-train --labelled-proportion leaving no image", lambda w: _img_train(w, "--labelled-proportion", "1e-4"),
     "leaves no labelled image"),
    ("ssl-images-train --labelled-proportion 1 leaves nothing unlabelled for pretrain",
     lambda w: _img_train(w, "--method", "pretrain", "--init", _img(w)["ebm"], "--labelled-proportion", "1"),
     "no unlabelled image"),
    ("ssl-images-train --resume with nothing to resume", lambda w: _img_train(w, "--resume"), "nothing to resume"),
    ("ssl-images-train --overwrite an EBM run", lambda w: _set(_img_train(w, "--overwrite"), "--out", _img(w)["ebm"]),
     "holds the output of `ssl-images pretrain`"),
    *[(f"ssl-images-pretrain {flag} {val}", lambda w, f=flag, v=val: _img_pretrain(w, f, v), flag)
      for flag, val in [("--seed", "-1"), ("--epochs", "0"), ("--max-steps", "0"), ("--batch-size", "0"),
                        ("--grad-accum", "0"), ("--weight-decay", "-0.1"), ("--warmup", "1.5"), ("--grad-clip", "-1"),
                        ("--schedule", "step"), ("--precision", "fp17"), ("--checkpoint-every", "0"),
                        ("--log-every", "0"), ("--threads", "-1"), ("--lr", "nan"), ("--test-fraction", "1"),
                        ("--test-seed", "-1"), ("--labelled-proportion", "0"), ("--labelled-proportion", "1.5"),
                        ("--split-seed", "-1"), ("--channels", "0"), ("--hidden", "0"), ("--sgld-steps", "0"), ("--sgld-step-size", "0"), ("--sgld-noise", "-1"), ("--buffer-size", "0"),
                        ("--reinit", "1.5"), ("--samples", "0"), ("--data-noise", "-1"), ("--energy-reg", "-1"),
                        ("--max-energy", "0")]],
    ("ssl-images-pretrain --data images of the wrong shape", lambda w: _img_pretrain(w, "--data", _img(w)["wrong"]),
     "wrong.npz: X has shape (10, 64)"),
    ("ssl-images-pretrain --labelled-proportion 1 leaves nothing to pre-train on",
     lambda w: _img_pretrain(w, "--labelled-proportion", "1"), "no unlabelled image"),
    ("ssl-images-pretrain --resume with nothing to resume", lambda w: _img_pretrain(w, "--resume"), "nothing to resume"),
    ("ssl-images-pretrain --overwrite a classifier run",
     lambda w: _set(_img_pretrain(w, "--overwrite"), "--out", _img(w)["sup"]), "holds the output of `ssl-images train`"),
    ("ssl-images-eval --model an EBM", lambda w: _img_eval(w, model=_img(w)["ebm"]), "an EBM of `ssl-images pretrain`"),
    ("ssl-images-eval --model a tagger", lambda w: _img_eval(w, model=_tag(w)["run"]), "expected an image network"),
    ("ssl-images-eval --data images of the wrong shape", lambda w: _img_eval(w, "--data", _img(w)["wrong"]),
     "wrong.npz: X has shape (10, 64)"),
    ("ssl-images-eval --split holdout", lambda w: _img_eval(w, "--split", "holdout"), "holdout"),
    ("ssl-images-eval --test-fraction 0", lambda w: _img_eval(w, "--test-fraction", "0"), "--test-fraction"),
    ("ssl-images-eval --test-seed with --split all", lambda w: _img_eval(w, "--split", "all", "--test-seed", "1"),
     "--test-seed"),
    ("ssl-images-eval --test-seed -1", lambda w: _img_eval(w, "--test-seed", "-1"), "--test-seed"),
    ("ssl-images-eval --threads -1", lambda w: _img_eval(w, "--threads", "-1"), "--threads"),
    ("ssl-images-eval --out an existing file", lambda w: _img_eval(w, "--out", w["existing"]), "existing.jsonl: exists"),
    ("ssl-images-eval --overwrite without --out", lambda w: _img_eval(w, "--overwrite"), "--overwrite"),
    # an output where nothing can be written (a pseudo file system) or under a file: every command
    *[(f"{name} {flag} {where}", lambda w, b=build, f=flag, x=where: _set(b(w), f, _unwritable(w, x, f)),
       "cannot write in /proc" if where == "/proc/x" else "is a file")
      for name, build, flag in OUTPUTS for where in ("/proc/x", "under a file")],
    # tag grid: one bad value for each of its options
    ("tag-grid --config a bad one", lambda w: _tag_grid(w, config="grid-bad.json"), "grid-bad.json"),
    ("tag-grid --config missing", lambda w: _tag_grid(w, config="none.json"), "none.json"),
    ("tag-grid --out a foreign folder", lambda w: _set(_tag_grid(w), "--out", w["foreign"]), "mine"),
    ("tag-grid --shard 3/2", lambda w: _tag_grid(w, "--shard", "3/2"), "--shard"),
    ("tag-grid --workers without --backend dask", lambda w: _tag_grid(w, "--workers", "4"), "--workers"),
    ("tag-grid --address without --backend dask", lambda w: _tag_grid(w, "--address", "tcp://127.0.0.1:1"),
     "--address"),
    ("tag-grid --backend ray", lambda w: _tag_grid(w, "--backend", "ray"), "--backend"),
    ("tag-grid --threads -1", lambda w: _tag_grid(w, "--threads", "-1"), "--threads"),
    ("tag-grid --report with --plan", lambda w: _tag_grid(w, "--report", "--plan"), "--report"),
    ("tag-grid --report before any cell", lambda w: _tag_grid(w, "--report"), "--report: "),
    # quickstart and lm train: one bad value for each option (issue 33 extends the rule to them)
    ("quickstart --data missing", lambda w: _set(_quickstart(w), "--data", w["root"] / "nope"), "nope"),
    ("quickstart --encoder a causal LM", lambda w: _set(_quickstart(w), "--encoder", w["lm"]), "--encoder"),
    ("quickstart --noise-lm an encoder", lambda w: _quickstart(w, "--noise-lm", w["encoder"]), "--noise-lm"),
    ("quickstart --nce-weight -1", lambda w: _quickstart(w, "--nce-weight", "-1"), "--nce-weight"),
    ("quickstart --nce-warmup -1", lambda w: _quickstart(w, "--nce-warmup", "-1"), "--nce-warmup"),
    ("quickstart --energy-lr 0", lambda w: _quickstart(w, "--energy-lr", "0"), "--energy-lr"),
    ("quickstart --lm-layers 0", lambda w: _quickstart(w, "--lm-layers", "0"), "--lm-layers"),
    ("quickstart --lm-width 0", lambda w: _quickstart(w, "--lm-width", "0"), "--lm-width"),
    ("quickstart --lm-vocab-size 3", lambda w: _quickstart(w, "--lm-vocab-size", "3"), "--lm-vocab-size"),
    ("quickstart --seeds 0", lambda w: _quickstart(w, "--seeds", "0"), "--seeds"),
    ("quickstart --only-seeds -1", lambda w: _quickstart(w, "--only-seeds", "-1"), "--only-seeds"),
    ("quickstart --bootstrap -1", lambda w: _quickstart(w, "--bootstrap", "-1"), "--bootstrap"),
    ("quickstart --threads 100000", lambda w: _quickstart(w, "--threads", "100000"), "--threads must be at most"),
    ("quickstart --shard 0/2", lambda w: _quickstart(w, "--shard", "0/2"), "--shard"),
    ("quickstart --backend ray", lambda w: _quickstart(w, "--backend", "ray"), "--backend"),
    ("quickstart --workers without --backend dask", lambda w: _quickstart(w, "--workers", "3"), "--workers"),
    ("quickstart --address without --backend dask", lambda w: _quickstart(w, "--address", "tcp://127.0.0.1:1"),
     "--address"),
    ("lm-train --data missing", lambda w: _set(_lm_train(w), "--data", w["root"] / "nope"), "nope"),
    ("lm-train --tokenizer a folder without one", lambda w: _lm_train(w, "--tokenizer", w["adir"]), "--tokenizer"),
    ("lm-train --arch rnn", lambda w: _lm_train(w, "--arch", "rnn"), "--arch"),
    ("lm-train --kernel 0", lambda w: _lm_train(w, "--arch", "gcnn", "--kernel", "0"), "--kernel"),
    ("lm-train --width 0", lambda w: _set(_lm_train(w), "--width", "0"), "--width"),
    ("lm-train --heads 0", lambda w: _set(_lm_train(w), "--heads", "0"), "--heads"),
    ("lm-train --context 1", lambda w: _lm_train(w, "--context", "1"), "--context"),
    ("lm-train --chunk with --eval-split on a file", lambda w: _lm_train(w, "--chunk", "-1"), "--chunk"),
    ("lm-train --overwrite of its own --init", lambda w: _set(_lm_train(w)[:6] + ["--init", w["lm"], "--max-steps", "1"],
                                                              "--out", w["lm"]) + ["--overwrite"], "is the input of --init"),
    ("lm-train --overwrite of its own --residual-of",
     lambda w: _set(_ralm_train(w, w["lm"]), "--out", w["lm"]) + ["--overwrite"], "is the input of --residual-of"),
    ("lm-train --out holding its --data", lambda w: _set(_lm_train(w), "--out", w["data"].parent) + ["--overwrite"],
     "holds the input of --data"),
    ("cloze-train --overwrite of its own --init",
     lambda w: ["cloze", "train", "--data", w["data"], "--out", w["encoder"], "--init", w["encoder"], "--max-steps", "1",
                "--no-progress", "--overwrite"], "is the input of --init"),
    ("tag-train --overwrite of its own --init",
     lambda w: ["tag", "train", "--data", _tag(w)["data"], "--out", w["adir"], "--method", "joint", "--init", w["adir"],
                "--max-steps", "1", "--no-progress", "--overwrite"], "is the input of --init"),
    ("tag-train --freeze with --method joint", lambda w: _tag_train(w, "--method", "joint", "--freeze"), "--freeze"),
    ("tag-train --stage2-words with --method joint",
     lambda w: _tag_train(w, "--method", "joint", "--stage2-words", "labelled"), "--stage2-words"),
    ("tag-train --stage2-words some", lambda w: _tag_train(w, "--method", "pretrain", "--stage2-words", "some"),
     "--stage2-words"),
    ("tag-train --zeta-lr -1", lambda w: _tag_train(w, "--method", "joint", "--zeta-lr", "-1"), "--zeta-lr"),
    ("tag-train --zeta-draws 0", lambda w: _tag_train(w, "--method", "joint", "--zeta-draws", "0"), "--zeta-draws"),
    ("tag-train --eval-limit -1", lambda w: _tag_train(w, "--eval-limit", "-1"), "--eval-limit"),
    ("tag-train --char-embed 0", lambda w: _tag_train(w, "--char-cnn", "--char-embed", "0"), "--char-embed"),
    ("tag-train --char-filters without --char-cnn", lambda w: _tag_train(w, "--char-filters", "8"), "--char-filters"),
    ("tag-train --char-cnn with an --init tagger that has none",
     lambda w: ["tag", "train", "--data", _tag(w)["data"], "--out", w["root"] / "new-tagger", "--method", "joint",
                "--char-cnn", "--init", _tag(w)["run"], "--ratio", "1", "--labelled", "3", "--no-progress"],
     "--char-cnn"),
    ("tag-train --stage1-cache with --method supervised", lambda w: _tag_train(w, "--stage1-cache", w["root"] / "s1"),
     "--stage1-cache"),
    ("tag-train --from-pretrained with --init",
     lambda w: _tag_train(w, "--method", "joint", "--from-pretrained", "--init", w["root"] / "nope"),
     "--from-pretrained"),
    # what issue 33's probes found accepted silently or left behind
    ("cloze-train --noise-scale 0.01 (below the smallest tower)",
     lambda w: _cloze_train(w, "--width", "64", "--noise-scale", "0.01"), "--noise-scale 0.01"),
    ("negatives-generate --data a file", lambda w: _set(_neg(w), "--data", w["file"]), "is a file"),
    ("residual-ppl --positions beyond --windows", lambda w: _jppl(w, "--positions", "100"), "--positions 100"),
    ("quickstart --reuse missing with --plan", lambda w: _quickstart(w, "--plan", "--reuse", w["root"] / "nosuch"),
     "--reuse"),
    ("quickstart --reuse a classifier run with --plan", lambda w: _quickstart(w, "--plan", "--reuse", w["clf"]),
     "`classify train`"),
    ("detect-matrix a config naming a missing corpus folder",
     lambda w: ["detect", "matrix", "--config", _missing_corpus(w), "--out", w["root"] / "new-matrix"],
     "no train.jsonl"),
    ("detect-matrix a config naming an unknown dataset",
     lambda w: ["detect", "matrix", "--config", _missing_corpus(w, named=True), "--out", w["root"] / "new-matrix"],
     "no named dataset"),
    ("score an unfinished cloze run", lambda w: ["score", "--model", _unfinished(w), "--input", w["file"], "--out",
                                                w["root"] / "s.jsonl"], "unfinished `cloze train` run"),
    # --threads beyond the cores this process may use: every command that takes it
    *[(f"{name} --threads 100000", lambda w, b=build: _with_out(w, _set(b(w), "--threads", "100000")),
       "--threads must be at most")
      for name, build in {n: b for n, b, _ in OUTPUTS}.items() if name in _takes_threads() and name != "quickstart"],
]


def _tree(root: Path) -> dict[str, int]:
    """Every file under root with its size and mtime: what a command must leave as it found it."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else "folder"
            for p in sorted(root.rglob("*"))}


# fp16 is a valid precision on a CUDA machine: those cases only hold on a CPU-only one.
# /proc cases need Linux's /proc.
RUN_CASES = [c for c in CASES if not ("fp16" in c[0] and __import__("torch").cuda.is_available())
             and not ("/proc/" in c[0] and not Path("/proc/self").exists())]


@pytest.mark.parametrize("case", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_bad_input_exits_2_names_it_and_writes_nothing(world, case, capsys, monkeypatch):
    name, build, expected = case
    argv = [str(a) for a in build(world)]
    base = world["root"].parent
    before = _tree(base)
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse: bad choice or type
        rc = e.code
    captured = capsys.readouterr()
    err = captured.err
    assert rc == 2, f"{name}: exit {rc}\n{err[-2000:]}"
    assert "Traceback" not in err + captured.out
    assert expected in err, f"{name}: the message does not name {expected!r}:\n{err[-1000:]}"
    assert _tree(base) == before, f"{name}: files were written or changed"


def test_the_table_covers_every_command():
    from textebm.cli import GROUPS, build_parser

    parser = build_parser()
    commands = set()
    for group in GROUPS:
        sub = parser._subparsers._group_actions[0].choices[group]
        if sub._subparsers is None:
            commands.add(group)
        else:
            commands |= {f"{group}-{c}" for c in sub._subparsers._group_actions[0].choices}
    covered = {c[0].split(" ")[0] for c in CASES}
    listless = {"data-list", "models-list"}  # no options, no inputs
    from textebm.cli.detect import COMMANDS as DETECT

    listless |= {f"residual-{c}" for c in DETECT}  # the old names of `detect` (tests/test_detection.py)
    assert commands - listless <= covered, commands - listless - covered
    assert len(CASES) >= 100
    threads = {c[0].split(" ")[0] for c in CASES if c[0].endswith("--threads 100000")}
    assert _takes_threads() - listless <= threads, _takes_threads() - listless - threads  # the bound, every command
    print(f"{len(CASES)} bad inputs")  # the figure the issue's closing note asks for


# The newer commands are held to one case per option, not per command: the option a case exercises
# is the word after the command in its id ("detect-eval --test windows of another length").
PER_OPTION = ["score", "rerank", "negatives-generate", "detect-train", "detect-fit", "detect-eval",
              "detect-score", "detect-threshold", "detect-analyze", "detect-matrix", "cloze-train",
              "tokenizer-train", "residual-generate", "residual-ppl", "residual-repetitions", "tag-train", "tag-eval", "tag-predict",
              "ssl-images-train", "ssl-images-pretrain", "ssl-images-eval", "tag-grid", "quickstart", "lm-train"]
# Options that cannot take a bad value: on/off switches whose either state is valid in any mode.
NO_BAD_VALUE = {
    "--progress",  # a progress bar or none
    "--keep-checkpoint",  # keep checkpoint/ after a finished run or not
    "--lowercase",  # tokenizer train: either case handling is a valid tokenizer
    "--plan",  # detect matrix, tag grid: print the plan instead of running; valid with any config
    "--per-token", "--per-word",  # score: extra fields in each row, valid for every method
    "--corpus",  # negatives generate: a free-text name in the rows' provenance
    "--strict",  # detect score: refuse short texts or not (its refusal: tests/test_detection.py)
    "--exact-last",  # residual ppl: the last position scored exactly or estimated like the others
    "--keep-best",  # detect train: any run may validate after each epoch (tag train's needs a dev split: a case)
}


def test_the_table_has_a_bad_value_for_every_option_of_the_newer_commands():
    from textebm.options import cli_fields, flag_of

    configs = _command_configs()
    covered = {tuple(c[0].split(" ")[:2]) for c in CASES}
    missing = [f"{cmd} {flag_of(f)}" for cmd in PER_OPTION for f in cli_fields(configs[cmd])
               if flag_of(f) not in NO_BAD_VALUE and (cmd, flag_of(f)) not in covered]
    assert not missing, "options without a bad-value case: " + ", ".join(missing)



# ---------------------------------------------------------------- bad values that stop a run already started


@pytest.mark.parametrize("objective", [["electric"], ["electric", "--estimator", "naive"], ["electra"]],
                         ids=["electric", "electric-naive", "electra"])
def test_cloze_train_stops_cleanly_when_the_noise_model_diverges(world, tmp_path, capsys, objective):
    """--lr 1e30: the noise model's probabilities turn NaN after the first step; sampling from them
    must stop the run as a NaN loss does (exit 2, the message, the last good checkpoint kept), not
    end in torch.multinomial's traceback."""
    run = tmp_path / "run"
    argv = _set(_set(_cloze_train(world, "--objective", *objective, "--lr", "1e30", "--precision", "bf16",
                                  "--checkpoint-every", "1", "--batch-size", "8", "--eval-split", ""),
                     "--max-steps", "4"), "--out", run)
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "loss is nan" in err and "last good checkpoint is kept" in err, err[-2000:]
    assert (run / "checkpoint" / "state.json").is_file()


def test_an_interrupted_run_says_that_resume_continues_it(world, tmp_path, capsys, monkeypatch):
    import textebm.train

    run = tmp_path / "run"
    argv = [str(a) for a in _set(_set(_lm_train(world, "--checkpoint-every", "1", "--eval-split", ""), "--max-steps",
                                      "3"), "--out", run)]
    check = textebm.train._check_finite

    def interrupt_at(n):
        def fake(loss, step, *a):
            if step >= n:
                raise KeyboardInterrupt
            return check(loss, step, *a)
        return fake

    monkeypatch.setattr(textebm.train, "_check_finite", interrupt_at(0))  # before any checkpoint
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume" not in err and not run.exists()  # nothing to continue
    monkeypatch.setattr(textebm.train, "_check_finite", interrupt_at(2))  # after the checkpoint of step 2
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert f"interrupted: --out {run}: the checkpoint of step" in err and "--resume" in err, err[-1000:]
    monkeypatch.setattr(textebm.train, "_check_finite", check)
    assert main([*argv, "--resume"]) == 0
    assert json.loads((run / "metrics.json").read_text())["train"]["steps"] == 3


def test_score_forced_to_another_detectors_threshold_decides_with_it(world, tmp_path, caplog):
    import logging

    d = _det(world)
    out = tmp_path / "p.jsonl"
    with caplog.at_level(logging.WARNING):
        assert main([str(a) for a in _set(_res_score(world, "--threshold", d["thr"], "--force-threshold",
                                                     model=d["zs"]), "--out", out)]) == 0
    assert "fitted for another detector" in caplog.text
    t = json.loads(d["thr"].read_text())["threshold"]
    sign = json.loads((d["zs"] / "detector.json").read_text())["rule"]["sign"]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 16 and all(r["generated"] == (sign * r["score"] > t) for r in rows)


def test_a_threshold_refitted_for_the_detector_is_accepted(world, tmp_path):
    d = _det(world)
    out = tmp_path / "p.jsonl"
    assert main([str(a) for a in _set(_res_score(world, "--threshold", d["thr"]), "--out", out)]) == 0
    t = json.loads(d["thr"].read_text())["threshold"]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(r["generated"] == (r["energy"] > t) for r in rows)  # an energy's sign is +1


def test_rerank_logs_each_splits_one_best_beside_its_wer(tmp_path, caplog):
    import logging

    nb = {"dev": ("a b", "a c"), "test": ("a c", "a b")}  # the 1-best is right on dev, wrong on test
    for split, (first, second) in nb.items():
        (tmp_path / f"{split}.json").write_text(json.dumps({"u1": {"ref": "a b", "hyp_1": {"text": first, "score": -1},
                                                                   "hyp_2": {"text": second, "score": -2}}}))
    (tmp_path / "s.jsonl").write_text('{"text": "a b", "score": -3.0, "method": "m"}\n'
                                      '{"text": "a c", "score": -4.0, "method": "m"}\n')
    with caplog.at_level(logging.INFO):
        assert main(["rerank", "--dev", str(tmp_path / "dev.json"), "--test", str(tmp_path / "test.json"), "--scores",
                     str(tmp_path / "s.jsonl"), "--out", str(tmp_path / "rr"), "--bootstrap", "0"]) == 0
    line = next(x for x in caplog.text.splitlines() if "lambda" in x)
    assert "(1-best 0.00%), test WER" in line and line.endswith("(1-best 50.00%)"), line


def test_residual_analyze_help_names_the_files_it_writes(world, tmp_path, capsys):
    import re

    capsys.readouterr()
    assert main(["detect", "analyze", "--help"]) == 0
    named = set(re.findall(r"[\w.-]+\.(?:json|png)", capsys.readouterr().out))
    out = tmp_path / "an"
    assert main([str(a) for a in _analyze(world, "--lm", world["lm"], "--windows", "2", "--positions", "2",
                                          out=out)]) == 0
    written = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    assert named == written == {"analysis.json", "context.png", "perturbations.png"}


@pytest.mark.parametrize("command", ["detect-threshold", "cloze-train", "score"])
def test_an_output_in_a_read_only_folder_is_refused(world, tmp_path, capsys, monkeypatch, command):
    """As root every folder is writable (the /proc cases above hold there); as a user, one that is
    not must be refused before any work."""
    import os

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):  # root: permission bits do not stop it; the folder says no instead
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: Path(p) != ro and real(p, mode, *a, **k))
        build = {"detect-threshold": _res_threshold, "cloze-train": _cloze_train, "score": _score_texts}[command]
        capsys.readouterr()
        assert main([str(a) for a in _set(build(world), "--out", ro / "x")]) == 2
        assert f"cannot write in {ro}" in capsys.readouterr().err and not any(ro.iterdir())
    finally:
        ro.chmod(0o755)
