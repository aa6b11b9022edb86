"""Read n-best lists in the JSON of awslabs/mlm-scoring (Salazar et al. 2020), as used for the
LibriSpeech reranking of Clark et al. (2020, sec. 3.2):

    {"1272-128104-0000": {"ref": "MISTER QUILTER IS THE APOSTLE ...",
                          "hyp_1": {"text": "MISTER QUILTER IS THE APOSTLE ...", "score": -3.71},
                          "hyp_2": {"text": "MISTER QUILTER IS THE APOSTLES ...", "score": -5.02},
                          ...},
     ...}

`score` is the speech model's log score of the hypothesis (higher is better); hypotheses are
kept in the order of N in `hyp_N`. An utterance may carry `"subset": "clean"`; without one it
belongs to the subset "all" (reranking chooses lambda per subset). Other keys of a hypothesis
(an `lm_score` a scoring tool added) are ignored; any other key of an utterance is an error, so
a typo like `hyp1` never drops a hypothesis silently.

`top_indices` / `top_hypotheses` keep the N best hypotheses of a list by the speech model's score
(`textebm rerank --top N`).

Every problem is an `InputError` naming the file and the line: the decoder's line for bad JSON,
and for everything else the line of the offending key, found by scanning the raw text (the json
module keeps no positions, and silently keeps only the last of two equal keys).
"""

from __future__ import annotations

import bisect
import json
import math
import re
from dataclasses import dataclass
from json.decoder import scanstring
from pathlib import Path
from typing import Any

from textebm.errors import InputError

DEFAULT_SUBSET = "all"
HYP_KEY = re.compile(r"hyp_([1-9][0-9]*)")
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Hypothesis:
    key: str  # "hyp_3"
    text: str
    score: float  # the speech model's log score (higher is better)
    line: int


@dataclass(frozen=True)
class Utterance:
    id: str
    ref: str
    hyps: tuple[Hypothesis, ...]  # in the order of N in hyp_N
    subset: str
    line: int


def read_nbest(path: str | Path) -> list[Utterance]:
    """All utterances of an n-best file, in file order; InputError (file and line) on bad content."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found" if not path.exists() else "not a regular file")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON: {e.msg} (column {e.colno})", e.lineno) from None
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(pos: int) -> int:
        return bisect.bisect_right(newlines, pos) + 1

    start = _WS.match(text).end()
    if not isinstance(doc, dict):
        raise InputError(path, f"expected a JSON object {{utterance id: {{\"ref\": ..., \"hyp_1\": {{\"text\": ..., "
                               f"\"score\": ...}}, ...}}}}, got {type(doc).__name__}", line_of(start))
    if not doc:
        raise InputError(path, "no utterances (an empty object)", line_of(start))
    utterances = []
    first_seen: dict[str, int] = {}
    for uid, kpos, value, vpos in _members(text, start):
        line = line_of(kpos)
        _first_time(path, first_seen, uid, line, f"utterance id {uid!r}")
        utterances.append(_utterance(path, text, uid, line, value, vpos, line_of))
    return utterances


def top_indices(scores, n: int) -> list[int]:
    """Positions of the `n` highest scores (of equal scores, the earlier), in their original order;
    every position when n is 0 or at least the length."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties keep list order
    return list(range(len(scores))) if n <= 0 or n >= len(scores) else sorted(order[:n])


def top_hypotheses(u: Utterance, n: int) -> Utterance:
    """`u` with only its `n` best hypotheses by the speech model's score, in n-best order (all of
    them when n is 0)."""
    keep = top_indices([h.score for h in u.hyps], n)
    return Utterance(u.id, u.ref, tuple(u.hyps[i] for i in keep), u.subset, u.line)


def _first_time(path: Path, seen: dict[str, int], key: str, line: int, what: str) -> None:
    """Record where `key` appears; a second appearance is an InputError naming both lines."""
    if key in seen:
        raise InputError(path, f"{what} appears twice (first at line {seen[key]})", line)
    seen[key] = line


def _utterance(path: Path, text: str, uid: str, line: int, value: Any, vpos: int, line_of) -> Utterance:
    if not isinstance(value, dict):
        raise InputError(path, f"utterance {uid!r}: expected an object with \"ref\" and \"hyp_1\", \"hyp_2\", ...; "
                               f"got {type(value).__name__}", line)
    ref = subset = None
    hyps: list[tuple[int, Hypothesis]] = []
    seen: dict[str, int] = {}
    for key, kpos, item, ipos in _members(text, vpos):
        kline = line_of(kpos)
        _first_time(path, seen, key, kline, f"utterance {uid!r}: key {key!r}")
        if key == "ref":
            if not isinstance(item, str):
                raise InputError(path, f"utterance {uid!r}: \"ref\" must be a string (the reference transcript), "
                                       f"got {type(item).__name__}", kline)
            ref = item
        elif key == "subset":
            if not isinstance(item, str) or not item.strip():
                raise InputError(path, f"utterance {uid!r}: \"subset\" must be a non-empty string", kline)
            subset = item
        elif (m := HYP_KEY.fullmatch(key)) is not None:
            hyps.append((int(m.group(1)), _hypothesis(path, text, uid, key, kline, item, ipos, line_of)))
        else:
            raise InputError(path, f"utterance {uid!r}: unknown key {key!r}; expected \"ref\", \"subset\" or "
                                   "\"hyp_N\" (N = 1, 2, ...)", kline)
    if ref is None:
        raise InputError(path, f"utterance {uid!r} has no \"ref\" (the reference transcript)", line)
    if not hyps:
        raise InputError(path, f"utterance {uid!r} has no hypotheses (\"hyp_1\", \"hyp_2\", ...): an empty n-best list",
                         line)
    hyps.sort(key=lambda nh: nh[0])
    return Utterance(uid, ref, tuple(h for _, h in hyps), subset if subset is not None else DEFAULT_SUBSET, line)


def _hypothesis(path: Path, text: str, uid: str, key: str, line: int, item: Any, ipos: int, line_of) -> Hypothesis:
    where = f"utterance {uid!r}, {key}"
    if not isinstance(item, dict):
        raise InputError(path, f"{where}: expected an object {{\"text\": ..., \"score\": ...}}, "
                               f"got {type(item).__name__}", line)
    fields: dict[str, tuple[Any, int]] = {}
    for name, kpos, value, _ in _members(text, ipos):
        if name in fields:
            raise InputError(path, f"{where}: key {name!r} appears twice", line_of(kpos))
        fields[name] = (value, line_of(kpos))
    if "text" not in fields:
        raise InputError(path, f"{where} has no \"text\"", line)
    hyp_text, tline = fields["text"]
    if not isinstance(hyp_text, str):
        raise InputError(path, f"{where}: \"text\" must be a string, got {type(hyp_text).__name__}", tline)
    if not hyp_text.strip():
        raise InputError(path, f"{where}: \"text\" is empty; an empty hypothesis cannot be scored", tline)
    if "score" not in fields:
        raise InputError(path, f"{where} has no \"score\" (the speech model's log score)", line)
    score, sline = fields["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise InputError(path, f"{where}: \"score\" must be a number, got {type(score).__name__}", sline)
    if not math.isfinite(score):
        raise InputError(path, f"{where}: \"score\" must be a finite number, got {score}", sline)
    return Hypothesis(key, hyp_text, float(score), line)


def _members(text: str, idx: int) -> list[tuple[str, int, Any, int]]:
    """(key, position of the key, value, position of the value) of the JSON object starting at
    text[idx] == "{", in document order, duplicates included. The text is known to be valid JSON."""
    out = []
    idx = _WS.match(text, idx + 1).end()
    if text[idx] == "}":
        return out
    while True:
        kpos = idx
        key, idx = scanstring(text, idx + 1)
        idx = _WS.match(text, idx).end() + 1  # past ":"
        vpos = _WS.match(text, idx).end()
        value, idx = _DECODER.raw_decode(text, vpos)
        out.append((key, kpos, value, vpos))
        idx = _WS.match(text, idx).end()
        if text[idx] == "}":
            return out
        idx = _WS.match(text, idx + 1).end()  # past ","
