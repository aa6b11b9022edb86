"""`textebm rerank`: n-best reading, corpus WER, lambda chosen on dev only, and the command's files.

The n-best lists and text scores are made by hand so that every choice can be worked out on
paper: hypothesis i wins at lambda when asr_i + lambda * text_i is the largest.
"""

from __future__ import annotations

import json
import re
import random
from pathlib import Path

import numpy as np
import pytest

from textebm.cli import main
from textebm.data.nbest import read_nbest
from textebm.errors import InputError, TextebmError
from textebm.scoring.rerank import (PAPER_GRID, WIDE_GRID, choose_lambda, corpus_wer, evaluate,
                                    paired_wer_diff, prepare, read_score_files, rerank_index, wer_curve,
                                    word_edits)

# dev: d1 is fixed by lambda > 1/3 (hyp_1 -2 - 5l beats hyp_2 -1 - 8l), d2 is broken by lambda > 0.62
# (hyp_2 -2.24 - 4l beats hyp_1 -1 - 6l): dev WER is 0 exactly for 1/3 < lambda <= 0.62, so 0.35.
DEV = {
    "d1": {"ref": "the cat sat",
           "hyp_1": {"text": "the cat sat", "score": -2.0},
           "hyp_2": {"text": "the cap sat", "score": -1.0}},
    "d2": {"ref": "a dog ran",
           "hyp_1": {"text": "a dog ran", "score": -1.0},
           "hyp_2": {"text": "a dog ran far", "score": -2.24}},
}
# test: t1 is fixed only by lambda > 0.85 (hyp_2 -2.7 - 7l beats hyp_1 -1 - 9l), t2 by lambda > 0.25
# (hyp_2 -1.5 - 4l beats hyp_1 -1 - 6l). The best test lambda (>= 0.9) is not dev's 0.35.
TEST = {
    "t1": {"ref": "we went home",
           "hyp_1": {"text": "we want home", "score": -1.0},
           "hyp_2": {"text": "we went home", "score": -2.7}},
    "t2": {"ref": "i see",
           "hyp_1": {"text": "eye see", "score": -1.0},
           "hyp_2": {"text": "i see", "score": -1.5}},
}
TEXT_SCORES = {"the cat sat": -5.0, "the cap sat": -8.0, "a dog ran": -6.0, "a dog ran far": -4.0,
               "we want home": -9.0, "we went home": -7.0, "eye see": -6.0, "i see": -4.0}



def _cells(markdown: str) -> str:
    """The report with each table cell's padding taken away: "|  a   | 1 |" -> "| a | 1 |"."""
    return re.sub(r" *\| *", " | ", markdown).replace("\n | ", "\n| ")

def write_nbest(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    return path


def write_scores(path: Path, scores: dict[str, float], method: str | None = "electric") -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, (text, score) in enumerate(scores.items()):
            row = {"id": str(i), "text": text, "score": score, "n_tokens": len(text.split())}
            if method is not None:
                row["method"] = method
            f.write(json.dumps(row) + "\n")
    return path


def _items(tmp_path: Path, dev: dict, test: dict):
    d = prepare(read_nbest(write_nbest(tmp_path / "dev.json", dev)))
    t = prepare(read_nbest(write_nbest(tmp_path / "test.json", test)))
    scores = {"electric": ([np.array([TEXT_SCORES[x] for x in it.texts]) for it in d],
                           [np.array([TEXT_SCORES[x] for x in it.texts]) for it in t])}
    return d, t, scores


# ---------------------------------------------------------------- WER


def _levenshtein(a: list[str], b: list[str]) -> int:
    """Plain dynamic programme over words: the reference for jiwer's counts."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def test_word_edits_match_hand_counted_edits():
    refs = ["the cat sat on the mat", "hello world", "a b c d", "", "same words here"]
    hyps = ["the cat sit on mat", "hello big world", "", "x", "same words here"]
    # sat->sit and a deleted "the": 2; "big" inserted: 1; four deletions: 4; one insertion: 1; none: 0
    assert word_edits(refs, hyps) == [2, 1, 4, 1, 0]
    words = sum(len(r.split()) for r in refs)  # 6 + 2 + 4 + 0 + 3
    assert words == 15
    assert corpus_wer(sum(word_edits(refs, hyps)), words) == pytest.approx(8 / 15)


def test_word_edits_match_an_independent_levenshtein():
    rng = random.Random(0)
    vocab = ["a", "b", "c", "d", "e"]
    refs = [" ".join(rng.choices(vocab, k=rng.randint(0, 8))) for _ in range(200)]
    hyps = [" ".join(rng.choices(vocab, k=rng.randint(0, 8))) for _ in range(200)]
    assert word_edits(refs, hyps) == [_levenshtein(r.split(), h.split()) for r, h in zip(refs, hyps)]


def test_corpus_wer_refuses_no_reference_words():
    with pytest.raises(ValueError):
        corpus_wer(3, 0)


# ---------------------------------------------------------------- choosing


def test_rerank_index_takes_the_argmax_and_the_earlier_on_ties():
    asr, text = np.array([-2.0, -1.0]), np.array([-5.0, -8.0])
    assert rerank_index(asr, text, 0.0) == 1
    assert rerank_index(asr, text, 0.5) == 0
    assert rerank_index(np.array([-1.0, -1.0]), np.array([0.0, 0.0]), 0.3) == 0


def test_choose_lambda_takes_the_lowest_wer_and_the_smaller_lambda_on_ties():
    assert choose_lambda([0.1, 0.2, 0.3, 0.4], [0.5, 0.4, 0.4, 0.45]) == 0.2
    assert choose_lambda([0.1, 0.2], [0.3, 0.3]) == 0.1


def test_grids():
    assert len(PAPER_GRID) == 20 and PAPER_GRID[0] == 0.05 and PAPER_GRID[-1] == 1.0
    assert PAPER_GRID[6] == 0.35  # exact values, no 0.35000000000000003
    assert set(PAPER_GRID) < set(WIDE_GRID) and WIDE_GRID[0] == 0.0 and WIDE_GRID[-1] == 10.0


def test_lambda_is_chosen_on_dev_only_and_picks_the_expected_hypotheses(tmp_path):
    dev, test, scores = _items(tmp_path, DEV, TEST)
    metrics, chosen = evaluate(dev, test, scores, PAPER_GRID)
    e = metrics["subsets"]["all"]
    m = e["methods"]["electric"]
    assert m["lambda"] == 0.35
    assert m["dev_wer"] == 0.0 and m["dev_edits"] == 0
    # the test curve is best at lambda >= 0.9, but the command keeps dev's choice
    test_curve = m["curve"]["test_wer"]
    assert min(test_curve) == 0.0 and PAPER_GRID[test_curve.index(0.0)] == 0.9
    assert m["test_edits"] == 1 and m["test_wer"] == pytest.approx(1 / 5)
    assert {r["id"]: r["hyp"] for r in chosen} == {"t1": "hyp_1", "t2": "hyp_2"}
    # 1-best: d1 -> hyp_2 (1 edit), d2 -> hyp_1; t1 -> hyp_1 and t2 -> hyp_1 (1 edit each)
    assert e["one_best"] == {"dev_edits": 1, "dev_wer": pytest.approx(1 / 6), "test_edits": 2,
                             "test_wer": pytest.approx(2 / 5)}
    assert e["oracle"]["dev_edits"] == 0 and e["oracle"]["test_edits"] == 0
    assert e["dev"] == {"utterances": 2, "words": 6, "hypotheses": 4}
    # the dev curve by hand: 1 edit below 1/3, none up to 0.62, 1 above
    expected = [1 / 6 if lam < 1 / 3 or lam > 0.62 else 0.0 for lam in PAPER_GRID]
    assert m["curve"]["dev_wer"] == pytest.approx(expected)


def test_dev_ties_go_to_the_smaller_lambda(tmp_path):
    dev = {**DEV, "d2": {"ref": "a dog ran",  # now broken from lambda > 0.3: WER 1/6 both below 1/3 and above
                         "hyp_1": {"text": "a dog ran", "score": -1.0},
                         "hyp_2": {"text": "a dog ran far", "score": -1.6}}}
    d, t, scores = _items(tmp_path, dev, TEST)
    assert wer_curve(d, scores["electric"][0], [0.05, 0.35]) == pytest.approx([1 / 6, 1 / 6])
    metrics, _ = evaluate(d, t, scores, PAPER_GRID)
    assert metrics["subsets"]["all"]["methods"]["electric"]["lambda"] == 0.05


def test_lambda_is_chosen_per_subset(tmp_path):
    dev = {"c1": {**DEV["d1"], "subset": "clean"},
           "o1": {"subset": "other", "ref": "the cat sat",  # fixed only from lambda > 2 (the wide grid's 3)
                  "hyp_1": {"text": "the cat sat", "score": -5.0},
                  "hyp_2": {"text": "the cap sat", "score": -1.0}}}
    test = {"c2": {**TEST["t2"], "subset": "clean"}, "o2": {**TEST["t1"], "subset": "other"}}
    d, t, scores = _items(tmp_path, dev, test)
    metrics, chosen = evaluate(d, t, scores, WIDE_GRID)
    assert metrics["subsets"]["clean"]["methods"]["electric"]["lambda"] == 0.35
    assert metrics["subsets"]["other"]["methods"]["electric"]["lambda"] == 1.5  # 4/3 < lambda: 1.5 first
    assert {r["id"]: (r["subset"], r["lambda"], r["hyp"]) for r in chosen} == {
        "c2": ("clean", 0.35, "hyp_2"), "o2": ("other", 1.5, "hyp_2")}
    pooled = metrics["pooled"]
    assert pooled["methods"]["electric"]["test_edits"] == 0
    assert pooled["one_best"]["dev_edits"] == 2 and pooled["dev"]["words"] == 6


def test_a_test_subset_whose_references_hold_no_words_has_no_test_wer(tmp_path, capsys):
    """An empty `ref` is allowed in test lists: a subset whose references hold no words at all has
    no test WER ("–" in the report, None in metrics.json), as a subset without test lists (it
    crashed in the test curve). A dev subset so is refused (lambda has nothing to be chosen on)."""
    test = {"e1": {"ref": "", "hyp_1": {"text": "the cat sat", "score": -1.0},
                   "hyp_2": {"text": "the cap sat", "score": -1.5}}}
    d, t, scores = _items(tmp_path, DEV, test)
    metrics, _ = evaluate(d, t, scores, PAPER_GRID)
    m = metrics["subsets"]["all"]["methods"]["electric"]
    assert m["lambda"] == 0.35 and m["test_wer"] is None and m["test_edits"] == 3
    assert m["curve"]["test_wer"] == [None] * len(PAPER_GRID)
    out = tmp_path / "r"
    argv = ["rerank", "--dev", str(tmp_path / "dev.json"), "--test", str(tmp_path / "test.json"),
            "--scores", str(write_scores(tmp_path / "s.jsonl", TEXT_SCORES)), "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    assert "| electric | 0.00 | – | 0.35 |" in _cells((out / "report.md").read_text())
    write_nbest(tmp_path / "dev.json", test)
    assert main([*argv[:-1], str(tmp_path / "r2")]) == 2
    assert "hold no words" in capsys.readouterr().err and not (tmp_path / "r2").exists()


def test_a_test_subset_missing_from_dev_is_an_error(tmp_path):
    test = {"x": {**TEST["t1"], "subset": "other"}}
    d, t, scores = _items(tmp_path, DEV, test)
    with pytest.raises(TextebmError, match="'other'"):
        evaluate(d, t, scores, PAPER_GRID)


# ---------------------------------------------------------------- the n-best reader


def test_reader_reads_the_mlm_scoring_format_in_hyp_order(tmp_path):
    p = tmp_path / "n.json"
    p.write_text('{"u": {"ref": "a b",\n "hyp_10": {"text": "ten", "score": -10},\n'
                 ' "hyp_2": {"text": "two", "score": -2, "lm_score": 1.5},\n "hyp_1": {"text": "one", "score": -1}}}\n')
    (u,) = read_nbest(p)
    assert (u.id, u.ref, u.subset) == ("u", "a b", "all")
    assert [(h.key, h.text, h.score, h.line) for h in u.hyps] == [("hyp_1", "one", -1.0, 4), ("hyp_2", "two", -2.0, 3),
                                                                  ("hyp_10", "ten", -10.0, 2)]


BAD_NBEST = [
    ("bad JSON", '{\n "u1": {"ref": "a",\n  "hyp_1": {"text": "a" "score": 1}}\n}\n', 3, "invalid JSON"),
    ("empty file", "", 1, "invalid JSON"),
    ("a list", "[\n {}\n]\n", 1, "expected a JSON object"),
    ("no utterances", "\n{}\n", 2, "no utterances"),
    ("missing ref", '{\n "u1": {"ref": "a", "hyp_1": {"text": "a", "score": 1}},\n'
                    ' "u2": {"hyp_1": {"text": "a", "score": 1}}\n}\n', 3, "no \"ref\""),
    ("ref not a string", '{"u1": {\n "ref": 3, "hyp_1": {"text": "a", "score": 1}}}', 2, "\"ref\" must be a string"),
    ("hypothesis without text", '{"u1": {"ref": "a",\n "hyp_1": {"text": "a", "score": 1},\n'
                                ' "hyp_2": {"score": 2}}}\n', 3, "hyp_2 has no \"text\""),
    ("empty text", '{"u1": {"ref": "a",\n "hyp_1": {"text": "  ", "score": 1}}}', 2, "empty"),
    ("non-finite score", '{"u1": {"ref": "a", "hyp_1": {"text": "a",\n "score": Infinity}}}', 2, "finite"),
    ("NaN score", '{"u1": {"ref": "a", "hyp_1": {"text": "a",\n\n "score": NaN}}}', 3, "finite"),
    ("score a string", '{"u1": {"ref": "a", "hyp_1": {"text": "a",\n "score": "-1"}}}', 2, "must be a number"),
    ("no score", '{"u1": {"ref": "a",\n "hyp_1": {"text": "a"}}}', 2, "no \"score\""),
    ("empty n-best list", '{\n "u1": {"ref": "a"}\n}', 2, "no hypotheses"),
    ("duplicate utterance ids", '{\n "u1": {"ref": "a", "hyp_1": {"text": "a", "score": 1}},\n'
                                ' "u1": {"ref": "b", "hyp_1": {"text": "b", "score": 1}}\n}', 3, "appears twice"),
    ("duplicate hypothesis keys", '{"u1": {"ref": "a",\n "hyp_1": {"text": "a", "score": 1},\n'
                                  ' "hyp_1": {"text": "b", "score": 1}}}', 3, "'hyp_1' appears twice"),
    ("unknown key", '{"u1": {"ref": "a",\n "hyp1": {"text": "a", "score": 1}}}', 2, "unknown key 'hyp1'"),
    ("hypothesis not an object", '{"u1": {"ref": "a",\n "hyp_1": "a"}}', 2, "expected an object"),
    ("utterance not an object", '{"u1": {"ref": "a", "hyp_1": {"text": "a", "score": 1}},\n "u2": []}', 2,
     "expected an object"),
    ("empty subset", '{"u1": {"ref": "a", "hyp_1": {"text": "a", "score": 1},\n "subset": ""}}', 2, "subset"),
]


@pytest.mark.parametrize("case", BAD_NBEST, ids=[c[0] for c in BAD_NBEST])
def test_reader_errors_name_file_and_line(tmp_path, case):
    _, content, line, expected = case
    p = tmp_path / "bad.json"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_nbest(p)
    assert str(e.value).startswith(f"{p}:{line}: "), str(e.value)
    assert expected in str(e.value)


def test_reader_refuses_bytes_that_are_not_utf8_and_missing_files(tmp_path):
    p = tmp_path / "latin.json"
    p.write_bytes('{"u": {"ref": "caf\u00e9"}}'.encode("latin-1"))
    with pytest.raises(InputError, match="latin.json: not valid UTF-8"):
        read_nbest(p)
    with pytest.raises(InputError, match="nope.json: file not found"):
        read_nbest(tmp_path / "nope.json")


# ---------------------------------------------------------------- score files


def test_score_files_are_named_by_method_or_by_stem_when_methods_clash(tmp_path):
    a = write_scores(tmp_path / "electric.jsonl", TEXT_SCORES, "electric")
    b = write_scores(tmp_path / "mlm-big.jsonl", TEXT_SCORES, "mlm")
    assert [f.method for f in read_score_files([a, b])] == ["electric", "mlm"]
    c = write_scores(tmp_path / "electric-2.jsonl", TEXT_SCORES, "electric")
    assert [f.method for f in read_score_files([a, b, c])] == ["electric", "mlm", "electric-2"]
    d = write_scores(tmp_path / "nomethod.jsonl", TEXT_SCORES, None)
    assert read_score_files([d])[0].method == "nomethod"
    with pytest.raises(TextebmError, match="given twice"):
        read_score_files([a, a])


@pytest.mark.parametrize("line2, expected", [
    ('{"text": "b", "score": NaN, "method": "electric"}', "finite"),
    ('{"score": 1.0, "method": "electric"}', "\"text\""),
    ('{"text": "b", "score": "x", "method": "electric"}', "\"score\""),
    ('{"text": "b", "score": 1.0, "method": "mlm"}', "one score file holds one method"),
    ('not json', "malformed JSON"),
])
def test_score_file_errors_name_file_and_line(tmp_path, line2, expected):
    p = tmp_path / "s.jsonl"
    p.write_text('{"text": "a", "score": -1.0, "method": "electric"}\n' + line2 + "\n")
    with pytest.raises(InputError) as e:
        read_score_files([p])
    assert str(e.value).startswith(f"{p}:2: ") and expected in str(e.value)


# ---------------------------------------------------------------- the command


def _files(tmp_path: Path) -> dict[str, Path]:
    dev = {"c1": {**DEV["d1"], "subset": "clean"}, "c2": {**DEV["d2"], "subset": "clean"},
           "o1": {"subset": "other", "ref": "the cat sat",
                  "hyp_1": {"text": "the cat sat", "score": -5.0},
                  "hyp_2": {"text": "the cap sat", "score": -1.0}}}
    test = {"tc1": {**TEST["t1"], "subset": "clean"}, "tc2": {**TEST["t2"], "subset": "clean"},
            "to1": {**TEST["t1"], "subset": "other"}}
    return {"dev": write_nbest(tmp_path / "dev.json", dev), "test": write_nbest(tmp_path / "test.json", test),
            "electric": write_scores(tmp_path / "electric.jsonl", TEXT_SCORES, "electric"),
            # a second method that always prefers the speech model's own choice
            "mlm": write_scores(tmp_path / "mlm.jsonl", {t: 0.0 for t in TEXT_SCORES}, "mlm")}


def test_cli_end_to_end_writes_metrics_chosen_report_and_plot(tmp_path, capsys):
    f = _files(tmp_path)
    out = tmp_path / "rerank"
    argv = ["rerank", "--dev", str(f["dev"]), "--test", str(f["test"]), "--scores", str(f["electric"]),
            str(f["mlm"]), "--out", str(out), "--grid", "wide"]
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [".textebm-output.json", "chosen.jsonl", "metrics.json",
                                                     "report.md", "wer_vs_lambda.png"]
    assert json.loads((out / ".textebm-output.json").read_text())["kind"] == "rerank"
    metrics = json.loads((out / "metrics.json").read_text())
    clean, other = metrics["subsets"]["clean"], metrics["subsets"]["other"]
    assert clean["methods"]["electric"]["lambda"] == 0.35
    assert clean["methods"]["electric"]["test_wer"] == pytest.approx(1 / 5)
    assert other["methods"]["electric"]["lambda"] == 1.5
    assert other["methods"]["electric"]["test_wer"] == 0.0
    assert clean["methods"]["mlm"]["lambda"] == 0.0  # no help from a flat score: lambda 0 = the 1-best
    assert clean["methods"]["mlm"]["test_wer"] == clean["one_best"]["test_wer"] == pytest.approx(2 / 5)
    assert clean["test"] == {"utterances": 2, "words": 5, "hypotheses": 4}
    assert metrics["pooled"]["methods"]["electric"]["test_edits"] == 1
    assert metrics["grid"] == list(WIDE_GRID) and metrics["grid_name"] == "wide"
    rows = [json.loads(line) for line in (out / "chosen.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2
    by = {(r["id"], r["method"]): r for r in rows}
    assert by["tc2", "electric"]["text"] == "i see" and by["tc2", "electric"]["edits"] == 0
    assert by["tc2", "electric"]["total"] == pytest.approx(-1.5 + 0.35 * -4.0)
    assert by["to1", "electric"]["hyp"] == "hyp_2" and by["tc1", "electric"]["hyp"] == "hyp_1"
    report = _cells((out / "report.md").read_text())
    assert "| electric | 0.00 | 20.00 | 0.35 |" in report
    assert "| none (1-best) | 16.67 | 40.00 | – |" in report
    assert "| oracle | 0.00 | 0.00 | – |" in report
    assert "wer_vs_lambda.png" in report
    assert (out / "wer_vs_lambda.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a second run needs --overwrite, and keeps a user's file beside the outputs
    (out / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    assert main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(argv + ["--overwrite", "--grid", "paper"]) == 0
    assert json.loads((out / "metrics.json").read_text())["grid_name"] == "paper"
    assert (out / "notes.txt").read_text() == "mine\n"


def test_cli_write_texts_then_scores_match(tmp_path, capsys):
    f = _files(tmp_path)
    texts = tmp_path / "texts.txt"
    assert main(["rerank", "--dev", str(f["dev"]), "--test", str(f["test"]), "--write-texts", str(texts)]) == 0
    lines = texts.read_text().splitlines()
    assert sorted(lines) == sorted(TEXT_SCORES) and len(lines) == len(set(lines))
    assert "textebm score" in capsys.readouterr().out
    from textebm.data.readers import read_examples  # what `textebm score --input` reads

    assert [r["text"] for r in read_examples(texts)] == lines
    as_jsonl = tmp_path / "texts.jsonl"
    assert main(["rerank", "--dev", str(f["dev"]), "--test", str(f["test"]), "--write-texts", str(as_jsonl)]) == 0
    assert [r["text"] for r in read_examples(as_jsonl)] == lines


def test_cli_a_hypothesis_without_a_score_names_the_file_and_how_to_score(tmp_path, capsys):
    f = _files(tmp_path)
    partial = write_scores(tmp_path / "partial.jsonl", {k: v for k, v in TEXT_SCORES.items() if k != "i see"})
    out = tmp_path / "rerank"
    rc = main(["rerank", "--dev", str(f["dev"]), "--test", str(f["test"]), "--scores", str(partial),
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "partial.jsonl" in err and "'i see'" in err and "--write-texts" in err and "textebm score" in err
    assert not out.exists()


def test_cli_write_texts_refuses_a_hypothesis_that_normalisation_empties(tmp_path, capsys):
    """"..." is empty in the asr form: `score` would skip its blank line and rerank would ask for the
    same --write-texts again; refused, naming the list, the utterance and the hypothesis."""
    dev = write_nbest(tmp_path / "dev.json", {**DEV, "d3": {"ref": "ok", "hyp_1": {"text": "ok", "score": -1.0},
                                                            "hyp_2": {"text": "...", "score": -2.0}}})
    test = write_nbest(tmp_path / "test.json", TEST)
    for name in ("t.txt", "t.jsonl"):
        assert main(["rerank", "--dev", str(dev), "--test", str(test), "--normalize", "asr", "--write-texts",
                     str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert f"{dev}:" in err and "utterance 'd3', hyp_2: the hypothesis '...' is empty" in err, err
        assert not (tmp_path / name).exists()


def test_cli_scores_that_name_a_folder_or_nothing_say_so_with_the_option(tmp_path, capsys):
    f = _files(tmp_path)
    base = ["rerank", "--dev", str(f["dev"]), "--test", str(f["test"]), "--out", str(tmp_path / "o")]
    assert main(base + ["--scores", str(tmp_path)]) == 2
    assert f"--scores {tmp_path}: is a folder; give the JSONL file that `textebm score` wrote" in capsys.readouterr().err
    assert main(base + ["--scores", str(f["electric"]), str(tmp_path / "nope.jsonl")]) == 2
    assert f"--scores {tmp_path / 'nope.jsonl'}: file not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_options_that_do_nothing_are_refused(tmp_path, capsys):
    f = _files(tmp_path)
    base = ["rerank", "--dev", str(f["dev"]), "--test", str(f["test"])]
    assert main(base + ["--write-texts", str(tmp_path / "t.txt"), "--scores", str(f["electric"])]) == 2
    assert "--scores" in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "o")]) == 2
    assert "--scores" in capsys.readouterr().err
    assert main(base + ["--scores", str(f["electric"])]) == 2
    assert "--out" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "t.txt").exists()


def test_paired_wer_diff_matches_a_loop_over_the_same_resamples():
    from textebm.bootstrap import resample_indices

    rng = np.random.default_rng(3)
    words = rng.integers(1, 20, size=40)
    a, b = rng.integers(0, 5, size=40), rng.integers(0, 5, size=40)
    got = paired_wer_diff(a, b, words, n_boot=300, seed=7)
    # the observed difference by hand: corpus WERs of the whole test set
    assert got["diff"] == pytest.approx(a.sum() / words.sum() - b.sum() / words.sum())
    diffs = []
    for row in resample_indices(40, 300, 7):  # one resample at a time, corpus WER from scratch
        wa = corpus_wer(int(sum(a[i] for i in row)), int(sum(words[i] for i in row)))
        wb = corpus_wer(int(sum(b[i] for i in row)), int(sum(words[i] for i in row)))
        diffs.append(wa - wb)
    assert got["lo"] == pytest.approx(float(np.quantile(diffs, 0.025)))
    assert got["hi"] == pytest.approx(float(np.quantile(diffs, 0.975)))
    assert got["p_below_zero"] == pytest.approx(float(np.mean(np.array(diffs) < 0)))


def test_paired_wer_diff_of_one_choice_against_itself_is_exactly_zero_and_a_clear_win_excludes_zero():
    words = np.full(50, 10)
    same = paired_wer_diff(np.arange(50) % 3, np.arange(50) % 3, words)
    assert same == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p_below_zero": 0.0}
    better = paired_wer_diff(np.zeros(50), np.full(50, 2), words)  # 2 edits fewer in every utterance
    assert better["diff"] == pytest.approx(-0.2) and better["lo"] == better["hi"] == pytest.approx(-0.2)
    mixed = paired_wer_diff(np.r_[np.zeros(25), np.full(25, 1)], np.full(50, 1), words)
    assert mixed["hi"] < 0 < mixed["p_below_zero"] and mixed["lo"] < mixed["diff"] == pytest.approx(-0.05)
    with pytest.raises(ValueError):
        paired_wer_diff(np.zeros(3), np.zeros(4), np.ones(3))
    with pytest.raises(ValueError, match="no words"):
        paired_wer_diff(np.ones(3), np.zeros(3), np.zeros(3))
    # resamples drawing only the empty reference (inserted words, no reference words) are left out
    odd = paired_wer_diff(np.array([2, 1]), np.array([0, 0]), np.array([0, 4]), n_boot=400)
    assert odd["diff"] == pytest.approx(3 / 4) and np.isfinite([odd["lo"], odd["hi"]]).all() and odd["hi"] <= 3.0


def test_cli_versus_adds_paired_intervals_and_refuses_an_unknown_method(tmp_path, capsys):
    f = _files(tmp_path)
    out = tmp_path / "rerank"
    base = ["rerank", "--dev", str(f["dev"]), "--test", str(f["test"]), "--scores", str(f["electric"]),
            str(f["mlm"]), "--grid", "wide"]
    assert main(base + ["--out", str(out), "--versus", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--versus nosuch" in err and "electric" in err and "Traceback" not in err and not out.exists()
    assert main(base + ["--out", str(out), "--versus", "mlm", "--bootstrap", "200"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    clean = metrics["subsets"]["clean"]["methods"]
    # electric fixes t2 (2 of 5 words -> 1 of 5); mlm is the 1-best: both changes are -1/5
    assert clean["electric"]["test_vs_one_best"]["diff"] == pytest.approx(-0.2)
    assert clean["electric"]["test_vs_versus"]["diff"] == pytest.approx(-0.2)
    assert clean["mlm"]["test_vs_one_best"]["diff"] == 0.0 and "test_vs_versus" not in clean["mlm"]
    pooled = metrics["pooled"]["methods"]["electric"]["test_vs_one_best"]  # 3 test utterances, 8 words
    assert pooled["diff"] == pytest.approx((1 - 3) / 8) and pooled["lo"] <= pooled["diff"] <= pooled["hi"]
    assert metrics["versus"] == "mlm" and metrics["bootstrap"] == {"resamples": 200, "seed": 0, "level": 0.95}
    report = _cells((out / "report.md").read_text())
    assert "Δ test WER vs mlm [95% CI]" in report and "| electric | 0.00 | 20.00 | 0.35 | -20.00 [" in report
    # the reference may be the first method: its own row has no change against itself
    assert main(base + ["--out", str(tmp_path / "r1"), "--versus", "electric", "--bootstrap", "50"]) == 0
    assert "| mlm | 16.67 | 40.00 | 0 | +0.00 [+0.00, +0.00] | +20.00 [" in _cells((tmp_path / "r1" / "report.md").read_text())
    # method names that are words of the bookkeeping do not clash with it
    words = write_scores(tmp_path / "words.jsonl", TEXT_SCORES, "words")
    one_best = write_scores(tmp_path / "ob.jsonl", {t: 0.0 for t in TEXT_SCORES}, "one_best")
    assert main(["rerank", "--dev", str(f["dev"]), "--test", str(f["test"]), "--scores", str(words), str(one_best),
                 "--grid", "wide", "--out", str(tmp_path / "r2")]) == 0
    clash = json.loads((tmp_path / "r2" / "metrics.json").read_text())["pooled"]["methods"]
    assert clash["words"]["test_vs_one_best"]["diff"] == pytest.approx((1 - 3) / 8)
    assert clash["one_best"]["test_vs_one_best"]["diff"] == 0.0
    assert main(base + ["--out", str(tmp_path / "r3"), "--versus", "mlm", "--bootstrap", "0"]) == 2
    assert "--bootstrap 0" in capsys.readouterr().err and not (tmp_path / "r3").exists()
    assert main(base + ["--out", str(tmp_path / "r0"), "--bootstrap", "0"]) == 0
    m0 = json.loads((tmp_path / "r0" / "metrics.json").read_text())["subsets"]["clean"]["methods"]["electric"]
    assert "test_vs_one_best" not in m0


# ---------------------------------------------------------------- --top and --normalize


def test_top_indices_keep_the_best_by_score_in_list_order():
    from textebm.data.nbest import top_indices

    scores = [-3.0, -1.0, -2.0, -1.0]
    assert top_indices(scores, 1) == [1]
    assert top_indices(scores, 2) == [1, 3]  # the two -1.0s
    assert top_indices(scores, 3) == [1, 2, 3]
    assert top_indices([-1.0, -2.0, -1.0], 1) == [0]  # of equal scores, the earlier
    assert top_indices(scores, 0) == top_indices(scores, 9) == [0, 1, 2, 3]


# d1 gains a third hypothesis, the worst by speech score; t1 gains "we want a home" (-1.5), which
# pushes the correct "we went home" (-2.7) out of the 2 best. With --top 2: the kept lists' oracle
# has 1 edit in t1 (test 1 of 5 words), the whole lists' 0; dev's oracle is 0 either way.
TOP_DEV = {"d1": {**DEV["d1"], "hyp_3": {"text": "the bat sat", "score": -3.0}}, "d2": DEV["d2"]}
TOP_TEST = {"t1": {**TEST["t1"], "hyp_3": {"text": "we want a home", "score": -1.5}}, "t2": TEST["t2"]}


def test_cli_top_keeps_the_n_best_and_reports_both_oracles(tmp_path, capsys):
    dev, test = write_nbest(tmp_path / "dev.json", TOP_DEV), write_nbest(tmp_path / "test.json", TOP_TEST)
    base = ["rerank", "--dev", str(dev), "--test", str(test), "--top", "2"]
    texts = tmp_path / "texts.txt"
    assert main(base + ["--write-texts", str(texts)]) == 0
    assert texts.read_text().splitlines() == ["the cat sat", "the cap sat", "a dog ran", "a dog ran far",
                                              "we want home", "we want a home", "eye see", "i see"]
    # only the kept hypotheses need a score
    scores = write_scores(tmp_path / "s.jsonl", {**{t: TEXT_SCORES[t] for t in TEXT_SCORES if t != "we went home"},
                                                  "we want a home": -20.0})
    out = tmp_path / "r"
    assert main(base + ["--scores", str(scores), "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    s = m["subsets"]["all"]
    assert m["top"] == 2
    assert s["test"] == {"utterances": 2, "words": 5, "hypotheses": 4, "hypotheses_read": 5}
    assert s["oracle"]["test_wer"] == pytest.approx(1 / 5) and s["oracle_read"]["test_wer"] == 0.0
    assert s["oracle"]["dev_wer"] == s["oracle_read"]["dev_wer"] == 0.0
    # lambda 0.35 from dev; t1: -1 + 0.35 * -9 beats -1.5 + 0.35 * -20 (1 edit); t2: "i see" (0 edits)
    assert s["methods"]["electric"]["lambda"] == 0.35 and s["methods"]["electric"]["test_wer"] == pytest.approx(1 / 5)
    report = _cells((out / "report.md").read_text())
    assert "| oracle (top 2) | 0.00 | 20.00 | – |" in report and "| oracle (whole lists) | 0.00 | 0.00 | – |" in report
    # without --top, the dropped hypotheses need scores too
    capsys.readouterr()
    assert main(["rerank", "--dev", str(dev), "--test", str(test), "--scores", str(scores), "--out",
                 str(tmp_path / "r2")]) == 2
    assert "no score for 1 hypothesis text, e.g. 'the bat sat'" in capsys.readouterr().err  # dev's first


# The recogniser writes "didn't"; the text model was trained on PTB ("did n't"). Scored as written,
# the model cannot read "didn't" and prefers the wrong word; in PTB form it prefers the right one.
PTB_DEV = {"d1": {"ref": "we didn't go",
                  "hyp_1": {"text": "we didn't goat", "score": -1.0},
                  "hyp_2": {"text": "we didn't go", "score": -1.5}}}
PTB_TEST = {"t1": {"ref": "I didn't see it",
                   "hyp_1": {"text": "I didn't sea it", "score": -1.0},
                   "hyp_2": {"text": "I didn't see it", "score": -1.5}}}
PTB_SCORES = {"we didn't goat": -40.0, "we didn't go": -42.0, "I didn't sea it": -40.0, "I didn't see it": -42.0,
              "we did n't goat": -30.0, "we did n't go": -20.0, "i did n't sea it": -30.0, "i did n't see it": -20.0}


def test_cli_normalize_ptb_changes_the_reranking_and_wer_stays_on_the_texts_as_written(tmp_path, capsys):
    dev, test = write_nbest(tmp_path / "dev.json", PTB_DEV), write_nbest(tmp_path / "test.json", PTB_TEST)
    base = ["rerank", "--dev", str(dev), "--test", str(test)]
    texts = tmp_path / "texts.txt"
    assert main(base + ["--normalize", "ptb", "--write-texts", str(texts)]) == 0
    assert texts.read_text().splitlines() == ["we did n't goat", "we did n't go", "i did n't sea it",
                                              "i did n't see it"]
    scores = write_scores(tmp_path / "causal.jsonl", PTB_SCORES, "causal")
    for norm in ("none", "ptb"):
        assert main(base + ["--scores", str(scores), "--out", str(tmp_path / norm), "--normalize", norm]) == 0
    none = json.loads((tmp_path / "none" / "metrics.json").read_text())
    ptb = json.loads((tmp_path / "ptb" / "metrics.json").read_text())
    # as written: hyp_2 never wins (-1.5 - 42 l < -1 - 40 l), so dev WER 1/3 everywhere: lambda 0.05;
    # test keeps "I didn't sea it": 1 edit in 4 words as written (PTB form would count 5 words)
    assert none["subsets"]["all"]["methods"]["causal"]["lambda"] == 0.05
    assert none["subsets"]["all"]["methods"]["causal"]["test_wer"] == pytest.approx(1 / 4)
    # PTB form: hyp_2 wins once -1.5 - 20 l > -1 - 30 l, lambda > 0.05 (a tie at 0.05 keeps hyp_1): 0.1
    assert ptb["subsets"]["all"]["methods"]["causal"]["lambda"] == 0.1
    assert ptb["subsets"]["all"]["methods"]["causal"]["test_wer"] == 0.0
    assert ptb["normalize"] == {"causal": "ptb"} and none["normalize"] == {"causal": "none"}
    chosen = [json.loads(x) for x in (tmp_path / "ptb" / "chosen.jsonl").read_text().splitlines()]
    assert chosen[0]["text"] == "I didn't see it" and chosen[0]["text_score"] == -20.0  # written as given
    assert "scored in form `ptb`" in (tmp_path / "ptb" / "report.md").read_text()


def test_cli_a_score_file_of_score_normalize_is_looked_up_in_its_own_form(tmp_path, capsys):
    dev, test = write_nbest(tmp_path / "dev.json", PTB_DEV), write_nbest(tmp_path / "test.json", PTB_TEST)
    # what `textebm score --normalize ptb` writes: the scored (normalised) text, the text as read, the form
    rows = [{"id": str(i), "text": t, "input_text": t, "method": "causal", "score": v, "n_tokens": 3,
             "normalize": "ptb"} for i, (t, v) in enumerate(PTB_SCORES.items()) if "n't" in t]
    scores = tmp_path / "causal.jsonl"
    scores.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["rerank", "--dev", str(dev), "--test", str(test), "--scores", str(scores)]
    assert main(base + ["--out", str(tmp_path / "r")]) == 0  # no --normalize: the file's own form
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["normalize"] == {"causal": "ptb"} and m["subsets"]["all"]["methods"]["causal"]["test_wer"] == 0.0
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "r2"), "--normalize", "asr"]) == 2
    err = capsys.readouterr().err
    assert "--normalize asr" in err and "--normalize ptb" in err and not (tmp_path / "r2").exists()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "normalize": "asr"}) + "\n")
    assert main(["rerank", "--dev", str(dev), "--test", str(test), "--scores", str(mixed), "--out",
                 str(tmp_path / "r3")]) == 2
    assert "mixed.jsonl:2" in capsys.readouterr().err
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({**rows[0], "normalize": "lower"}) + "\n")
    assert main(["rerank", "--dev", str(dev), "--test", str(test), "--scores", str(unknown), "--out",
                 str(tmp_path / "r4")]) == 2
    err = capsys.readouterr().err
    assert "unknown.jsonl:1" in err and "'lower'" in err and "Traceback" not in err


def test_cli_scores_of_normalised_texts_without_a_recorded_form_name_the_normalize_fix(tmp_path, capsys):
    """`rerank --normalize ptb --write-texts` then a plain `score`: the rows hold PTB-form texts and
    record no form; rerank without --normalize finds none of the hypotheses and says which
    --normalize finds them all (not only --write-texts)."""
    dev, test = write_nbest(tmp_path / "dev.json", PTB_DEV), write_nbest(tmp_path / "test.json", PTB_TEST)
    ptb_only = {t: v for t, v in PTB_SCORES.items() if " n't" in t}
    scores = write_scores(tmp_path / "causal.jsonl", ptb_only, "causal")
    base = ["rerank", "--dev", str(dev), "--test", str(test), "--scores", str(scores)]
    assert main(base + ["--out", str(tmp_path / "r")]) == 2
    assert "its texts are in the --normalize ptb form" in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "r"), "--normalize", "ptb"]) == 0
