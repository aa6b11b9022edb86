"""Documents as token streams: a corpus's sentences, joined per document, tokenised as one text.

Language models that generate windows of running text (Bakhtin et al. 2019) train on chunks of
these streams, and the windows of real text are cut from them (`textebm.detection.windows`).
"""

from __future__ import annotations

from typing import Sequence


def doc_streams(rows: Sequence[dict], tokenizer) -> list[tuple[str, list[int]]]:
    """(doc, token ids) of each document of a split, in first-appearance order; a document's
    texts are joined by single spaces. Rows without `doc` each count as their own document."""
    docs: dict[str, list[str]] = {}
    for i, row in enumerate(rows):
        docs.setdefault(str(row.get("doc", row.get("id", i))), []).append(row["text"])
    names = list(docs)
    texts = [" ".join(docs[d]) for d in names]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    return list(zip(names, ids))


def starts(n: int, length: int, stride: int) -> range:
    """Offsets of the windows of `length` tokens every `stride` tokens in a stream of n tokens."""
    if length < 1 or stride < 1:
        raise ValueError(f"need length >= 1 and stride >= 1, got {length}, {stride}")
    return range(0, max(n - length + 1, 0), stride)


def chunks(streams: Sequence[tuple[str, list[int]]], length: int) -> list[list[int]]:
    """Consecutive pieces of `length` tokens of every stream (a shorter tail piece included)."""
    return [ids[s:s + length] for _, ids in streams for s in range(0, len(ids), length)]
