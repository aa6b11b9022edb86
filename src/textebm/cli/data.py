"""Datasets: list and prepare the named offline datasets, or convert your own files.

Every dataset is written in one layout: DIR/train.jsonl, dev.jsonl, test.jsonl (one example a
line: id, text, optional text_pair and label) and DIR/dataset.json. See docs/data.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from textebm.data.recipes import RECIPES


@dataclass
class ListConfig:
    """No options."""


@dataclass
class PrepareConfig:
    name: str = field(metadata={"help": "dataset name (see `textebm data list`)",
                                "positional": True, "choices": list(RECIPES)})
    out: Path = field(metadata={"help": "output folder (new or empty; see --overwrite)"})
    seed: int = field(default=0, metadata={"help": "seed of the train/dev/test split where the "
                                                   "source has none", "min": 0})
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier dataset in --out"})


@dataclass
class ConvertConfig:
    input: Path = field(metadata={"help": "training file (.jsonl, .csv, .tsv, .txt or .conll); also the "
                                          "source of dev/test when those are not given"})
    out: Path = field(metadata={"help": "output folder (new or empty; see --overwrite)"})
    dev: Path | None = field(default=None, metadata={"help": "dev file"})
    test: Path | None = field(default=None, metadata={"help": "test file"})
    seed: int = field(default=0, metadata={"help": "seed of the split made from --input", "min": 0})
    text_field: str | None = field(default=None, metadata={
        "help": "text column / key (default: auto-detected: text, sentence1, question1, "
                "question, sentence, ...)"})
    pair_field: str | None = field(default=None, metadata={"help": "second-text column / key"})
    label_field: str | None = field(default=None, metadata={
        "help": "label column / key (default: auto-detected: label, gold_label, quality, "
                "is_duplicate, score)"})
    id_field: str | None = field(default=None, metadata={
        "help": "id column / key, kept as source_id (default: id, idx, index, guid if present)"})
    format: str = field(default="auto", metadata={
        "choices": ["auto", "conll"],
        "help": "auto: by extension (.jsonl, .csv, .tsv, .txt; .conll is CoNLL columns); conll: "
                "CoNLL column files (a token a line, a blank line between sentences: CoNLL-2000 "
                "chunking, CoNLL-2003 NER) whatever their names, into a tagging dataset"})
    token_column: int = field(default=0, metadata={
        "help": "CoNLL: the token column (0-based; negative counts from the end)"})
    tag_column: int = field(default=-1, metadata={
        "help": "CoNLL: the tag column (0-based; negative counts from the end; default the last: "
                "chunks in CoNLL-2000, entities in CoNLL-2003; 1 for their POS tags)"})
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier dataset in --out"})


def list_datasets(cfg: ListConfig) -> None:
    """Print the named offline datasets: name, task, source package, licence, description."""
    from textebm.data.recipes import RECIPES

    rows = [("NAME", "TASK", "SOURCE", "LICENCE", "DESCRIPTION")]
    rows += [(r.name, r.task, r.source, r.licence, r.description) for r in RECIPES.values()]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join([*(c.ljust(w) for c, w in zip(row, widths)), row[4]]))


def prepare_dataset(cfg: PrepareConfig) -> None:
    """Download a named dataset (once) and write it to --out in the standard layout."""
    from textebm.data.recipes import prepare

    info = prepare(cfg.name, cfg.out, seed=cfg.seed, overwrite=cfg.overwrite)
    _report(cfg.out, info)


def convert_files(cfg: ConvertConfig) -> None:
    """Convert your own JSONL / CSV / TSV (GLUE) / text / CoNLL files into the standard layout."""
    from textebm.data.convert import convert

    info = convert(cfg.input, cfg.out, dev=cfg.dev, test=cfg.test, seed=cfg.seed,
                   text_field=cfg.text_field, pair_field=cfg.pair_field,
                   label_field=cfg.label_field, id_field=cfg.id_field,
                   overwrite=cfg.overwrite, format=cfg.format, token_column=cfg.token_column,
                   tag_column=cfg.tag_column)
    _report(cfg.out, info)


def _report(out: Path, info: dict) -> None:
    sizes = ", ".join(f"{s} {n:,}" for s, n in info["splits"].items())
    labels = f"; labels: {', '.join(info['labels'])}" if info["labels"] else ""
    print(f"wrote {out}: {sizes}{labels}")


COMMANDS = {
    "list": (ListConfig, list_datasets),
    "prepare": (PrepareConfig, prepare_dataset),
    "convert": (ConvertConfig, convert_files),
}
