"""Per-word scores: sub-word token scores summed into the whitespace-separated words of the text.

A word is a maximal run of non-space characters of the input text (`str.split()`'s words). A
token belongs to the word that holds its first non-space character; tokens outside every word
(a causal LM's [eos], whose span is empty, or a span of spaces) belong to none, so the word
scores sum to the text's score minus theirs. The word's score is the sum of its tokens' scores:
log p(word | context) under the chain rule for a causal LM, the sum of the tokens' PLL terms for
the cloze methods (as Salazar et al. sum sub-word PLLs).
"""

from __future__ import annotations

import bisect
import math
import re


def word_scores(text: str, offsets: list[tuple[int, int]], scores: list[float]
                ) -> tuple[list[str], list[float], list[tuple[int, int]]]:
    """(words, their summed scores, their character spans) of `text`."""
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    starts = [s for s, _ in spans]
    parts: list[list[float]] = [[] for _ in spans]
    for (a, b), v in zip(offsets, scores):
        while a < b and text[a].isspace():  # a byte-level BPE token may carry its leading space
            a += 1
        if a >= b:
            continue
        w = bisect.bisect_right(starts, a) - 1
        if w >= 0 and a < spans[w][1]:
            parts[w].append(v)
    return [text[s:e] for s, e in spans], [math.fsum(p) for p in parts], spans
