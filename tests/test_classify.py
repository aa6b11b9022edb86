"""Calibrated classifiers (paper a): the noise stream's bucketing, a killed joint run resuming to
the same weights, the joint forward's fast path against its reference, `classify train` /
`classify eval` from the CLI, bad input, and a tiny quickstart.

Everything runs on a from-scratch 1-layer BERT with a WordPiece tokenizer trained on a synthetic
sentiment fixture, so the file takes seconds, not minutes.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from forked import run_main

from textebm.classify.data import Collator, Encoded, noise_stream
from textebm.cli import main
from textebm.data.batching import BucketBatchSampler
from textebm.data.batching import stream_sampler

from conftest import _sentence

# ---------------------------------------------------------------- noise stream


def _examples(n: int, k: int, rng: random.Random) -> tuple[list[Encoded], list[int]]:
    examples, lengths = [], []
    for i in range(n):
        examples.append(Encoded([0] * rng.randint(3, 40), None, 0, list(range(len(lengths), len(lengths) + k + 1)), i))
        lengths += [rng.randint(3, 60) for _ in range(k + 1)]
    return examples, lengths


def _noise_sampler(examples, noise_len, k, batch_size, seed):
    """The noise stream's sampler as `train` builds it for `classify train`."""
    noise = [([5] * n, None) for n in noise_len]
    stream = noise_stream(examples, noise, k, batch_size, pad_id=0)
    return stream, stream_sampler(stream, seed, 0)


@pytest.mark.parametrize("k", [1, 3])
def test_noise_stream_uses_each_examples_k_samples_of_the_epoch_once(k):
    """Epoch e's noise batches hold samples (e*K + j) mod n, j < K, of every example, each once, in
    as many batches as the data (K x the data batch size, the short one last), so that under
    several processes data batch r and noise batch r go to the same process."""
    rng = random.Random(1)
    examples, noise_len = _examples(203, k, rng)
    data = BucketBatchSampler([len(e.ids) for e in examples], 16, seed=4)
    stream, noise = _noise_sampler(examples, noise_len, k, 16, seed=4)
    assert stream.lockstep and stream.batch_size == 16 * k
    for epoch in (1, 2):
        data.set_epoch(epoch)
        noise.set_epoch(epoch)
        batches, data_batches = list(noise), list(data)
        assert len(batches) == len(data_batches) == 13
        assert [len(b) for b in batches] == [k * len(b) for b in data_batches]  # nce_loss gets B*K noise energies
        pool = sorted(e.noise[(epoch * k + j) % len(e.noise)] for e in examples for j in range(k))
        assert sorted(n for b in batches for n in b) == pool  # each pooled sample once
        assert list(noise) == batches  # a resumed run draws the same noise
    noise.set_epoch(1)
    assert list(noise) != batches


def test_noise_stream_buckets_noise_by_its_own_length():
    rng = random.Random(2)
    examples, noise_len = _examples(640, 1, rng)
    data = list(BucketBatchSampler([len(e.ids) for e in examples], 32, seed=0))
    _, noise = _noise_sampler(examples, noise_len, 1, 32, seed=0)
    own = [[e.noise[0] for e in (examples[i] for i in b)] for b in data]  # per-example pairing

    def waste(groups):
        real = sum(noise_len[n] for g in groups for n in g)
        return 1 - real / sum(len(g) * max(noise_len[n] for n in g) for g in groups)

    assert waste(list(noise)) < 0.05  # bucketed: a few per cent of padding
    assert waste(own) > 0.3  # paired with the source sentence: noise lengths scatter


def test_noise_batches_are_padded_inputs_and_data_batches_carry_no_noise():
    rng = random.Random(3)
    examples, noise_len = _examples(10, 2, rng)
    stream, _ = _noise_sampler(examples, noise_len, 2, 5, seed=0)
    out = stream.collate([stream.dataset[i] for i in (0, 3, 4)])
    assert out["input_ids"].shape == (3, max(noise_len[i] for i in (0, 3, 4)))
    assert out["attention_mask"].sum().item() == sum(noise_len[i] for i in (0, 3, 4))
    data = Collator(0)(examples[:4])
    assert data.noise is None and {"input_ids", "attention_mask"} <= set(data.data)
    assert data.index.tolist() == [0, 1, 2, 3] and data.labels.shape == (4,)


def test_joint_training_resumed_after_a_kill_draws_the_same_noise(classify_fixture, tmp_path):
    """`classify train --energy hidden` killed mid-epoch 2 and resumed ends with bitwise the same
    weights and NCE history as an uninterrupted run: the noise stream resumes where it stopped."""
    from safetensors.torch import load_file

    d = classify_fixture
    args = ["classify", "train", "--data", str(d / "data"), "--encoder", str(d / "encoder"), "--energy", "hidden",
            "--noise", str(d / "noise.jsonl"), "--noise-ratio", "2", "--epochs", "2", "--batch-size", "16",
            "--checkpoint-every", "4", "--log-every", "2", "--precision", "fp32", "--no-progress",
            "--eval-split", ""]
    env = {"OMP_NUM_THREADS": "1"}
    full = run_main("textebm.cli", [*args, "--out", str(tmp_path / "full")], env)
    assert full.returncode == 0, full.stderr[-3000:]
    cut = run_main("kill_at_step", ["10", *args, "--out", str(tmp_path / "cut")], env, entry="run")
    assert cut.returncode == 137, cut.stderr[-3000:]
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["step"] == 8  # epoch 1, batch 2
    resumed = run_main("textebm.cli", [*args, "--out", str(tmp_path / "cut"), "--resume"], env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = load_file(str(tmp_path / "full" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ha, hb = (json.loads((tmp_path / r / "metrics.json").read_text())["train"]["history"] for r in ("full", "cut"))
    assert ha == hb and all(h["nce"] > 0 for h in ha)


# ---------------------------------------------------------------- fast path vs reference


@pytest.mark.parametrize("energy", ["scalar", "hidden", "sharp-hidden"])
def test_separate_passes_equal_one_concatenated_pass(classify_fixture, energy):
    """The fast path (data and noise padded separately) gives the same loss and gradients as one
    pass over both padded together."""
    from textebm.classify.data import batch_inputs
    from textebm.models.classifier import ClassifierSpec
    from textebm.models.load import build_classifier
    from textebm.classify.train import joint_forward
    from textebm.losses.nce import nce_loss

    torch.manual_seed(0)
    spec = ClassifierSpec(labels=["negative", "positive"], energy=energy, dropout=0.0)
    model, tok = build_classifier(classify_fixture / "encoder", spec)
    model.train()
    short = ["great film", "dull", "a truly moving story"]
    long = ["the plot is really boring and the ending is tedious with a bland cast",
            "funny", "the cast is smart and charming", "a film", "is really messy and awful",
            "a wonderful and brilliant story with a truly moving ending and a smart plot"]
    data = batch_inputs([(ids, None) for ids in tok(short)["input_ids"]], tok.pad_token_id)
    noise = batch_inputs([(ids, None) for ids in tok(long)["input_ids"]], tok.pad_token_id)
    labels = torch.tensor([1, 0, 1])
    results = []
    for separate in (True, False):
        model.zero_grad()
        logits, e_pos, e_neg = joint_forward(model, data, noise, separate=separate)
        loss = torch.nn.functional.cross_entropy(logits, labels) + nce_loss(e_pos, e_neg, 2).loss
        loss.backward()
        results.append((loss.detach(), e_pos.detach(), e_neg.detach(),
                        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (la, pa, na, ga), (lb, pb, nb, gb) = results
    torch.testing.assert_close(pa, pb, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(na, nb, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(la, lb, atol=1e-5, rtol=1e-5)
    assert ga.keys() == gb.keys() and ga
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], atol=1e-5, rtol=1e-4, msg=n)


# ---------------------------------------------------------------- the commands


def _run(*argv: str) -> int:
    return main([str(a) for a in argv])


def test_classify_train_and_eval_from_the_cli(classify_fixture, tmp_path, capsys, caplog):
    d = classify_fixture
    common = ["--data", d / "data", "--encoder", d / "encoder", "--epochs", "10", "--batch-size", "16",
              "--lr", "3e-3", "--no-progress", "--precision", "fp32"]
    assert _run("classify", "train", "--out", tmp_path / "base", *common) == 0
    assert _run("classify", "train", "--out", tmp_path / "ebm", "--energy", "sharp-hidden",
                "--noise", d / "noise.jsonl", "--noise-ratio", "2", *common) == 0
    hist = json.loads((tmp_path / "ebm" / "metrics.json").read_text())["train"]["history"]
    assert {"ce", "nce", "nce_acc"} <= set(hist[-1])
    assert hist[-1]["ce"] < 0.5 * hist[0]["ce"]  # the classifier learned
    assert hist[-1]["nce"] < hist[0]["nce"] and hist[-1]["nce_acc"] > 0.6  # the energy tells data from noise
    cfg = json.loads((tmp_path / "ebm" / "config.json").read_text())
    assert cfg["energy"] == "sharp-hidden" and cfg["noise_ratio"] == 2
    capsys.readouterr()
    assert _run("classify", "eval", "--model", tmp_path / "base", tmp_path / "ebm", "--data", d / "data",
                "--out", tmp_path / "report", "--bins", "10") == 0
    m = json.loads((tmp_path / "report" / "metrics.json").read_text())
    assert set(m["methods"]) == {"baseline", "ebm-sharp-hidden", "tscal-train", "tscal-dev",
                                 "scalbin-train", "scalbin-dev"}
    base = m["methods"]["baseline"]
    assert base["accuracy"] > 0.8 and m["methods"]["ebm-sharp-hidden"]["accuracy"] > 0.8  # majority: 0.5
    assert base["nll"] < math.log(2)  # better than the uniform guess
    assert m["methods"]["tscal-train"]["temperature"] > 0
    assert m["settings"]["runs"]["baseline"]["test_half"] == 32  # half of the 64 dev examples
    from test_calibration_plots import assert_png

    for png in ("reliability_classwise_all.png", "energy_histogram.png", "entropy_vs_energy.png",
                "reliability_toplabel_ebm-sharp-hidden.png"):
        assert_png(tmp_path / "report" / png)
    assert "(EBM)s-hidden" in (tmp_path / "report" / "report.md").read_text()
    assert "Baseline" in capsys.readouterr().out and "is not the data" not in caplog.text
    # another training split than the run learned: the -train calibrators would fit other examples
    import shutil

    other = shutil.copytree(d / "data", tmp_path / "other")
    lines = (other / "train.jsonl").read_text().splitlines()
    (other / "train.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    assert _run("classify", "eval", "--model", tmp_path / "base", "--data", other, "--out", tmp_path / "report2",
                "--bootstrap", "0") == 0
    assert f"--data {other} is not the data" in caplog.text


def test_classify_bad_input_names_file_and_line(classify_fixture, tmp_path, capsys):
    d = classify_fixture
    bad = tmp_path / "noise.jsonl"
    bad.write_text('{"source_id": "train-000000", "text": "ok"}\n{"text": "no source"}\n')
    rc = _run("classify", "train", "--data", d / "data", "--encoder", d / "encoder", "--out", tmp_path / "r",
              "--energy", "hidden", "--noise", bad, "--no-progress")
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}:2" in err and "source_id" in err
    assert not (tmp_path / "r" / "model").exists()
    rc = _run("classify", "train", "--data", d / "data", "--encoder", d / "encoder", "--out", tmp_path / "r2",
              "--energy", "scalar")
    assert rc == 2 and "--noise" in capsys.readouterr().err


def test_quickstart_end_to_end_on_a_fixture(classify_fixture, tmp_path, capsys):
    """The main job on the toy data with a tiny encoder and noise LM, two seeds: all nine methods
    per seed, their mean / spread / intervals, a resumed call that retrains nothing, and a call
    with other settings refused."""
    d = classify_fixture
    out = tmp_path / "qs"
    argv = ["quickstart", "--out", out, "--data", d / "data", "--encoder", d / "encoder",
            "--train-limit", "0", "--epochs", "1", "--lm-epochs", "1", "--lm-layers", "1",
            "--lm-width", "32", "--lm-vocab-size", "300", "--batch-size", "16", "--no-progress", "--seeds", "2",
            "--bootstrap", "200"]
    assert _run(*argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert list(res["methods"]) == ["baseline", "poscal", "ebm-scalar", "ebm-hidden", "ebm-sharp-hidden",
                                    "tscal-train", "tscal-dev", "scalbin-train", "scalbin-dev"]
    assert list(res["seeds"]) == ["0", "1"]
    per_seed = [res["seeds"][s]["methods"] for s in ("0", "1")]
    for name, m in res["methods"].items():
        assert set(m) >= {"accuracy", "ece_classwise", "ece_toplabel", "nll", "brier"}, name
        for k, v in m.items():  # the table is the mean over seeds
            assert v == pytest.approx((per_seed[0][name][k] + per_seed[1][name][k]) / 2), (name, k)
        spread = res["summary"][name]["ece_classwise"]
        assert spread["n"] == 2 and spread["std"] == pytest.approx(
            abs(per_seed[0][name]["ece_classwise"] - per_seed[1][name]["ece_classwise"]) / math.sqrt(2))
    change = res["change_vs_baseline"]["ebm-hidden"]["ece_classwise"]
    assert change["mean"] == pytest.approx(res["methods"]["ebm-hidden"]["ece_classwise"]
                                           - res["methods"]["baseline"]["ece_classwise"])
    assert res["settings"]["train_examples"] == 96 and res["settings"]["dataset"] == "toy-sentiment"
    for seed in ("0", "1"):
        lo, hi = res["seeds"][seed]["intervals"]["baseline"]["accuracy"]
        assert lo <= res["seeds"][seed]["methods"]["baseline"]["accuracy"] <= hi
        for name, acc in res["seeds"][seed]["nce_accuracy"].items():  # the last logged NCE accuracy of each run
            hist = json.loads((out / f"seed-{seed}" / "runs" / name / "metrics.json").read_text())["train"]["history"]
            assert acc == round(hist[-1]["nce_acc"], 4)
        assert len(res["seeds"][seed]["train_ce"]) == 5
        for name, ce in res["seeds"][seed]["train_ce"].items():  # and the classification loss it ended with
            hist = json.loads((out / f"seed-{seed}" / "runs" / name / "metrics.json").read_text())["train"]["history"]
            assert ce == round(hist[-1]["ce"], 4)
    assert res["diagnostics"]["train_ce"]["ebm-scalar"] == pytest.approx(
        (res["seeds"]["0"]["train_ce"]["ebm-scalar"] + res["seeds"]["1"]["train_ce"]["ebm-scalar"]) / 2)
    noise = [json.loads(line) for line in (out / "seed-0" / "noise.jsonl").read_text().splitlines()]
    assert len(noise) == 96 and all(n["mode"] == "infill" and n["top_k"] == 20 for n in noise)
    assert noise != [json.loads(line) for line in (out / "seed-1" / "noise.jsonl").read_text().splitlines()]
    preds = [json.loads(line) for line in (out / "seed-0" / "eval" / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == res["settings"]["test_half"] and set(preds[0]["probs"]) == set(res["methods"])
    report = (out / "report.md").read_text()
    assert "Mean over 2 seeds" in report and "toy-sentiment" in report and "(EBM)hidden" in report
    assert "over 2 seeds" in report and "interval" in report
    # The seeds are cells of textebm's grid runner: --plan lists what is left and writes nothing.
    assert len(list((out / "cells").glob("seed-*.json"))) == 2
    capsys.readouterr()
    assert _run(*argv, "--plan") == 0
    assert "2 cells, 2 cached, 0 to run here" in capsys.readouterr().out
    assert _run(*argv, "--out", tmp_path / "planned", "--seeds", "3", "--shard", "2/2", "--plan") == 0
    text = capsys.readouterr().out
    assert "3 cells, 0 cached; shard 2/2 holds 1, 1 to run here:\n  seed-1  ~" in text
    assert not (tmp_path / "planned").exists()
    # A second call finds every step done: nothing is trained again, the report is re-rendered.
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("seed-*/runs/*/model/model.safetensors")}
    stamps[out / "seed-0" / "noise.jsonl"] = (out / "seed-0" / "noise.jsonl").stat().st_mtime_ns
    assert len(stamps) == 11
    assert _run(*argv) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    again = json.loads((out / "results.json").read_text())
    assert again["methods"] == res["methods"]
    # Every step's time is counted once, whichever call did it: the second call keeps the first's
    # timings; summarising fewer seeds counts only theirs.
    steps = {f"seed {s}: {n}" for s in (0, 1) for n in ("noise-lm", "noise", "train baseline", "train poscal",
                                                          "train ebm-scalar", "train ebm-hidden",
                                                          "train ebm-sharp-hidden", "eval")}
    assert set(res["timings"]) == steps and again["timings"] == res["timings"]
    assert f"Compute time of the steps: {res['wall_seconds']:.0f} s" in (out / "report.md").read_text()
    assert _run(*argv[:-4], "--seeds", "1", "--bootstrap", "200") == 0
    one = json.loads((out / "results.json").read_text())
    assert set(one["timings"]) == {k for k in steps if k.startswith("seed 0")}
    assert one["wall_seconds"] == pytest.approx(sum(one["timings"].values()), abs=0.05)
    assert _run(*argv) == 0
    # Other settings in the same folder are refused, naming what changed; nothing is retrained.
    capsys.readouterr()
    assert _run(*[a if a != "16" else "8" for a in argv]) == 2
    assert "batch_size: 16 -> 8" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # --reuse: a study of an EBM setting takes the noise LM, noise, baseline and PosCal of the same
    # seed from the first folder (the same files) and trains only the EBMs; another noise-LM setting
    # keeps only the classifiers that do not see the noise.
    other = tmp_path / "qs-w025"
    assert _run(*argv[:-4], "--seeds", "1", "--bootstrap", "0", "--out", other, "--reuse", out,
                "--nce-weight", "0.25") == 0
    for rel in ("noise.jsonl", "runs/baseline/model/model.safetensors", "runs/poscal/model/model.safetensors",
                "noise-lm/model/model.safetensors"):
        assert (other / "seed-0" / rel).read_bytes() == (out / "seed-0" / rel).read_bytes(), rel
    ebm = "runs/ebm-scalar/model/model.safetensors"
    assert (other / "seed-0" / ebm).read_bytes() != (out / "seed-0" / ebm).read_bytes()
    assert json.loads((other / "seed-0" / "runs/ebm-scalar/config.json").read_text())["nce_weight"] == 0.25
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # the source is left as it was
    lm2 = tmp_path / "qs-lm2"
    assert _run(*argv[:-4], "--seeds", "1", "--bootstrap", "0", "--out", lm2, "--reuse", out, "--lm-layers", "2") == 0
    assert (lm2 / "seed-0/runs/baseline/model/model.safetensors").read_bytes() == \
        (out / "seed-0/runs/baseline/model/model.safetensors").read_bytes()
    assert (lm2 / "seed-0/noise.jsonl").read_bytes() != (out / "seed-0/noise.jsonl").read_bytes()
    assert _run("quickstart", "--data", d / "data", "--out", tmp_path / "qs-x", "--reuse", d / "data") == 2
    assert "not a quickstart folder" in capsys.readouterr().err
    # --only-seeds: one seed of the study in a folder of its own (here its steps are taken from the
    # first folder); it trains, scores and summarises that seed alone, under its own number.
    shard = tmp_path / "qs-s1"
    assert _run(*argv, "--out", shard, "--only-seeds", "1", "--reuse", out) == 0
    alone = json.loads((shard / "results.json").read_text())
    assert list(alone["seeds"]) == ["1"] and not (shard / "seed-0").exists()
    assert alone["seeds"]["1"]["methods"] == res["seeds"]["1"]["methods"]
    for name in ("baseline", "ebm-scalar", "ebm-sharp-hidden"):  # every step's inputs are the same: all copied
        rel = f"runs/{name}/model/model.safetensors"
        assert (shard / "seed-1" / rel).read_bytes() == (out / "seed-1" / rel).read_bytes(), name
    # no training ran here (only the evaluation): each copied step counts the time it took where it ran
    assert alone["timings"].pop("seed 1: eval") > 0
    assert alone["timings"] == {f"{k} (copied from {out})": v for k, v in res["timings"].items()
                                if k.startswith("seed 1:") and k != "seed 1: eval"}
    assert "s of it by steps that ran in another folder and were copied (--reuse)" in (shard / "report.md").read_text()
    assert "training seed 1;" in (shard / "report.md").read_text()
    assert _run(*argv, "--out", tmp_path / "qs-s5", "--only-seeds", "5") == 2
    assert "--only-seeds 5: not among the seeds 0..1" in capsys.readouterr().err
    assert not (tmp_path / "qs-s5").exists()


def test_train_ce_words_name_the_ebms_that_fit_the_labels_less():
    from textebm.classify.quickstart import train_ce_words

    ce = {"baseline": 0.24, "poscal": 0.25, "ebm-scalar": 0.35, "ebm-hidden": 0.26, "ebm-sharp-hidden": 0.33}
    text = train_ce_words(ce, 3)
    assert "(mean over seeds)" in text and "Baseline 0.240" in text and "(EBM)scalar 0.350" in text
    assert "The (EBM)scalar, (EBM)s-hidden end with a training loss over 10% above" in text  # 0.26 is within 10 %
    assert "trained for fewer epochs, is also better calibrated" in text  # the control to compare with
    assert "above the baseline" not in train_ce_words({**ce, "ebm-scalar": 0.25, "ebm-sharp-hidden": 0.2}, 1)


def test_an_interrupted_quickstart_says_to_run_it_again(classify_fixture, tmp_path, capsys, monkeypatch):
    """Ctrl-C inside one of its steps: the quickstart takes no --resume (each step resumes itself),
    so the message says to run the same command again, not the inner run's --resume."""
    from kill_at_step import stop_after

    from textebm.lm.train import LMRecipe

    d = classify_fixture
    stop_after(2, LMRecipe, monkeypatch)  # in the noise LM's training, its first step
    capsys.readouterr()
    assert _run("quickstart", "--out", tmp_path / "qs", "--data", d / "data", "--encoder", d / "encoder",
                "--train-limit", "0", "--epochs", "1", "--lm-epochs", "1", "--lm-layers", "1", "--lm-width", "32",
                "--lm-vocab-size", "300", "--batch-size", "16", "--no-progress", "--seeds", "1") == 130
    err = capsys.readouterr().err
    assert "run the same command again (`make quickstart`) to continue" in err and "--resume" not in err


def test_quickstart_checks_its_data_before_any_work(tmp_path, capsys):
    from textebm.data.layout import write_dataset

    rows = [{"text": f"w{i}", "label": "a" if i % 2 else "b"} for i in range(10)]
    write_dataset(tmp_path / "d", {"train": rows, "dev": rows[:4] + [{"text": "x", "label": "c"}], "test": rows[:2]},
                  {"name": "d"})
    assert _run("quickstart", "--data", tmp_path / "d", "--out", tmp_path / "qs", "--no-progress") == 2
    assert "dev.jsonl" in capsys.readouterr().err and not (tmp_path / "qs").exists()


def test_quickstart_folder_made_before_a_setting_existed_keeps_the_value_it_was_made_with(tmp_path):
    """A folder whose settings.json predates --nce-warmup was trained with a constant NCE weight: a
    call with today's default (a warm-up) is refused, one with --nce-warmup 0 continues."""
    from textebm.data.layout import write_dataset
    from textebm.errors import TextebmError
    from textebm.classify.quickstart import QuickstartConfig, check_settings

    rows = [{"text": f"w{i}", "label": "a" if i % 2 else "b"} for i in range(10)]
    write_dataset(tmp_path / "d", {"train": rows, "dev": rows[:4], "test": rows[:2]}, {"name": "d"})
    out = tmp_path / "qs"
    out.mkdir()
    then = QuickstartConfig(nce_warmup=0.0, nce_weight=1.0)
    made = check_settings(out, then, "bf16", tmp_path / "d")
    old = {k: v for k, v in made.items() if k not in ("nce_weight", "nce_warmup", "energy_lr")}
    (out / "settings.json").write_text(json.dumps(old))  # as written before those options existed
    assert (QuickstartConfig().nce_warmup, QuickstartConfig().nce_weight) == (0.3, 0.5)
    with pytest.raises(TextebmError, match=r"nce_weight: 1.0 -> 0.5, nce_warmup: 0.0 -> 0.3"):
        check_settings(out, QuickstartConfig(), "bf16", tmp_path / "d")
    assert check_settings(out, then, "bf16", tmp_path / "d")["nce_warmup"] == 0.0


def test_quickstart_presets_size_the_noise_lm_by_precision_and_fine_tune_a_pretrained_one_once():
    """The defaults are the remedies grid's `lm4w05` cell (docs/classify.md): a noise LM from scratch
    for 4 epochs in bf16 (2 in fp32), NCE weight 0.5 warmed up over 30 % of the steps; a pretrained
    --noise-lm is fine-tuned for one epoch unless --lm-epochs says otherwise."""
    from textebm.classify.quickstart import QuickstartConfig, settle

    assert (QuickstartConfig().nce_weight, QuickstartConfig().nce_warmup) == (0.5, 0.3)
    assert settle(QuickstartConfig(), "bf16").lm_epochs == 4.0
    assert settle(QuickstartConfig(), "fp32").lm_epochs == 2.0
    assert (settle(QuickstartConfig(), "fp32").train_limit, settle(QuickstartConfig(), "bf16").train_limit) == \
        (1200, 2500)
    assert settle(QuickstartConfig(noise_lm="smollm2-135m"), "bf16").lm_epochs == 1.0
    assert settle(QuickstartConfig(noise_lm="smollm2-135m", lm_epochs=2.5), "bf16").lm_epochs == 2.5
    mine = QuickstartConfig(full=True)
    assert settle(mine, "bf16").noise_ratio == 8 and (mine.train_limit, mine.lm_epochs) == (None, None)  # a copy


def test_sentence_pairs_use_the_encoders_pair_input(tmp_path):
    """A `text_pair` is encoded as the encoder's pair input: [CLS] a [SEP] b [SEP] with segment ids
    0 then 1, which reach the encoder as token_type_ids; train and eval run end to end on pairs."""
    from tokenizers.processors import TemplateProcessing

    from textebm.classify.data import batch_inputs, encode
    from textebm.data.layout import write_dataset
    from textebm.models.build import SmallLMConfig, build_encoder
    from textebm.tokenizer import train_tokenizer

    rng = random.Random(5)
    rows = []
    for i in range(64):
        a, b = rng.choice(["positive", "negative"]), rng.choice(["positive", "negative"])
        rows.append({"text": _sentence(rng, a), "text_pair": _sentence(rng, b),
                     "label": "same" if a == b else "different"})
    write_dataset(tmp_path / "pairs", {"train": rows[:40], "dev": rows[40:60], "test": rows[60:]}, {"name": "pairs"})
    tok = train_tokenizer([r[f] for r in rows for f in ("text", "text_pair")], vocab_size=200, kind="wordpiece")
    cls, sep = tok.convert_tokens_to_ids("<s>"), tok.convert_tokens_to_ids("<sep>")
    tok._tokenizer.post_processor = TemplateProcessing(  # BERT's layout, as a pretrained encoder has it
        single="<s> $A <sep>", pair="<s> $A <sep> $B:1 <sep>:1", special_tokens=[("<s>", cls), ("<sep>", sep)])
    tok.model_input_names = ["input_ids", "token_type_ids", "attention_mask"]  # as BERT's tokenizer declares
    tok.init_kwargs["model_input_names"] = tok.model_input_names
    enc_dir = tmp_path / "encoder"
    build_encoder(SmallLMConfig(layers=1, width=32, heads=2, context=64), tok).save_pretrained(enc_dir)
    tok.save_pretrained(enc_dir)

    (ids, types), = encode(tok, [{"text": "great film", "text_pair": "dull plot"}], 64)
    n_a = len(tok("great film", add_special_tokens=False)["input_ids"])
    n_b = len(tok("dull plot", add_special_tokens=False)["input_ids"])
    assert ids[0] == cls and ids[n_a + 1] == sep and ids[-1] == sep and len(ids) == n_a + n_b + 3
    assert types == [0] * (n_a + 2) + [1] * (n_b + 1)
    assert batch_inputs([(ids, types)], 0)["token_type_ids"].tolist() == [types]

    assert _run("classify", "train", "--data", tmp_path / "pairs", "--encoder", enc_dir, "--out", tmp_path / "run",
                "--epochs", "2", "--batch-size", "8", "--no-progress", "--precision", "fp32") == 0
    assert _run("classify", "eval", "--model", tmp_path / "run", "--data", tmp_path / "pairs",
                "--out", tmp_path / "report", "--no-calibrators") == 0
    report = json.loads((tmp_path / "report" / "metrics.json").read_text())
    assert report["settings"]["runs"]["baseline"]["test_half"] == 10  # half of the 20 dev pairs
    assert np.isfinite(report["methods"]["baseline"]["nll"])


def test_reuse_takes_an_ebm_only_when_its_loss_settings_match(tmp_path):
    from textebm.classify.quickstart import STEP_INPUTS, ReuseSource

    here = {k: 1 for keys in STEP_INPUTS.values() for k in keys}
    src = ReuseSource(tmp_path, dict(here))
    src.match(here)
    assert set(src.steps) == set(STEP_INPUTS)
    src.match({**here, "energy_lr": 5e-4})  # only the scalar EBM has a head learning rate
    assert set(src.steps) == set(STEP_INPUTS) - {"ebm-scalar"}
    src.match({**here, "nce_warmup": 0.3})
    assert set(src.steps) == {"noise-lm", "noise", "baseline", "poscal"}
    src.match({**here, "noise_ratio": 4})  # new noise: every EBM trains again
    assert set(src.steps) == {"noise-lm", "baseline", "poscal"}


def test_reuse_replaces_an_unfinished_try_of_the_step(tmp_path):
    """A step this folder began and left unfinished (a killed run) is replaced by the finished copy."""
    from textebm.classify.quickstart import STEP_INPUTS, ReuseSource

    src, dst = tmp_path / "src" / "noise-lm", tmp_path / "out" / "noise-lm"
    src.mkdir(parents=True)
    (src / "model.safetensors").write_bytes(b"done")
    dst.mkdir(parents=True)
    (dst / "config.json").write_text("{}")  # what a killed noise-LM run leaves, with textebm's marker
    (dst / ".textebm-output.json").write_text('{"kind": "lm-run"}')
    foreign = tmp_path / "out" / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("a user's")
    settings = {k: 1 for k in STEP_INPUTS["noise-lm"]}
    reuse = ReuseSource(tmp_path / "src", settings)
    reuse.match(settings)
    assert reuse.take("noise-lm", src, dst, lambda p: (p / "model.safetensors").is_file())
    assert sorted(p.name for p in dst.iterdir()) == ["model.safetensors"]
    assert (src / "model.safetensors").read_bytes() == b"done"  # the source is left as it was
    assert not reuse.take("noise-lm", tmp_path / "nowhere", dst, lambda p: False)
    # a folder textebm did not write (no marker) is never deleted
    assert not reuse.take("noise-lm", src, foreign, lambda p: (p / "model.safetensors").is_file())
    assert (foreign / "notes.txt").read_text() == "a user's"


def test_quickstart_report_names_the_classes_of_a_folder_without_dataset_json(tmp_path):
    from textebm.classify.quickstart import dataset_labels

    (tmp_path / "train.jsonl").write_text('{"text": "a", "label": "pos"}\n{"text": "b", "label": "neg"}\n')
    assert dataset_labels(tmp_path, {}) == ["neg", "pos"]
    assert dataset_labels(tmp_path, {"labels": ["x", "y"]}) == ["x", "y"]


def test_the_quickstart_checks_the_labels_of_the_training_examples_its_runs_read(tmp_path):
    """--train-limit N: the runs train on the first N examples; a dev label only after them failed
    the evaluation after every model had trained (20 minutes at the real presets)."""
    from textebm.classify.quickstart import check_dataset
    from textebm.errors import InputError

    data = tmp_path / "late"
    data.mkdir()
    rows = [{"text": f"t{i}", "label": "pos" if i % 2 else "neg"} for i in range(8)]
    rows += [{"text": "t9", "label": "neutral"}]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "dev.jsonl").write_text(json.dumps({"text": "d", "label": "neutral"}) + "\n")
    check_dataset(data)
    with pytest.raises(InputError, match=r"dev.jsonl: labels \['neutral'\] do not occur"):
        check_dataset(data, train_limit=8)
