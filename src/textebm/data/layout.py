"""The standard on-disk dataset layout and seeded splits.

A dataset is a directory:

    DIR/train.jsonl  DIR/dev.jsonl  DIR/test.jsonl   one example a line:
        {"id": "train-000123", "text": ..., ["text_pair": ...], ["label": "positive"], ...}
    DIR/dataset.json                                 name, source, seed, sizes, labels, licence

Ids are `{split}-{index:06d}` in file order, so they are stable for a given source and seed.
The folder is written as a whole (`textebm.outputs.output_dir`): a failure leaves no partial output,
and an existing folder is replaced only with --overwrite and only when textebm wrote it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from textebm.errors import InputError, TextebmError
from textebm.outputs import output_dir

SPLITS = ("train", "dev", "test")
DEFAULT_FRACTIONS = {"train": 0.8, "dev": 0.1, "test": 0.1}
LAYOUT_FILES = {f"{s}.jsonl" for s in SPLITS} | {"dataset.json"}
FIRST_KEYS = ("id", "text", "text_pair", "label")


def input_sha256(value: str | Path) -> str:
    """What a training reads from one input, as config.json `inputs_sha256` records it: a file's
    bytes; a run folder's model (RUN and RUN/model hash the same, and what a run keeps beside its
    model, metrics.json with an evaluation merged in, checkpoint/, is not what is read); a dataset
    folder's splits and description (not an output written into it); any other folder's files; a
    value that names nothing here (a models-fetch id, a dataset recipe) stands for itself."""
    from textebm.fingerprint import file_sha256, folder_sha256

    path = Path(value).expanduser()
    if path.is_file():
        return file_sha256(path)
    if path.is_dir():
        if (path / "model").is_dir():
            path = path / "model"
        return dataset_sha256(path) or folder_sha256(path)
    return f"name:{value}"


def dataset_sha256(folder: str | Path) -> str | None:
    """A dataset folder's content as a training records it (config.json `inputs_sha256`): its
    splits and description, not an output written into it; None for a folder with none of them."""
    from textebm.fingerprint import file_sha256, json_sha256

    folder = Path(folder)
    files = sorted(f for f in LAYOUT_FILES if (folder / f).is_file())
    return json_sha256([[f, file_sha256(folder / f)] for f in files]) if files else None


def seeded_split(n: int, seed: int, fractions: Mapping[str, float] = DEFAULT_FRACTIONS
                 ) -> dict[str, list[int]]:
    """Split indices 0..n-1 by a `random.Random(seed)` permutation.

    Each split other than `train` gets `max(1, round(n * fraction))` items, `train` the rest;
    indices within a split are sorted, so each split keeps the source order.
    """
    if "train" not in fractions:
        raise ValueError("fractions must include 'train'")
    held = {s: max(1, round(n * f)) for s, f in fractions.items() if s != "train"}
    if n - sum(held.values()) < 1:
        raise TextebmError(f"too few items ({n}) to split into {', '.join(fractions)}")
    perm = list(range(n))
    random.Random(seed).shuffle(perm)
    out: dict[str, list[int]] = {}
    start = 0
    for s in fractions:
        k = n - sum(held.values()) if s == "train" else held[s]
        out[s] = sorted(perm[start:start + k])
        start += k
    return {s: out[s] for s in SPLITS if s in out}


def split_examples(examples: Sequence[dict], seed: int,
                   fractions: Mapping[str, float] = DEFAULT_FRACTIONS) -> dict[str, list[dict]]:
    """Seeded split of single examples (see `seeded_split`)."""
    idx = seeded_split(len(examples), seed, fractions)
    return {s: [examples[i] for i in ids] for s, ids in idx.items()}


def split_documents(docs: Mapping[str, Sequence[dict]], seed: int,
                    fractions: Mapping[str, float] = DEFAULT_FRACTIONS) -> dict[str, list[dict]]:
    """Seeded split of whole documents, so no document contributes to two splits.

    Documents are ordered by key before the permutation, so the result depends only on the
    seed and the set of documents; within a split, examples stay in document-key order.
    """
    keys = sorted(docs)
    idx = seeded_split(len(keys), seed, fractions)
    return {s: [ex for i in ids for ex in docs[keys[i]]] for s, ids in idx.items()}


def with_ids(split: str, examples: Sequence[dict]) -> list[dict]:
    """Copies of `examples` with `id = {split}-{i:06d}` and keys in a readable order."""
    out = []
    for i, ex in enumerate(examples):
        row: dict[str, Any] = {"id": f"{split}-{i:06d}"}
        row.update({k: ex[k] for k in FIRST_KEYS[1:] if k in ex})
        row.update({k: v for k, v in ex.items() if k not in FIRST_KEYS})
        out.append(row)
    return out


def label_set(splits: Mapping[str, Sequence[dict]]) -> list[str]:
    return sorted({ex["label"] for rows in splits.values() for ex in rows if "label" in ex})


# The output marker's kind of a dataset folder (textebm.outputs): one per command, so that
# `data prepare --overwrite` never replaces `data convert`'s folder nor the other way round.
PREPARE_KIND, CONVERT_KIND = "data prepare", "data convert"
DATASET_KIND = PREPARE_KIND


def write_dataset(out: str | Path, splits: Mapping[str, Sequence[dict]], meta: dict[str, Any],
                  overwrite: bool = False, kind: str = DATASET_KIND) -> dict[str, Any]:
    """Write the standard layout to `out` as a whole and return the `dataset.json` contents.

    `splits` maps each of train/dev/test to its examples (ids are assigned here); `meta` is
    merged into `dataset.json` before the computed `splits` sizes and `labels`.
    """
    out = Path(out).absolute()
    missing = [s for s in SPLITS if s not in splits]
    if missing:
        raise ValueError(f"splits missing: {missing}")
    for s in SPLITS:
        for ex in splits[s]:
            if not isinstance(ex.get("text"), str) or not ex["text"].strip():
                raise InputError(out / f"{s}.jsonl", f"example without text: {str(ex)[:80]}")
    info = {**meta, "splits": {s: len(splits[s]) for s in SPLITS}, "labels": label_set(splits)}
    with output_dir(out, kind, overwrite) as tmp:
        for s in SPLITS:
            with open(tmp / f"{s}.jsonl", "w", encoding="utf-8") as f:
                for row in with_ids(s, splits[s]):
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
        with open(tmp / "dataset.json", "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2, ensure_ascii=False)
            f.write("\n")
    return info
