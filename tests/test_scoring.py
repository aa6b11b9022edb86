"""`textebm.scoring`: one-pass and masked-LM pseudo-log-likelihoods against their slow paths,
per-word sums by hand, and `textebm score` end to end with resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

from test_electric import _tiny_model
from textebm.cli import main
from textebm.models.cloze import save_cloze
from textebm.scoring.pll import cloze_scores, mlm_token_scores, mlm_token_scores_reference
from textebm.scoring.words import word_scores

TEXTS = ["w1 w7 w2", "w3 w8 w9 w10 w11 w4 w1", "w5", "w12 w2 w2 w6 w7"]


def test_electric_pll_is_the_sum_of_per_token_minus_energies_batched_or_not():
    model, tok = _tiny_model("electric")
    model.eval()
    batched = cloze_scores(model, tok, TEXTS, "electric", batch_size=4)
    single = cloze_scores(model, tok, TEXTS, "electric", batch_size=1)
    for text, b, s in zip(TEXTS, batched, single):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        x = torch.tensor([[model.spec.start_id, *ids, model.spec.end_id]])
        with torch.no_grad():
            e = model.token_scores(x, torch.ones_like(x))[0, 1:-1]
        assert b.token_ids == ids and len(b.scores) == len(ids)
        assert b.total == pytest.approx(-float(e.double().sum()), abs=1e-5)
        assert b.scores == pytest.approx(s.scores, abs=1e-5)  # padding changes nothing


def test_twotower_and_electra_scores_follow_their_definitions():
    from textebm.losses.electric import electra_token_log_prob, num_replaced

    model, tok = _tiny_model("electra")
    model.eval()
    text = TEXTS[1]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    x = torch.tensor([[model.spec.start_id, *ids, model.spec.end_id]])
    a = torch.ones_like(x)
    with torch.no_grad():
        lq = model.noise_log_probs(x, a).gather(-1, x[..., None])[0, 1:-1, 0]
        s = model.token_scores(x, a)[0, 1:-1]
    n = torch.tensor([len(ids)])
    expected = electra_token_log_prob(lq[None], s[None], n, num_replaced(n, 0.15))[0]
    assert cloze_scores(model, tok, [text], "electra")[0].scores == pytest.approx(expected.tolist(), abs=1e-5)
    assert cloze_scores(model, tok, [text], "twotower")[0].scores == pytest.approx(lq.tolist(), abs=1e-5)
    with pytest.raises(Exception, match="mlm"):
        cloze_scores(model, tok, [text], "mlm")


def test_masked_lm_pll_sub_batched_equals_one_mask_at_a_time():
    model, tok = _tiny_model("mlm")
    model.eval()
    ids = tok(TEXTS[1], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        ref = mlm_token_scores_reference(model, ids)
        for budget in (1, 9 * 3, 10_000):  # one copy per pass, three per pass, all at once
            assert mlm_token_scores(model, ids, budget) == pytest.approx(ref, abs=1e-5), budget
    assert math.fsum(ref) == pytest.approx(cloze_scores(model, tok, [TEXTS[1]], "mlm")[0].total, abs=1e-5)


def test_masked_lm_pll_passes_stay_within_the_token_budget_whatever_the_length():
    """A 400-token text and a 40-token one: every pass holds at most `token_budget` tokens and the
    output layer runs on one position per copy, so the largest tensors do not grow with n²."""
    model, _ = _tiny_model("mlm")
    model.spec.context = 1024
    model.eval()
    seen = []
    hidden, head = model.hidden, model.mlm_head.forward

    def spy_hidden(x, a):
        seen.append(("hidden", x.numel()))
        seen.append(("attention", x.shape[0] * x.shape[1] ** 2))  # score cells per head
        return hidden(x, a)

    def spy_head(h):
        seen.append(("head", h.shape[0] * h.shape[1]))
        return head(h)

    model.hidden, model.mlm_head.forward = spy_hidden, spy_head
    from textebm.models.build import SmallLMConfig, build_encoder

    # The tiny encoder takes 64 positions: give it 512 for the long text.
    enc = build_encoder(SmallLMConfig(layers=1, width=32, heads=2, context=512), type("T", (), {
        "bos_token_id": None, "eos_token_id": 3, "pad_token_id": 0, "__len__": lambda s: model.spec.vocab_size})())
    enc.pooler = None
    model.encoder = enc
    attention = {}
    with torch.no_grad():
        for n in (40, 400):
            seen.clear()
            out = mlm_token_scores(model, [7] * n, token_budget=2048)
            assert len(out) == n
            assert max(v for k, v in seen if k == "hidden") <= 2048
            assert max(v for k, v in seen if k == "head") <= 2048 // (n + 2) * 32 + 32
            attention[n] = max(v for k, v in seen if k == "attention")
    # within 64 x budget attention cells; the 400-token text goes one copy per pass (one copy's T^2
    # cells, the least possible; its activations, 402 tokens, are below the 40-token text's 40 x 42)
    assert attention[40] <= 2048 * 64 and attention[400] == 402 ** 2


def test_word_scores_by_hand():
    text = "New York's  cats purr"
    # a byte-level BPE split: "New", " York", "'s", " ", " cats", " pur", "r", then [eos] (empty span)
    offsets = [(0, 3), (3, 8), (8, 10), (10, 11), (11, 16), (16, 20), (20, 21), (21, 21)]
    scores = [-1.0, -2.0, -0.5, -0.25, -3.0, -4.0, -0.125, -7.0]
    words, ws, spans = word_scores(text, offsets, scores)
    assert words == ["New", "York's", "cats", "purr"]
    assert ws == [-1.0, -2.5, -3.0, -4.125]  # the lone space and [eos] belong to no word
    assert spans == [(0, 3), (4, 10), (12, 16), (17, 21)]


def test_causal_scores_in_text_order_for_both_directions(tmp_path):
    from test_lm_sampling import make_tiny_lm
    from textebm.lm.scoring import score_texts
    from textebm.models.load import load_lm
    from textebm.scoring.pll import causal_scores

    for direction in ("l2r", "r2l"):
        folder = make_tiny_lm(tmp_path / direction, direction=direction)
        model, tok, meta = load_lm(folder)
        texts = ["the cat sat", "a dog"]
        res = causal_scores(model, tok, meta, texts)
        ref = score_texts(model, tok, meta, texts)
        for t, r, q in zip(texts, res, ref):
            assert r.total == pytest.approx(q.logprob, abs=1e-6)
            assert r.token_ids[:-1] == tok(t, add_special_tokens=False)["input_ids"]  # text order
            assert r.offsets[-1] == (len(t), len(t))


def test_score_command_writes_scores_and_resumes(tmp_path, capsys, monkeypatch):
    model, tok = _tiny_model("electric")
    folder = tmp_path / "electric"
    save_cloze(model, tok, folder)
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(TEXTS * 5) + "\n")
    full = tmp_path / "full.jsonl"
    args = ["score", "--model", str(folder), "--input", str(inp), "--per-word", "--per-token", "--no-progress",
            "--chunk", "3", "--precision", "fp32"]
    assert main([*args, "--out", str(full)]) == 0
    rows = [json.loads(line) for line in full.read_text().splitlines()]
    assert len(rows) == 20 and rows[0]["method"] == "electric" and rows[2]["text"] == "w5"
    assert rows[0]["score"] == pytest.approx(sum(rows[0]["token_scores"]))
    assert rows[1]["words"] == TEXTS[1].split() and sum(rows[1]["word_scores"]) == pytest.approx(rows[1]["score"])
    # An interrupted run: two chunks (6 lines) written, then a seventh line and a torn eighth of the
    # third chunk; the rerun scores the third chunk again and agrees byte for byte.
    cut = tmp_path / "cut.jsonl"
    lines = full.read_text().splitlines(keepends=True)
    _interrupted(monkeypatch, [*args, "--out", str(cut)], chunks=2)
    partial = tmp_path / "cut.jsonl.partial"
    with open(partial, "a") as f:
        f.write("".join(lines[6:7]) + lines[7][:20])
    assert main([*args, "--out", str(cut)]) == 0
    assert cut.read_text() == full.read_text() and not partial.exists()
    # An existing output is never replaced without --overwrite.
    assert main([*args, "--out", str(full)]) == 2


def _interrupted(monkeypatch, argv: list[str], chunks: int) -> None:
    """Run `argv` and interrupt it (as Ctrl-C) after `chunks` chunks are scored."""
    import textebm.scoring.pll as pll

    calls = []
    for name in ("cloze_scores", "causal_scores"):
        real = getattr(pll, name)

        def flaky(*a, _real=real, **k):
            calls.append(1)
            if len(calls) > chunks:
                raise KeyboardInterrupt
            return _real(*a, **k)

        monkeypatch.setattr(pll, name, flaky)
    assert main(argv) == 130
    monkeypatch.undo()


def test_score_never_resumes_another_models_or_options_partial(tmp_path, capsys, monkeypatch):
    """A .partial records the model by content and the options that change a line: resuming with
    another model, with a model replaced at the same path, or with --per-word added is refused."""
    import shutil

    folders = {}
    for seed in (0, 1):
        model, tok = _tiny_model("electric")
        with torch.no_grad():  # a second model: the same shapes and config, other weights
            next(model.parameters()).add_(0.1 * seed)
        folders[seed] = tmp_path / f"m{seed}"
        save_cloze(model, tok, folders[seed])
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(TEXTS * 3) + "\n")
    out = tmp_path / "s.jsonl"
    args = ["score", "--input", str(inp), "--out", str(out), "--no-progress", "--chunk", "2", "--precision", "fp32"]
    _interrupted(monkeypatch, [*args, "--model", str(folders[0])], chunks=2)
    partial = tmp_path / "s.jsonl.partial"
    before = partial.read_bytes()
    capsys.readouterr()
    assert main([*args, "--model", str(folders[1])]) == 2
    err = capsys.readouterr().err
    assert str(partial) in err and "model_sha256" in err and "delete" in err
    assert main([*args, "--model", str(folders[0]), "--per-word"]) == 2
    assert "per_word: false -> true" in capsys.readouterr().err
    inp2 = tmp_path / "in2.txt"  # the same ids (line numbers), other texts
    inp2.write_text("\n".join(reversed(TEXTS * 3)) + "\n")
    assert main([*args[:2], str(inp2), *args[3:], "--out", str(out), "--model", str(folders[0])]) == 2
    assert "input_sha256" in capsys.readouterr().err
    shutil.rmtree(folders[0])  # another model at the same path
    shutil.copytree(folders[1], folders[0])
    assert main([*args, "--model", str(folders[0])]) == 2
    assert "model_sha256" in capsys.readouterr().err
    assert partial.read_bytes() == before and not out.exists()  # refused before any work


def test_score_refuses_an_output_that_is_its_input_or_another_output(tmp_path, capsys):
    model, tok = _tiny_model("electric")
    save_cloze(model, tok, tmp_path / "m")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    args = ["score", "--model", str(tmp_path / "m"), "--no-progress", "--precision", "fp32"]
    out = tmp_path / "s.jsonl"
    assert main([*args, "--input", str(inp), "--out", str(out)]) == 0
    original = inp.read_bytes()  # its input, named as --out: refused, even with --overwrite
    assert main([*args, "--input", str(inp), "--out", str(inp), "--overwrite"]) == 2
    assert "is the input of --input" in capsys.readouterr().err and inp.read_bytes() == original
    metrics = tmp_path / "metrics.json"  # a run's metrics (no marker beside it): never replaced
    metrics.write_text('{"eval_test": 1}')
    assert main([*args, "--input", str(inp), "--out", str(metrics), "--overwrite"]) == 2
    assert "not written by textebm" in capsys.readouterr().err and metrics.read_text() == '{"eval_test": 1}'
    assert main([*args, "--input", str(inp), "--out", str(out), "--overwrite"]) == 0  # its own output: replaced
    # --out and --html naming one file: refused before any work (the page was replaced by the JSONL).
    page = tmp_path / "x"
    assert main([*args, "--input", str(inp), "--out", str(page), "--html", str(page)]) == 2
    assert "names the same file as --out" in capsys.readouterr().err and not page.exists()


def test_a_text_too_long_is_named_by_file_and_line_for_every_model_kind(tmp_path, capsys):
    from test_lm_sampling import make_tiny_lm

    model, tok = _tiny_model("electric")
    save_cloze(model, tok, tmp_path / "electric")
    make_tiny_lm(tmp_path / "causal")
    inp = tmp_path / "in.txt"
    inp.write_text("w1 w2\n\nw3\n" + " ".join(["w5"] * 10_000) + "\nw4\n")  # the long text on line 4
    for folder in ("electric", "causal"):
        out = tmp_path / f"{folder}.jsonl"
        assert main(["score", "--model", str(tmp_path / folder), "--input", str(inp), "--out", str(out),
                     "--no-progress", "--chunk", "2"]) == 2
        err = capsys.readouterr().err
        assert f"{inp}:4: this text has 10000 tokens" in err, err
        assert not out.exists() and not (tmp_path / f"{folder}.jsonl.partial").exists()
