"""Windows of real text and where generation starts in them (Bakhtin et al. 2019, sec. 4.1-4.2).

A corpus is split by document first (`textebm data prepare` does so), so no window of one split
shares text with another. Each document's sentences, joined by spaces, are tokenised into one
stream in the shared vocabulary and cut into windows of `length` tokens every `stride` tokens
(the paper: L = 160, stride L/4 on small corpora and L on large ones). A window keeps a context
of c tokens, c drawn with equal probability from `contexts` (the paper: 120 or 140 of 160; the CPU
default 48 or 56 of 64), and a generator replaces the rest:

    direction l2r (suffix completion):  window = context (first c) + generated (last L − c)
    direction r2l (prefix completion):  window = generated (first L − c) + context (last c)

Which windows are kept (`max_windows`, a seeded subset in document order) and each window's c
depend only on the seed, the corpus, the split and the window's place, never on the generator,
so the negatives of two generators share their positives and contexts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from textebm.data.streams import starts
from textebm.errors import InputError, TextebmError
from textebm.io import iter_jsonl
from textebm.seeds import derive_seed, seeded_sample

DIRECTIONS = ("l2r", "r2l")


@dataclass(frozen=True)
class Window:
    key: str  # "{corpus}/{split}/{doc}/{start}": unique and stable
    corpus: str
    split: str
    doc: str
    start: int  # token offset in the document's stream
    ids: tuple[int, ...]  # the real window, `length` tokens
    context_len: int  # c


def make_windows(streams: Sequence[tuple[str, list[int]]], corpus: str, split: str, length: int, stride: int,
                 contexts: Sequence[int], seed: int, max_windows: int = 0) -> list[Window]:
    """The windows of a split (see the module doc); `max_windows` > 0 keeps a seeded subset of
    that many, in document order."""
    if not contexts or any(not 0 < c < length for c in contexts):
        raise ValueError(f"context lengths must lie strictly between 0 and the window length {length}, "
                         f"got {list(contexts)}")
    places = [(doc, s) for doc, ids in streams for s in starts(len(ids), length, stride)]
    if max_windows and len(places) > max_windows:
        keep = seeded_sample(len(places), max_windows, seed, corpus, split, "subset")
        places = [places[i] for i in keep]
    by_doc = dict(streams)
    out = []
    for doc, s in places:
        c = contexts[random.Random(derive_seed(seed, corpus, split, doc, s, "context")).randrange(len(contexts))]
        out.append(Window(f"{corpus}/{split}/{doc}/{s}", corpus, split, doc, s,
                          tuple(by_doc[doc][s:s + length]), c))
    return out


def context_ids(window: Window, direction: str) -> list[int]:
    """The kept tokens in reading order: the first c (l2r) or the last c (r2l)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be l2r or r2l, got {direction!r}")
    c = window.context_len
    return list(window.ids[:c]) if direction == "l2r" else list(window.ids[len(window.ids) - c:])


def assemble(window: Window, direction: str, generated: Sequence[int]) -> list[int]:
    """A negative window: the context kept as it is and `generated` (reading order) in the place
    of the real continuation (suffix for l2r, prefix for r2l)."""
    ctx = context_ids(window, direction)
    return [*ctx, *generated] if direction == "l2r" else [*generated, *ctx]


def generated_part(ids: Sequence[int], context_len: int, direction: str) -> list[int]:
    """The part of a window that is not context (the continuation, reading order)."""
    return list(ids[context_len:]) if direction == "l2r" else list(ids[:len(ids) - context_len])


def window_seqs(rows: list[dict]) -> list[list[int]]:
    """Every window of negatives-file rows, each real one followed by its k negatives: B(1+k) id lists."""
    return [s for r in rows for s in (r["positive"], *r["negatives"])]


def _first_bad_id(ids: list[int], vocab_size: int | None) -> int | None:
    """The first of `ids` below 0 or, with `vocab_size`, not below it; None when all are token ids."""
    return next((t for t in ids if t < 0 or (vocab_size is not None and t >= vocab_size)), None)


def read_window_file(path, length: int | None = None, vocab_size: int | None = None, length_of: str = "",
                     vocab_of: str = "") -> list[dict]:
    """The rows of a `negatives generate` file, checked: `positive` a list of token ids,
    `negatives` a non-empty list of id lists, each as long as the positive, `context_len` and
    `direction` present (InputError naming the file and line otherwise). A token id is an integer
    of at least 0 and, with `vocab_size`, below it (`vocab_of` names that vocabulary); every window
    has `length` tokens (`length_of` says why; default: as many as the first one)."""

    rows = []
    for lineno, row in iter_jsonl(path):
        pos, negs = row.get("positive"), row.get("negatives")
        if not (isinstance(pos, list) and pos and all(isinstance(t, int) for t in pos)):
            raise InputError(path, "`positive` must be a non-empty list of token ids "
                                   "(a file written by `textebm negatives generate`)", lineno)
        if not (isinstance(negs, list) and negs and all(isinstance(n, list) and len(n) == len(pos)
                                                         and all(isinstance(t, int) for t in n) for n in negs)):
            raise InputError(path, "`negatives` must be a non-empty list of id lists as long as the positive",
                             lineno)
        if row.get("direction") not in DIRECTIONS or not isinstance(row.get("context_len"), int):
            raise InputError(path, "missing `direction` (l2r / r2l) or `context_len`", lineno)
        if not 0 <= row["context_len"] < len(pos):
            raise InputError(path, f"`context_len` {row['context_len']} is not a prefix of the {len(pos)}-token window "
                                   f"(0 to {len(pos) - 1})", lineno)
        bad = next((t for t in (_first_bad_id(s, vocab_size) for s in (pos, *negs)) if t is not None), None)
        if bad is not None and bad < 0:
            raise InputError(path, f"token id {bad} is negative; token ids count from 0", lineno)
        if bad is not None:
            raise InputError(path, f"token id {bad} is beyond the {vocab_size} entries of "
                                   f"{vocab_of or 'the vocabulary'}; the windows were cut in another vocabulary",
                             lineno)
        if length is None:
            length, length_of = len(pos), "the windows above it are that long"
        if len(pos) != length:
            raise InputError(path, f"a window of {len(pos)} tokens where {length} are expected ({length_of})", lineno)
        if rows and len(negs) != len(rows[0]["negatives"]):
            raise InputError(path, f"this window has {len(negs)} negatives where the first has "
                                   f"{len(rows[0]['negatives'])}; every window of a file has as many", lineno)
        rows.append(row)
    if not rows:
        raise InputError(path, "no windows in the file")
    return rows


def read_window_files(paths, option: str, length: int | None = None, vocab_size: int | None = None,
                      length_of: str = "", vocab_of: str = "") -> list[dict]:
    """The rows of several negatives files, in order, checked as `read_window_file` does; every
    window must be as long as the first one (or `length`). A missing file is a TextebmError naming
    `option`."""
    from pathlib import Path

    rows = []
    for p in paths:
        if not Path(p).is_file():
            raise TextebmError(f"{option} {p}: no such file; write one with `textebm negatives generate`")
        rows.extend(read_window_file(p, length, vocab_size, length_of, vocab_of))
        if length is None:
            length, length_of = len(rows[0]["positive"]), f"the windows of {paths[0]} are that long"
    return rows
