"""`textebm tag eval` and `textebm tag predict`: a trained tagger on tagged or plain sentences.

    textebm tag eval --model runs/pos --data data/wsj-pos --split test [--out wsj.json]
    textebm tag predict --model runs/pos --input sentences.jsonl --out tagged.conll

Both check their output before any work, then the model folder (a tagger with its word
vocabulary, `tagging/folder.py`), and tag in fp32 on the accelerator when there is one. `eval`
reads gold tags (`data/tagging.py`: a dataset folder's split, a JSONL file or a CoNLL file) and
refuses a tag the model never saw, naming the file and line; it prints token accuracy (and span
precision / recall / F1 for a BIO tag set) and writes them to --out as JSON when given.
`predict` reads tokens (JSONL rows with `tokens`, or a CoNLL file's first column) and writes a
CoNLL file: token and predicted tag, tab-separated, a blank line after each sentence.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from textebm.data.conll import CONLL_SUFFIX, write_conll
from textebm.data.readers import split_path
from textebm.data.tagging import check_known_tags, load_tagged
from textebm.errors import TextebmError
from textebm.inference import inference_setup, set_threads
from textebm.io import write_json
from textebm.options import check_config, refuse_unused, threads_field
from textebm.outputs import check_output_file, mark_file
from textebm.tagging.folder import load_tagging_model, tag_sentences
from textebm.tagging.metrics import tagging_scores

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TagEvalConfig:
    model: str = field(metadata={"help": "a tagger: the run folder of `tag train` (or its model/)"})
    data: str = field(metadata={"help": "tagged sentences: a dataset folder, a JSONL file or a CoNLL file (.conll)"})
    split: str = field(default="test", metadata={"help": "split of a dataset folder (a single file is 'train')"})
    tag_column: int = field(default=-1, metadata={
        "help": "CoNLL files: the gold tag column (0-based, negative from the end; tokens are column 0)"})
    out: str = field(default="", metadata={"help": "also write the metrics to this JSON file"})
    batch_size: int = field(default=64, metadata={"help": "sentences per batch", "min": 1})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an --out file of an earlier `tag eval`"})

    def check(self) -> None:
        if not str(self.data).lower().endswith(CONLL_SUFFIX):
            refuse_unused(self, ["tag_column"], "unless --data is a CoNLL file (.conll)")
        if self.overwrite and not self.out:
            raise TextebmError("--overwrite has no effect without --out (nothing is written); leave it out")


def tag_eval(cfg: TagEvalConfig) -> dict:
    """Accuracy (and span F1 for BIO tags) of a tagger on a split; returns the metrics."""
    check_config(cfg)
    set_threads(cfg.threads)
    if cfg.out:
        check_output_file(cfg.out, cfg.overwrite, kind="tag eval", inputs=[("--data", cfg.data)])
    device, _ = inference_setup("fp32")
    tagger, vocab, folder = load_tagging_model(cfg.model, device)
    rows = load_tagged(cfg.data, cfg.split, tag_column=cfg.tag_column)
    check_known_tags(rows, tagger.spec.tags, split_path(cfg.data, cfg.split))
    pred = tag_sentences(tagger, vocab, rows, cfg.batch_size)
    unknown = sum(w == vocab.unk_id for r in rows for w in vocab.encode(r["tokens"]))
    metrics = {"model": str(folder.resolve()), "data": str(cfg.data), "split": cfg.split,
               **tagging_scores([r["tags"] for r in rows], pred, tagger.spec.tags, cfg.split),
               f"{cfg.split}_unknown_words": unknown, "precision": "fp32"}
    if cfg.out:
        write_json(cfg.out, metrics)
        mark_file(cfg.out, "tag eval")
    return metrics


@dataclass(kw_only=True)
class TagPredictConfig:
    model: str = field(metadata={"help": "a tagger: the run folder of `tag train` (or its model/)"})
    input: str = field(metadata={"help": "sentences to tag: JSONL rows with `text` and `tokens` (the dataset "
                                         "layout), or a CoNLL file (.conll; tokens in column 0)"})
    out: str = field(metadata={"help": "the CoNLL file to write: token and predicted tag a line"})
    batch_size: int = field(default=64, metadata={"help": "sentences per batch", "min": 1})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an --out file of an earlier `tag predict`"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})


def tag_predict(cfg: TagPredictConfig) -> int:
    """Tag every sentence of --input into a CoNLL file; returns the number of sentences."""
    check_config(cfg)
    set_threads(cfg.threads)
    check_output_file(cfg.out, cfg.overwrite, kind="tag predict", inputs=[("--input", cfg.input)])
    if Path(cfg.input).is_dir():  # a dataset folder would be read as its train split, unasked
        raise TextebmError(f"--input {cfg.input}: a folder; give the file to tag (JSONL with `tokens`, or CoNLL), "
                           f"e.g. {Path(cfg.input) / 'test.jsonl'} for a dataset's test split")
    device, _ = inference_setup("fp32")
    tagger, vocab, _ = load_tagging_model(cfg.model, device)
    rows = load_tagged(cfg.input, "train", tags=False)
    pred = tag_sentences(tagger, vocab, rows, cfg.batch_size, progress=cfg.progress)
    write_conll(cfg.out, [{"tokens": r["tokens"], "tags": p} for r, p in zip(rows, pred)])
    mark_file(cfg.out, "tag predict")
    log.info("tagged %d sentences into %s", len(rows), cfg.out)
    return len(rows)

