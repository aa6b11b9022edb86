"""Sentences of a tagging dataset, checked: what a tagger trains on, is evaluated on, tags.

    rows = load_tagged("data/brown-pos", "train")          # DIR/train.jsonl of `data prepare`
    rows = load_tagged("eng.testa.conll", tag_column=3)     # a CoNLL file (by its .conll name)
    rows = load_tagged("raw.conll", tags=False)             # tokens only: input to `tag predict`
    check_known_tags(rows, model_tags, "data/wsj-pos/test.jsonl")

A row is `{"text", "tokens", "tags", "line", ...}` (`line`: the 1-based line of the file it came
from; other fields of a JSONL row are kept). Every problem is an `InputError` naming the file and
line: a row without `tokens` (a list of non-empty strings without whitespace), an empty sentence,
`tags` missing or of another length, a tag that is not a non-empty string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection, Sequence

from textebm.data.conll import CONLL_SUFFIX, read_conll
from textebm.data.layout import SPLITS
from textebm.data.readers import JSONL_SUFFIXES, read_numbered_examples, split_path
from textebm.io import iter_jsonl
from textebm.errors import InputError


def load_tagged(data: str | Path, split: str = "train", tags: bool = True, token_column: int = 0,
                tag_column: int = -1) -> list[dict[str, Any]]:
    """The checked sentences of `data`: a dataset folder's `{split}.jsonl`, or a file (JSONL rows
    with `tokens` / `tags`, or CoNLL columns when its name ends in `.conll`; a single file is the
    train split, as `textebm.data.load_split` reads it). `tags=False` reads tokens only."""
    path = split_path(data, split)
    if path.suffix.lower() == CONLL_SUFFIX:
        return read_conll(path, token_column, tag_column if tags else None)
    if path.suffix.lower() not in JSONL_SUFFIXES:
        raise InputError(path, f"a tagging file is JSONL (rows with `tokens` and `tags`) or CoNLL columns "
                               f"({CONLL_SUFFIX}), not {path.suffix or 'a file without an extension'}")
    if not path.is_file():
        raise InputError(path, "file not found" if not path.exists() else "not a regular file")
    rows = [_checked(path, line, row, tags) for line, row in iter_jsonl(path)]  # a row's `text` is optional
    if not rows:
        raise InputError(path, "no examples (empty file)")
    return rows


def load_unlabelled_text(folders: Sequence[str | Path], option: str = "--unlabelled") -> list[list[str]]:
    """Unlabelled sentences for a tagger from text datasets (`data prepare sotu | news |
    shakespeare`: rows with a `text`): every split a folder has, in the order train, dev, test,
    cut into Brown's word tokens (`textebm.data.words.brown_words`); rows that give no token are
    dropped. A folder that is not a dataset, or a row without text, is an InputError naming it."""
    from textebm.data.words import brown_words

    out: list[list[str]] = []
    for folder in folders:
        folder = Path(folder)
        files = [folder / f"{s}.jsonl" for s in SPLITS if (folder / f"{s}.jsonl").is_file()] if folder.is_dir() else []
        if not files:
            raise InputError(folder, f"{option}: not a dataset folder (no train/dev/test.jsonl); make one with "
                                     f"`textebm data prepare sotu` (or news, shakespeare)")
        for path in files:
            for line, row in read_numbered_examples(path):
                text = row.get("text")
                if not isinstance(text, str):
                    raise InputError(path, f"{option}: a row without a 'text' string", line)
                if words := brown_words(text):
                    out.append(words)
    return out


def _checked(path: Path, line: int, row: dict[str, Any], tags: bool) -> dict[str, Any]:
    tokens = row.get("tokens")
    if not isinstance(tokens, list):
        raise InputError(path, "no 'tokens' list: a tagging row needs tokens (and tags); make one "
                               "with `textebm data prepare brown-pos` or `data convert --format "
                               "conll`", line)
    if not tokens:
        raise InputError(path, "an empty sentence (no tokens)", line)
    bad = next((i for i, t in enumerate(tokens)
                if not isinstance(t, str) or len(t.split()) != 1 or t != t.strip()), None)
    if bad is not None:
        raise InputError(path, f"token {bad + 1} ({tokens[bad]!r}) is not a non-empty string "
                               "without whitespace", line)
    if tags:
        got = row.get("tags")
        if not isinstance(got, list):
            raise InputError(path, "no 'tags' list", line)
        if len(got) != len(tokens):
            raise InputError(path, f"{len(got)} tags for {len(tokens)} tokens", line)
        bad = next((i for i, t in enumerate(got) if not isinstance(t, str) or not t.strip()), None)
        if bad is not None:
            raise InputError(path, f"tag {bad + 1} ({got[bad]!r}) is not a non-empty string", line)
    return {**row, "line": line}


def tag_set(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The sorted tags of `rows` (a tagger's output layer, fixed from the training split)."""
    return sorted({t for row in rows for t in row["tags"]})


def check_known_tags(rows: Sequence[dict[str, Any]], known: Collection[str], path: str | Path) -> None:
    """`InputError` naming `path` and the row's line for the first tag not in `known` (a tag
    unseen in training cannot be predicted or scored)."""
    known = set(known)
    for row in rows:
        for i, t in enumerate(row["tags"]):
            if t not in known:
                raise InputError(path, f"tag {t!r} (token {i + 1}, {row['tokens'][i]!r}) was not "
                                       f"seen in training; the model's tags: "
                                       f"{', '.join(sorted(known))}", row.get("line"))
