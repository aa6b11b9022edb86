"""Tagging metrics: token accuracy, and span precision / recall / F1 for BIO tag sets.

    token_accuracy(gold, pred)          # gold, pred: lists of tag sequences
    spans(["B-PER", "I-PER", "O"])      # {("PER", 0, 2)}: (type, start, end) with end exclusive
    span_f1(gold, pred)                 # {"precision", "recall", "f1", "gold_spans", "pred_spans"}
    is_bio(tags)                        # every tag O, B-X or I-X (and at least one B-X or I-X)

Spans are read as CoNLL's conlleval (and seqeval's default mode) reads them: a span starts at
B-X, or at an I-X that does not continue a span of type X (after O, after another type, or at
the sentence start), and ends before the next tag that does not continue it. A span is correct
when its type and both ends match a gold span exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def token_accuracy(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """The fraction of tokens whose predicted tag is the gold one."""
    _check(gold, pred)
    total = sum(len(g) for g in gold)
    if total == 0:
        raise ValueError("no tokens to score")
    return sum(a == b for g, p in zip(gold, pred) for a, b in zip(g, p)) / total


def selected_score(tags: Sequence[str]) -> str:
    """What `--keep-best` maximises for a tag set, as the paper's code selects: "span_f1" for a
    BIO tag set (chunking, NER), "accuracy" otherwise (POS). `SCORE_NAMES` gives its words."""
    return "span_f1" if is_bio(tags) else "accuracy"


SCORE_NAMES = {"span_f1": "span F1", "accuracy": "accuracy"}


def is_bio(tags: Sequence[str]) -> bool:
    """True for a BIO tag set: every tag `O`, `B-X` or `I-X`, and at least one of the latter."""
    return (any(t[:2] in ("B-", "I-") for t in tags)
            and all(t == "O" or (t[:2] in ("B-", "I-") and len(t) > 2) for t in tags))


def spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The (type, start, end) spans of one BIO tag sequence (end exclusive)."""
    out: set[tuple[str, int, int]] = set()
    kind, start = None, 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, typ = (tag[:2], tag[2:]) if tag[:2] in ("B-", "I-") else ("O", None)
        continues = prefix == "I-" and typ == kind
        if kind is not None and not continues:
            out.add((kind, start, i))
            kind = None
        if prefix != "O" and not continues:
            kind, start = typ, i
    return out


def span_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged span precision, recall and F1 over all sentences (0 where undefined)."""
    _check(gold, pred)
    n_gold = n_pred = correct = 0
    for g, p in zip(gold, pred):
        gs, ps = spans(g), spans(p)
        n_gold, n_pred, correct = n_gold + len(gs), n_pred + len(ps), correct + len(gs & ps)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "gold_spans": n_gold, "pred_spans": n_pred}


def tagging_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], tags: Sequence[str],
                   split: str) -> dict[str, Any]:
    """{split}_accuracy and _tokens, and for a BIO tag set span precision, recall and F1."""
    out: dict[str, Any] = {f"{split}_accuracy": token_accuracy(gold, pred),
                           f"{split}_tokens": sum(len(g) for g in gold), f"{split}_sentences": len(gold)}
    if is_bio(tags):
        out.update({f"{split}_span_{k}": v for k, v in span_f1(gold, pred).items()})
    return out


def _check(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> None:
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred)):
        raise ValueError("gold and predicted tags must have the same sentences and lengths")
