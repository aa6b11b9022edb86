"""CoNLL column files: a token a line, whitespace-separated columns, a blank line between sentences.

    read_conll("train.txt")                             # CoNLL-2000 chunking: word POS chunk
    read_conll("eng.train", tag_column=3)               # CoNLL-2003 NER: word POS chunk NER
    read_conll("eng.train", tag_column=1)               # ... its POS tags instead
    read_conll("raw.txt", tag_column=None)              # tokens only (input to a tagger)
    write_conll("pred.conll", rows, columns=("tokens", "gold", "tags"))

Columns are 0-based; a negative column counts from the end (the default tag column, -1, is the
last: chunk tags in CoNLL-2000, NER tags in CoNLL-2003). `-DOCSTART-` lines (CoNLL-2003's document
markers) are skipped and end a sentence. Every row of a file has the same number of columns.
A sentence comes back as the rows of a tagging dataset (`textebm data prepare brown-pos`):
`{"text", "tokens", "tags", "line"}`, `text` the tokens joined by spaces, `line` the 1-based
line of its first token. Every problem is an `InputError` naming the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from textebm.data.readers import _decode
from textebm.errors import InputError, TextebmError
from textebm.io import atomic_write

DOCSTART = "-DOCSTART-"
CONLL_SUFFIX = ".conll"  # read as CoNLL columns by `textebm data convert` without --format conll


def read_conll(path: str | Path, token_column: int = 0, tag_column: int | None = -1
               ) -> list[dict[str, Any]]:
    """The sentences of a CoNLL column file (see the module docstring); `tag_column=None` reads
    tokens only (no `tags` key)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found" if not path.exists() else "not a regular file")
    sentences: list[dict[str, Any]] = []
    width: tuple[int, int] | None = None  # (columns of every row, line of the first row)
    current: list[list[str]] = []
    start = 0

    def close() -> None:
        if current:
            tokens = [cells[tok] for cells in current]
            row: dict[str, Any] = {"text": " ".join(tokens), "tokens": tokens}
            if tag is not None:
                row["tags"] = [cells[tag] for cells in current]
            row["line"] = start
            sentences.append(row)
            current.clear()

    tok = tag = None
    for lineno, line in enumerate(_decode(path).split("\n"), start=1):
        cells = line.split()
        if not cells or cells[0] == DOCSTART:
            close()
            continue
        if width is None:
            width = (len(cells), lineno)
            tok = _column(path, lineno, token_column, len(cells), "token")
            if tag_column is not None:
                tag = _column(path, lineno, tag_column, len(cells), "tag")
                if tag == tok:
                    raise InputError(path, f"has {len(cells)} column(s) and the token column "
                                           f"({token_column}) is the tag column ({tag_column}): "
                                           "no tag column", lineno)
        elif len(cells) != width[0]:
            raise InputError(path, f"{len(cells)} columns, but line {width[1]} has {width[0]}; "
                                   "every row of a CoNLL file has the same columns (a token "
                                   "with a space in it?)", lineno)
        if not current:
            start = lineno
        current.append(cells)
    close()
    if not sentences:
        raise InputError(path, "no sentences (empty file)")
    return sentences


def _column(path: Path, line: int, column: int, width: int, what: str) -> int:
    """`column` (negative from the end) as an index into `width` cells, or InputError."""
    if not -width <= column < width:
        raise InputError(path, f"has {width} column(s); no {what} column {column} (0-based, "
                               "negative from the end)", line)
    return column % width


def write_conll(path: str | Path, rows: Sequence[dict[str, Any]],
                columns: Sequence[str] = ("tokens", "tags")) -> None:
    """Write sentences as a CoNLL column file: for each row, its lists named by `columns` side by
    side (tab-separated), a blank line after each sentence. Everything is checked first (same
    lengths, no empty sentence, no empty cell or whitespace inside one: `TextebmError` naming
    the sentence), then the file is written atomically, so a failure writes nothing."""
    if not columns:
        raise ValueError("write_conll needs at least one column")
    lines: list[str] = []
    for i, row in enumerate(rows):
        cols = []
        for name in columns:
            if not isinstance(row.get(name), (list, tuple)):
                raise TextebmError(f"sentence {i + 1}: no list {name!r} to write as a column")
            cols.append(row[name])
        n = len(cols[0])
        if n == 0:
            raise TextebmError(f"sentence {i + 1}: empty; a CoNLL file cannot hold an empty sentence")
        for name, col in zip(columns, cols):
            if len(col) != n:
                raise TextebmError(f"sentence {i + 1}: {len(col)} {name} for {n} {columns[0]}")
            for j, cell in enumerate(col):
                if not isinstance(cell, str) or not cell or len(cell.split()) != 1 or cell != cell.strip():
                    raise TextebmError(f"sentence {i + 1}, token {j + 1}: {name} {cell!r} is empty or "
                                       "holds whitespace; a CoNLL cell cannot")
        if DOCSTART in cols[0]:
            raise TextebmError(f"sentence {i + 1}: a {DOCSTART} token would be read back as a "
                               "document marker")
        lines += ["\t".join(cells) for cells in zip(*cols)]
        lines.append("")
    with atomic_write(path) as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
