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
from textebm.scoring.pll import cloze_scores, mlm_token_scores, mlm_token_scores_many, mlm_token_scores_reference
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


def test_masked_lm_pll_of_several_texts_sharing_passes_equals_one_text_at_a_time():
    """Copies of texts of different lengths share passes (right-padded, masked out): each text's
    scores are the one-mask-at-a-time reference's, whatever the budget cuts."""
    model, tok = _tiny_model("mlm")
    model.eval()
    texts = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    assert len({len(t) for t in texts}) > 1  # several lengths, so passes mix texts and pad
    with torch.no_grad():
        refs = [mlm_token_scores_reference(model, ids) for ids in texts]
        for budget in (1, 40, 300, 10_000):
            got = mlm_token_scores_many(model, texts, budget)
            for g, r in zip(got, refs):
                assert g == pytest.approx(r, abs=1e-5), budget
    assert [s.total for s in cloze_scores(model, tok, TEXTS, "mlm", token_budget=300)] == pytest.approx(
        [math.fsum(r) for r in refs], abs=1e-4)


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
    import textebm.scoring.score_command as pll  # where the command looks the scorers up

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


@pytest.mark.parametrize("method", ["electric", "twotower", "mlm"])
def test_special_token_strings_in_a_text_are_scored_as_plain_text(method):
    """"<mask>", "</s>", "[SEP]" written in a text are its characters, not the model's framing or
    mask tokens (q gives those probability 0: the score was -inf)."""
    from textebm.scoring.pll import text_ids

    model, tok = _tiny_model("mlm" if method == "mlm" else "electric")
    model.eval()
    texts = ["w1 <mask> w2", "[SEP]", "w3 </s>", "<s>"]
    special = {model.spec.start_id, model.spec.end_id, model.spec.pad_id, model.spec.mask_id}
    scored = cloze_scores(model, tok, texts, method)
    for text, sc, ids in zip(texts, scored, text_ids(tok, texts, method)):
        assert sc.token_ids == ids and not special & set(ids), (text, tok.convert_ids_to_tokens(sc.token_ids))
        assert all(math.isfinite(x) for x in sc.scores) and math.isfinite(sc.total)
        assert "".join(text[a:b] for a, b in sc.offsets) == text.replace(" ", "")  # the spans cover the text


def test_bert_special_token_strings_are_plain_text_too():
    """The same with BERT's WordPiece ([MASK], [SEP]: MiniLM's tokenizer), offsets kept."""
    from transformers import BertTokenizer

    from textebm.scoring.pll import _encode

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[", "]", "the", "cat", "mask", "sep"]
    tok = BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    ids, offsets = _encode(tok, ["the [MASK] cat [SEP]"])
    assert tok.convert_ids_to_tokens(ids[0]) == ["the", "[", "mask", "]", "cat", "[", "sep", "]"]
    assert offsets[0] == [(0, 3), (4, 5), (5, 9), (9, 10), (11, 14), (15, 16), (16, 19), (19, 20)]


def test_score_checks_each_text_in_its_scored_form_before_writing(tmp_path, capsys):
    """The length limit holds for the text as scored (--normalize ptb splits "gonna" in two), and a
    text of no token (zero-width spaces) is refused as an empty one is: both by file and line,
    before any chunk is written."""
    model, tok = _tiny_model("electric")  # takes 62 tokens; an unknown word is one [unk]
    save_cloze(model, tok, tmp_path / "m")
    args = ["score", "--model", str(tmp_path / "m"), "--no-progress", "--chunk", "1", "--precision", "fp32"]
    grows = tmp_path / "grows.txt"
    grows.write_text("w1 w2\n" + " ".join(["gonna"] * 40) + "\n")  # 40 tokens as written, 80 in PTB form
    out = tmp_path / "g.jsonl"
    assert main([*args, "--input", str(grows), "--out", str(out)]) == 0  # as written: it fits
    assert main([*args, "--input", str(grows), "--out", str(out), "--normalize", "ptb", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert f"{grows}:2: this text has 80 tokens in the form of --normalize ptb; the model takes at most 62" in err
    assert not (tmp_path / "g.jsonl.partial").exists()
    zero = tmp_path / "zero.txt"
    zero.write_text("w1 w2\n\u200b\u200b\n")
    assert main([*args, "--input", str(zero), "--out", str(tmp_path / "z.jsonl")]) == 2
    assert f"{zero}:2: this text ('\\u200b\\u200b') has no token for the model's tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "z.jsonl").exists() and not (tmp_path / "z.jsonl.partial").exists()


# ---------------------------------------------------------------- --normalize, the text check, --threads


def test_score_normalize_scores_the_normalised_text_and_records_it(tmp_path, capsys, monkeypatch):
    model, tok = _tiny_model("electric")
    folder = tmp_path / "electric"
    save_cloze(model, tok, folder)
    upper, lower = tmp_path / "upper.txt", tmp_path / "lower.txt"
    upper.write_text("W1 W7 W2\nW5  W3.\n")
    lower.write_text("w1 w7 w2\nw5 w3.\n")
    args = ["score", "--model", str(folder), "--no-progress", "--precision", "fp32"]
    assert main([*args, "--input", str(lower), "--out", str(tmp_path / "lower.jsonl")]) == 0
    assert main([*args, "--input", str(upper), "--out", str(tmp_path / "asr.jsonl"), "--normalize", "asr"]) == 0
    plain = [json.loads(x) for x in (tmp_path / "lower.jsonl").read_text().splitlines()]
    asr = [json.loads(x) for x in (tmp_path / "asr.jsonl").read_text().splitlines()]
    assert "normalize" not in plain[0] and "input_text" not in plain[0]  # none: the rows as before
    assert [r["text"] for r in asr] == ["w1 w7 w2", "w5 w3"] and [r["input_text"] for r in asr] == ["W1 W7 W2",
                                                                                                     "W5  W3."]
    assert {r["normalize"] for r in asr} == {"asr"}
    assert asr[0]["score"] == plain[0]["score"]  # the same text scored
    # a partial file written with another --normalize is refused, not mixed in
    mixed = [*args, "--input", str(lower), "--out", str(tmp_path / "mixed.jsonl"), "--chunk", "1"]
    _interrupted(monkeypatch, mixed, chunks=1)
    capsys.readouterr()
    assert main([*mixed, "--normalize", "ptb"]) == 2
    assert 'normalize: "none" -> "ptb"' in capsys.readouterr().err
    # a text that normalisation empties is an error naming it, before any scoring
    dashes = tmp_path / "dashes.txt"
    dashes.write_text("w1\n-- !\n")
    assert main([*args, "--input", str(dashes), "--out", str(tmp_path / "d.jsonl"), "--normalize", "asr"]) == 2
    assert "'-- !'" in capsys.readouterr().err and not (tmp_path / "d.jsonl").exists()


def test_score_warns_with_figures_when_texts_are_unlike_the_training_text(tmp_path, caplog):
    model, tok = _tiny_model("electric")  # WordPiece learnt on lower-case "wN" words
    folder = tmp_path / "electric"
    save_cloze(model, tok, folder)
    inp = tmp_path / "in.txt"
    inp.write_text("W1 W7 W2\nw5 W3 w2\n")  # 4 of the 6 words unknown to the vocabulary (upper case)
    args = ["score", "--model", str(folder), "--input", str(inp), "--no-progress", "--precision", "fp32"]
    with caplog.at_level("WARNING"):
        assert main([*args, "--out", str(tmp_path / "a.jsonl")]) == 0
    assert "4 of 6 tokens (66.7 %) are the unknown token" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert main([*args, "--out", str(tmp_path / "b.jsonl"), "--normalize", "asr"]) == 0
    assert "unknown token" not in caplog.text


def test_text_check_figures_and_warnings_by_hand(tmp_path):
    from textebm.scoring.textcheck import check_texts, mismatch_warnings, tokenizer_figures, word_figures
    from textebm.tokenizer import train_tokenizer

    train = ["i did n't go", "it 's fine", "we do n't know", "they are n't here", "he did n't say it 's so"] * 20
    texts = ["I DIDN'T GO", "it's fine we do"]
    w = word_figures(texts)
    # DIDN'T and it's carry a clitic; DIDN'T and GO have capitals, throughout (I has one letter: not counted)
    assert w == {"texts": 2, "words": 7, "clitics_attached": 2, "clitics_alone": 0, "with_capitals": 2,
                 "all_capitals": 2}
    assert word_figures(train)["clitics_alone"] == 120 and word_figures(train)["words"] == 440
    bpe = train_tokenizer(train, vocab_size=300, kind="bpe")  # GPT-2's pre-split: " n't" is not one piece
    t = tokenizer_figures(texts, bpe)
    assert t["unknown"] == 0 and t["case_sensitive"] and not t["piece_for_nt"]
    assert mismatch_warnings(word_figures(["i did n't go"]), tokenizer_figures(["i did n't go"], bpe),
                             word_figures(train), "train.jsonl") == []  # texts in the training text's form
    msgs = mismatch_warnings(w, t, word_figures(train), "train.jsonl")
    assert len(msgs) == 2
    assert msgs[0].startswith("2 of 7 words (28.6 %) have a clitic attached") and "120 of its 440" in msgs[0]
    assert msgs[1].startswith("2 of 7 words (28.6 %) have capitals, but only 0 of the 440")
    # without the training text: no sign of split clitics; the vocabulary (less Ġ) has no capitals
    assert [m[:61] for m in mismatch_warnings(w, t)] == ["2 of 7 words (28.6 %) have capitals, but only 0.00 % "
                                                         "of the v"]
    # the training text is found through the run folder's config.json ("data": a folder with train.jsonl)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"text": x}) + "\n" for x in train))
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "config.json").write_text(json.dumps({"data": str(data)}))
    assert check_texts(texts, bpe, tmp_path / "run" / "model") == [
        m.replace("(train.jsonl)", f"({data / 'train.jsonl'})") for m in msgs]


def test_the_training_text_is_found_where_the_run_was_started_and_only_with_its_content(tmp_path, monkeypatch):
    """config.json records --data and --out as typed: a relative --data is read against the folder
    the run was started from (RUN less its --out), not the current one, and where the run recorded
    the content (inputs_sha256), another content is never taken for it."""
    from types import SimpleNamespace

    from textebm.scoring.textcheck import training_texts
    from textebm.train import input_hashes

    def dataset(folder, text):
        folder.mkdir(parents=True)
        (folder / "train.jsonl").write_text(json.dumps({"text": text}) + "\n")

    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    dataset(proj / "data", "i did n't go")
    dataset(elsewhere / "data", "unrelated text")  # the same relative path, other content
    monkeypatch.chdir(proj)
    sha = input_hashes(SimpleNamespace(data="data"))["data"]  # as the training recorded it
    run = proj / "runs" / "el"
    (run / "model").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"out": "runs/el", "data": "data", "inputs_sha256": {"data": sha}}))
    monkeypatch.chdir(elsewhere)
    assert training_texts(run / "model") == (proj / "data" / "train.jsonl", ["i did n't go"])
    # a run folder moved away from its dataset: the current folder's data only when its content is the run's
    moved = elsewhere / "moved"
    run.rename(moved)
    assert training_texts(moved / "model") is None
    (proj / "data").rename(elsewhere / "data2")
    (moved / "config.json").write_text(json.dumps({"out": "runs/el", "data": "data2", "inputs_sha256": {"data": sha}}))
    assert training_texts(moved / "model") == (elsewhere / "data2" / "train.jsonl", ["i did n't go"])
    # no recorded content: a relative --data is not looked up in the current folder
    (moved / "config.json").write_text(json.dumps({"out": "runs/el", "data": "data"}))
    assert training_texts(moved / "model") is None


def test_threads_sets_torchs_thread_count(tmp_path):
    model, tok = _tiny_model("electric")
    folder = tmp_path / "electric"
    save_cloze(model, tok, folder)
    inp = tmp_path / "in.txt"
    inp.write_text("w1 w2\n")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["score", "--model", str(folder), "--input", str(inp), "--out", str(tmp_path / "s.jsonl"),
                     "--no-progress", "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


RUNS_A_MODEL = [("score",), ("lm", "score"), ("lm", "eval"), ("lm", "sample"), ("negatives", "generate"),
                ("detect", "fit"), ("detect", "eval"), ("detect", "score"), ("detect", "threshold"),
                ("detect", "analyze"), ("detect", "matrix"), ("classify", "eval"), ("tag", "eval"),
                ("tag", "predict")]
# (the training commands apply --threads in the training loop, `textebm.train.setup_torch`, after
# their inputs are checked)


@pytest.mark.parametrize("command", RUNS_A_MODEL, ids=" ".join)
def test_every_command_that_runs_a_model_applies_threads_first(command, monkeypatch, capsys):
    """--threads N reaches the one shared `set_threads` before the command reads any file (the
    required options get placeholder values that no command could open)."""
    import dataclasses
    import importlib

    from textebm.cli import GROUPS
    from textebm.errors import TextebmError
    from textebm.options import cli_fields, field_default, flag_of

    module = importlib.import_module(GROUPS[command[0]][0])
    cls = module.COMMAND[0] if len(command) == 1 else module.COMMANDS[command[1]][0]
    argv = [*command]
    for f in cli_fields(cls):
        if field_default(f) is dataclasses.MISSING:
            value = f.metadata.get("choices", ["placeholder-that-is-no-file"])[0]
            argv += [value] if f.metadata.get("positional") else [flag_of(f), value]

    def reached(n):
        raise TextebmError(f"set_threads({n}) reached")

    from textebm.options import usable_cores

    n = usable_cores()  # the most --threads allows
    monkeypatch.setattr("torch.set_num_threads", reached)  # what the one shared set_threads calls
    assert main([*argv, "--threads", str(n)]) == 2
    assert f"set_threads({n}) reached" in capsys.readouterr().err
