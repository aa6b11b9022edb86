"""A self-contained HTML page that colours each token of each text by its score, as GLTR does with
LM ranks (Gehrmann et al., 2019, "GLTR: Statistical Detection and Visualization of Generated
Text"): `textebm score ... --html FILE.html`.

`render_html(records, title=..., value_name=...)` takes the records the score command writes, one
per JSONL line:

    {"id": str, "text": str, "method": str, "score": float, "n_tokens": int,
     "tokens": [str], "token_scores": [float], "offsets": [[start, end], ...],
     # optional, per-word sums of the token scores:
     "words": [str], "word_scores": [float], "word_offsets": [[start, end], ...]}

Values are log-scores in nats, higher = more likely (log-probabilities, or -E(x)_t for Electric,
which is unnormalised). `level="word"` colours the words instead of the tokens.

Colour rule. Four bins, GLTR's colours from likely to unlikely: green, yellow, red, purple.
- `scale="quantile"` (default; works for any scorer, normalised or not): cut at the 50 %, 20 % and
  5 % quantiles of all finite values on the page, so green = the most likely half of the tokens,
  yellow = the next 30 %, red = the next 15 %, purple = the least likely 5 %. The cuts are the
  same for every text on the page, so texts on one page can be compared, pages cannot.
- `scale="logprob"` (for log-probabilities only): fixed cuts at p = 1/10, 1/100, 1/1000. A token
  with p >= 1/k is among the k most likely of the vocabulary, so green tokens are in GLTR's top 10
  (the converse need not hold: GLTR's bins are by rank, which the scores do not give).
-inf goes to purple, +inf to green, NaN (or a missing value) to a grey, dashed "n/a" class.

Each coloured span carries a `title` (shown on hover, no JavaScript): the token, its value, its
rank of likelihood within its text (1 = most likely) and its bin. Characters no token covers
(spaces, characters the tokenizer dropped) are written uncoloured, so the page shows each text
exactly. A zero-width token (e.g. `[eos]` at the end) is an empty span whose CSS `::after` shows
the token string, so it can be hovered without adding characters to the text; a token whose span
overlaps an earlier one keeps only its new characters (zero-width if none are new).
"""

from __future__ import annotations

import bisect
import math
from html import escape
from typing import Any, Sequence

import numpy as np

QUANTILES = (0.5, 0.2, 0.05)  # quantile cuts between the bins, from likely to unlikely
LOGPROB_CUTS = (math.log(1e-1), math.log(1e-2), math.log(1e-3))
COLOURS = ("#c7f2c0", "#fbe98a", "#ff9c8f", "#d9a6f5")  # green, yellow, red, purple (after GLTR)
BIN_NAMES = ("green", "yellow", "red", "purple")
LEVELS = {"token": ("tokens", "token_scores", "offsets"), "word": ("words", "word_scores", "word_offsets")}

CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.2em 2em;color:#222;
max-width:70em}
h1{font-size:1.35em;margin:0 0 .2em}
.meta{color:#555;margin:.2em 0 .6em}
.legend{display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:center;margin:.4em 0 1em;font-size:.9em}
.legend span.t{padding:0 .45em}
.rule{color:#555;font-size:.85em;margin:.2em 0 1em}
.rec{border-top:1px solid #ddd;padding:.5em 0 .7em}
.hd{font-size:.85em;color:#555;margin-bottom:.2em}
.hd .id{font-weight:600;color:#222;font-family:ui-monospace,Menlo,Consolas,monospace}
.hd b{color:#222;font-weight:600}
.txt{white-space:pre-wrap;word-wrap:break-word;font-size:1.05em;line-height:1.75}
.t{border-radius:3px;padding:1px 0;cursor:help;box-shadow:inset 1px 0 #fff}
.t:hover{outline:2px solid #333}
.z::after{content:attr(data-tok);font-size:.7em;color:#333;padding:0 .2em;vertical-align:.15em}
.b0{background:%s}.b1{background:%s}.b2{background:%s}.b3{background:%s}
.na{background:#e4e4e4;border-bottom:1px dashed #777}
""" % COLOURS


def _value(x: Any) -> float:
    """A score as a float; None or anything that is not a number becomes NaN."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return math.nan
    return float(x)


def _fmt(x: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}" if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _cuts(values: list[float], scale: str) -> tuple[float, float, float]:
    """The three bin boundaries, from likely to unlikely (descending)."""
    if scale == "logprob":
        return LOGPROB_CUTS
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return (math.inf, math.inf, math.inf)  # only +-inf / NaN: +inf still lands in green via >=
    return tuple(float(np.quantile(finite, q)) for q in QUANTILES)


def _bin(v: float, cuts: Sequence[float]) -> int | None:
    """0 (green, likely) .. 3 (purple, unlikely); None for NaN."""
    if math.isnan(v):
        return None
    for b, cut in enumerate(cuts):
        if v >= cut:
            return b
    return 3


def _ranks(values: list[float]) -> list[int | None]:
    """Rank of likelihood within one text: 1 + the number of strictly greater values; NaN: None."""
    ordered = sorted(v for v in values if not math.isnan(v))
    n = len(ordered)
    # 1 + count of values > v  ==  1 + n - (index after the last value <= v)
    return [None if math.isnan(v) else 1 + n - bisect.bisect_right(ordered, v) for v in values]


def _unit(record: dict, level: str, index: int) -> tuple[list[str], list[float], list[tuple[int, int]]]:
    """The units (tokens or words) of one record, their values and offsets, checked for length."""
    names = LEVELS[level]
    missing = [k for k in names if k not in record]
    rid = record.get("id", f"#{index}")
    if missing:
        raise ValueError(f"record {rid!r}: no {missing[0]!r} field for level={level!r}")
    units, scores, offsets = (record[k] for k in names)
    if not (len(units) == len(scores) == len(offsets)):
        raise ValueError(f"record {rid!r}: {names[0]}, {names[1]} and {names[2]} have different lengths "
                         f"({len(units)}, {len(scores)}, {len(offsets)})")
    spans = []
    for j, span in enumerate(offsets):
        try:
            start, end = (int(x) for x in span)
        except (TypeError, ValueError):
            raise ValueError(f"record {rid!r}: {names[2]}[{j}] = {span!r} is not a [start, end] pair") from None
        spans.append((start, end))
    return [str(u) for u in units], [_value(s) for s in scores], spans


def _legend(cuts: Sequence[float], counts: list[int], scale: str, value_name: str, plural: str) -> str:
    v = escape(value_name)
    if scale == "logprob":
        labels = ["p ≥ 1/10", "1/100 ≤ p < 1/10", "1/1000 ≤ p < 1/100", "p < 1/1000"]
    else:
        labels = ["most likely 50 %", "next 30 %", "next 15 %", "least likely 5 %"]
    c = [_fmt(x, 2) for x in cuts]
    ranges = [f"{v} ≥ {c[0]}", f"{c[1]} ≤ {v} < {c[0]}", f"{c[2]} ≤ {v} < {c[1]}", f"{v} < {c[2]}"]
    items = [f'<span><span class="t b{b}">{escape(labels[b])}</span> {ranges[b]} '
             f'<span class="rule">({counts[b]} {plural})</span></span>' for b in range(4)]
    if counts[4]:
        items.append(f'<span><span class="t na">n/a</span> not a number <span class="rule">({counts[4]} {plural})</span></span>')
    return '<div class="legend">' + "".join(items) + "</div>"


def _text_html(text: str, units: list[str], values: list[float], spans: list[tuple[int, int]],
               cuts: Sequence[float], level: str, value_name: str) -> str:
    """The text with each unit wrapped in a coloured span, uncovered characters as they are."""
    ranks = _ranks(values)
    n_ranked = sum(r is not None for r in ranks)
    out, pos = [], 0
    for j in sorted(range(len(units)), key=lambda j: (spans[j][0], j)):  # reading order, stable
        start, end = spans[j]
        start = min(max(start, pos), len(text))  # clip to the text and to what is not yet written
        end = min(max(end, start), len(text))
        out.append(escape(text[pos:start], quote=False))  # what no token covers, uncoloured
        pos = start
        b = _bin(values[j], cuts)
        rank = f"rank {ranks[j]} of {n_ranked} in this text" if ranks[j] is not None else "no rank"
        tip = (f"{level} {units[j]!r}\n{value_name} = {_fmt(values[j])}\n{rank}\n"
               f"bin: {BIN_NAMES[b] if b is not None else 'n/a'}")
        cls = f"t b{b}" if b is not None else "t na"
        if end > start:
            out.append(f'<span class="{cls}" title="{escape(tip)}">{escape(text[start:end], quote=False)}</span>')
            pos = end
        else:
            out.append(f'<span class="{cls} z" title="{escape(tip)}" data-tok="{escape(units[j])}"></span>')
    out.append(escape(text[pos:], quote=False))
    return "".join(out)


def render_html(records: list[dict], *, title: str, value_name: str, level: str = "token",
                scale: str = "quantile") -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external resources) showing each
    record's text with its tokens (or words, `level="word"`) coloured by value; see the module
    docstring for the record format and the colour rule. `value_name` labels the values (e.g.
    "log p" or "-E"). Raises ValueError on a record whose units, scores and offsets differ in
    length or lack the fields of `level`; offsets outside the text or overlapping are clipped."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}, not {level!r}")
    if scale not in ("quantile", "logprob"):
        raise ValueError(f"scale must be 'quantile' or 'logprob', not {scale!r}")
    units = [_unit(r, level, i) for i, r in enumerate(records)]
    all_values = [v for _, values, _ in units for v in values]
    cuts = _cuts(all_values, scale)
    counts = [0] * 5  # bins 0..3, then NaN
    for v in all_values:
        b = _bin(v, cuts)
        counts[4 if b is None else b] += 1

    plural = LEVELS[level][0]
    rule = ("bins cut at the 50 %, 20 % and 5 % quantiles of all values on this page"
            if scale == "quantile" else "bins cut at fixed probabilities 1/10, 1/100, 1/1000")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<div class="meta">{len(records)} texts, {len(all_values)} {plural}; each {level} coloured by '
        f"<b>{escape(value_name)}</b> (nats, higher = more likely). Hover a {level} for its value and "
        f"its rank of likelihood within its text.</div>",
        _legend(cuts, counts, scale, value_name, plural),
        f'<div class="rule">Colour rule: {rule}.</div>',
    ]
    for i, (record, (names, values, spans)) in enumerate(zip(records, units)):
        text = str(record.get("text", ""))
        rid = str(record.get("id", f"#{i}"))
        n_tokens = record.get("n_tokens", len(record.get("tokens", names)))
        total = _value(record.get("score"))
        mean = f", {_fmt(total / n_tokens)} per token" if isinstance(n_tokens, int) and n_tokens > 0 else ""
        words = f", {len(names)} words" if level == "word" else ""
        parts.append(
            f'<div class="rec"><div class="hd"><span class="id">{escape(rid)}</span> · '
            f'{escape(str(record.get("method", "")))} · score <b>{_fmt(total)}</b>{mean} · '
            f"{escape(str(n_tokens))} tokens{words}</div>"
            f'<div class="txt">{_text_html(text, names, values, spans, cuts, level, value_name)}</div></div>')
    parts.append("</body></html>\n")
    return "\n".join(parts)
