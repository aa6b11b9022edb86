"""Turn user files (JSONL, CSV, TSV, plain text) into the standard dataset layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textebm.data.layout import DATASET_KIND, split_examples, write_dataset
from textebm.data.readers import read_examples
from textebm.outputs import check_output_dir


def convert(
    input: str | Path,
    out: str | Path,
    dev: str | Path | None = None,
    test: str | Path | None = None,
    seed: int = 0,
    text_field: str | None = None,
    pair_field: str | None = None,
    label_field: str | None = None,
    id_field: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Read `input` (and `dev` / `test` when given) and write `out` in the standard layout.

    Splits that are not given are carved out of `input` by a seeded split: 80/10/10 when only
    `input` is given, 90/10 when one of dev / test is missing. Every file is read and checked
    before anything is written; a file's own ids are kept as `source_id`. Returns dataset.json.
    """

    check_output_dir(out, DATASET_KIND, overwrite)  # before reading anything
    fields = dict(text_field=text_field, pair_field=pair_field, label_field=label_field,
                  id_field=id_field)
    files = {"train": Path(input), "dev": dev and Path(dev), "test": test and Path(test)}
    given = {s: read_examples(f, **fields) for s, f in files.items() if f is not None}
    missing = [s for s in ("dev", "test") if s not in given]
    if missing:
        fractions = {"train": 0.8, "dev": 0.1, "test": 0.1} if len(missing) == 2 else \
            {"train": 0.9, missing[0]: 0.1}
        given.update(split_examples(given["train"], seed, fractions))
    splits = {s: [_rename_id(ex) for ex in given[s]] for s in ("train", "dev", "test")}
    labelled = any("label" in ex for ex in splits["train"])
    meta = {
        "name": Path(out).name,
        "task": "classification" if labelled else "language-modelling",
        "source": {"files": {s: str(f.absolute()) for s, f in files.items() if f is not None},
                   "fields": {k: v for k, v in fields.items() if v is not None}},
        "licence": "as the user's files",
        "split": "given files" if not missing else
                 f"seeded split of the input for {' and '.join(missing)}",
        "seed": seed,
    }
    return write_dataset(out, splits, meta, overwrite)


def _rename_id(ex: dict[str, Any]) -> dict[str, Any]:
    if "id" not in ex:
        return ex
    ex = dict(ex)
    ex["source_id"] = ex.pop("id")
    return ex
