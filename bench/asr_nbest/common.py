"""Shared by build.py, wer.py and ngram_scores.py: PTB <-> recogniser word forms and WER.

PTB (Mikolov's LM version) splits clitics off as tokens: "abc 's", "do n't", "ca n't",
"companies '". The recogniser's dictionary (CMUdict) has them as whole words: "abc's", "don't",
"can't", "companies'". `join_clitics` makes the spoken / dictionary form of a PTB sentence and
`split_clitics` turns a recogniser hypothesis back into PTB tokens; a sentence is only used when
the round trip gives back exactly its PTB tokens, so a perfect recognition has WER 0.
"""

from __future__ import annotations

CLITICS = ("n't", "'s", "'re", "'ve", "'ll", "'d", "'m")


def is_clitic(tok: str) -> bool:
    return tok in CLITICS or tok == "'"


def join_clitics(tokens: list[str]) -> list[str]:
    out: list[str] = []
    for t in tokens:
        if out and is_clitic(t):
            out[-1] += t
        else:
            out.append(t)
    return out


def split_clitics(words: list[str]) -> list[str]:
    out: list[str] = []
    for w in words:
        for c in CLITICS:
            if w.endswith(c) and len(w) > len(c):
                out += [w[: -len(c)], c]
                break
        else:
            if w.endswith("s'") and len(w) > 2:
                out += [w[:-1], "'"]
            else:
                out.append(w)
    return out


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance between two word lists (substitution = insertion = deletion = 1)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def corpus_wer(pairs: list[tuple[str, str]]) -> float:
    """Total word edits / total reference words over (ref, hyp) text pairs."""
    edits = sum(edit_distance(r.split(), h.split()) for r, h in pairs)
    words = sum(len(r.split()) for r, _ in pairs)
    return edits / max(words, 1)
