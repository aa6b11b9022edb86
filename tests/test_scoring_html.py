"""The score --html page: each text comes back exactly from the page (tags stripped, entities
unescaped, read with the standard library's html.parser), every token's span carries its value,
text is escaped, the colour bins follow the documented rule, word level and non-finite values work."""

import math
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from textebm.scoring.html import render_html


class Page(HTMLParser):
    """Per text block (div.txt): its character data and its coloured spans (class, title, data-tok);
    plus every start tag seen, to check that no markup came from the data."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.texts, self.spans, self.tags = [], [], []
        self._depth = 0  # div nesting inside the current div.txt; 0 = outside
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "div" and a.get("class") == "txt":
            self.texts.append("")
            self.spans.append([])
            self._depth = 1
        elif self._depth and tag == "div":
            self._depth += 1
        elif self._depth and tag == "span":
            self.spans[-1].append({"class": a["class"].split(), "title": a["title"], "tok": a.get("data-tok")})

    def handle_endtag(self, tag):
        if self._depth and tag == "div":
            self._depth -= 1

    def handle_data(self, data):
        if self._depth:
            self.texts[-1] += data


def bin_of(span):
    (b,) = [c for c in span["class"] if re.fullmatch(r"b\d|na", c)]
    return b


def value_in(title):
    return title.split("\n")[1].split(" = ")[1]


def record(rid, text, spans, scores, **extra):
    toks = [text[s:e] or "[eos]" for s, e in spans]
    return {"id": rid, "text": text, "method": "plm", "score": sum(s for s in scores if s is not None), "n_tokens": len(toks),
            "tokens": toks, "token_scores": scores, "offsets": [list(s) for s in spans], **extra}


def whitespace_record(rid, text, rng):
    """Tokens = the whitespace-separated pieces, plus a zero-width [eos] at the end."""
    spans = [m.span() for m in re.finditer(r"\S+", text)] + [(len(text), len(text))]
    return record(rid, text, spans, [float(x) for x in -rng.gamma(2.0, 2.0, len(spans))])


TEXTS = [
    "the cat sat on the mat .",
    "  leading and trailing spaces, two  spaces\tand a tab  ",
    "line one\nline two\n\nafter a blank line",
    "unicode: naïve café — 日本語 😀 done",
    "",
]


def test_each_text_comes_back_exactly_and_every_token_carries_its_value():
    rng = np.random.default_rng(0)
    records = [whitespace_record(f"r{i}", t, rng) for i, t in enumerate(TEXTS)]
    page = Page(render_html(records, title="t", value_name="log p"))
    assert page.texts == TEXTS
    for rec, spans in zip(records, page.spans):
        tokens = [s for s in spans if "t" in s["class"]]
        assert len(tokens) == len(rec["tokens"])
        for span, tok, v in zip(tokens, rec["tokens"], rec["token_scores"]):  # reading order = token order
            assert value_in(span["title"]) == f"{v:.3f}"
            assert repr(tok) in span["title"]
        assert "z" in tokens[-1]["class"] and tokens[-1]["tok"] == "[eos]"  # zero-width, shown by CSS only


def test_uncovered_overlapping_and_out_of_range_offsets_keep_the_text_exact():
    text = "a\u200bbc déf!!"
    # "\u200b" and " " are covered by no token (a dropped character, a space); "d" is covered twice
    # (two byte-level pieces of one character); the last span runs past the end of the text.
    spans = [(0, 1), (2, 4), (5, 6), (5, 6), (6, 8), (8, 99)]
    rec = record("x", text, spans, [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])
    page = Page(render_html([rec], title="t", value_name="log p"))
    assert page.texts == [text]
    shown = page.spans[0]
    assert [value_in(s["title"]) for s in shown] == ["-1.000", "-2.000", "-3.000", "-4.000", "-5.000", "-6.000"]
    assert "z" in shown[3]["class"]  # the second piece of "d" has nothing new to colour


def test_text_is_escaped_and_shown_literally():
    text = '<script>alert("x")</script> & &amp; \'q\' <b>bold</b> --> <!-- c'
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    rec = record('<img src=x onerror="alert(1)">', text, spans, [-float(i) for i in range(len(spans))])
    rec["tokens"][0] = '"><script>x</script>'
    rec["method"] = "<i>m</i>"
    html = render_html([rec], title="<title> & \"t\"", value_name="<v>")
    for raw in ("<script", "<img", "<b>bold", "<i>", "<title> &", "<v>", "<!--"):
        assert raw not in html
    page = Page(html)
    assert page.texts == [text]
    assert set(page.tags) <= {"html", "head", "meta", "title", "style", "body", "h1", "div", "span", "b"}
    first = page.spans[0][0]
    assert repr('"><script>x</script>') in first["title"] and first["title"].split("\n")[1].startswith("<v> = ")


def test_the_lowest_and_highest_tokens_get_different_bins_and_bins_follow_the_rule():
    rng = np.random.default_rng(1)
    records = [whitespace_record(f"r{i}", " ".join(["w"] * 99), rng) for i in range(10)]  # 1000 tokens
    page = Page(render_html(records, title="t", value_name="log p"))
    values = [v for r in records for v in r["token_scores"]]
    bins = [bin_of(s) for spans in page.spans for s in spans]
    assert bins[int(np.argmin(values))] == "b3" and bins[int(np.argmax(values))] == "b0"
    # quantile scale: the most likely 50 %, next 30 %, next 15 %, least likely 5 % of 1000 distinct values
    assert [bins.count(f"b{b}") for b in range(4)] == [500, 300, 150, 50]
    q50, q20, q05 = np.quantile(values, [0.5, 0.2, 0.05])
    expected = ["b0" if v >= q50 else "b1" if v >= q20 else "b2" if v >= q05 else "b3" for v in values]
    assert bins == expected

    # logprob scale: fixed cuts at p = 1/10, 1/100, 1/1000
    probs = [0.5, 0.1, 0.05, 0.01, 0.005, 0.001, 0.0005]
    rec = record("p", " ".join("abcdefg"), [(2 * i, 2 * i + 1) for i in range(7)], [math.log(p) for p in probs])
    bins = [bin_of(s) for s in Page(render_html([rec], title="t", value_name="log p", scale="logprob")).spans[0]]
    assert bins == ["b0", "b0", "b1", "b1", "b2", "b2", "b3"]


def test_ranks_of_likelihood_within_each_text():
    rec = record("r", "a b c d", [(0, 1), (2, 3), (4, 5), (6, 7)], [-2.0, -0.5, -2.0, -9.0])
    titles = [s["title"] for s in Page(render_html([rec], title="t", value_name="v")).spans[0]]
    assert [t.split("\n")[2] for t in titles] == [
        "rank 2 of 4 in this text", "rank 1 of 4 in this text", "rank 2 of 4 in this text", "rank 4 of 4 in this text"]


def test_word_level_colours_the_words_with_their_sums():
    text = "unbelievable news"
    rec = record("w", text, [(0, 2), (2, 8), (8, 12), (13, 17)], [-1.0, -2.0, -0.5, -3.0],
                 words=["unbelievable", "news"], word_scores=[-3.5, -3.0], word_offsets=[[0, 12], [13, 17]])
    page = Page(render_html([rec], title="t", value_name="log p", level="word"))
    assert page.texts == [text]
    spans = page.spans[0]
    assert [value_in(s["title"]) for s in spans] == ["-3.500", "-3.000"]
    assert spans[0]["title"].startswith("word 'unbelievable'")
    assert bin_of(spans[0]) != bin_of(spans[1])
    with pytest.raises(ValueError, match="'plain'.*'words'"):
        render_html([record("plain", "a", [(0, 1)], [-1.0])], title="t", value_name="v", level="word")


def test_non_finite_values_do_not_break_the_page():
    text = "a b c d e f"
    scores = [-1.0, float("nan"), float("-inf"), float("inf"), None, -2.0]
    rec = record("n", text, [(i, i + 1) for i in range(0, 11, 2)], scores)
    rec["score"] = float("nan")
    html = render_html([rec], title="t", value_name="v")
    page = Page(html)
    assert page.texts == [text]
    spans = page.spans[0]
    assert [value_in(s["title"]) for s in spans] == ["-1.000", "n/a", "-inf", "inf", "n/a", "-2.000"]
    assert [bin_of(s) for s in spans] == ["b0", "na", "b3", "b0", "na", "b3"]
    assert "score <b>n/a</b>" in html
    only_nan = record("m", "a", [(0, 1)], [float("nan")])
    assert Page(render_html([only_nan], title="t", value_name="v")).texts == ["a"]


def test_bad_records_are_refused_with_their_id():
    rec = record("bad", "a b", [(0, 1), (2, 3)], [-1.0])
    with pytest.raises(ValueError, match="'bad'.*different lengths"):
        render_html([rec], title="t", value_name="v")
    rec = record("bad2", "a", [(0, 1)], [-1.0])
    rec["offsets"] = [[0]]
    with pytest.raises(ValueError, match="'bad2'.*offsets\\[0\\]"):
        render_html([rec], title="t", value_name="v")
    with pytest.raises(ValueError, match="level"):
        render_html([], title="t", value_name="v", level="char")


def test_the_page_is_one_light_file_for_hundreds_of_texts():
    rng = np.random.default_rng(2)
    sentence = "the quick brown fox jumps over the lazy dog and then runs far away from the farmer ."
    records = [whitespace_record(f"s{i}", sentence, rng) for i in range(500)]
    html = render_html(records, title="t", value_name="log p")
    n_tokens = sum(r["n_tokens"] for r in records)
    assert len(html.encode()) / n_tokens < 200  # bytes per token: classes, not per-token styles
    assert not re.search(r"<script|<link|src=|url\(|https?://|@import", html)
    assert html.count("<style>") == 1 and 'style="' not in html
    assert html.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in html
