"""Read user data files into examples: JSONL, CSV, TSV (GLUE layout) and plain text.

An example is a dict with `text` (str) and, where the file has them, `text_pair` (str),
`label` (str) and `id` (str). JSONL rows keep their other fields too (e.g. `tokens`, `tags`).

    read_examples("train.tsv")                       # GLUE columns found by name
    read_examples("reviews.csv", text_field="body", label_field="stars")
    load_split("data/rt-polarity", "dev")            # DIR/dev.jsonl of the standard layout

Every problem is an `InputError` naming the file and the 1-based line (as an editor shows it).
"""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from textebm.data.layout import SPLITS
from textebm.errors import InputError
from textebm.io import iter_jsonl

log = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".ndjson")
TEXT_SUFFIXES = (".txt", ".text")

# Auto-detected (text, pair) column names, first match wins; GLUE and common HF names.
TEXT_COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("text", "text_pair"),
    ("sentence1", "sentence2"),  # MNLI, RTE, WNLI, STS-B
    ("question1", "question2"),  # QQP
    ("question", "sentence"),  # QNLI
    ("#1 string", "#2 string"),  # MRPC
    ("premise", "hypothesis"),  # SNLI / MNLI as JSONL
    ("sentence", None),  # SST-2, CoLA with a header
    ("text", None),
)
LABEL_COLUMNS = ("label", "gold_label", "quality", "is_duplicate", "score")
ID_COLUMNS = ("id", "idx", "index", "guid")


@dataclass(frozen=True)
class Fields:
    """Which column / key of a file holds each part of an example (None: absent)."""

    text: str
    pair: str | None = None
    label: str | None = None
    id: str | None = None

    def used(self) -> set[str]:
        return {f for f in (self.text, self.pair, self.label, self.id) if f is not None}


def read_examples(
    path: str | Path,
    text_field: str | None = None,
    pair_field: str | None = None,
    label_field: str | None = None,
    id_field: str | None = None,
    labels: bool = True,
) -> list[dict[str, Any]]:
    """Read all examples of a user file, dispatching on its extension.

    `.jsonl`/`.ndjson`: one JSON object a line; `.csv`: comma-separated with a header row and
    standard quoting; `.tsv`: tab-separated with a header row and no quoting (GLUE); `.txt`: one
    text a line. Field names default to auto-detection (see `TEXT_COLUMNS`, `LABEL_COLUMNS`);
    header names match case-insensitively. `labels=False` (a command that only reads texts): no
    label is looked for, so a file whose rows carry one only here and there is read as texts.
    Raises `InputError` on any bad content.
    """
    return [row for _, row in read_numbered_examples(path, text_field, pair_field, label_field, id_field, labels)]


def read_numbered_examples(path: str | Path, text_field: str | None = None, pair_field: str | None = None,
                           label_field: str | None = None, id_field: str | None = None,
                           labels: bool = True) -> list[tuple[int, dict]]:
    """`read_examples` with the 1-based line of the file each example starts on."""
    if not labels and label_field is not None:
        raise ValueError("read_numbered_examples: a label_field with labels=False")
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found" if not path.exists() else "not a regular file")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        rows = _read_jsonl(path, text_field, pair_field, label_field, id_field, labels)
    elif suffix in (".csv", ".tsv"):
        rows = _read_delimited(path, "\t" if suffix == ".tsv" else ",",
                               text_field, pair_field, label_field, id_field, labels)
    elif suffix in TEXT_SUFFIXES:
        if any(f is not None for f in (text_field, pair_field, label_field, id_field)):
            raise InputError(path, "a plain-text file has one text a line and no fields; "
                                   "drop the field options or use .jsonl/.csv/.tsv")
        rows = list(_read_text(path))
    else:
        raise InputError(path, f"unknown file type {suffix or '(no extension)'!r}; "
                               "expected .jsonl, .csv, .tsv or .txt")
    if not rows:
        raise InputError(path, "no examples (empty file)")
    return _check_consistent(path, rows, ("text_pair", "label") if labels else ("text_pair",))


def example_id(row: dict[str, Any], index: int) -> str:
    """The id of an example: its `id` field, else its 0-based position in its split. Every command
    that names examples (noise samples' `source_id`, scores, predictions) uses this one rule."""
    return str(row["id"]) if row.get("id") is not None else str(index)


def eval_split_of(data: str | Path, eval_split: str | None) -> str:
    """The split a training command evaluates on: `eval_split` (--eval-split) when given ('' skips
    it); by default "dev" for a dataset folder and none for a single file (the train split only)."""
    if eval_split is not None:
        return eval_split
    if Path(data).is_dir():
        return "dev"
    log.info("--data %s is a single file (the train split only): no evaluation after training", data)
    return ""


def split_file(data: str | Path, split: str) -> Path:
    """The file a split is read from: DATA/SPLIT.jsonl for a dataset folder, else DATA itself
    (a single file is the train split), for messages that must name a file that exists."""
    data = Path(data)
    return data / f"{split}.jsonl" if data.is_dir() else data


def load_split(data: str | Path, split: str = "train") -> list[dict[str, Any]]:
    """Examples of one split: `DATA/{split}.jsonl` when `data` is a directory in the standard
    layout (see `textebm data prepare`), else `data` itself read with `read_examples`."""
    return read_examples(split_path(data, split))


def split_path(data: str | Path, split: str = "train") -> Path:
    """The file `load_split` reads for `split` of `data`, checked to exist (`InputError` saying
    what a dataset folder holds, or that a single file is the train split only)."""
    data = Path(data)
    if data.is_dir():
        if split not in SPLITS:
            raise InputError(data, f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        f = data / f"{split}.jsonl"
        if not f.is_file():
            raise InputError(f, "file not found; a dataset directory holds train.jsonl, dev.jsonl "
                                "and test.jsonl (see `textebm data prepare` / `convert`)")
        return f
    if not data.exists():
        raise InputError(data, "not found: expected a dataset folder (train.jsonl, dev.jsonl, test.jsonl; "
                               "see `textebm data prepare` / `convert`) or a data file")
    if split != "train":
        raise InputError(data, f"a single file is read as the train split only, so split {split!r} does not "
                               "exist here; make a dataset folder with dev and test splits: `textebm data "
                               f"convert --input {data} --out DIR` (a seeded split of the file)")
    return data


# ---------------------------------------------------------------- field resolution


def resolve_fields(
    path: Path,
    names: list[str],
    text_field: str | None,
    pair_field: str | None,
    label_field: str | None,
    id_field: str | None,
    line: int | None = None,
    labels: bool = True,
) -> Fields:
    """Map requested (or auto-detected) field names onto the names present in a file.

    Matching is case-insensitive; returns the file's own spelling. Explicit names that are
    absent raise `InputError` listing what the file has.
    """
    lower = {n.strip().lower(): n for n in names}

    def find(name: str | None, what: str) -> str | None:
        if name is None:
            return None
        if name.lower() not in lower:
            raise InputError(path, f"no {what} field {name!r}; the file has: {', '.join(names)}",
                             line)
        return lower[name.lower()]

    if text_field is not None:
        text, pair = find(text_field, "text"), find(pair_field, "pair")
    else:
        if pair_field is not None:
            raise InputError(path, "a pair field needs an explicit text field too")
        for t, p in TEXT_COLUMNS:
            if t in lower and (p is None or p in lower):
                text, pair = lower[t], (lower[p] if p else None)
                break
        else:
            raise InputError(path, "cannot tell which field holds the text (tried "
                                   f"{', '.join(sorted({t for t, _ in TEXT_COLUMNS}))}); "
                                   f"the file has: {', '.join(names)}; name it with the text "
                                   "field option",
                             line)
    label = (find(label_field, "label") if label_field is not None
             else _first(LABEL_COLUMNS, lower) if labels else None)
    id_ = find(id_field, "id") if id_field is not None else _first(ID_COLUMNS, lower)
    fields = Fields(text, pair, label, id_)
    if len(fields.used()) < sum(f is not None for f in (text, pair, label, id_)):
        raise InputError(path, f"one field used for two roles: {fields}", line)
    return fields


def _first(candidates: tuple[str, ...], lower: dict[str, str]) -> str | None:
    return next((lower[c] for c in candidates if c in lower), None)


def make_example(path: Path, line: int, values: dict[str, Any], fields: Fields,
                 keep_extra: bool) -> dict[str, Any]:
    """Build one normalised example from a row's values; checks types and emptiness."""
    ex: dict[str, Any] = {}
    if fields.text not in values:
        raise InputError(path, f"missing field {fields.text!r}", line)
    ex["text"] = _text(path, line, values[fields.text], fields.text)
    if fields.pair is not None:
        if fields.pair not in values:
            raise InputError(path, f"missing field {fields.pair!r}", line)
        ex["text_pair"] = _text(path, line, values[fields.pair], fields.pair)
    if fields.label is not None:
        if fields.label not in values:
            raise InputError(path, f"missing field {fields.label!r}", line)
        ex["label"] = _scalar(path, line, values[fields.label], fields.label)
    if fields.id is not None and fields.id in values:
        ex["id"] = _scalar(path, line, values[fields.id], fields.id)
    if keep_extra:
        ex.update({k: v for k, v in values.items() if k not in fields.used() and k not in ex})
    return ex


def _text(path: Path, line: int, value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InputError(path, f"field {name!r} must be a string, got {type(value).__name__}", line)
    if not value.strip():
        raise InputError(path, f"field {name!r} is empty", line)
    return value


def _scalar(path: Path, line: int, value: Any, name: str) -> str:
    """Labels and ids are kept as strings; JSON integers are converted."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(path, f"field {name!r} must be a string or integer, "
                               f"got {type(value).__name__}", line)
    value = str(value)
    if not value.strip():
        raise InputError(path, f"field {name!r} is empty", line)
    return value


def _check_consistent(path: Path, rows: list[tuple[int, dict]],
                      keys: tuple[str, ...] = ("text_pair", "label")) -> list[tuple[int, dict]]:
    """All examples of a file must agree on having each of `keys` (a `text_pair`, a `label`)."""
    first_line, first = rows[0]
    for key in keys:
        has = key in first
        for line, row in rows:
            if (key in row) != has:
                state = "has" if key in row else "lacks"
                raise InputError(path, f"this example {state} {key!r} but the one on line "
                                       f"{first_line} does not; every example must agree", line)
    return rows


# ---------------------------------------------------------------- formats


def _read_jsonl(path: Path, text_field: str | None, pair_field: str | None,
                label_field: str | None, id_field: str | None, labels: bool = True) -> list[tuple[int, dict]]:
    rows: list[tuple[int, dict]] = []
    fields: Fields | None = None
    for line, obj in iter_jsonl(path):
        if fields is None:
            fields = resolve_fields(path, list(obj), text_field, pair_field, label_field,
                                    id_field, line, labels)
        rows.append((line, make_example(path, line, obj, fields, keep_extra=True)))
    return rows


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(path, f"not valid UTF-8 ({e.reason} at byte {e.start})", line) from None


def _read_delimited(path: Path, delimiter: str, text_field: str | None, pair_field: str | None,
                    label_field: str | None, id_field: str | None, labels: bool = True) -> list[tuple[int, dict]]:
    """CSV (standard quoting) or TSV (no quoting, as GLUE) with a header row."""
    text = _decode(path)
    csv.field_size_limit(2**31 - 1)  # long documents in one cell
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting,
                        strict=True)
    records = _records(path, reader, "TSV" if delimiter == "\t" else "CSV")
    header_line, header = next(records, (1, []))
    if not header:
        return []
    seen: dict[str, str] = {}
    for name in header:  # a name twice (in any case) would keep one column's cells and drop the other's
        if (key := name.strip().lower()) in seen:
            raise InputError(path, f"the column {name!r} twice in the header ({seen[key]!r}); give each column a "
                                   "name of its own", header_line)
        seen[key] = name
    fields = resolve_fields(path, header, text_field, pair_field, label_field, id_field,
                            header_line, labels)
    rows = []
    for line, cells in records:
        if len(cells) != len(header):
            raise InputError(path, f"expected {len(header)} columns as in the header, found "
                                   f"{len(cells)}", line)
        rows.append((line, make_example(path, line, dict(zip(header, cells)), fields,
                                        keep_extra=False)))
    if not rows:
        raise InputError(path, "no rows after the header")
    return rows


def _records(path: Path, reader: Any, kind: str) -> Iterator[tuple[int, list[str]]]:
    """Yield (first line of the record, cells), skipping blank lines (and rows of empty cells only,
    as a spreadsheet pads its end); a lone quoted `""` is a row, an empty text the reader refuses."""
    end = 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise InputError(path, f"malformed {kind}: {e}", end + 1) from None
        start, end = end + 1, reader.line_num
        if cells == [""] or (cells and any(c.strip() for c in cells)):  # [""]: a quoted "" (a blank line is [])
            yield start, cells


def _read_text(path: Path) -> Iterator[tuple[int, dict]]:
    for line, text in enumerate(_decode(path).split("\n"), start=1):
        text = text.strip()
        if text:
            yield line, {"text": text}
