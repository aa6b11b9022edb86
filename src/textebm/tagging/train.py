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
Dev accuracy (and span F1 for a BIO tag set) is measured after every epoch and at the end (in fp32,
as `tag eval` does); `--keep-best` keeps the epoch of the best dev span F1 for a BIO tag set
(chunking, NER) and of the best dev accuracy otherwise, as the paper's code selects. RUN/model holds
tagger.json, model.safetensors and words.json.

`--method pretrain` and `--method joint` (sec. 3.2-3.3) read the labelled set and an unlabelled
pool of `--ratio` times as many sentences, drawn by the nested split from the training sentences
outside the --labelled set (dev and test sentences left out; their tags are never read), and build
the word vocabulary from both. Their TRF is trained by DNCE (`tagging/ssl.py`) with a 1-layer LSTM
noise LM trained along by maximum likelihood in a parameter group of its own (`--noise-lr`); ζ per
length learnt, π the unlabelled sentences' length distribution. Their recipes are in
`tagging/recipes.py`.

pretrain: stage 1 is a run of its own in RUN/pretrain (`--pretrain-epochs`, `--pretrain-lr`,
`--pretrain-steps`; the TRF language model of eq. (3) over the BiLSTM, on the unlabelled
sentences only), keyed by its inputs (data, split, vocabulary, options) and resumed by itself;
stage 2 is RUN's own run, a second call of the loop: the embeddings and the BiLSTM loaded from
stage 1, the linear output layer (new, as initialised) and A, every weight trained on the labelled
sentences by the CRF NLL (with --freeze only the output layer and A).

joint: one run, the unlabelled sentences the main stream (epochs count passes over them: they
are the many, and the cost) and the labelled ones a cycling stream (they are few, so each
unlabelled epoch passes over them ratio times); loss = CRF NLL (labelled batch) + w(step) · DNCE
of the JRF's marginal (unlabelled batch) + the noise LM's NLL, w(step) = --unlabelled-weight ·
sqrt(min(step, N) / N), N = --ramp-steps. `--init RUN` starts from a supervised tagger.

RUN/model is a tagger folder like the supervised method's, so `tag eval` and `tag predict` read it.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from textebm.data.conll import CONLL_SUFFIX
from textebm.data.readers import eval_split_of, split_path
from textebm.data.ssl_split import nested_split
from textebm.data.tagging import check_known_tags, load_tagged, load_unlabelled_text, tag_set
from textebm.errors import TextebmError, TrainingInterrupted
from textebm.fingerprint import file_sha256, json_sha256
from textebm.io import once, read_json
from textebm.models.crf import BiLSTMCRF, TaggerSpec
from textebm.models.noise_lm import NoiseLM
from textebm.models.trf import TRFHead, length_distribution
from textebm.options import check_config, field_default, options_dict, refuse_unused
from textebm.runfolder import check_keep_best, check_run_dir, holds_progress, RESUME_FREE, run_completed
from textebm.seeds import seeded_sample
from textebm.tagging.folder import load_tagging_model
from textebm.tagging.metrics import SCORE_NAMES, selected_score
from textebm.tagging.recipes import (
    encode,
    freeze_encoder,
    load_encoder,
    load_stage1,
    STAGE1,
    start_zeta,
    tagger_for,
    TaggerJointRecipe,
    TaggerRecipe,
    transfer_tagger,
    TRFRecipe,
)
from textebm.tagging.ssl import DNCESpec, SemiSupervisedTagger
from textebm.tagging.vocab import MAX_WORD_CHARS, WordVocab, build_vocab
from textebm.train import run_loop, seed_everything, started_run, train, TrainOptions

log = logging.getLogger(__name__)

METHODS = ["supervised", "pretrain", "joint"]
SSL_OPTIONS = ["ratio", "unlabelled", "unlabelled_max_tokens", "dnce_alpha", "noise_ratio", "noise_lr", "noise_embed",
               "noise_hidden", "zeta_lr", "zeta_draws"]  # pretrain, joint
INIT_KEEPS = ("embed", "hidden", "layers", "lowercase", "char_embed", "char_filters")  # joint takes them from --init
STAGE1_OPTIONS = ["pretrain_epochs", "pretrain_steps", "pretrain_lr", "stage1_cache"]  # pretrain; joint --from-pretrained
PRETRAIN_OPTIONS = [*STAGE1_OPTIONS, "freeze", "stage2_words"]
JOINT_OPTIONS = ["unlabelled_weight", "ramp_steps", "init", "from_pretrained"]


@dataclass(kw_only=True)
class TagTrainConfig(TrainOptions):
    COMMAND: ClassVar[str] = "tag train"
    data: str = field(metadata={"help": "tagged sentences: a dataset folder of `data prepare brown-pos` (rows with "
                                        "tokens and tags), a JSONL file of such rows, or a CoNLL file (.conll)"})
    method: str = field(default="supervised", metadata={
        "help": "supervised: the BiLSTM-CRF trained on the CRF's -log p(y|x) of the labelled sentences; "
                "pretrain: a TRF language model over the BiLSTM (eq. 3) trained by DNCE on unlabelled sentences "
                "(RUN/pretrain), then the tagger started from its embeddings and BiLSTM and fine-tuned on the "
                "labelled ones (--freeze: only a new output layer and A); "
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
    eval_limit: int = field(default=0, metadata={
        "help": "measure the dev accuracy (after each epoch, for --keep-best and at the end) on this many sentences "
                "of the evaluation split, a seeded sample (0: all of it; a 6,000-sentence dev split after each of 40 epochs costs more than the "
                "training of a small labelled set)", "min": 0})
    lowercase: bool = field(default=False, metadata={"help": "lowercase words before looking them up"})
    min_count: int = field(default=2, metadata={
        "help": "words seen fewer times in the labelled sentences share the unknown word's vector", "min": 1})
    max_words: int = field(default=0, metadata={
        "help": "keep only this many of the most frequent words (of the labelled and unlabelled sentences); the "
                "others share the unknown word's vector (0: no cap)", "min": 0})
    embed: int = field(default=100, metadata={"help": "word embedding size", "min": 1})
    char_cnn: bool = field(default=False, metadata={
        "help": "add a character CNN to each word's embedding (thu-spmi/semi-EBM's: widths 2, 3, 4), reading "
                "every token as written, so that a word outside the vocabulary keeps its spelling"})
    char_embed: int = field(default=50, metadata={"help": "--char-cnn: character embedding size", "min": 1})
    char_filters: int = field(default=100, metadata={"help": "--char-cnn: filters per width", "min": 1})
    hidden: int = field(default=200, metadata={"help": "LSTM state size per direction", "min": 1})
    layers: int = field(default=1, metadata={"help": "stacked bidirectional LSTM layers", "min": 1})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the embeddings and the LSTM's outputs",
                                                  "min": 0, "lt": 1})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (AdamW)", "gt": 0})
    keep_best: bool = field(default=False, metadata={
        "help": "end with the weights of the epoch of best dev accuracy (span F1 for a BIO tag set), not the "
                "last (pretrain: of stage 2)"})
    # pretrain and joint: the unlabelled sentences, DNCE and its noise LM
    ratio: int = field(default=50, metadata={
        "help": "pretrain, joint: unlabelled sentences per labelled one (U/L), the nested split's pool drawn from "
                "the training sentences outside the --labelled set", "min": 1})
    unlabelled: list[str] = field(default_factory=list, metadata={
        "help": "pretrain, joint: text dataset folders (`data prepare sotu`, news, shakespeare) whose sentences join "
                "the pool, cut into Brown's word tokens; the seeded permutation mixes them with the training "
                "sentences (the labelled draw does not change)"})
    unlabelled_max_tokens: int = field(default=0, metadata={
        "help": "pretrain, joint: leave sentences of more tokens out of the unlabelled pool (0: keep all; a few "
                "long rows, e.g. Shakespeare's speeches, pad every DNCE batch they fall in and widen the TRF's "
                "lengths)", "min": 0})
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
    zeta_lr: float = field(default=0.0, metadata={
        "help": "pretrain, joint: peak learning rate of zeta, the log-normalisers (its own parameter group; 0: the "
                "TRF's own rate, --pretrain-lr or --lr)", "min": 0})
    zeta_draws: int = field(default=8, metadata={
        "help": "pretrain, joint: uniform sentences per length behind zeta's starting estimate of log Z_l",
        "min": 1})
    # pretrain: stage 1 (the TRF); --epochs, --lr, --max-steps are stage 2's (the output layer and A)
    pretrain_epochs: float = field(default=1.0, metadata={
        "help": "pretrain: passes of stage 1 (the TRF language model) over the unlabelled sentences", "gt": 0})
    pretrain_steps: int = field(default=0, metadata={
        "help": "pretrain: stop stage 1 after this many optimizer steps (0: no limit)", "min": 0})
    pretrain_lr: float = field(default=1e-3, metadata={"help": "pretrain: peak learning rate of stage 1 (AdamW)",
                                                       "gt": 0})
    stage1_cache: str = field(default="", metadata={
        "help": "pretrain, joint --from-pretrained: keep stage 1 (the TRF) in this folder, under a name keyed by its "
                "content (the unlabelled sentences, the vocabulary, the options, the seed), and reuse it when a run "
                "of the same content finished it before (the grid's cells share it); default: RUN/pretrain"})
    freeze: bool = field(default=False, metadata={
        "help": "pretrain: stage 2 trains only the new output layer and A, the embeddings and BiLSTM kept as stage "
                "1 left them (the ablation; default: every weight fine-tuned, as the paper's code does)"})
    stage2_words: str = field(default="all", metadata={
        "choices": ["all", "labelled"],
        "help": "pretrain: the words stage 2's tagger keeps: all (stage 1's vocabulary, the unlabelled pool's words "
                "too) or labelled (the words of the labelled sentences, as the supervised tagger's; a word only the "
                "pool has reads as the unknown word, whose vector and the character CNN then stand for it)"})
    # joint
    unlabelled_weight: float = field(default=0.1, metadata={
        "help": "joint: the DNCE loss's weight after the ramp (thu-spmi/semi-EBM: 0.1)", "min": 0})
    ramp_steps: int = field(default=1000, metadata={
        "help": "joint: the weight ramps as unlabelled_weight * sqrt(min(step, N) / N) over N optimizer steps "
                "(the paper's code: 40000 on a GPU; 0: no ramp)", "min": 0})
    init: str = field(default="", metadata={
        "help": "joint: start from this supervised tagger (a `tag train` run; as thu-spmi/semi-EBM's ICASSP-2020 "
                "script does); words it lacks start as its unknown word"})
    from_pretrained: bool = field(default=False, metadata={
        "help": "joint: start from stage 1 of pre-training (trained, or reused from --stage1-cache): its "
                "embeddings, character CNN, BiLSTM and noise LM, a new output layer and A, zeta estimated anew "
                "(this paper's run_trf_semi.py --model <trf_pretrain>)"})

    def check(self) -> None:
        super().check()
        if self.stage1_cache and Path(self.stage1_cache).exists() and not Path(self.stage1_cache).is_dir():
            raise TextebmError(f"--stage1-cache {self.stage1_cache}: not a folder; name a folder (new, or one that "
                               "holds stage 1 runs) for the TRF language models of pre-training")
        if self.method == "joint" and self.from_pretrained and self.init:
            raise TextebmError("--from-pretrained and --init: joint training starts from one of them; give one")
        for names, why in unused_options(self.method, from_pretrained=self.from_pretrained, init=bool(self.init)):
            refuse_unused(self, names, why)
        if not self.char_cnn:
            refuse_unused(self, ["char_embed", "char_filters"], "without --char-cnn")
        if Path(self.data).suffix.lower() != CONLL_SUFFIX:
            refuse_unused(self, ["tag_column"], "unless --data is a CoNLL file (.conll)")
        if not self.labelled and self.proportion == 1.0:
            refuse_unused(self, ["split_seed"], "without --labelled or --proportion (every training sentence "
                                                "is used)")


def unused_options(method: str, *, from_pretrained: bool = False, init: bool = False) -> list[tuple[list[str], str]]:
    """The options that do nothing with `method` (joint: started `from_pretrained`, or from an
    `init` tagger), in groups with the reason: what `TagTrainConfig.check` refuses, and what the
    grid leaves out of its `options.all` for the method's cells."""
    if method == "supervised":
        return [(SSL_OPTIONS + PRETRAIN_OPTIONS + JOINT_OPTIONS, "with --method supervised")]
    if method == "pretrain":
        return [(JOINT_OPTIONS, "with --method pretrain")]
    groups = [(["freeze", "stage2_words"], "with --method joint")]
    if not from_pretrained:
        groups.append((STAGE1_OPTIONS, "with --method joint unless --from-pretrained"))
    if init:
        groups.append((list(INIT_KEEPS), "with --init (the sizes and the lowercasing are the initial tagger's)"))
    return groups


def held_out(data: str, eval_split: str) -> list[list[str]]:
    """The sentences kept out of the unlabelled pool of `--method pretrain | joint` (their tags are
    never read): every one of the evaluation split `eval_split` (also past --eval-limit) and, for a
    dataset folder, of its test split. `tag train` and the grid's plan of the ratios both use it."""
    splits = [eval_split] if eval_split else []
    if Path(data).is_dir() and eval_split != "test" and split_path(data, "test").is_file():
        splits.append("test")
    return [r["tokens"] for split in splits for r in load_tagged(data, split, tags=False)]


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
             exclude: list[list[str]] = (), extra: list[list[str]] = (), max_tokens: int = 0
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(labelled, unlabelled) sentences: `labelled_rows`, and the first ratio·|labelled| sentences
    of the nested split's unlabelled pool (the training sentences outside the --labelled set and
    the `extra` sentences of other corpora, less any equal to one of `exclude` and, when
    `max_tokens` > 0, any longer). A pool too small is a TextebmError naming --ratio."""
    lab = labelled_rows(rows, labelled, proportion, seed, where)
    split = nested_split([r["tokens"] for r in rows], labelled or len(rows), seed, proportions=(proportion,),
                         extra=extra, exclude=exclude, max_pool_tokens=max_tokens)
    need = ratio * len(lab)
    if need > len(split.pool):
        raise TextebmError(f"--ratio {ratio}: U/L = {ratio} with {len(lab):,} labelled sentences needs {need:,} "
                           f"unlabelled ones; {where}" + (" and --unlabelled" if extra else "")
                           + f" hold {len(split.pool):,} sentences outside the --labelled set"
                           + (f" of at most --unlabelled-max-tokens {max_tokens}" if max_tokens else "")
                           + (f" (the largest --ratio it allows is {len(split.pool) // len(lab)})"
                              if len(split.pool) >= len(lab) else
                              " (too few for any --ratio: give --labelled N below the training split's "
                              f"{len(rows):,} sentences, so that the rest forms the pool, or --unlabelled DIR)"))
    return lab, [rows[i] if src == "train" else {"tokens": extra[i]} for src, i in split.unlabelled(proportion, ratio)]


def tag_train(cfg: TagTrainConfig) -> dict:
    """Train a tagger (see the module doc); returns metrics.json."""
    check_config(cfg)
    check_run_dir(cfg, None)  # a bad --out fails before the data is read
    eval_split = eval_split_of(cfg.data, cfg.eval_split)
    check_keep_best(cfg, eval_split, "dev accuracy (span F1 for a BIO tag set)")
    if cfg.stage1_cache and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise TextebmError("--stage1-cache builds stage 1 under a file lock, which several processes of one run "
                           "(accelerate launch) would wait on each other for; run stage 1 in one process first, or "
                           "leave --stage1-cache out")
    seed_everything(cfg.seed)
    read = lambda split: load_tagged(cfg.data, split, tag_column=cfg.tag_column)
    train_rows = read("train")
    tags = tag_set(train_rows)
    eval_rows = read(eval_split) if eval_split else []
    if eval_rows:
        check_known_tags(eval_rows, tags, split_path(cfg.data, eval_split))
    if cfg.method != "supervised":
        return ssl_train(cfg, train_rows, tags, eval_split, eval_rows)
    eval_rows = measured_rows(eval_rows, cfg.eval_limit)
    rows = labelled_rows(train_rows, cfg.labelled, cfg.proportion, cfg.split_seed, cfg.data)
    vocab = build_vocab(rows, cfg.lowercase, cfg.min_count, cfg.max_words, chars=cfg.char_cnn)
    model = new_tagger(cfg, vocab, tags)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tagger: %d labelled sentences (%d tokens), %d words, %d tags, %.2fM parameters", len(rows),
             sum(len(r["tokens"]) for r in rows), len(vocab), len(tags), n_params / 1e6)
    config = {**options_dict(cfg), "train_sha256": file_sha256(split_path(cfg.data, "train")),
              "labelled_sentences": len(rows), "vocab_size": len(vocab), "tags": tags, "parameters": n_params,
              **kept_by(cfg, tags)}
    recipe = TaggerRecipe(model, vocab, rows, eval_split, eval_rows, cfg.batch_size)
    recipe.keep_best = cfg.keep_best
    return train(cfg, config, recipe)


def kept_by(cfg: TagTrainConfig, tags: list[str]) -> dict[str, str]:
    """What --keep-best selects by, in the run's config when it is span F1 (a BIO tag set), so that a
    run kept by dev accuracy before is not resumed under it (the key runs of POS had stays as it was)."""
    score = selected_score(tags)
    return {"keep_best_by": f"dev {SCORE_NAMES[score]}"} if cfg.keep_best and score == "span_f1" else {}


def measured_rows(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The evaluation sentences the per-epoch accuracy is measured on: all, or `limit` of them
    drawn with a fixed seed (--eval-limit), in their file order."""
    if not limit or len(rows) <= limit:
        return rows
    keep = seeded_sample(len(rows), limit, 0, "eval-limit")
    return [rows[i] for i in keep]


def new_tagger(cfg: TagTrainConfig, vocab: WordVocab, tags: list[str]) -> BiLSTMCRF:
    """A fresh tagger of the options' sizes over `vocab` (with its character table under --char-cnn)."""
    spec = TaggerSpec(vocab_size=len(vocab), tags=tags, embed=cfg.embed, hidden=cfg.hidden, layers=cfg.layers,
                      dropout=cfg.dropout, pad_id=vocab.pad_id, char_vocab=len(vocab.chars),
                      char_embed=cfg.char_embed, char_filters=cfg.char_filters, word_chars=MAX_WORD_CHARS)
    return tagger_for(spec, vocab)


def stage2_frozen(cfg: TagTrainConfig) -> tuple[bool, bool]:
    """(whether stage 2 of pre-training keeps the BiLSTM frozen, whether the run is one resumed from
    before --freeze existed): --freeze; and a run whose config.json has no `freeze` is frozen, as it
    started, with or without --freeze now."""
    old = Path(cfg.out) / "config.json"
    if cfg.resume and old.is_file():
        recorded = read_json(old)
        if isinstance(recorded, dict) and recorded.get("method") == "pretrain" and "freeze" not in recorded:
            log.info("--resume of a pre-training run from before --freeze: its stage 2 stays frozen, as it started")
            return True, True
    return cfg.freeze, False


STAGE1_TRAIN_KEYS = ("seed", "batch_size", "grad_accum", "weight_decay", "warmup", "schedule", "grad_clip",
                     "precision", "checkpoint_every", "log_every", "keep_checkpoint", "threads", "progress")
STAGE1_OWN = ("lowercase", "min_count", "embed", "hidden", "layers", "dropout", "dnce_alpha", "noise_ratio", "noise_lr",
              "noise_embed", "noise_hidden")
STAGE1_IF_SET = ("max_words", "unlabelled_max_tokens", "zeta_lr")  # recorded only when set (older stage 1s resume)
STAGE1_CHARS = ("char_cnn", "char_embed", "char_filters")  # recorded with --char-cnn
# every option stage 1 depends on (what --stage1-cache keys it by): a grid gives them to all its cells of one pool
STAGE1_SHAPING = (*STAGE1_OWN, *STAGE1_IF_SET, "zeta_draws", *STAGE1_CHARS, "pretrain_epochs", "pretrain_steps",
                  "pretrain_lr", *(k for k in STAGE1_TRAIN_KEYS if k not in RESUME_FREE | {"log_every", "seed"}))
STAGE1_DRAW = ("data", "labelled", "proportion", "split_seed", "ratio")  # in RUN/pretrain's config (the cache keys content)


def train_stage1(cfg: TagTrainConfig, run: Path, trf_model: SemiSupervisedTagger, vocab: WordVocab,
                 unlabelled: list[list[int]], spec: DNCESpec, inputs: dict) -> Path:
    """Stage 1 of pre-training, the TRF language model, trained (or resumed, or found finished) in
    RUN/pretrain, or with --stage1-cache in CACHE/trf-KEY, KEY a hash of everything it depends on
    (the unlabelled sentences, the vocabulary and the options, by content), built once under a lock
    whichever run needs it first; -> the folder of its tagger (and the TRF's `trf.safetensors`)."""
    own = {k: getattr(cfg, k) for k in STAGE1_OWN}
    # recorded only when set, so that a stage 1 written before these options existed still resumes
    own.update({k: getattr(cfg, k) for k in STAGE1_IF_SET if getattr(cfg, k)})
    if cfg.char_cnn:
        own.update({k: getattr(cfg, k) for k in STAGE1_CHARS})
    if cfg.zeta_draws != 8:
        own["zeta_draws"] = cfg.zeta_draws
    schedule = {"epochs": cfg.pretrain_epochs, "max_steps": cfg.pretrain_steps, "lr": cfg.pretrain_lr,
                **{k: getattr(cfg, k) for k in STAGE1_TRAIN_KEYS}}
    if cfg.stage1_cache:
        # a shared stage 1 logs at the default pace whoever builds it, so another run can resume it
        schedule["log_every"] = field_default(next(f for f in dataclasses.fields(TrainOptions) if f.name == "log_every"))
        content = {**own, **inputs, **{k: v for k, v in schedule.items() if k not in RESUME_FREE | {"log_every"}}}
        out = Path(cfg.stage1_cache).resolve() / f"trf-{json_sha256(content)[:16]}"
    else:
        out = run / STAGE1
        own.update({k: getattr(cfg, k) for k in STAGE1_DRAW})

    def build() -> None:
        opts = PretrainStageOptions(out=str(out), resume=(out / "config.json").is_file(), **schedule)
        log.info("stage 1 (the TRF language model) in %s", out)
        if not run_completed(out):
            start_zeta(trf_model, joint=False, seed=cfg.seed, draws=cfg.zeta_draws)  # a checkpoint replaces it
        train(opts, {**options_dict(opts), **own, **inputs},
              TRFRecipe(trf_model, vocab, unlabelled, spec, cfg.noise_lr, cfg.zeta_lr))

    if cfg.stage1_cache:
        if run_completed(out):
            recorded = read_json(out / "config.json")
            differ = sorted(k for k in content if not isinstance(recorded, dict) or recorded.get(k) != content[k])
            if differ:
                raise TextebmError(f"--stage1-cache: {out} holds a stage 1 of other inputs ({', '.join(differ)} "
                                   "differ from this run's: another pool, vocabulary or options); move it away or "
                                   "choose another --stage1-cache")
            log.info("stage 1 (the TRF language model): reusing %s (same content)", out)
    try:
        if cfg.stage1_cache:
            once(out, lambda: run_completed(out), build)
        else:
            build()
    except TrainingInterrupted:  # said for the user's --out, not for stage 1's own folder
        kept = holds_progress(out)
        if cfg.stage1_cache:
            what = (f"its progress is kept in the --stage1-cache ({out})" if kept else "nothing of it was kept")
            again = "run the same command again to continue"  # the cache resumes by content
        else:
            what = f"its progress is kept in {out}" if kept else "nothing of it was kept"
            again = "run the same command with --resume to continue" if kept else "run the command again"
        raise TrainingInterrupted(f"--out {run}: stopped in stage 1 (the TRF language model); {what}; {again}") from None
    return out / "model"


@dataclass(kw_only=True)
class PretrainStageOptions(TrainOptions):
    """Stage 1 of `tag train --method pretrain`, the run in RUN/pretrain (made from the command's
    options, never given by the user)."""

    COMMAND: ClassVar[str] = "tag train --method pretrain (stage 1)"


def ssl_train(cfg: TagTrainConfig, train_rows: list[dict[str, Any]], tags: list[str], eval_split: str,
              eval_rows: list[dict[str, Any]]) -> dict:
    """`tag train --method pretrain | joint` (see the module doc); returns metrics.json."""
    init = None
    if cfg.init:
        init, init_vocab, init_path = load_tagging_model(cfg.init, "cpu", option="--init")
        if init.spec.tags != tags:
            raise TextebmError(f"--init {cfg.init}: its tags {init.spec.tags} are not the training split's {tags}")
        if cfg.char_cnn and not init_vocab.chars:
            raise TextebmError(f"--char-cnn: the --init tagger {init_path} has no character CNN (train it with "
                               "--char-cnn, or leave --char-cnn out: the network is the initial tagger's)")
    exclude = held_out(cfg.data, eval_split)  # every dev sentence, also past --eval-limit
    eval_rows = measured_rows(eval_rows, cfg.eval_limit)
    extra = load_unlabelled_text(cfg.unlabelled) if cfg.unlabelled else []
    rows, unlabelled_rows = ssl_rows(train_rows, cfg.labelled, cfg.proportion, cfg.ratio, cfg.split_seed, cfg.data,
                                     exclude, extra, cfg.unlabelled_max_tokens)
    lowercase = init_vocab.lowercase if init is not None else cfg.lowercase
    vocab = build_vocab(rows + unlabelled_rows, lowercase, cfg.min_count, cfg.max_words, chars=cfg.char_cnn)
    if init is not None:
        vocab = dataclasses.replace(vocab, chars=init_vocab.chars)
    unlabelled = encode(vocab, unlabelled_rows)
    lengths = [len(s) for s in unlabelled]
    pi = length_distribution(lengths, max(lengths))
    if init is not None:
        tagger = transfer_tagger(init, init_vocab, vocab, cfg.dropout)
    else:
        tagger = new_tagger(cfg, vocab, tags)
    noise = NoiseLM(len(vocab), pi, embed=cfg.noise_embed, hidden=cfg.noise_hidden, pad_id=vocab.pad_id)
    spec = DNCESpec(alpha=cfg.dnce_alpha, nu=cfg.noise_ratio)
    log.info("%s: %d labelled sentences, %d unlabelled (%d tokens, lengths 1..%d), %d words, %d tags", cfg.method,
             len(rows), len(unlabelled), sum(lengths), max(lengths), len(vocab), len(tags))
    inputs = {"train_sha256": file_sha256(split_path(cfg.data, "train")), "labelled_sentences": len(rows),
              "unlabelled_sentences": len(unlabelled), "unlabelled_sha256": json_sha256(unlabelled),
              "vocab_size": len(vocab), "vocab_sha256": json_sha256(list(vocab.words)), "tags": tags}
    if vocab.chars:
        inputs["chars_sha256"] = json_sha256(list(vocab.chars))
    if init is not None:
        inputs["init_sha256"] = file_sha256(init_path / "model.safetensors")
    config = {**options_dict(cfg), **inputs, **kept_by(cfg, tags)}
    trf_model = None  # stage 1's TRF, when the method starts from pre-training
    if cfg.method == "pretrain" or cfg.from_pretrained:
        stage1_tagger = tagger_for(tagger.spec, vocab)
        # joint --from-pretrained: stage 1 trains a copy (the loop may move it to a device), joint loads its weights
        trf_noise = copy.deepcopy(noise) if cfg.method == "joint" else noise
        trf_model = SemiSupervisedTagger(stage1_tagger, TRFHead(len(vocab), tagger.spec.hidden, pi), trf_noise)
    if cfg.method == "joint":
        model = SemiSupervisedTagger(tagger, TRFHead(len(vocab), None, pi), noise)
        if trf_model is None:
            start_zeta(model, joint=True, seed=cfg.seed, draws=cfg.zeta_draws)
        recipe = TaggerJointRecipe(model, vocab, rows, unlabelled, eval_split, eval_rows, cfg.batch_size, spec,
                                   cfg.unlabelled_weight, cfg.ramp_steps, cfg.noise_lr, cfg.zeta_lr)
        supervised = recipe.supervised
    else:  # pretrain: stage 2 trains the tagger on the labelled sentences, started from stage 1's encoder
        freeze, legacy = stage2_frozen(cfg)
        if legacy:  # an older run, frozen as it started: its config.json stays as written
            config.pop("freeze", None)
        if freeze:
            freeze_encoder(tagger)
        recipe = supervised = TaggerRecipe(tagger, vocab, rows, eval_split, eval_rows, cfg.batch_size)
    recipe.keep_best = supervised.keep_best = cfg.keep_best  # joint: its tagger's recipe reports the selection
    if trf_model is None:
        return train(cfg, config, recipe)
    # Two runs of the loop: RUN's folder is started first, so that its marker owns RUN/pretrain
    # (--overwrite replaces it, a failure after it made progress keeps it); stage 1 is a run of its
    # own there (trained, resumed, or found finished; or in the --stage1-cache), then RUN's own.
    recipe.run_files = (STAGE1,)
    with started_run(cfg, config, recipe) as run:
        if run.finished is not None:
            return run.finished
        folder = train_stage1(cfg, run.path, trf_model, vocab, unlabelled, spec, inputs)
        supervised.stage1_run = folder.parent.resolve()
        if cfg.method == "joint":
            load_stage1(model, folder, cfg.seed, cfg.zeta_draws)
        else:
            load_encoder(tagger, folder)
            if cfg.stage2_words == "labelled":
                recipe = labelled_words(recipe, rows, cfg, freeze)
            log.info("stage 2: %s on the labelled sentences (%d words)", "the output layer and A, the encoder frozen"
                     if freeze else "every weight fine-tuned from stage 1's encoder", len(recipe.vocab))
        return run_loop(cfg, recipe, run)


def labelled_words(recipe: TaggerRecipe, rows: list[dict[str, Any]], cfg: TagTrainConfig, freeze: bool
                   ) -> TaggerRecipe:
    """Stage 2 with --stage2-words labelled: the tagger of `recipe` (stage 1's encoder loaded) moved
    to the vocabulary the supervised tagger builds from the labelled sentences `rows` (the same rule and
    options), each word with its stage-1 vector, on stage 1's characters. A word that only the
    unlabelled pool has then reads as the unknown word at training and at test, as the supervised
    tagger reads it: its stage-1 vector, which no labelled sentence trains, no longer stands for it
    (bench/results/tagging/pretrain-budget.json: those words were where pre-training lost)."""
    vocab = recipe.vocab
    kept = dataclasses.replace(build_vocab(rows, vocab.lowercase, cfg.min_count, cfg.max_words), chars=vocab.chars)
    tagger = transfer_tagger(recipe.model, vocab, kept, cfg.dropout)
    if freeze:
        freeze_encoder(tagger)
    stage2 = TaggerRecipe(tagger, kept, rows, recipe.eval_split, recipe.eval_rows, recipe.batch_size)
    stage2.keep_best, stage2.run_files, stage2.stage1_run = recipe.keep_best, recipe.run_files, recipe.stage1_run
    return stage2
