"""Paper d from the command line on a tiny corpus: `residual ppl` and `residual generate` over a
base LM trained by `lm train` and a UniT energy trained by conditional NCE on untruncated
negatives (`negatives generate --top-k 0`, `detect train --loss bce --negatives random`), their
resume, and their errors (exit 2, nothing written)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from conftest import same, walking_world

from textebm.cli import main


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    base = walking_world(root)["base"]
    energy = root / "unit"
    assert main(["detect", "train", "--train", str(root / "train.jsonl"), "--val", str(root / "dev.jsonl"),
                 "--vocab", str(root / "vocab"), "--energy", "unitransf", "--init", str(base), "--loss", "bce",
                 "--negatives", "random", "--max-steps", "6", "--batch-size", "8", "--out", str(energy),
                 "--no-progress"]) == 0
    return {"root": root, "data": root / "data", "vocab": root / "vocab", "base": base, "energy": energy}


def _ppl(world, out, *extra):
    return main(["residual", "ppl", "--base", str(world["base"]), "--energy", str(world["energy"]), "--data",
                 str(world["data"]), "--windows", "3", "--samples", "6", "--out", str(out), "--no-progress", *extra])


def test_ppl_bounds_equal_the_library_and_bracket_the_base_lm_terms(world, tmp_path):
    from textebm.models.load import load_energy, load_lm
    from textebm.residual import bounds
    from textebm.residual.joint import BaseLM, JointEnergy

    out = tmp_path / "ppl"
    assert _ppl(world, out, "--positions", "1", "--position-samples", "4") == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["windows"] == 3 and m["tokens"] == 3 * 6 and m["prefix_len"] == 14 and m["length"] == 6
    model = m["models"][0]
    assert model["joint_ppl_lower"] <= model["joint_ppl_upper"]
    assert [g["samples"] for g in model["gap_by_samples"]] == [2, 4, 6]
    # the command's numbers are the library's on the same windows and seeds
    rows = [json.loads(x) for x in (out / "windows.jsonl").read_text().splitlines()]
    wins = [r for r in rows if r["part"] == "window"]
    e_model, spec, tok, vocab = load_energy(world["energy"])
    lm, ltok, meta = load_lm(world["base"])
    base, en = BaseLM(lm, ltok, meta, vocab), JointEnergy(e_model, spec, tok, vocab)
    from textebm.detection.negative_sampling import windows_of

    w = windows_of(world["data"], "test", vocab, 20, [14], stride=20, seed=0, max_windows=3)[0]
    direct = bounds.window_bounds(base, en, w.key, w.ids, 14, 6, 0)
    assert wins[0]["key"] == w.key
    got = bounds.WindowBounds.from_row(wins[0]["terms"][0])
    assert got.estimates[6] == pytest.approx(direct.estimates[6], abs=same(1e-9))
    assert math.isclose(m["base_ppl"], math.exp(-sum(sum(r["terms"][0]["lp_lm"]) for r in wins) / 18), rel_tol=1e-12)
    pos = next(r for r in rows if r["part"] == "position")["per_energy"][0]["positions"]
    assert len(pos) == 6 and "exact" in pos[-1]
    assert (out / "report.md").is_file() and (out / "gap.png").is_file() and (out / "positions.png").is_file()
    assert not (tmp_path / "ppl.partial").exists()


def test_ppl_resumes_from_its_partial_rows_with_the_same_numbers(world, tmp_path, monkeypatch):
    from textebm.residual import bounds

    full = tmp_path / "full"
    assert _ppl(world, full) == 0
    calls = {"n": 0}
    real = bounds.window_bounds_many

    def dies_on_the_second(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(bounds, "window_bounds_many", dies_on_the_second)
    out = tmp_path / "resumed"
    assert _ppl(world, out) == 130  # interrupted
    assert not out.exists() and (tmp_path / "resumed.partial").is_file()
    monkeypatch.setattr(bounds, "window_bounds_many", real)
    assert _ppl(world, out, "--batch-size", "5", "--chunk", "4") == 0  # neither changes a number
    a = json.loads((full / "metrics.json").read_text())["models"][0]
    b = json.loads((out / "metrics.json").read_text())["models"][0]
    assert a["joint_ppl_lower"] == pytest.approx(b["joint_ppl_lower"], rel=same(1e-9))
    assert a["joint_ppl_upper"] == pytest.approx(b["joint_ppl_upper"], rel=same(1e-9))


@pytest.fixture(scope="module")
def second(world):
    """A second UniT energy: the same recipe, another seed (other weights)."""
    out = world["root"] / "unit-s1"
    assert main(["detect", "train", "--train", str(world["root"] / "train.jsonl"), "--val",
                 str(world["root"] / "dev.jsonl"), "--vocab", str(world["vocab"]), "--energy", "unitransf", "--init",
                 str(world["base"]), "--loss", "bce", "--negatives", "random", "--max-steps", "6", "--batch-size", "8",
                 "--seed", "1", "--out", str(out), "--no-progress"]) == 0
    return out


def test_ppl_reuse_takes_the_rows_already_scored_and_changes_no_number(world, second, tmp_path, monkeypatch, capsys):
    """--reuse: an energy that a finished run scored (same base LM, windows, samples, seed, precision)
    is taken from it; the table equals the one that scores every energy, to the last digit."""
    from textebm.residual import bounds

    both = [str(world["energy"]), str(second)]
    pos = ["--positions", "1", "--position-samples", "4"]
    assert _ppl(world, tmp_path / "all", "--energy", *both, *pos) == 0
    assert _ppl(world, tmp_path / "one", "--energy", str(second), *pos) == 0
    scored, real = [], bounds.window_bounds_many
    monkeypatch.setattr(bounds, "window_bounds_many", lambda b, es, *a, **k: scored.append(len(es)) or real(b, es, *a, **k))
    out = tmp_path / "reused"
    assert _ppl(world, out, "--energy", *both, *pos, "--reuse", str(tmp_path / "one")) == 0
    assert scored == [1, 1, 1]  # three windows, one energy scored in each: the other was taken
    assert (out / "windows.jsonl").read_text() == (tmp_path / "all" / "windows.jsonl").read_text()
    m, ref = (json.loads((d / "metrics.json").read_text()) for d in (out, tmp_path / "all"))
    for k in ("models", "differences", "positions", "base_ppl", "identity"):
        assert m[k] == ref[k], k
    assert m["reused"] == [{"energy": ref["models"][1]["energy"], "from": str(tmp_path / "one")}] and ref["reused"] == []
    assert "(`--reuse`): unit-s1 from" in (out / "report.md").read_text()
    # every energy reused: nothing is sampled at all
    scored.clear()
    assert _ppl(world, tmp_path / "none", "--energy", str(second), *pos, "--reuse", str(tmp_path / "all")) == 0
    assert scored == []
    assert json.loads((tmp_path / "none" / "metrics.json").read_text())["models"] == ref["models"][1:]
    # other inputs, or a folder that is not a ppl output: exit 2, nothing written
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert _ppl(world, bad, "--energy", *both, "--samples", "4", "--reuse", str(tmp_path / "one")) == 2
    err = capsys.readouterr().err
    assert "--reuse" in err and "samples: 6 -> 4" in err and "positions: 1 -> 0" in err
    assert _ppl(world, bad, "--energy", *both, "--reuse", str(world["energy"])) == 2
    assert "not a finished `residual ppl` output" in capsys.readouterr().err
    edited = tmp_path / "edited"
    shutil.copytree(tmp_path / "one", edited)
    lines = (edited / "windows.jsonl").read_text().splitlines()
    (edited / "windows.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # a row cut away by hand
    assert _ppl(world, bad, "--energy", *both, *pos, "--reuse", str(edited)) == 2
    assert "windows.jsonl changed since `residual ppl` wrote it" in capsys.readouterr().err
    assert not bad.exists() and not (tmp_path / "bad.partial").exists()


def test_generate_resamples_by_energy_and_reports(world, tmp_path):
    out = tmp_path / "gen"
    args = ["residual", "generate", "--base", str(world["base"]), "--energy", str(world["energy"]), "--data",
            str(world["data"]), "--windows", "3", "--n", "5", "--top-k", "4", "--no-progress"]
    assert main([*args, "--out", str(out), "--judge", str(world["energy"])]) == 0
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["ids"]["joint"]) == 6 and len(r["ids"]["base"]) == 6 for r in rows)
    assert all(1.0 <= r["ess"] <= 5.0 for r in rows)
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["groups"]) == {"joint", "base", "real"} and "judge" in m
    assert (out / "report.md").read_text().startswith("# Joint sampling") and (out / "density.png").is_file()
    # figure 3's two panels: each group's scores under the base LM and under the joint model (log P_LM − E),
    # and each group's difference of means from the real continuations under both
    assert all(len(g["energy"]) == 3 for g in m["groups"].values())
    text = (out / "report.md").read_text()
    assert "under the base LM and under the joint model (figure 3)" in text and "mean − real's, joint model" in text
    joint_gap = np.mean(np.subtract(m["groups"]["joint"]["lm_logprob"], m["groups"]["joint"]["energy"])) - np.mean(
        np.subtract(m["groups"]["real"]["lm_logprob"], m["groups"]["real"]["energy"]))
    assert f"{joint_gap:+.2f}" in text
    again = tmp_path / "again"
    assert main([*args, "--out", str(again), "--batch-size", "2"]) == 0
    rows2 = [json.loads(x) for x in (again / "generations.jsonl").read_text().splitlines()]
    assert [r["ids"] for r in rows2] == [r["ids"] for r in rows]  # seeded per prefix, not per batch


@pytest.mark.parametrize("extra, names", [
    (["--samples", "1"], "--samples"),
    (["--prefix-len", "12"], "--prefix-len 12"),
    (["--length", "4"], "--length"),
    (["--position-samples", "3"], "--position-samples"),
    (["--bootstrap", "-1"], "--bootstrap"),
])
def test_ppl_bad_options_exit_2_and_write_nothing(world, tmp_path, capsys, extra, names):
    out = tmp_path / "o"
    assert _ppl(world, out, *extra) == 2
    assert names in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "o.partial").exists()


def test_a_base_lm_of_another_vocabulary_is_refused(world, tmp_path, capsys):
    other = tmp_path / "other"
    assert main(["lm", "train", "--data", str(world["data"]), "--vocab-size", "280", "--layers", "1", "--width", "16",
                 "--heads", "2", "--context", "48", "--chunk", "32", "--max-steps", "1", "--batch-size", "4",
                 "--out", str(other), "--no-progress", "--eval-split", ""]) == 0
    out = tmp_path / "o"
    assert main(["residual", "ppl", "--base", str(other), "--energy", str(world["energy"]), "--data",
                 str(world["data"]), "--samples", "2", "--out", str(out), "--no-progress"]) == 2
    assert "vocabulary" in capsys.readouterr().err and not out.exists()


def test_an_energy_of_another_lms_negatives_or_precision_is_refused(world, tmp_path, capsys):
    """One P_LM (issue 35): the energy's training negatives must come from --base (by content: the
    same vocabulary, other weights is refused) and from the precision the joint model runs in."""
    other = tmp_path / "other"
    assert main(["lm", "train", "--data", str(world["data"]), "--tokenizer", str(world["vocab"]), "--layers", "1",
                 "--width", "32", "--heads", "2", "--context", "48", "--chunk", "32", "--max-steps", "2",
                 "--batch-size", "8", "--seed", "1", "--out", str(other), "--no-progress", "--eval-split", ""]) == 0
    out = tmp_path / "o"
    assert main(["residual", "ppl", "--base", str(other), "--energy", str(world["energy"]), "--data",
                 str(world["data"]), "--samples", "2", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "another LM than --base" in err and "train.jsonl" in err and not out.exists()
    assert _ppl(world, out, "--precision", "bf16") == 2
    err = capsys.readouterr().err
    assert "--precision bf16" in err and "drew in fp32" in err and not out.exists()
    assert main(["residual", "generate", "--base", str(other), "--energy", str(world["energy"]), "--data",
                 str(world["data"]), "--n", "2", "--out", str(out), "--no-progress"]) == 2
    assert "another LM than --base" in capsys.readouterr().err and not out.exists()


def test_nan_energies_stop_with_exit_2_and_nothing_written(world, tmp_path, capsys, monkeypatch):
    from textebm.residual.joint import JointEnergy

    real = JointEnergy.continuation_energies
    monkeypatch.setattr(JointEnergy, "continuation_energies",
                        lambda self, *a, **k: np.full_like(real(self, *a, **k), np.nan))
    out = tmp_path / "o"
    assert _ppl(world, out) == 2
    assert "NaN" in capsys.readouterr().err and not out.exists() and not (tmp_path / "o.partial").exists()
    assert main(["residual", "generate", "--base", str(world["base"]), "--energy", str(world["energy"]), "--data",
                 str(world["data"]), "--windows", "2", "--n", "3", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "finite energies" in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "o.partial").exists()


def test_unique_ngram_ratios_by_hand():
    from textebm.residual.diversity import ngram_ratios, set_unique_ngram_ratio, unique_ngram_ratio

    seqs = [[1, 2, 1, 2, 1], [3, 3, 3]]
    # [1 2 1 2 1]: unigrams 2 distinct of 5, bigrams {12, 21} 2 of 4; [3 3 3]: 1 of 3, 1 of 2
    assert unique_ngram_ratio(seqs, 1) == pytest.approx((2 / 5 + 1 / 3) / 2)
    assert unique_ngram_ratio(seqs, 2) == pytest.approx((2 / 4 + 1 / 2) / 2)
    assert unique_ngram_ratio(seqs, 4) == pytest.approx(2 / 2)  # only the first is long enough: 121 212 distinct
    assert unique_ngram_ratio([[1]], 2) is None
    assert set(ngram_ratios(seqs)) == {f"{k}_{n}gram" for k in ("unique", "set_unique") for n in (1, 2, 3, 4)}
    # over the whole set: unigrams {1, 2, 3} of 8; bigrams {12, 21, 33} of 6; the same phrase for
    # every prefix scores low there while each sequence alone looks varied
    assert set_unique_ngram_ratio(seqs, 1) == pytest.approx(3 / 8)
    assert set_unique_ngram_ratio(seqs, 2) == pytest.approx(3 / 6)
    same = [[5, 6, 7, 8]] * 10
    assert unique_ngram_ratio(same, 2) == 1.0 and set_unique_ngram_ratio(same, 2) == pytest.approx(3 / 30)
    assert set_unique_ngram_ratio([[1]], 2) is None


def test_ppl_compares_other_lms_on_the_same_tokens(world, tmp_path):
    """--compare scores a RALM (and any causal LM) under the base LM's rule on the same tokens."""
    ralm = tmp_path / "ralm"
    assert main(["lm", "train", "--data", str(world["data"]), "--residual-of", str(world["base"]), "--layers", "1",
                 "--width", "16", "--heads", "2", "--context", "48", "--chunk", "32", "--max-steps", "3",
                 "--batch-size", "8", "--out", str(ralm), "--no-progress", "--eval-split", ""]) == 0
    out = tmp_path / "ppl"
    assert _ppl(world, out, "--compare", str(world["base"]), str(ralm), "--samples", "2") == 0
    m = json.loads((out / "metrics.json").read_text())
    same, r = m["compare"]
    assert same["ppl"] == pytest.approx(m["base_ppl"], rel=1e-9) and same["tokens"] == m["tokens"]
    assert r["tokens"] == m["tokens"] and r["ppl"] != pytest.approx(m["base_ppl"], rel=1e-6)
    assert "ralm" in (out / "report.md").read_text()


def test_ppl_gives_a_paired_interval_for_every_difference(world, tmp_path):
    """--bootstrap: joint vs base, vs each --compare LM, and energy vs energy, each with its 95 %
    interval over the test windows from the upper and the lower perplexity, log Z's gap beside it,
    whether it can be told from 0, in metrics.json and report.md; the same numbers on a second run."""
    out = tmp_path / "ppl"
    args = ["--energy", str(world["energy"]), str(world["energy"]), "--compare", str(world["base"]), "--samples",
            "2", "--bootstrap", "200"]
    assert _ppl(world, out, *args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["bootstrap"]["resamples"] == 200 and m["bootstrap"]["seed"] == 0
    diffs = m["differences"]
    joint = [d["a"] for d in diffs[:2]]
    assert [(d["a"], d["b"]) for d in diffs] == [(joint[0], "base LM"), (joint[0], "base"), (joint[1], "base LM"),
                                                 (joint[1], "base"), (joint[0], joint[1])]
    model = m["models"][0]
    first = diffs[0]
    assert first["upper"]["diff"] == pytest.approx(model["joint_ppl_upper"] - m["base_ppl"], rel=1e-9)
    assert first["lower"]["diff"] == pytest.approx(model["joint_ppl_lower"] - m["base_ppl"], rel=1e-9)
    assert first["gap_a"] == pytest.approx(model["joint_ppl_upper"] - model["joint_ppl_lower"], rel=1e-9)
    for d in diffs:
        for bound in ("upper", "lower"):
            i = d[bound]
            assert i["lo"] <= i["hi"]
            assert i["excludes_zero"] == (i["lo"] > 0 or i["hi"] < 0)
        assert isinstance(d["can_tell_from_zero"], bool)
    same = diffs[-1]  # one energy against itself: 0 on every resample, so never told from 0
    assert same["upper"]["lo"] == same["upper"]["hi"] == 0.0 and same["can_tell_from_zero"] is False
    text = (out / "report.md").read_text()
    assert "## Differences, with 95 % intervals over the test windows" in text and "can tell from 0" in text
    assert "200 paired bootstrap resamples" in text
    again = tmp_path / "again"
    assert _ppl(world, again, *args) == 0
    assert json.loads((again / "metrics.json").read_text())["differences"] == diffs  # seeded
    off = tmp_path / "off"
    assert _ppl(world, off, "--samples", "2", "--bootstrap", "0") == 0
    d = json.loads((off / "metrics.json").read_text())["differences"][0]
    assert d["upper"]["lo"] is None and d["can_tell_from_zero"] is None
    assert "--bootstrap 0" in (off / "report.md").read_text()


def test_generate_continues_the_prefixes_of_a_users_file(world, tmp_path):
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("the nation shall build roads and schools for every citizen while congress votes on the budget\n"
                        "war and peace in our time the nation shall build roads and schools for every citizen\n")
    out = tmp_path / "gen"
    assert main(["residual", "generate", "--base", str(world["base"]), "--energy", str(world["energy"]), "--prefixes",
                 str(prefixes), "--n", "4", "--top-k", "0", "--out", str(out), "--no-progress"]) == 0
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert [r["key"] for r in rows] == ["0", "1"] and all("real" not in r for r in rows)
    assert all(len(r["ids"]["prefix"]) == 14 and len(r["ids"]["joint"]) == 6 for r in rows)  # the last p tokens
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["groups"]) == {"joint", "base"}


# ---------------------------------------------------------------- residual repetitions (table 3)


def _rep(world, out, *extra):
    return main(["residual", "repetitions", "--base", str(world["base"]), "--energy", str(world["energy"]), "--data",
                 str(world["data"]), "--windows", "12", "--examples", "3", "--candidates", "4", "--completions", "4",
                 "--bootstrap", "200", "--out", str(out), "--no-progress", *extra])


def test_repetitions_writes_table_3_with_the_librarys_numbers(world, tmp_path):
    """The base LM's own continuations searched for a repeated token; at each, the command's numbers
    are `next_token_joint`'s on the same context and seed; metrics.json, examples.jsonl and a report
    shaped like table 3; the same numbers at another batch and chunk size."""
    from textebm.models.load import load_energy, load_lm
    from textebm.residual import bounds
    from textebm.residual.joint import BaseLM, JointEnergy
    from textebm.seeds import derive_seed

    out = tmp_path / "rep"
    assert _rep(world, out) == 0
    m = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(x) for x in (out / "examples.jsonl").read_text().splitlines()]
    assert m["source"] == "sample" and m["top_k"] == 10 and m["precision"] == "fp32"
    assert len(m["examples"]) == len(rows) == 3 and m["windows_searched"] >= 3
    for r, ex in zip(rows, m["examples"]):
        ctx = r["context"]
        assert r["token"] in ctx and len(ctx) == 14 + r["position"] - 1 and ex["token_id"] == r["token"]
        assert r["continuation"][r["position"] - 1] == r["token"]
        assert r["token"] not in r["continuation"][:r["position"] - 1] or r["position"] > 1  # its first repetition
        for model in ("base", "joint"):
            assert 1 <= len(ex[model]) <= 5
            ps = [c["p"] for c in ex[model]]
            assert ps == sorted(ps, reverse=True) and sum(ps) <= 1 + 1e-9
        assert ex["log_ratio"] == pytest.approx(math.log(ex["p_token"]["joint"] / ex["p_token"]["lm_candidates"]))
    s = m["summary"]
    assert s["examples"] == 3 and s["lowered"] + s["raised"] <= 3 and s["lo"] <= s["mean_log_ratio"] <= s["hi"]
    assert s["lowered"] == sum(ex["log_ratio"] < 0 for ex in m["examples"])
    # the library on the first example, same seed: the same terms
    e_model, spec, tok, vocab = load_energy(world["energy"])
    lm, ltok, meta = load_lm(world["base"])
    base, en = BaseLM(lm, ltok, meta, vocab), JointEnergy(e_model, spec, tok, vocab)
    r = rows[0]
    nt = bounds.next_token_joint(base, en, r["context"], 20 - len(r["context"]) - 1, 4, 4,
                                 derive_seed(0, r["key"], "joint"), include=[r["token"]])
    assert nt.candidates == r["terms"]["candidates"]
    np.testing.assert_allclose(nt.log_z, r["terms"]["log_z"], rtol=0, atol=same(1e-9))
    text = (out / "report.md").read_text()
    assert text.startswith("# P(x_t | x_<t) on repetitions (table 3)")
    assert "| Context x_<t" in text and f"in {s['lowered']} of 3 examples" in text
    assert not (tmp_path / "rep.partial").exists()
    again = tmp_path / "again"
    assert _rep(world, again, "--batch-size", "3", "--chunk", "3") == 0
    _same_examples(json.loads((again / "metrics.json").read_text())["examples"], m["examples"])  # seeded per example


def _same_examples(a: list[dict], b: list[dict]) -> None:
    """The same examples, candidates and ranks; probabilities equal to fp32's batching noise."""
    assert [(x["key"], x["token_id"], [c["id"] for c in x["base"]]) for x in a] == \
        [(x["key"], x["token_id"], [c["id"] for c in x["base"]]) for x in b]
    for x, y in zip(a, b):
        assert [c["p"] for c in x["joint"]] == pytest.approx([c["p"] for c in y["joint"]], rel=1e-5)
        assert x["log_ratio"] == pytest.approx(y["log_ratio"], abs=1e-5)


def test_repetitions_resume_and_the_real_continuations(world, tmp_path, monkeypatch):
    from textebm.residual import bounds

    full = tmp_path / "full"
    assert _rep(world, full, "--source", "real", "--completions", "2") == 0
    m = json.loads((full / "metrics.json").read_text())
    assert m["source"] == "real" and m["top_k"] is None and len(m["examples"]) == 3
    real = bounds.next_token_joint
    calls = {"n": 0}

    def dies_on_the_second(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(bounds, "next_token_joint", dies_on_the_second)
    out = tmp_path / "resumed"
    assert _rep(world, out, "--source", "real", "--completions", "2") == 130
    assert not out.exists() and (tmp_path / "resumed.partial").is_file()
    monkeypatch.setattr(bounds, "next_token_joint", real)
    assert _rep(world, out, "--source", "real", "--completions", "2", "--completions", "3") == 2  # other settings
    assert _rep(world, out, "--source", "real", "--completions", "2") == 0
    _same_examples(json.loads((out / "metrics.json").read_text())["examples"], m["examples"])
    resumed = json.loads((out / "metrics.json").read_text())
    assert _rep(world, out, "--source", "real", "--completions", "2") == 2  # --out holds an output
    assert _rep(world, out, "--source", "real", "--completions", "2", "--overwrite") == 0
    again = json.loads((out / "metrics.json").read_text())
    assert again["examples"] == resumed["examples"] and again["summary"] == resumed["summary"]  # same seed


@pytest.mark.parametrize("extra, names", [
    (["--candidates", "0"], "--candidates"),
    (["--candidates", "100000"], "--candidates 100000"),
    (["--completions", "1"], "--completions"),
    (["--source", "real", "--top-k", "3"], "--top-k"),
    (["--precision", "bf16"], "drew in fp32"),
])
def test_repetitions_bad_options_exit_2_and_write_nothing(world, tmp_path, capsys, extra, names):
    out = tmp_path / "o"
    assert _rep(world, out, *extra) == 2
    assert names in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "o.partial").exists()


def test_repetitions_without_a_repetition_exit_2_naming_the_data(world, tmp_path, capsys):
    """A test split of 36 distinct characters the corpus never merges (36 distinct byte-level
    tokens): no real continuation repeats a token of its window."""
    from textebm.data.layout import write_dataset

    rows = [{"text": "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "doc": "d0"}]
    data = tmp_path / "distinct"
    write_dataset(data, {"train": rows, "dev": rows, "test": rows}, {"name": "distinct"})
    out = tmp_path / "o"
    assert main(["residual", "repetitions", "--base", str(world["base"]), "--energy", str(world["energy"]), "--data",
                 str(data), "--source", "real", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--data {data}: no token of the real continuations" in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "o.partial").exists()


def test_negatives_of_the_generators_own_training_text_are_warned_about(world, tmp_path, caplog):
    """The base LM fits its train split better than new text: windows cut from it get a warning
    that names the split and what to use instead; the dev split, which it did not train on, none."""
    args = ["negatives", "generate", "--data", str(world["data"]), "--generator", str(world["base"]), "--vocab",
            str(world["vocab"]), "--length", "20", "--contexts", "14", "--k", "1", "--max-windows", "2",
            "--no-progress"]
    warned = []
    for split in ("train", "dev"):
        caplog.clear()
        with caplog.at_level("WARNING", logger="textebm.detection.negatives"):
            assert main([*args, "--split", split, "--out", str(tmp_path / f"{split}.jsonl")]) == 0
        warned.append([r.getMessage() for r in caplog.records if "was trained on" in r.getMessage()])
    assert len(warned[0]) == 1 and "--split train" in warned[0][0] and "--split dev" in warned[0][0]
    assert warned[1] == []
