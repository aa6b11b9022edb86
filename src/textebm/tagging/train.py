"""`textebm tag train`: paper e's BiLSTM-CRF tagger trained on tagged sentences.

    textebm tag train --data data/brown-pos --out runs/pos --method supervised --labelled 2500

`--method supervised` (sec. 4's baseline): every parameter trained on the CRF's −log p(y | x) of
the labelled sentences (`losses/crf.py`, mean over the sentences of a batch), on the one
training loop (`textebm.train`: length-bucketed batches, AdamW, checkpoints, exact resume).
The labelled sentences are the training split, or a seeded subset of it drawn by the nested
split of the semi-supervised grid (`data/ssl_split.py`): `--labelled N` sentences, of which
`--proportion P` (so that `--labelled 2500 --proportion 0.02` is the grid's 2 % set, inside its
10 % set). The word vocabulary is built from the labelled sentences (`tagging/vocab.py`), the tag
set from the whole training split; dev tags unseen in training stop the run before it starts.
Dev accuracy is measured after every epoch and at the end (in fp32, as `tag eval` does), and
RUN/model holds tagger.json, model.safetensors and words.json.

`--method pretrain` and `--method joint` (sec. 3.2-3.3) add `--ratio` times as many unlabelled
sentences from the nested split's pool (`ssl_rows`); their recipes are in `tagging/ssl_train.py`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from textebm.data.conll import CONLL_SUFFIX
from textebm.data.readers import split_path
from textebm.data.ssl_split import nested_split
from textebm.data.tagging import check_known_tags, load_tagged, tag_set
from textebm.errors import TextebmError
from textebm.fingerprint import file_sha256
from textebm.losses.crf import crf_nll
from textebm.models.crf import BiLSTMCRF, TaggerSpec, save_tagger
from textebm.options import check_config, refuse_unused
from textebm.tagging.folder import tag_batch, tag_sentences
from textebm.tagging.metrics import tagging_scores
from textebm.tagging.vocab import WordVocab, build_vocab, save_vocab
from textebm.train import (
    Recipe,
    TrainOptions,
    check_run_dir,
    eval_split_of,
    options_dict,
    seed_everything,
    train,
)

log = logging.getLogger(__name__)

METHODS = ["supervised", "pretrain", "joint"]
SSL_OPTIONS = ["ratio", "dnce_alpha", "noise_ratio", "noise_lr", "noise_embed", "noise_hidden"]  # pretrain, joint
PRETRAIN_OPTIONS = ["pretrain_epochs", "pretrain_steps", "pretrain_lr"]
JOINT_OPTIONS = ["unlabelled_weight", "ramp_steps", "init"]


@dataclass(kw_only=True)
class TagTrainConfig(TrainOptions):
    COMMAND: ClassVar[str] = "tag train"
    data: str = field(metadata={"help": "tagged sentences: a dataset folder of `data prepare brown-pos` (rows with "
                                        "tokens and tags), a JSONL file of such rows, or a CoNLL file (.conll)"})
    method: str = field(default="supervised", metadata={
        "help": "supervised: the BiLSTM-CRF trained on the CRF's -log p(y|x) of the labelled sentences; "
                "pretrain: a TRF language model over the BiLSTM (eq. 3) trained by DNCE on unlabelled sentences "
                "(RUN/pretrain), then the BiLSTM frozen and a new output layer and A trained on the labelled ones; "
                "joint: the JRF (eq. 6), CRF NLL on labelled + weighted DNCE of its marginal on unlabelled sentences",
        "choices": METHODS})
    labelled: int = field(default=0, metadata={
        "help": "draw this many labelled sentences from the training split (seeded by --split-seed; 0: all of it)",
        "min": 0})
    proportion: float = field(default=1.0, metadata={
        "help": "train on this fraction of the --labelled set (nested: 0.02 of it lies inside 0.1 of it)",
        "gt": 0, "max": 1})
    split_seed: int = field(default=0, metadata={"help": "seed of the labelled subset (--labelled, --proportion)",
                                                 "min": 0})
    tag_column: int = field(default=-1, metadata={
        "help": "CoNLL files: the tag column (0-based, negative from the end; tokens are column 0)"})
    eval_split: str | None = field(default=None, metadata={
        "help": "split for dev accuracy after each epoch and at the end (default: dev when --data is a dataset "
                "folder; '' to skip)"})
    lowercase: bool = field(default=False, metadata={"help": "lowercase words before looking them up"})
    min_count: int = field(default=2, metadata={
        "help": "words seen fewer times in the labelled sentences share the unknown word's vector", "min": 1})
    embed: int = field(default=100, metadata={"help": "word embedding size", "min": 1})
    hidden: int = field(default=200, metadata={"help": "LSTM state size per direction", "min": 1})
    layers: int = field(default=1, metadata={"help": "stacked bidirectional LSTM layers", "min": 1})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the embeddings and the LSTM's outputs",
                                                  "min": 0, "lt": 1})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (AdamW)", "gt": 0})
    # pretrain and joint: the unlabelled sentences, DNCE and its noise LM
    ratio: int = field(default=50, metadata={
        "help": "pretrain, joint: unlabelled sentences per labelled one (U/L), the nested split's pool drawn from "
                "the training sentences outside the --labelled set", "min": 1})
    dnce_alpha: float = field(default=0.5, metadata={
        "help": "pretrain, joint: DNCE's share of real sentences on the data side (the rest are noise sentences; "
                "1: NCE with the trained noise)", "gt": 0, "max": 1})
    noise_ratio: float = field(default=1.0, metadata={
        "help": "pretrain, joint: DNCE's noise sentences per data-side sentence (nu)", "gt": 0})
    noise_lr: float = field(default=1e-3, metadata={
        "help": "pretrain, joint: peak learning rate of the noise LM (trained along, by maximum likelihood)",
        "gt": 0})
    noise_embed: int = field(default=100, metadata={"help": "pretrain, joint: the noise LM's word embedding size",
                                                    "min": 1})
    noise_hidden: int = field(default=200, metadata={"help": "pretrain, joint: the noise LM's LSTM state size",
                                                     "min": 1})
    # pretrain: stage 1 (the TRF); --epochs, --lr, --max-steps are stage 2's (the output layer and A)
    pretrain_epochs: float = field(default=1.0, metadata={
        "help": "pretrain: passes of stage 1 (the TRF language model) over the unlabelled sentences", "gt": 0})
    pretrain_steps: int = field(default=0, metadata={
        "help": "pretrain: stop stage 1 after this many optimizer steps (0: no limit)", "min": 0})
    pretrain_lr: float = field(default=1e-3, metadata={"help": "pretrain: peak learning rate of stage 1 (AdamW)",
                                                       "gt": 0})
    # joint
    unlabelled_weight: float = field(default=0.1, metadata={
        "help": "joint: the DNCE loss's weight after the ramp (thu-spmi/semi-EBM: 0.1)", "min": 0})
    ramp_steps: int = field(default=1000, metadata={
        "help": "joint: the weight ramps as unlabelled_weight * sqrt(min(step, N) / N) over N optimizer steps "
                "(the paper's code: 40000 on a GPU; 0: no ramp)", "min": 0})
    init: str = field(default="", metadata={
        "help": "joint: start from this supervised tagger (a `tag train` run; the paper's code starts joint "
                "training from the supervised CRF); words it lacks start as its unknown word"})

    def check(self) -> None:
        super().check()
        if self.method == "supervised":
            refuse_unused(self, SSL_OPTIONS + PRETRAIN_OPTIONS + JOINT_OPTIONS, "with --method supervised")
        elif self.method == "pretrain":
            refuse_unused(self, JOINT_OPTIONS, "with --method pretrain")
        else:
            refuse_unused(self, PRETRAIN_OPTIONS, "with --method joint")
            if self.init:
                refuse_unused(self, ["embed", "hidden", "layers", "lowercase"],
                              "with --init (the sizes and the lowercasing are the initial tagger's)")
        if Path(self.data).suffix.lower() != CONLL_SUFFIX:
            refuse_unused(self, ["tag_column"], "unless --data is a CoNLL file (.conll)")
        if not self.labelled and self.proportion == 1.0:
            refuse_unused(self, ["split_seed"], "without --labelled or --proportion (every training sentence "
                                                "is used)")


def labelled_rows(rows: list[dict[str, Any]], labelled: int, proportion: float, seed: int,
                  where: str) -> list[dict[str, Any]]:
    """The labelled sentences: `rows`, or the nested split's set of `proportion` of `labelled`
    (`data/ssl_split.py`); an impossible size is a TextebmError naming the option."""
    size = labelled or len(rows)
    if size > len(rows):
        raise TextebmError(f"--labelled {labelled:,}: {where} has only {len(rows):,} training sentences")
    if round(proportion * size) < 1:
        raise TextebmError(f"--proportion {proportion:g} of {size:,} sentences leaves no sentence; use a larger "
                           "--proportion or --labelled")
    if size == len(rows) and proportion == 1.0 and not labelled:
        return rows
    split = nested_split([r["tokens"] for r in rows], size, seed, proportions=(proportion,))
    return [rows[i] for i in split.labelled(proportion)]


def ssl_rows(rows: list[dict[str, Any]], labelled: int, proportion: float, ratio: int, seed: int, where: str,
             exclude: list[list[str]] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(labelled, unlabelled) sentences: `labelled_rows`, and the first ratio·|labelled| sentences
    of the nested split's unlabelled pool (the training sentences outside the --labelled set, less
    any equal to one of `exclude`). A pool too small is a TextebmError naming --ratio."""
    lab = labelled_rows(rows, labelled, proportion, seed, where)
    split = nested_split([r["tokens"] for r in rows], labelled or len(rows), seed, proportions=(proportion,),
                         exclude=exclude)
    need = ratio * len(lab)
    if need > len(split.pool):
        raise TextebmError(f"--ratio {ratio}: U/L = {ratio} with {len(lab):,} labelled sentences needs {need:,} "
                           f"unlabelled ones; {where} has {len(split.pool):,} training sentences outside the "
                           f"--labelled set (the largest --ratio it allows is {len(split.pool) // len(lab)})")
    return lab, [rows[i] for _, i in split.unlabelled(proportion, ratio)]


def tag_train(cfg: TagTrainConfig) -> dict:
    """Train a tagger (see the module doc); returns metrics.json."""
    check_config(cfg)
    check_run_dir(cfg, None)  # a bad --out fails before the data is read
    eval_split = eval_split_of(cfg)
    seed_everything(cfg.seed)
    read = lambda split: load_tagged(cfg.data, split, tag_column=cfg.tag_column)
    train_rows = read("train")
    tags = tag_set(train_rows)
    eval_rows = read(eval_split) if eval_split else []
    if eval_rows:
        check_known_tags(eval_rows, tags, split_path(cfg.data, eval_split))
    if cfg.method != "supervised":
        from textebm.tagging.ssl_train import ssl_train

        return ssl_train(cfg, train_rows, tags, eval_split, eval_rows)
    rows = labelled_rows(train_rows, cfg.labelled, cfg.proportion, cfg.split_seed, cfg.data)
    vocab = build_vocab(rows, cfg.lowercase, cfg.min_count)
    spec = TaggerSpec(vocab_size=len(vocab), tags=tags, embed=cfg.embed, hidden=cfg.hidden, layers=cfg.layers,
                      dropout=cfg.dropout, pad_id=vocab.pad_id)
    model = BiLSTMCRF(spec)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tagger: %d labelled sentences (%d tokens), %d words, %d tags, %.2fM parameters", len(rows),
             sum(len(r["tokens"]) for r in rows), len(vocab), len(tags), n_params / 1e6)
    config = {**options_dict(cfg), "train_sha256": file_sha256(split_path(cfg.data, "train")),
              "labelled_sentences": len(rows), "vocab_size": len(vocab), "tags": tags, "parameters": n_params}
    recipe = TaggerRecipe(model, vocab, rows, eval_split, eval_rows, cfg.batch_size)
    return train(cfg, config, recipe)


class TaggerRecipe(Recipe):
    """The supervised tagger on the loop: CRF NLL per sentence, dev accuracy after each epoch."""

    def __init__(self, model: BiLSTMCRF, vocab: WordVocab, rows: list[dict[str, Any]], eval_split: str,
                 eval_rows: list[dict[str, Any]], batch_size: int):
        self.model, self.vocab, self.eval_split, self.eval_rows = model, vocab, eval_split, eval_rows
        self.tagger = model  # what is scored and saved (the loop's `model` may hold more: paper e's JRF)
        self.batch_size = batch_size
        tag_id = {t: k for k, t in enumerate(model.spec.tags)}
        self.dataset = [(vocab.encode(r["tokens"]), [tag_id[t] for t in r["tags"]]) for r in rows]
        self.lengths = [len(w) for w, _ in self.dataset]
        self.collate = lambda items: tag_batch(items, vocab.pad_id)
        self.by_epoch: list[float] = []  # dev accuracy after each full epoch (kept in checkpoints)

    def loss(self, model, batch, at):
        phi = model(batch["input_ids"], batch["mask"])  # (B, T, K) in fp32
        nll = crf_nll(phi, self.model.transitions, batch["tags"], batch["mask"])  # mean over sentences
        return nll, {"tokens": float(batch["mask"].sum())}

    def _scores(self) -> dict[str, float]:
        """Dev metrics in fp32 (autocast off), as `tag eval` computes them."""
        device = next(self.tagger.parameters()).device
        with torch.autocast(device.type, enabled=False):
            pred = tag_sentences(self.tagger, self.vocab, self.eval_rows, self.batch_size)
        gold = [r["tags"] for r in self.eval_rows]
        return tagging_scores(gold, pred, self.tagger.spec.tags, self.eval_split)

    def end_epoch(self, epoch):
        if self.eval_rows:
            acc = self._scores()[f"{self.eval_split}_accuracy"]
            self.by_epoch.append(acc)
            log.info("epoch %d: %s accuracy %.4f", epoch + 1, self.eval_split, acc)

    def state(self):
        return {"by_epoch": torch.tensor(self.by_epoch, dtype=torch.float64)} if self.by_epoch else {}

    def load_state(self, tensors):
        self.by_epoch = tensors["by_epoch"].tolist() if "by_epoch" in tensors else []

    def evaluate(self):
        if not self.eval_rows:
            return None
        out = self._scores()
        out[f"{self.eval_split}_accuracy_by_epoch"] = [*self.by_epoch, out[f"{self.eval_split}_accuracy"]]
        return out

    def save(self, folder):
        save_tagger(self.tagger, folder)
        save_vocab(self.vocab, folder)

