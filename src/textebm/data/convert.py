"""Turn user files (JSONL, CSV, TSV, plain text, CoNLL columns) into the standard dataset layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textebm.data.conll import CONLL_SUFFIX, read_conll
from textebm.data.layout import CONVERT_KIND, split_examples, write_dataset
from textebm.data.readers import read_examples
from textebm.errors import TextebmError
from textebm.outputs import check_not_input, check_output_dir

FORMATS = ("auto", "conll")


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
    format: str = "auto",
    token_column: int = 0,
    tag_column: int = -1,
) -> dict[str, Any]:
    """Read `input` (and `dev` / `test` when given) and write `out` in the standard layout.

    Splits that are not given are carved out of `input` by a seeded split: 80/10/10 when only
    `input` is given, 90/10 when one of dev / test is missing. Every file is read and checked
    before anything is written; a file's own ids are kept as `source_id`. Returns dataset.json.
    `format="conll"` (or `auto` with a `.conll` input) reads CoNLL column files
    (`textebm.data.conll`, columns `token_column` / `tag_column`) into a tagging dataset: rows
    `text`, `tokens`, `tags` and `source_line`.
    """

    check_not_input(out, [("--input", input), ("--dev", dev or ""), ("--test", test or "")])
    check_output_dir(out, CONVERT_KIND, overwrite)  # before reading anything
    fields = dict(text_field=text_field, pair_field=pair_field, label_field=label_field,
                  id_field=id_field)
    files = {"train": Path(input), "dev": dev and Path(dev), "test": test and Path(test)}
    if format not in FORMATS:
        raise TextebmError(f"--format: {format!r}; expected one of {', '.join(FORMATS)}")
    conll = format == "conll" or format == "auto" and files["train"].suffix.lower() == CONLL_SUFFIX
    if conll and any(v is not None for v in fields.values()):
        given_fields = [f"--{k.replace('_', '-')}" for k, v in fields.items() if v is not None]
        raise TextebmError(f"{given_fields[0]}: a CoNLL file has columns, not fields; name them "
                           "with --token-column / --tag-column")
    if not conll and (token_column, tag_column) != (0, -1):
        raise TextebmError(f"--{'token' if token_column != 0 else 'tag'}-column: only for CoNLL "
                           f"column files (--format conll, or a {CONLL_SUFFIX} input)")
    if conll:
        given = {s: [_source_line(r) for r in read_conll(f, token_column, tag_column)]
                 for s, f in files.items() if f is not None}
    else:
        given = {s: read_examples(f, **fields) for s, f in files.items() if f is not None}
    missing = [s for s in ("dev", "test") if s not in given]
    if missing:
        fractions = ({"train": 0.8, "dev": 0.1, "test": 0.1} if len(missing) == 2
                     else {"train": 0.9, missing[0]: 0.1})
        try:
            given.update(split_examples(given["train"], seed, fractions))
        except TextebmError as e:
            raise TextebmError(f"--input {files['train']}: {e}; give at least {len(fractions)} items, or the "
                               f"{' and '.join('--' + m for m in missing)} file{'s' if len(missing) > 1 else ''}") from None
    splits = {s: [_rename_id(ex) for ex in given[s]] for s in ("train", "dev", "test")}
    labelled = any("label" in ex for ex in splits["train"])
    source: dict[str, Any] = {"files": {s: str(f.absolute()) for s, f in files.items() if f is not None}}
    if conll:
        source.update(format="conll", token_column=token_column, tag_column=tag_column)
    else:
        source["fields"] = {k: v for k, v in fields.items() if v is not None}
    meta = {
        "name": Path(out).name,
        "task": "tagging" if conll else "classification" if labelled else "language-modelling",
        "source": source,
        "licence": "as the user's files",
        "split": "given files" if not missing else
                 f"seeded split of the input for {' and '.join(missing)}",
        "seed": seed,
    }
    if conll:
        meta["tags"] = sorted({t for rows in splits.values() for ex in rows for t in ex["tags"]})
    return write_dataset(out, splits, meta, overwrite, kind=CONVERT_KIND)


def _source_line(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["source_line"] = row.pop("line")
    return row


def _rename_id(ex: dict[str, Any]) -> dict[str, Any]:
    if "id" not in ex:
        return ex
    ex = dict(ex)
    ex["source_id"] = ex.pop("id")
    return ex
