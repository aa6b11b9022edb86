"""`textebm.api`: `textebm.load` and one class a system on tiny model folders. Each class gives
its command's numbers on the same inputs (a fitted calibrator those of `classify eval`); bad
arguments raise errors naming them; `textebm.training` runs the training commands from Python
under their rules; docs/api.md's code blocks run as written (in a folder holding tiny runs under
the names the page uses), and every public name is on that page; a built and installed wheel
(not the source tree) loads every kind of folder to the same numbers."""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import same
import torch

import textebm
from textebm import api, training
from textebm.calibration import halve_dev
from textebm.cli import main
from textebm.io import read_json

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
POS_TAGS = ["DET", "NOUN", "VERB", "."]
BIO_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTENCES = [["The", "dog", "sees", "a", "cat", "."], ["A", "cat", "hears", "the", "dog"], ["dog"]]


def _tagger(folder: Path, tags: list[str], seed: int) -> None:
    """A random BiLSTM-CRF tagger over SENTENCES' words (lower-cased) with `tags`, saved with its
    vocabulary as `tag train` leaves RUN/model."""
    from textebm.models.crf import BiLSTMCRF, TaggerSpec, save_tagger
    from textebm.tagging.vocab import build_vocab, save_vocab

    vocab = build_vocab([{"tokens": s} for s in SENTENCES], lowercase=True)
    torch.manual_seed(seed)
    model = BiLSTMCRF(TaggerSpec(vocab_size=len(vocab), tags=tags, embed=8, hidden=8, pad_id=vocab.pad_id))
    save_tagger(model, folder)
    save_vocab(vocab, folder)


def _detector(run: Path, texts: list[str]) -> None:
    """A linear energy with random weights over a BPE vocabulary of `texts`, and a decision rule,
    as `detect train` leaves RUN (model/ and detector.json)."""
    from textebm.detection.detect import Rule, write_rule
    from textebm.models.seq_energy import EnergySpec, build_energy, save_energy
    from textebm.tokenizer import train_tokenizer

    tok = train_tokenizer(texts, vocab_size=300)
    spec = EnergySpec(kind="linear", vocab_size=len(tok), length=8, pad_id=tok.pad_token_id or 0)
    model = build_energy(spec)
    torch.manual_seed(0)
    torch.nn.init.normal_(model.weight.weight, std=0.3)
    save_energy(model, spec, tok, run / "model")
    write_rule(run / "detector.json", {"detector": "energy", "energy": "linear", "model": "model", "length": 8},
               Rule(threshold=0.1, temperature=2.0, threshold_fpr=1.0))


def _joint(runs: Path, texts: list[str]) -> None:
    """A base LM (a random 1-layer Llama, as `lm train` leaves RUN/model) and a linear residual
    energy with random weights over windows of 8 + 4 tokens (as `detect train` leaves RUN/model),
    in one BPE vocabulary of `texts`: runs/base and runs/unit."""
    from textebm.models.build import SmallLMConfig, build_causal_lm
    from textebm.models.lm import LMMeta, save_lm
    from textebm.models.seq_energy import EnergySpec, build_energy, save_energy
    from textebm.tokenizer import train_tokenizer

    tok = train_tokenizer(texts, vocab_size=300)
    lm = build_causal_lm(SmallLMConfig(layers=1, width=16, heads=2, context=32), tok, seed=0)
    save_lm(lm, tok, LMMeta(bos_token=tok.bos_token, eos_token=tok.eos_token, pad_token=tok.pad_token),
            runs / "base" / "model")
    spec = EnergySpec(kind="linear", vocab_size=len(tok), length=12, pad_id=tok.pad_token_id or 0, contexts=[8])
    model = build_energy(spec)
    torch.manual_seed(1)
    torch.nn.init.normal_(model.weight.weight, std=0.3)
    save_energy(model, spec, tok, runs / "unit" / "model")


def _articles(n: int, seed: int) -> list[str]:
    """n texts of four walking sentences each (about 40 tokens of runs/unit's vocabulary)."""
    from conftest import walking_doc

    rng = random.Random(seed)
    return [" ".join(walking_doc(rng, 4)) for _ in range(n)]


@pytest.fixture(scope="module")
def runs(classify_fixture, tmp_path_factory) -> Path:
    """ROOT/runs/{electric, mlm, ptb-lm, noise-lm, ebm, pos, ner, det, loglik, base, unit}: tiny models of
    every kind the API loads, under the names docs/api.md uses (random weights: the numbers only
    have to agree); ROOT/data/rt and ROOT/models/minilm: a tiny labelled dataset and encoder for its
    training example; ROOT/articles.txt: texts for its joint-model example."""
    from test_electric import _tiny_model
    from test_lm_sampling import make_tiny_lm
    from conftest import walking_doc
    from textebm.detection.detect import Rule, write_rule
    from textebm.models.classifier import ClassifierSpec, save_classifier
    from textebm.models.cloze import save_cloze
    from textebm.models.load import build_classifier

    root = tmp_path_factory.mktemp("api")
    runs = root / "runs"
    for name, objective in (("electric", "electric"), ("mlm", "mlm")):
        save_cloze(*_tiny_model(objective), runs / name / "model")
    make_tiny_lm(runs / "ptb-lm" / "model")
    make_tiny_lm(runs / "noise-lm" / "model", objective="infill", seed=2)
    torch.manual_seed(0)
    model, tok = build_classifier(classify_fixture / "encoder", ClassifierSpec(labels=["negative", "positive"],
                                                                               energy="sharp-hidden"))
    save_classifier(model, tok, runs / "ebm" / "model")
    _tagger(runs / "pos" / "model", POS_TAGS, seed=0)
    _tagger(runs / "ner" / "model", BIO_TAGS, seed=1)
    _detector(runs / "det", walking_doc(random.Random(0), 40))
    _joint(runs, walking_doc(random.Random(1), 40))
    (root / "articles.txt").write_text("\n\n".join(_articles(2, 2)) + "\n", encoding="utf-8")
    write_rule(runs / "loglik" / "detector.json", {"detector": "loglik", "model": str(runs / "ptb-lm" / "model"),
                                                  "vocab": str(runs / "ptb-lm" / "model"), "length": 4},
               Rule(sign=-1, threshold=14.0, temperature=5.0))
    shutil.copytree(classify_fixture / "data", root / "data" / "rt")
    shutil.copytree(classify_fixture / "encoder", root / "models" / "minilm")
    return root


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


# ---------------------------------------------------------------- load


def test_load_returns_each_systems_class_by_what_the_folder_holds(runs):
    r = runs / "runs"
    expected = {"electric": api.Scorer, "mlm": api.Scorer, "ptb-lm": api.Scorer, "noise-lm": api.InfillLM,
                "ebm": api.Classifier, "pos": api.Tagger, "det": api.Detector, "loglik": api.Detector,
                "base": api.Scorer}
    for name, cls in expected.items():
        for folder in (r / name, r / name / "model"):
            if folder.is_dir():
                assert type(textebm.load(folder, device="cpu")) is cls, folder
    assert textebm.load(r / "electric").method == "electric"
    assert textebm.load(str(r / "mlm"), precision="fp32").method == "mlm"


def test_import_textebm_loads_no_model_code_until_the_api_is_used():
    code = ("import sys, textebm; assert 'torch' not in sys.modules and 'textebm.api' not in sys.modules; "
            "assert 'textebm.training' not in sys.modules; "
            "textebm.load; assert 'textebm.api' in sys.modules and 'textebm.training' not in sys.modules; "
            "assert textebm.training.classify_train.__name__ == 'classify_train'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_package_exports_exactly_the_apis_public_names():
    assert list(textebm._API) == api.__all__
    assert all(getattr(textebm, n) is getattr(api, n) for n in api.__all__)


# ---------------------------------------------------------------- each class against its command


def test_scorer_gives_the_score_commands_numbers(runs, tmp_path):
    texts = ["w1 w7 w2", "w3 w8 w9 w10 w11 w4 w1", "w5", "w12 w2 w2 w6 w7"]
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(texts) + "\n")
    for name in ("electric", "mlm", "ptb-lm"):
        folder = runs / "runs" / name
        out = tmp_path / f"{name}.jsonl"
        assert main(["score", "--model", str(folder), "--input", str(inp), "--out", str(out), "--per-token",
                     "--per-word", "--precision", "fp32", "--no-progress"]) == 0
        got = api.Scorer(folder, precision="fp32").score(texts, batch_size=2)
        for row, s in zip(_jsonl(out), got):
            assert (s.text, s.n_tokens, s.tokens) == (row["text"], row["n_tokens"], row["tokens"]), name
            assert s.score == pytest.approx(row["score"], abs=1e-6), name
            assert s.token_scores == pytest.approx(row["token_scores"], abs=1e-6), name
            assert [list(o) for o in s.offsets] == row["offsets"]
            words, scores, spans = zip(*s.words())
            assert list(words) == row["words"] and [list(x) for x in spans] == row["word_offsets"]
            assert list(scores) == pytest.approx(row["word_scores"], abs=1e-6)


def test_scorer_normalizes_as_the_command_does(runs, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("W1 W7, W2!\n")
    out = tmp_path / "out.jsonl"
    folder = runs / "runs" / "electric"
    assert main(["score", "--model", str(folder), "--input", str(inp), "--out", str(out), "--normalize", "asr",
                 "--precision", "fp32", "--no-progress"]) == 0
    row, = _jsonl(out)
    s, = api.Scorer(folder, precision="fp32").score(["W1 W7, W2!"], normalize="asr")
    assert s.text == row["text"] == "w1 w7 w2" and s.score == pytest.approx(row["score"], abs=1e-6)


@pytest.fixture(scope="module")
def eval_report(runs, classify_fixture, tmp_path_factory) -> Path:
    """`classify eval` of runs/ebm on the classify fixture's data, its calibrators fitted."""
    report = tmp_path_factory.mktemp("eval") / "report"
    assert main(["classify", "eval", "--model", str(runs / "runs" / "ebm"), "--data", str(classify_fixture / "data"),
                 "--out", str(report), "--bootstrap", "0", "--precision", "fp32"]) == 0
    return report


def test_classifier_gives_the_probabilities_and_energies_of_classify_eval(runs, classify_fixture, eval_report):
    run = runs / "runs" / "ebm"
    rows = _jsonl(eval_report / "predictions.jsonl")
    dev = {r["id"]: r["text"] for r in _jsonl(classify_fixture / "data" / "dev.jsonl")}
    texts = [dev[r["id"]] for r in rows]
    clf = api.Classifier(run, precision="fp32")
    assert clf.classes_ == ["negative", "positive"]
    probs = clf.predict_proba(texts, batch_size=5)
    assert probs.shape == (len(rows), 2)
    np.testing.assert_allclose(probs, [r["probs"]["ebm-sharp-hidden"] for r in rows], atol=1e-7)
    np.testing.assert_allclose(clf.energy(texts), [r["energy"]["ebm-sharp-hidden"] for r in rows], rtol=same(1e-9))
    assert clf.predict(texts) == [clf.classes_[k] for k in probs.argmax(1)]


def test_tagger_gives_the_tags_of_tag_predict_and_spans_for_bio_tags(runs, tmp_path):
    from textebm.data.conll import read_conll
    from textebm.tagging.metrics import spans

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": " ".join(s), "tokens": s}) + "\n" for s in SENTENCES))
    for name in ("pos", "ner"):
        out = tmp_path / f"{name}.conll"
        assert main(["tag", "predict", "--model", str(runs / "runs" / name), "--input", str(inp), "--out", str(out),
                     "--no-progress"]) == 0
        tagger = api.Tagger(runs / "runs" / name)
        got = tagger.tag([*SENTENCES[:2], " ".join(SENTENCES[2])], batch_size=2)  # a string is cut at whitespace
        assert [(t.tokens, t.tags) for t in got] == [(r["tokens"], r["tags"]) for r in read_conll(out, 0, 1)]
        assert tagger.bio == (name == "ner")
        for t in got:
            assert t.spans == (sorted(spans(t.tags), key=lambda s: s[1]) if name == "ner" else None)


def test_detector_gives_the_probabilities_and_decisions_of_residual_score(runs, tmp_path):
    texts = ["the nation shall build roads and schools for every citizen while congress votes",
             "budget of war", "peace in our time the nation", "w1 w2 w3 w4 w5 w6 w7 w8 w9"]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    for name, key in (("det", "energy"), ("loglik", "score")):
        out = tmp_path / f"{name}.jsonl"
        assert main(["detect", "score", "--model", str(runs / "runs" / name), "--input", str(inp),
                     "--out", str(out)]) == 0
        rows = _jsonl(out)
        det = api.Detector(runs / "runs" / name, device="cpu", precision="fp32")
        np.testing.assert_allclose(det.scores(texts, batch_size=3), [r[key] for r in rows], rtol=1e-9)
        np.testing.assert_allclose(det.predict_proba(texts), [r["p_generated"] for r in rows], rtol=1e-9)
        assert det.predict(texts).tolist() == [r["generated"] for r in rows]
        s = det.scores(texts)  # the decision is the rule's: oriented score above the threshold, on each side of it
        np.testing.assert_array_equal(det.predict(texts), det.rule_.oriented(s) > det.threshold_)
        det.threshold_ = det.rule_.threshold = float(np.median(det.rule_.oriented(s)))
        assert len(set(det.predict(texts).tolist())) == 2, name  # a threshold among the scores: both decisions


def test_a_fitted_calibrator_gives_the_calibrated_probabilities_of_classify_eval(runs, classify_fixture,
                                                                                 eval_report):
    """fit_calibrator on the dev half (or the training split) and predict_proba on the test half
    give `classify eval`'s tscal-/scalbin- rows of predictions.jsonl and its temperature."""
    run, data = runs / "runs" / "ebm", classify_fixture / "data"
    rows, methods = _jsonl(eval_report / "predictions.jsonl"), read_json(eval_report / "metrics.json")["methods"]
    dev = _jsonl(data / "dev.jsonl")
    dev_idx, test_idx = halve_dev(len(dev), 0)
    assert [dev[i]["id"] for i in test_idx] == [r["id"] for r in rows]
    test_texts = [dev[i]["text"] for i in test_idx]
    fits = {"dev": [dev[i] for i in dev_idx], "train": _jsonl(data / "train.jsonl")}
    clf = api.Classifier(run, precision="fp32")
    uncalibrated = clf.predict_proba(test_texts)
    for method in ("tscal", "scalbin"):
        for where, fit_rows in fits.items():
            key = f"{method}-{where}"
            got = clf.fit_calibrator([r["text"] for r in fit_rows], [r["label"] for r in fit_rows], method,
                                     batch_size=7)
            assert got is clf
            probs = clf.predict_proba(test_texts)
            np.testing.assert_allclose(probs, [r["probs"][key] for r in rows], atol=same(1e-7), err_msg=key)
            assert clf.predict(test_texts) == [clf.classes_[k] for k in probs.argmax(1)]
            if method == "tscal":
                assert clf.calibrator_.temperature_ == pytest.approx(methods[key]["temperature"], rel=1e-9)
    assert not np.allclose(probs, uncalibrated)  # the calibrator is applied
    clf.calibrator_ = None
    np.testing.assert_array_equal(clf.predict_proba(test_texts), uncalibrated)


def test_fit_calibrator_refuses_bad_labels_and_logs_a_degenerate_fit(runs, caplog, capsys):
    clf = api.Classifier(runs / "runs" / "ebm")
    cases = [(dict(method="platt"), r"^method: must be one of tscal, scalbin, got 'platt'"),
             (dict(labels=["positive", "meh"]), r"^labels\[1\]: 'meh' is not one of the classifier's classes_ "
                                               r"\(negative, positive\)"),
             (dict(labels=["positive", 1]), r"^labels\[1\]: '1' is not one of"),
             (dict(labels=["positive", True]), r"^labels\[1\]: True is not one of"),
             (dict(labels=["positive"]), r"^labels: 1 labels for 2 texts"),
             (dict(labels="positive"), r"^labels: must be a list")]
    for kwargs, message in cases:
        with pytest.raises(api.ArgumentError, match=message):
            clf.fit_calibrator(["a film", "a dull film"], **{"labels": ["positive", "negative"], **kwargs})
    assert clf.calibrator_ is None
    # a classifier of JSON labels 0 and 1 (read as "0", "1") takes them as numbers, as the readers do
    assert [api._label(x, {"0": 0, "1": 1}, 0) for x in (1, np.int64(0), "1")] == [1, 0, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CalibrationWarning would raise here: it goes to the log instead
        with caplog.at_level(logging.WARNING):
            clf.fit_calibrator(["a film"], ["positive"])
    assert clf.calibrator_.temperature_ == 1.0
    assert "tscal on 1 texts: temperature scaling on 1 sample(s): keeping T = 1" in caplog.text
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- re-fitting, reranking, sampling, the joint model


def test_refit_threshold_gives_a_new_detector_at_the_threshold_of_detect_threshold(runs, tmp_path):
    """The threshold and report of `detect threshold` on the same texts, and the probabilities
    and decisions of `detect score --threshold` with its file; the old detector unchanged."""
    from conftest import walking_doc

    human = walking_doc(random.Random(5), 9) + ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"]
    (tmp_path / "human.txt").write_text("\n".join(human) + "\n")
    thr = tmp_path / "thr.json"
    assert main(["detect", "threshold", "--model", str(runs / "runs" / "det"), "--human", str(tmp_path / "human.txt"),
                 "--out", str(thr), "--fpr", "0.25", "--seed", "3", "--held-out", "0.4"]) == 0
    want = read_json(thr)
    det = api.Detector(runs / "runs" / "det", device="cpu", precision="fp32")
    new = det.refit_threshold(human, fpr=0.25, seed=3, held_out=0.4, batch_size=3)
    assert new is not det and type(new) is api.Detector
    assert new.threshold_ == want["threshold"] != det.threshold_ == 0.1  # the old one keeps its own
    report = {k: v for k, v in want.items() if k not in ("model", "detector_sha256", "human")}
    report["warnings"] = [w.replace("--model ", "path ") for w in report["warnings"]]  # how each names the folder
    assert new.threshold_report_ == report and report["warnings"]
    assert det.threshold_report_ is None and det.rule_.threshold == 0.1
    texts = ["the nation shall build roads and schools", "budget of war", "w1 w2 w3 w4 w5 w6", "peace in our time"]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "scored.jsonl"
    assert main(["detect", "score", "--model", str(runs / "runs" / "det"), "--input", str(inp), "--threshold", str(thr),
                 "--out", str(out)]) == 0
    rows = _jsonl(out)
    np.testing.assert_allclose(new.predict_proba(texts), [r["p_generated"] for r in rows], rtol=1e-12)
    assert new.predict(texts).tolist() == [r["generated"] for r in rows]
    np.testing.assert_array_equal(new.scores(texts), det.scores(texts))


def _nbest_file(path: Path, lists: dict[str, tuple[str, list[tuple[str, float]]]]) -> Path:
    path.write_text(json.dumps({u: {"ref": ref, **{f"hyp_{j + 1}": {"text": t, "score": a} for j, (t, a) in
                                                   enumerate(hyps)}} for u, (ref, hyps) in lists.items()}))
    return path


def test_rerank_chooses_as_textebm_rerank(runs, tmp_path):
    """At the lambda `textebm rerank` chose on dev, the hypothesis, text score and total of each
    test list are those of its chosen.jsonl; lam 0 is the speech 1-best, a huge lam the text's."""
    rng = random.Random(0)

    def lists(prefix: str, n: int) -> dict:
        out = {}
        for u in range(n):
            words = [f"w{rng.randrange(1, 13)}" for _ in range(rng.randint(2, 5))]
            hyps = [(" ".join(words[:k] + [f"w{rng.randrange(1, 13)}"] + words[k + 1:]), -rng.uniform(1, 3))
                    for k in range(len(words))]
            out[f"{prefix}{u}"] = (" ".join(words), hyps)
        return out

    dev, test = _nbest_file(tmp_path / "dev.json", lists("d", 5)), _nbest_file(tmp_path / "test.json", lists("t", 5))
    texts, scores, out = tmp_path / "texts.jsonl", tmp_path / "electric.jsonl", tmp_path / "rerank"
    electric = runs / "runs" / "electric"
    assert main(["rerank", "--dev", str(dev), "--test", str(test), "--write-texts", str(texts)]) == 0
    assert main(["score", "--model", str(electric), "--input", str(texts), "--out", str(scores), "--precision", "fp32",
                 "--no-progress"]) == 0
    assert main(["rerank", "--dev", str(dev), "--test", str(test), "--scores", str(scores), "--out", str(out),
                 "--grid", "wide", "--bootstrap", "0"]) == 0
    chosen = _jsonl(out / "chosen.jsonl")
    nbest = [hyps for _, hyps in json_lists(test)]
    scorer = api.Scorer(electric, precision="fp32")
    got = scorer.rerank(nbest, lam=chosen[0]["lambda"], batch_size=3)
    assert [(g.index + 1, g.text) for g in got] == [(r["rank"], r["text"]) for r in chosen]
    for g, r in zip(got, chosen):
        assert (g.asr_score, g.text_score, g.total) == pytest.approx((r["asr_score"], r["text_score"], r["total"]),
                                                                     abs=1e-6)
    assert [g.index for g in scorer.rerank(nbest, lam=0)] == [int(np.argmax([a for _, a in h])) for h in nbest]
    text = {s.text: s.score for s in scorer.score(list(dict.fromkeys(t for h in nbest for t, _ in h)))}
    assert [g.index for g in scorer.rerank(nbest, lam=1e9)] == [int(np.argmax([text[t] for t, _ in h])) for h in nbest]


def json_lists(path: Path) -> list[tuple[str, list[tuple[str, float]]]]:
    from textebm.data.nbest import read_nbest

    return [(u.id, [(h.text, h.score) for h in u.hyps]) for u in read_nbest(path)]


def test_sample_draws_what_lm_sample_free_draws(runs, tmp_path):
    lm = runs / "runs" / "ptb-lm"
    data, out = tmp_path / "one.jsonl", tmp_path / "samples.jsonl"
    data.write_text(json.dumps({"text": "w1 w2"}) + "\n")
    assert main(["lm", "sample", "--model", str(lm), "--data", str(data), "--mode", "free", "--per-example", "4",
                 "--max-new-tokens", "9", "--top-k", "5", "--temperature", "0.8", "--seed", "3", "--precision", "fp32",
                 "--out", str(out), "--no-progress"]) == 0
    rows = _jsonl(out)
    got = api.Scorer(lm, precision="fp32").sample(4, max_new_tokens=9, top_k=5, temperature=0.8, seed=3, batch_size=3)
    assert [(s.text, s.n_tokens) for s in got] == [(r["text"], r["gen_tokens"]) for r in rows]
    assert [s.logprob for s in got] == pytest.approx([r["gen_logprob"] for r in rows], abs=1e-6)
    assert len({s.text for s in got}) > 1 and all(1 <= s.n_tokens <= 9 for s in got)
    again = api.Scorer(lm, precision="fp32").sample(2, max_new_tokens=9, top_k=5, temperature=0.8, seed=3)
    assert again == got[:2]  # sample j does not depend on how many are drawn, nor on the batch


INFILL_TEXTS = ["w1 w7 w2 w9", "w3 w8 w9 w10 w11 w4 w1 w5 w6", "w5", "w12 w2 w2 w6 w7 w30"]


def _lm_sample_infill(lm: Path, rows: list[dict], out: Path, *options: str) -> list[dict]:
    data = out.with_suffix(".data.jsonl")
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["lm", "sample", "--model", str(lm), "--data", str(data), "--mode", "infill", "--precision", "fp32",
                 "--out", str(out), "--no-progress", *options]) == 0
    return _jsonl(out)


def test_infill_lm_samples_what_lm_sample_infill_samples(runs, tmp_path):
    """The rows of `lm sample --mode infill --per-example 3` on the same texts and seed: each
    sample's text, context (the masked text shown), log q and token count, with and without a
    text pair and at the model's own mask ratio or another; sample j of a text is the same
    whatever per_text and batch_size."""
    lm = runs / "runs" / "noise-lm"
    infill = api.InfillLM(lm, precision="fp32")
    assert infill.meta_.mask_ratio == 0.4
    options = ["--per-example", "3", "--top-k", "5", "--temperature", "0.8", "--seed", "3"]
    rows = _lm_sample_infill(lm, [{"text": t} for t in INFILL_TEXTS], tmp_path / "plain.jsonl", *options)
    got = infill.sample(INFILL_TEXTS, 3, top_k=5, temperature=0.8, seed=3, batch_size=5)
    assert [(s.source, s.text, s.context, s.n_tokens, s.text_pair) for s in got] == \
        [(int(r["source_id"]), r["text"], r["context"], r["gen_tokens"], None) for r in rows]
    assert [s.logprob for s in got] == pytest.approx([r["gen_logprob"] for r in rows], rel=1e-6)
    assert all(r["mask_ratio"] == 0.4 for r in rows) and "<mask>" in "".join(s.context for s in got)
    assert len({s.text for s in got}) == len(got)  # a fresh mask and fresh tokens every sample
    once = infill.sample(INFILL_TEXTS, top_k=5, temperature=0.8, seed=3)
    assert [(s.text, s.context) for s in once] == [(s.text, s.context) for s in got[::3]]

    pairs = [{"text": t, "text_pair": p} for t, p in zip(INFILL_TEXTS, INFILL_TEXTS[::-1])]
    rows = _lm_sample_infill(lm, pairs, tmp_path / "pairs.jsonl", "--mask-ratio", "0.7", "--max-new-tokens", "6",
                             "--seed", "1")
    got = infill.sample(INFILL_TEXTS, text_pairs=INFILL_TEXTS[::-1], mask_ratio=0.7, max_new_tokens=6, seed=1,
                        batch_size=2)
    assert [(s.text, s.context, s.text_pair, s.context_pair, s.n_tokens) for s in got] == \
        [(r["text"], r["context"], r["text_pair"], r["context_pair"], r["gen_tokens"]) for r in rows]
    assert [s.logprob for s in got] == pytest.approx([r["gen_logprob"] for r in rows], rel=1e-6)
    assert all(len(s.text.split()) <= 6 for s in got)


def test_infill_lm_refuses_bad_arguments_and_folders_naming_them(runs, capsys):
    r = runs / "runs"
    infill = api.InfillLM(r / "noise-lm")
    texts = ["w1 w2", "w3"]
    cases = [(lambda: infill.sample([]), r"^texts: an empty list"),
             (lambda: infill.sample("w1 w2"), r"^texts: must be a list, got one str"),
             (lambda: infill.sample(["w1", 3]), r"^texts\[1\]: not a string \(int\)"),
             (lambda: infill.sample(["w1", " "]), r"^texts\[1\]: an empty text"),
             (lambda: infill.sample(texts, 0), r"^per_text: must be a whole number >= 1, got 0"),
             (lambda: infill.sample(texts, seed=-1), r"^seed: must be a whole number >= 0, got -1"),
             (lambda: infill.sample(texts, seed=1.5), r"^seed: must be a whole number"),
             (lambda: infill.sample(texts, mask_ratio=1.5), r"^mask_ratio: must be a number in \[0, 1\] or None"),
             (lambda: infill.sample(texts, mask_ratio="0.4"), r"^mask_ratio: must be a number"),
             (lambda: infill.sample(texts, top_k=0), r"^top_k: must be a whole number >= 1"),
             (lambda: infill.sample(texts, temperature=0), r"^temperature: must be a finite number > 0"),
             (lambda: infill.sample(texts, max_new_tokens=0), r"^max_new_tokens: must be a whole number >= 1"),
             (lambda: infill.sample(texts, batch_size=0), r"^batch_size: must be a whole number >= 1"),
             (lambda: infill.sample(texts, text_pairs=["w1"]), r"^text_pairs: 1 pairs for 2 texts"),
             (lambda: infill.sample(texts, text_pairs=["w1", 2]), r"^text_pairs\[1\]: not a string"),
             (lambda: infill.sample(["w1", " ".join(["w2"] * 300)], mask_ratio=0),
              r"^texts\[1\]: a context of 302 tokens leaves no room to generate within the model's 256 positions"),
             (lambda: infill.sample(["w1", "w2"], text_pairs=["w3", " ".join(["w2"] * 300)], mask_ratio=0),
              r"^text_pairs\[1\]: a context of 302 tokens")]
    for call, message in cases:
        with pytest.raises(api.ArgumentError, match=message):
            call()
    with pytest.raises(api.TextebmError, match=f"^path {r / 'ptb-lm' / 'model'}: a causal LM trained with objective "
                                               "'causal', .*; expected an infill LM"):
        api.InfillLM(r / "ptb-lm")
    with pytest.raises(api.TextebmError, match="^path .*: a textebm cloze model.*expected a causal LM"):
        api.InfillLM(r / "electric")
    with pytest.raises(api.TextebmError, match="^path .*noise-lm.*: a causal LM trained with objective 'infill', .*"
                                               "textebm.InfillLM"):
        api.Scorer(r / "noise-lm")
    assert capsys.readouterr().out == ""


def test_joint_model_generates_and_bounds_perplexity_as_the_residual_commands(runs, tmp_path):
    base, unit = runs / "runs" / "base", runs / "runs" / "unit"
    joint = api.JointModel(unit, base=base)
    assert (joint.prefix_len, joint.length) == (8, 4)
    prefixes = _articles(3, 7)
    (tmp_path / "prefixes.txt").write_text("\n".join(prefixes) + "\n")
    gen = tmp_path / "gen"
    assert main(["residual", "generate", "--base", str(base), "--energy", str(unit), "--prefixes",
                 str(tmp_path / "prefixes.txt"), "--n", "6", "--top-k", "5", "--seed", "2", "--out", str(gen),
                 "--no-progress"]) == 0
    rows = _jsonl(gen / "generations.jsonl")
    got = joint.generate(prefixes, n=6, top_k=5, seed=2, batch_size=4)
    assert [(g.prefix, g.joint, g.base) for g in got] == [(r["prefix"], r["joint"], r["base"]) for r in rows]
    for g, r in zip(got, rows):
        assert (g.ess, g.energy_joint, g.energy_base) == pytest.approx((r["ess"], r["energy_joint"], r["energy_base"]),
                                                                       rel=1e-9)
    data = tmp_path / "texts"  # a dataset folder named texts: its windows are keyed texts/test/{i}/{start}
    data.mkdir()
    texts = _articles(2, 8)
    (data / "test.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    ppl = tmp_path / "ppl"
    assert main(["residual", "ppl", "--base", str(base), "--energy", str(unit), "--data", str(data), "--windows", "0",
                 "--samples", "5", "--bootstrap", "50", "--seed", "1", "--out", str(ppl), "--no-progress"]) == 0
    m = read_json(ppl / "metrics.json")
    got = joint.perplexity(texts, samples=5, bootstrap=50, seed=1, chunk=2, batch_size=3)
    want = m["models"][0]
    assert (got.windows, got.tokens, got.samples) == (m["windows"], m["tokens"], 5) and got.windows >= 4
    assert (got.base_ppl, got.joint_ppl_lower, got.joint_ppl_upper) == pytest.approx(
        (m["base_ppl"], want["joint_ppl_lower"], want["joint_ppl_upper"]), rel=1e-9)
    assert got.joint_ppl_lower <= got.joint_ppl_upper
    assert [g["samples"] for g in got.gap_by_samples] == [g["samples"] for g in want["gap_by_samples"]]
    diff = m["differences"][0]
    for bound in ("upper", "lower"):
        assert got.vs_base[bound] == pytest.approx(diff[bound], rel=1e-9)
    assert got.vs_base["can_tell_from_zero"] == diff["can_tell_from_zero"]


def test_the_new_calls_refuse_bad_arguments_naming_them(runs, capsys):
    r = runs / "runs"
    det = api.Detector(r / "det")
    human = ["the nation shall build", "roads and schools", "for every citizen", "while congress votes", "on war"]
    cases = [(lambda: det.refit_threshold([]), r"^human_texts: an empty list"),
             (lambda: det.refit_threshold(["a", 3]), r"^human_texts\[1\]: not a string \(int\)"),
             (lambda: det.refit_threshold(human, fpr=0), r"^fpr: must be a finite number in \(0, 1\), got 0"),
             (lambda: det.refit_threshold(human, fpr="0.1"), r"^fpr: must be a finite number in \(0, 1\)"),
             (lambda: det.refit_threshold(human, fpr=True), r"^fpr: must be a finite number"),
             (lambda: det.refit_threshold(human[:3]), r"^human_texts: need at least 4 human texts"),
             (lambda: det.refit_threshold(human, held_out=0.95), r"^human_texts: held_out 0.95 of 5 human texts holds "
                                                                 r"out all 5"),
             (lambda: det.refit_threshold(human, seed=-1), r"^seed: must be a whole number >= 0")]
    scorer, lm = api.Scorer(r / "electric"), api.Scorer(r / "ptb-lm")
    cases += [(lambda: scorer.rerank([], lam=0.5), r"^nbest: an empty list"),
              (lambda: scorer.rerank([[("w1", -1.0)], []], lam=0.5), r"^nbest\[1\]: an empty n-best list"),
              (lambda: scorer.rerank([[("w1", "x")]], lam=0.5), r"^nbest\[0\]: hypothesis 0: the asr_score must be"),
              (lambda: scorer.rerank([[("w1", -1.0), (3, -2.0)]], lam=0.5), r"^nbest\[0\]: hypothesis 1 is not a "
                                                                         r"\(text, asr_score\) pair"),
              (lambda: scorer.rerank([["w1 w2"]], lam=0.5), r"^nbest\[0\]: hypothesis 0 is not a"),
              (lambda: scorer.rerank("w1", lam=0.5), r"^nbest: must be a list"),
              (lambda: scorer.rerank([[("w1", -1.0)]], lam=-1), r"^lam: must be a finite number >= 0, got -1"),
              (lambda: scorer.rerank([[("w1", -1.0)]], lam=float("nan")), r"^lam: must be a finite number"),
              (lambda: lm.sample(0), r"^n: must be a whole number >= 1, got 0"),
              (lambda: lm.sample(2, top_k=0), r"^top_k: must be a whole number >= 1"),
              (lambda: lm.sample(2, temperature=0), r"^temperature: must be a finite number > 0"),
              (lambda: lm.sample(2, max_new_tokens=300), r"^max_new_tokens: 300: the model has 256 positions"),
              (lambda: lm.sample(2, seed=1.5), r"^seed: must be a whole number")]
    for call, message in cases:
        with pytest.raises(api.ArgumentError, match=message):
            call()
    with pytest.raises(api.TextebmError, match="a cloze model scores texts but does not write them"):
        scorer.sample(2)
    base, unit = r / "base", r / "unit"
    for kwargs, message in [(dict(energy=r / "ebm", base=base), f"^energy {r / 'ebm' / 'model'}: a textebm "
                                                                "classifier .*, not a textebm sequence energy"),
                            (dict(energy=unit, base=r / "electric"), "^base .*: a textebm cloze model"),
                            (dict(energy=unit, base=base, prefix_len=5), "^prefix_len 5: the energy .* was trained on "
                                                                         "prefixes of 8 tokens"),
                            (dict(energy=unit, base=base, length=3), r"^prefix_len 8 \+ length 3 = 11 tokens, but "),
                            (dict(energy=3, base=base), "^energy: must be a folder path"),
                            (dict(energy=unit, base=base, length=-1), "^length: must be a whole number >= 0")]:
        with pytest.raises(api.TextebmError, match=message):
            api.JointModel(**kwargs)
    joint = api.JointModel(unit, base=base)
    long = _articles(1, 0)
    cases = [(lambda: joint.generate([]), r"^prefixes: an empty list"),
             (lambda: joint.generate(long + ["the nation"]), r"^prefixes\[1\]: \d tokens, where the joint model "
                                                             r"continues the last prefix_len = 8"),
             (lambda: joint.generate(long, top_k=-1), r"^top_k: must be a whole number >= 0"),
             (lambda: joint.generate(long, n=0), r"^n: must be a whole number >= 1"),
             (lambda: joint.perplexity([5]), r"^texts\[0\]: not a string \(int\)"),
             (lambda: joint.perplexity(long + ["budget of war"]), r"^texts\[1\]: \d tokens, fewer than one window "
                                                                 r"of prefix_len \+ length = 12"),
             (lambda: joint.perplexity(long, samples=1), r"^samples: must be a whole number >= 2, got 1"),
             (lambda: joint.perplexity(long, bootstrap=-1), r"^bootstrap: must be a whole number >= 0")]
    for call, message in cases:
        with pytest.raises(api.ArgumentError, match=message):
            call()
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- bad input


def test_bad_texts_raise_errors_naming_the_argument_and_the_index(runs):
    scorer = api.Scorer(runs / "runs" / "electric", precision="fp32")
    cases = [(["w1", 3], r"^texts\[1\]: not a string \(int\)"), ([], r"^texts: an empty list"),
             ("w1 w2", r"^texts: must be a list, got one str"), (["w1", "  "], r"^texts\[1\]: an empty text"),
             (None, r"^texts: must be a list, got NoneType")]
    for texts, message in cases:
        with pytest.raises(api.ArgumentError, match=message):
            scorer.score(texts)
    with pytest.raises(api.ArgumentError, match=r"^texts \(in the form of normalize='asr'\)\[0\]: an empty text"):
        scorer.score(["!!"], normalize="asr")
    with pytest.raises(api.ArgumentError, match="^normalize: unknown"):
        scorer.score(["w1"], normalize="nfc")
    with pytest.raises(api.ArgumentError, match="^batch_size: must be a whole number >= 1, got 0"):
        scorer.score(["w1"], batch_size=0)
    with pytest.raises(api.TextTooLong, match=r"^texts\[1\]: 70 tokens; the model takes at most 62") as e:
        scorer.score(["w1", " ".join(["w2"] * 70)])
    assert e.value.index == 1
    with pytest.raises(api.ArgumentError, match=r"^texts\[1\]: '\\u200b' has no token for the model's tokenizer"):
        scorer.score(["w1", "\u200b"])  # it scored 0.0 (a cloze model), the best a reranked hypothesis can get
    with pytest.raises(api.ArgumentError, match=r"^text_pairs: 1 pairs for 2 texts"):
        api.Classifier(runs / "runs" / "ebm").predict_proba(["a", "b"], ["c"])
    tagger = api.Tagger(runs / "runs" / "pos")
    with pytest.raises(api.ArgumentError, match=r"^sentences\[1\]: not a list of non-empty token strings"):
        tagger.tag([["a"], ["b", 3]])
    with pytest.raises(api.ArgumentError, match=r"^sentences\[0\]: no tokens"):
        tagger.tag(["   "])
    with pytest.raises(api.ArgumentError, match=r"^texts\[0\]: an empty text"):
        api.Detector(runs / "runs" / "det").predict([""])


def test_numpy_numbers_are_taken_as_the_python_numbers_they_hold(runs):
    scorer = api.Scorer(runs / "runs" / "ptb-lm", threads=np.int64(1))
    assert scorer.score(["w1 w2"], batch_size=np.int64(4))[0].score == scorer.score(["w1 w2"], batch_size=4)[0].score
    drawn = scorer.sample(np.int64(2), max_new_tokens=np.int64(3), temperature=np.float32(0.5), seed=np.int64(1))
    same_py = scorer.sample(2, max_new_tokens=3, temperature=float(np.float32(0.5)), seed=1)
    assert [(x.text, x.logprob) for x in drawn] == [(x.text, x.logprob) for x in same_py]
    electric = api.Scorer(runs / "runs" / "electric")
    assert electric.rerank([[("w1 w2", np.float32(-1.0)), ("w2 w1", -1.5)]], lam=np.float32(0.5))[0].index in (0, 1)
    with pytest.raises(api.ArgumentError, match=r"^batch_size: must be a whole number >= 1, got (np.float64\()?4.0"):
        scorer.score(["w1"], batch_size=np.float64(4))
    with pytest.raises(api.ArgumentError, match="^n: must be a whole number >= 1, got (np.)?True"):
        scorer.sample(np.bool_(True))


def test_a_detector_warns_of_texts_shorter_than_its_training_windows_and_strict_refuses_them(runs, caplog):
    det = api.Detector(runs / "runs" / "loglik")  # windows of 4 tokens
    assert det.min_length_ == 4
    long, short = "w1 w2 w3 w4 w5 w6", "w1"
    with caplog.at_level(logging.WARNING):
        scores = det.scores([long, short])
    assert "1 of 2 texts have fewer than 4 tokens" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert det.scores([long], strict=True)[0] == scores[0]
    assert "fewer than" not in caplog.text
    with pytest.raises(api.ArgumentError, match=r"^texts\[1\]: 1 tokens, fewer than the 4 of the shortest windows"):
        det.predict([long, short], strict=True)
    with pytest.raises(api.ArgumentError, match="^strict: must be True or False"):
        det.predict_proba([long], strict="yes")


def test_a_damaged_rule_is_an_input_error_naming_its_field(runs, tmp_path):
    folder = tmp_path / "loglik"
    shutil.copytree(runs / "runs" / "loglik", folder)
    raw = json.loads((folder / "detector.json").read_text())
    for name, value in (("temperature", "hot"), ("temperature", 0), ("sign", 0), ("sign", True),
                        ("threshold", None), ("fpr", [0.1]), ("val", [1])):
        (folder / "detector.json").write_text(json.dumps({**raw, "rule": {**raw["rule"], name: value}}))
        with pytest.raises(api.InputError, match=f"detector.json: rule.{name} must be"):
            api.Detector(folder)


def test_a_classifier_reads_the_kind_of_input_it_was_trained_on(runs, tmp_path):
    """A classifier records whether it was trained on text pairs: given the other kind (a pair to a
    single-text model, a single text to a pair model) it refuses, naming text_pairs; one saved
    before textebm recorded it (no `pairs`) is not checked."""
    folder = tmp_path / "ebm"
    shutil.copytree(runs / "runs" / "ebm", folder)
    spec_file = folder / "model" / "classifier.json"
    spec = json.loads(spec_file.read_text())
    assert "pairs" not in spec or spec["pairs"] is None
    assert api.Classifier(folder).predict(["a b"], text_pairs=["c d"])  # unknown: as before
    for pairs, call, words in ((False, dict(text_pairs=["c d"]), "trained on single texts"),
                               (True, {}, "trained on text pairs")):
        spec_file.write_text(json.dumps({**spec, "pairs": pairs}))
        clf = api.Classifier(folder)
        with pytest.raises(api.ArgumentError, match=f"^text_pairs: the classifier was {words}"):
            clf.predict(["a b"], **call)
        assert clf.predict(["a b"], **({} if call else dict(text_pairs=["c d"])))


def test_a_model_folder_without_its_tokenizer_is_refused_not_read_as_all_unknown(runs, tmp_path):
    from textebm.models.load import TOKENIZER_FILES

    for name in ("ebm", "electric", "ptb-lm"):
        folder = tmp_path / name
        shutil.copytree(runs / "runs" / name, folder)
        gone = [f for f in (folder / "model").iterdir() if f.name in TOKENIZER_FILES]
        assert gone, name
        for f in gone:
            f.unlink()
        with pytest.raises(api.TextebmError, match=f"^path .*{name}.*: no tokenizer in the folder"):
            textebm.load(folder)
    from textebm.models.load import _has_tokenizer
    byte_level = tmp_path / "byt5"
    byte_level.mkdir()
    (byte_level / "tokenizer_config.json").write_text('{"tokenizer_class": "ByT5Tokenizer"}')
    assert _has_tokenizer(byte_level) and not _has_tokenizer(tmp_path / "ebm" / "model")


def test_bad_settings_raise_errors_naming_the_argument(runs):
    folder = runs / "runs" / "electric"
    cases = [(dict(device="cuda:99"), "^device: 'cuda:99': this machine has"),
             (dict(device="tpu"), "^device: 'tpu' is not a device"),
             (dict(device="meta"), "^device: 'meta': textebm runs on 'cpu' or 'cuda'"),
             (dict(precision="fp64"), "^precision: must be one of auto, fp32, bf16, fp16, got 'fp64'"),
             (dict(threads=-1), "^threads: must be a whole number from 0 .* got -1"),
             (dict(threads=1000), "^threads: must be a whole number from 0 .* the cores this process may use"),
             (dict(method="causal"), "^method: 'causal' for .*electric.*: a model trained with objective electric "
                                     "scores with electric or twotower")]
    if not torch.cuda.is_available():
        cases += [(dict(device="cuda"), "^device: 'cuda': this machine has no CUDA GPU"),
                  (dict(precision="fp16"), "^precision: fp16 needs a CUDA GPU")]
    for kwargs, message in cases:
        with pytest.raises(api.TextebmError, match=message):
            api.Scorer(folder, **kwargs)
    with pytest.raises(api.ArgumentError, match="^precision: a tagger runs in fp32"):
        api.Tagger(runs / "runs" / "pos", precision="bf16")
    with pytest.raises(api.ArgumentError, match="^path: must be a folder path"):
        textebm.load(3)


def test_a_folder_of_the_wrong_kind_names_what_it_holds_and_what_was_expected(runs, tmp_path):
    r = runs / "runs"
    cases = [(api.Tagger, r / "ebm", f"path {r / 'ebm' / 'model'}: a textebm classifier .*, not a textebm tagger; "
                                     "expected a tagger"),
             (api.Classifier, r / "electric", "not a textebm classifier; expected a classifier"),
             (api.Scorer, r / "pos", f"path {r / 'pos' / 'model'}: a textebm tagger; expected a cloze model"),
             (api.Detector, r / "ebm", f"path {r / 'ebm'}: a textebm classifier .*, with no detector.json; expected a "
                                       "detector"),
             (api.Detector, tmp_path / "nope", "path .*nope: no such folder; expected a detector"),
             (textebm.load, tmp_path, f"path {tmp_path}: not a model folder \\(no config.json\\); expected a folder "
                                      "textebm wrote"),
             (textebm.load, tmp_path / "nope", "path .*nope: no such folder; expected a folder textebm wrote")]
    for fn, folder, message in cases:
        with pytest.raises(api.TextebmError, match=message):
            fn(folder)


def test_library_calls_print_nothing(runs, capsys):
    r = runs / "runs"
    textebm.load(r / "electric").score(["w1 w2", "hello there"])  # unknown pieces: a log warning, not a print
    textebm.load(r / "ebm").predict(["a film"])
    textebm.load(r / "pos").tag(["the dog"])
    textebm.load(r / "det").predict_proba(["the nation"])
    textebm.load(r / "det").refit_threshold(["the nation", "shall build", "roads and", "schools for"], fpr=0.1)
    textebm.load(r / "electric").rerank([[("w1 w2", -1.0), ("w2 w1", -1.5)]], lam=0.5)
    textebm.load(r / "ptb-lm").sample(2, max_new_tokens=5)
    textebm.load(r / "noise-lm").sample(["w1 w2 w3"], 2)
    joint = textebm.JointModel(r / "unit", base=r / "base")
    joint.generate(_articles(1, 0), n=2)
    joint.perplexity(_articles(1, 0), samples=2, bootstrap=10)
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- training from Python

TRAINING = {("classify", "train"): ("ClassifyTrainConfig", "classify_train"),
            ("cloze", "train"): ("ClozeTrainConfig", "cloze_train"),
            ("lm", "train"): ("LMTrainConfig", "lm_train"),
            ("tag", "train"): ("TagTrainConfig", "tag_train"),
            ("detect", "train"): ("DetectTrainConfig", "detect_train"),
            ("detect", "fit"): ("FitConfig", "fit_zeroshot")}


def _moved(group: str, command: str) -> bool:
    """`textebm residual train` and the others run for one release under their old name."""
    from textebm.cli.detect import COMMANDS

    return group == "residual" and command in COMMANDS


def test_textebm_training_holds_every_training_commands_config_and_function():
    """The command line's own config class and the function in its module, for every command
    that trains (a config on the shared training options) and `detect fit`; ssl-images (no text
    system of the API yet) aside."""
    from textebm.cli import GROUPS
    from textebm.train import TrainOptions

    trains = set()
    for group, (module_name, _) in GROUPS.items():
        module = importlib.import_module(module_name)
        for command, (cls, _fn) in getattr(module, "COMMANDS", {}).items():
            if issubclass(cls, TrainOptions) and group != "ssl-images" and not _moved(group, command):
                trains.add((group, command))
    assert trains | {("detect", "fit")} == set(TRAINING)
    assert sorted(training.__all__) == sorted(n for pair in TRAINING.values() for n in pair)
    for (group, command), (config, function) in TRAINING.items():
        cls = importlib.import_module(GROUPS[group][0]).COMMANDS[command][0]
        assert getattr(training, config) is cls
        assert getattr(training, function) is getattr(importlib.import_module(cls.__module__), function)


def _classify_options(data: Path) -> dict:
    return dict(data=str(data / "data"), encoder=str(data / "encoder"), epochs=1, batch_size=16, max_len=32,
                precision="fp32", progress=False)


def test_training_from_python_writes_the_commands_run_and_returns_its_metrics(classify_fixture, tmp_path):
    opts = _classify_options(classify_fixture)
    argv = ["classify", "train", "--out", str(tmp_path / "cli"), "--no-progress"]
    argv += [a for k, v in opts.items() if k != "progress" for a in (f"--{k.replace('_', '-')}", str(v))]
    assert main(argv) == 0
    metrics = training.classify_train(training.ClassifyTrainConfig(out=tmp_path / "py", **opts))  # a Path: fine
    assert metrics == read_json(tmp_path / "py" / "metrics.json")
    assert metrics["eval"] == read_json(tmp_path / "cli" / "metrics.json")["eval"]  # same seed, same numbers
    assert sorted(p.name for p in (tmp_path / "py").iterdir()) == sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert textebm.load(tmp_path / "py").classes_ == ["negative", "positive"]


def test_training_from_python_keeps_the_output_rules_and_raises_on_bad_options(classify_fixture, tmp_path):
    opts = _classify_options(classify_fixture)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    cases = [(dict(out=str(mine)), "--out .*mine"),
             (dict(out=str(tmp_path / "a"), energy="sharp"), "^--energy must be one of none, scalar, hidden, "
                                                              "sharp-hidden, got 'sharp'"),
             (dict(out=str(tmp_path / "a"), epochs="1"), "^--epochs must be a number, got '1'"),
             (dict(out=str(tmp_path / "a"), batch_size=2.0), "^--batch-size must be a whole number, got 2.0"),
             (dict(out=str(tmp_path / "a"), batch_size=0), "^--batch-size must be at least 1, got 0"),
             (dict(out=str(tmp_path / "a"), progress="no"), "^--progress must be true or false"),
             (dict(out=str(tmp_path / "a"), energy="hidden"), "--energy hidden needs --noise"),
             (dict(out=str(tmp_path / "a"), resume=True), "nothing to resume"),
             (dict(out=str(tmp_path / "a"), data=None), "^--data must be a string, got None"),
             (dict(out=str(tmp_path / "a"), epochs=None), "^--epochs must be a number, got None"),
             (dict(out=None), "^--out must be a string, got None")]
    for kwargs, message in cases:
        with pytest.raises(api.TextebmError, match=message):
            training.classify_train(training.ClassifyTrainConfig(**{**opts, **kwargs}))
    assert (mine / "notes.txt").read_text() == "my notes" and not (tmp_path / "a").exists()
    run = tmp_path / "run"
    first = training.classify_train(training.ClassifyTrainConfig(out=str(run), **opts))
    assert json.loads((run / "model" / "classifier.json").read_text())["pairs"] is False  # trained on single texts
    with pytest.raises(api.TextebmError, match="--overwrite"):
        training.classify_train(training.ClassifyTrainConfig(out=str(run), **opts))
    again = training.classify_train(training.ClassifyTrainConfig(out=str(run), overwrite=True, **opts))
    assert again["eval"] == first["eval"]


# ---------------------------------------------------------------- the installed wheel


def test_an_installed_wheel_loads_every_kind_of_folder(runs, tmp_path):
    """`pip wheel` (offline: no build isolation, no index) on a copy of the sources, `pip install
    --target` of the wheel, then tests/wheel_smoke.py under that install gives the source tree's
    numbers for every kind of folder (and the wheel's metadata and `textebm` command work)."""
    import wheel_smoke

    src = tmp_path / "src-copy"  # the sources only: the build writes nothing into the checkout
    shutil.copytree(ROOT / "src" / "textebm", src / "src" / "textebm", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(tmp_path / "wheels")], capture_output=True, text=True)
    assert built.returncode == 0, f"pip wheel failed (setuptools>=68 is in the dev extra):\n{built.stderr}"
    wheel, = (tmp_path / "wheels").glob("textebm-*.whl")
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--no-compile", "--target", str(site), str(wheel)],
                   check=True)
    out = tmp_path / "numbers.json"
    subprocess.run([sys.executable, str(ROOT / "tests" / "wheel_smoke.py"), str(site), str(runs), str(out)],
                   check=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    got, want = json.loads(out.read_text()), wheel_smoke.numbers(runs)
    assert got.keys() == want.keys() == {"electric", "mlm", "ptb-lm", "noise-lm", "ebm", "pos", "ner", "det", "loglik",
                                         "unit"}
    for name in want:
        if name in ("pos", "ner"):
            assert got[name] == want[name]
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


# ---------------------------------------------------------------- docs/api.md


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_every_code_block_of_docs_api_runs(runs, monkeypatch, capsys):
    blocks = _python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 6
    monkeypatch.chdir(runs)  # the page's run folders: runs/electric, runs/ebm, ...
    namespace: dict = {}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
        except Exception as e:  # noqa: BLE001  name the block that broke
            pytest.fail(f"docs/api.md python block {i + 1} raised {type(e).__name__}: {e}\n{block}")
    out = capsys.readouterr().out
    assert "texts[1]: not a string (int)" in out  # the errors block printed its message


def test_the_readmes_python_block_runs(runs, monkeypatch):
    blocks = _python_blocks((DOC.parents[1] / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) == 1
    monkeypatch.chdir(runs)
    exec(compile(blocks[0], "README.md", "exec"), {})


def test_every_public_name_is_on_docs_api():
    text = DOC.read_text(encoding="utf-8")
    missing = [n for n in [*api.__all__, *training.__all__] if f"`{n}`" not in text]
    assert not missing, f"public names of textebm.api or textebm.training not in docs/api.md: {missing}"


def test_each_system_package_gives_its_commands_config_and_function():
    """Issue 38: `from textebm.detection import DetectTrainConfig, detect_train` (and the other
    systems') gives the very objects of textebm.training and the command line, loaded on first use."""
    import subprocess
    import sys

    import textebm.classify
    import textebm.cloze
    import textebm.detection
    import textebm.lm
    import textebm.residual
    import textebm.tagging
    from textebm.residual import commands

    for pkg in (textebm.classify, textebm.cloze, textebm.detection, textebm.lm, textebm.tagging):
        for name in pkg.__all__:
            assert getattr(pkg, name) is getattr(training, name), (pkg.__name__, name)
    assert textebm.residual.residual_ppl is commands.residual_ppl
    assert textebm.residual.ResidualGenerateConfig is commands.ResidualGenerateConfig
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        textebm.detection.nothing  # noqa: B018
    # importing a library module of a system loads none of its command modules
    code = ("import sys, textebm.detection.detect; "
            "print('textebm.detection.train' in sys.modules, 'textebm.detection.commands' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split() == \
        ["False", "False"]
