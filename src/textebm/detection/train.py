"""`textebm detect train`: a sequence energy against LM-generated negatives (Bakhtin et al.
2019, sec. 3-4), on the one training loop (checkpoints, resume, NaN stop).

Data: files of `textebm negatives generate` (several --train files: their union, e.g. all
corpora); --val files of held-out windows (the training generator's, never the test one's).
Each batch holds B windows and their k negatives; the energy scores all B(1+k) windows, context
and continuation together, and the loss is `textebm.losses.residual` (eq. 1's BCE with the worst,
one random or all negatives, or appendix C's ranking loss).

After training, validation windows fit the decision rule (`textebm.detection.detect.fit_rule`:
threshold, 1 % false-positive threshold, temperature), written to RUN/detector.json beside
RUN/model.

`--energy lmstats --base LM` is paper d's control (`textebm.models.seq_energy.LMStatsEnergy`): 3
weights and a bias on statistics of the frozen base LM over each window's continuation, trained
by the same loss on the same batches; it needs windows of one prefix length written left to right.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from textebm.data.batching import Batch
from textebm.detection import detect
from textebm.detection.windows import read_window_files, window_seqs
from textebm.errors import TextebmError
from textebm.io import read_json
from textebm.lm.generate import fixed_length_banned
from textebm.losses.residual import precision_at_1, ranking_loss, residual_bce
from textebm.models.build import SmallLMConfig, build_causal_lm, build_encoder
from textebm.models.lm import special_ids
from textebm.models.load import load_encoder, load_lm, load_tokenizer
from textebm.models.ralm import ResidualLM
from textebm.models.seq_energy import (
    EnergySpec,
    build_energy,
    encode_windows,
    save_energy,
    spec_dict,
)
from textebm.options import check_config, keep_best_field, options_dict, patience_field, refuse_unused
from textebm.runfolder import check_run_dir
from textebm.seeds import derive_seed
from textebm.tokenizer import same_vocab
from textebm.train import Recipe, seed_everything, train, TrainOptions

log = logging.getLogger(__name__)

LOSSES = ("bce", "ranking")


@dataclass(kw_only=True)
class DetectTrainConfig(TrainOptions):
    COMMAND: ClassVar[str] = "detect train"
    train: list[str] = field(metadata={"help": "negatives files of the training windows (several: their union)"})
    val: list[str] = field(metadata={"help": "negatives files of held-out windows: evaluation and the "
                                             "decision rule"})
    vocab: str = field(metadata={"help": "tokenizer folder of the shared vocabulary the windows are in"})
    energy: str = field(default="unitransf", metadata={
        "help": "energy function (sec. 4.3; lmstats: paper d's control, linear in the base LM's statistics "
                "on the continuation, needs --base)",
        "choices": ["linear", "bilstm", "unitransf", "bitransf", "lmstats"]})
    base: str = field(default="", metadata={
        "help": "lmstats: the base LM P_LM whose log-probabilities and entropies on the continuation the "
                "energy weighs (a causal LM in the shared vocabulary, frozen, fp32; the --base of "
                "`residual ppl`)"})
    init: str = field(default="", metadata={
        "help": "unitransf: a transformer LM in the shared vocabulary to start from (the paper's choice); "
                "bitransf: an encoder (e.g. minilm-l6; windows are re-tokenised into its vocabulary); "
                "default: from scratch"})
    loss: str = field(default="bce", metadata={"help": "eq. 1 binary cross-entropy or appendix C ranking",
                                               "choices": list(LOSSES)})
    negatives: str = field(default="worst", metadata={
        "help": "which negatives enter the loss: the lowest-energy one, one at random, or all k (table 7)",
        "choices": ["worst", "random", "all"]})
    margin: float = field(default=1.0, metadata={"help": "ranking loss margin (eq. 2: 1; figure 3: 0.1)",
                                                 "min": 0})
    layers: int = field(default=2, metadata={"help": "from scratch: transformer / LSTM layers", "min": 1})
    width: int = field(default=128, metadata={"help": "from scratch: hidden size (bilstm: per direction)",
                                              "min": 8})
    heads: int = field(default=4, metadata={"help": "from scratch transformers: attention heads", "min": 1})
    max_tokens: int = field(default=160, metadata={"help": "bitransf from an encoder: cap on re-tokenised "
                                                           "window length", "min": 8})
    pool: str = field(default="first", metadata={
        "help": "bitransf: what the scalar projects, the first position (Bakhtin et al.) or the top "
                "states mean-pooled over the window (Deng et al.'s BiT); unitransf pools the mean over the window "
                "(first or mean); continuation (unitransf, bitransf): the mean over the positions after the prefix only "
                "(identical for a window and its negatives; needs windows of one prefix length)",
        "choices": ["first", "mean", "continuation"]})
    dropout: float = field(default=0.0, metadata={
        "help": "unitransf, bitransf: dropout on the pooled vector while training", "min": 0, "lt": 1})
    max_windows: int = field(default=0, metadata={
        "help": "train on this many of the --train windows, a seeded subset (--seed) that a larger value contains "
                "(a learning curve over the number of windows; 0: all)", "min": 0})
    min_length: int = field(default=0, metadata={
        "help": "train on windows of varied lengths: each epoch a window and its negatives are cut alike (with "
                "probability --cut-fraction) to n tokens, n uniform in [MIN, L], keeping the end that holds the "
                "generated continuation (the context goes first); the decision rule is fitted on the whole "
                "validation windows and one cut copy of each (0: whole windows only, the paper's)", "min": 0})
    cut_fraction: float = field(default=0.5, metadata={
        "help": "with --min-length: the share of windows cut each epoch; the rest are read whole, so the "
                "detector keeps what it learns on full windows", "gt": 0, "max": 1})
    eval_batch_size: int = field(default=128, metadata={"help": "windows per evaluation batch", "min": 1})
    keep_best: bool = keep_best_field("the conditional NCE loss on the --val windows (eq. 1 over all their negatives)")
    patience: int = patience_field()
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (AdamW)", "gt": 0})

    def check(self) -> None:
        super().check()
        if self.loss != "ranking":
            refuse_unused(self, ["margin"], "with --loss bce")
        if self.energy in ("linear", "lmstats"):
            refuse_unused(self, ["layers", "width", "heads", "init"], f"with --energy {self.energy}")
        if self.energy == "lmstats" and not self.base:
            raise TextebmError("--energy lmstats needs --base: the base LM whose statistics it weighs (the "
                               "one that wrote the negatives, e.g. the --base of `residual ppl`)")
        if self.energy != "lmstats":
            refuse_unused(self, ["base"], f"with --energy {self.energy} (only lmstats reads a base LM)")
        if self.energy == "bilstm":
            refuse_unused(self, ["heads", "init"], "with --energy bilstm")
        if self.init:
            refuse_unused(self, ["layers", "width", "heads"], "with --init (the model's own size is used)")
        if not (self.energy == "bitransf" and self.init):
            refuse_unused(self, ["max_tokens"], "unless --energy bitransf starts from an encoder (--init)")
        if self.energy not in ("unitransf", "bitransf"):
            refuse_unused(self, ["pool", "dropout"], f"with --energy {self.energy} (it pools as its kind does)")
        if not self.min_length:
            refuse_unused(self, ["cut_fraction"], "without --min-length")
        if self.min_length and (self.energy == "lmstats" or self.pool == "continuation"):
            who = "--energy lmstats" if self.energy == "lmstats" else "--pool continuation"
            raise TextebmError(f"--min-length {self.min_length}: {who} reads the continuation after a prefix of one "
                               "length, which a cut window no longer has; train it on whole windows")
        if self.energy in ("unitransf", "bitransf") and not self.init and self.width % self.heads:
            raise TextebmError(f"--width {self.width} must be divisible by --heads {self.heads}")


@dataclass(kw_only=True)
class EnergyBuildSpec:
    """What `build_energy_model` builds (sec. 4.3): the kind of energy, from `init` or from
    scratch at the given size."""

    energy: str = "unitransf"  # linear | bilstm | unitransf | bitransf | lmstats
    dropout: float = 0.0  # unitransf, bitransf: on the pooled vector
    init: str = ""  # unitransf: an LM in the shared vocabulary; bitransf: an encoder
    base: str = ""  # lmstats: the base LM whose statistics it weighs
    prefix_len: int = 0  # lmstats, pool continuation: where the continuation starts in every window
    layers: int = 2
    width: int = 128
    heads: int = 4
    max_tokens: int = 160  # bitransf from an encoder: cap on the re-tokenised window
    pool: str = "first"  # bitransf: its first position or the mean of its top states
    seed: int = 0  # of the initial weights


def build_energy_model(want: EnergyBuildSpec, vocab, length: int):
    """(module, EnergySpec, input tokenizer) of a fresh or initialised energy."""

    pad = vocab.pad_token_id if vocab.pad_token_id is not None else 0
    pool = (want.pool if want.energy == "bitransf" or (want.energy == "unitransf" and want.pool == "continuation")
            else "first")
    spec = EnergySpec(kind=want.energy, vocab_size=len(vocab), length=length, pad_id=pad, init=want.init, pool=pool,
                      dropout=want.dropout if want.energy in ("unitransf", "bitransf") else 0.0,
                      contexts=[want.prefix_len] if pool == "continuation" else [])
    tokenizer, body = vocab, None
    # the one causal LM an energy reads: unitransf's starting point (--init), lmstats' base (--base), fp32
    lm_option, lm_path = {"unitransf": ("--init", want.init),
                          "lmstats": ("--base", want.base)}.get(want.energy, ("", ""))
    lm, tok, meta = load_lm(lm_path, dtype=torch.float32, option=lm_option) if lm_path else (None, None, None)
    if want.energy == "bilstm":
        spec.embed, spec.hidden, spec.layers = want.width, want.width, want.layers
    elif want.energy == "unitransf":
        if lm is not None:
            if not hasattr(lm, "model") or not same_vocab(tok, vocab):
                raise TextebmError(f"--init {want.init}: unitransf starts from a transformer LM in the shared "
                                   "vocabulary of --vocab (train one with `lm train --tokenizer VOCAB`)")
            if meta.direction != "l2r":
                log.warning("--init %s reads right to left; the energy reads windows left to right", want.init)
            body = lm.model
        else:
            body = build_causal_lm(SmallLMConfig(want.layers, want.width, want.heads, context=length + 8), vocab,
                                   seed=want.seed).model
        body.config.architectures = [type(body).__name__]
    elif want.energy == "lmstats":
        body = _lmstats_base(want, (lm, tok, meta), vocab, spec, length)
    elif want.energy == "bitransf":
        if want.init:
            body, tokenizer = load_encoder(want.init, option="--init")
            spec.retokenize = not same_vocab(tokenizer, vocab)
            if spec.retokenize and pool == "continuation":
                raise TextebmError(f"--pool continuation: --init {want.init} reads its own tokenizer's pieces, so the "
                                   "prefix has no fixed length in its input; use --pool mean, or an encoder in the "
                                   "shared vocabulary (`cloze train --tokenizer VOCAB`)")
            spec.max_tokens = want.max_tokens
            spec.vocab_size = len(tokenizer)
            spec.pad_id = tokenizer.pad_token_id or 0
        else:
            body = build_encoder(SmallLMConfig(want.layers, want.width, want.heads, context=length + 8), vocab,
                                 seed=want.seed)
            body.pooler = None  # the energy pools (--pool); an unused pooler breaks DDP
    return build_energy(spec, body), spec, tokenizer


def _lmstats_base(want: EnergyBuildSpec, loaded: tuple, vocab, spec: EnergySpec, length: int):
    """The frozen fp32 base LM of an lmstats energy (`loaded`: `load_lm`'s (model, tokenizer, meta)
    of --base), checked as paper d's P_LM is (`textebm.residual.joint.BaseLM`: a causal LM read left
    to right in the shared vocabulary); records its [bos], the tokens it never writes and the prefix
    in `spec`."""
    lm, tok, meta = loaded
    name = f"--base {want.base}"
    if isinstance(lm, ResidualLM):
        raise TextebmError(f"{name}: a RALM; lmstats weighs the statistics of a plain causal LM (the base LM "
                           "the RALM was trained on)")
    if meta.objective != "causal" or meta.direction != "l2r":
        raise TextebmError(f"{name}: the base LM must be a causal LM read left to right, not an "
                           f"{meta.objective} one trained {meta.direction}")
    if not same_vocab(tok, vocab):
        raise TextebmError(f"{name}: the base LM's vocabulary differs from the windows' (--vocab); train the LM "
                           "with `lm train --tokenizer VOCAB`")
    positions = getattr(lm.config, "max_position_embeddings", None)
    if positions and length > positions:
        raise TextebmError(f"{name}: windows of {length} tokens (read after [bos]) exceed its {positions} positions")
    if not 0 < want.prefix_len < length:
        raise ValueError(f"an lmstats energy needs a prefix shorter than its windows, got {want.prefix_len} "
                         f"of {length}")
    sp = special_ids(tok, meta)
    spec.bos_id, spec.banned, spec.contexts = sp.bos, list(fixed_length_banned(sp)), [want.prefix_len]
    spec.init = want.base
    return lm


def one_prefix(train_rows: list[dict], val_rows: list[dict], who: str) -> int:
    """The one prefix length p of the windows an energy that reads the continuation after it takes
    (`who`: --energy lmstats, --pool continuation; TextebmError naming the option otherwise), read
    left to right."""
    for rows, option in ((train_rows, "--train"), (val_rows, "--val")):
        if any(r["direction"] != "l2r" for r in rows):
            raise TextebmError(f"{option}: {who} reads the continuation after the prefix, left to "
                               "right; these windows were written right to left (r2l)")
    contexts = sorted({int(r["context_len"]) for r in train_rows})
    if len(contexts) != 1:
        raise TextebmError(f"--train: {who} reads the continuation after a prefix of one length; these "
                           f"windows have prefixes of {', '.join(map(str, contexts))} tokens (write them with "
                           "`negatives generate --contexts P`)")
    other = sorted({int(r["context_len"]) for r in val_rows} - set(contexts))
    if other:
        raise TextebmError(f"--val: windows with prefixes of {', '.join(map(str, other))} tokens; the --train "
                           f"windows' prefix is {contexts[0]}")
    return contexts[0]


def _check_lmstats_windows(spec: EnergySpec, rows_of: dict[str, list[dict]]) -> None:
    """No continuation holds a token the base LM never writes (its log-probability would be −inf)."""
    p = spec.contexts[0]
    for option, rows in rows_of.items():
        seqs = np.asarray([s for r in rows for s in (r["positive"], *r["negatives"])])  # (N(1+k), L): one length
        if np.isin(seqs[:, p:], spec.banned).any():
            raise TextebmError(f"{option}: a window continues with a token the --base LM never writes ([eos] "
                               "or a layout symbol); its log-probability would be -inf")


@dataclass
class WindowBatch(Batch):
    """B windows and their k negatives each, positives first: B(1+k) rows."""

    input_ids: torch.Tensor  # (B(1+k), T)
    attention_mask: torch.Tensor  # (B(1+k), T)
    k: int  # negatives per window


def cut_rows(rows: list[dict], min_length: int, length: int, key: list, fraction: float = 1.0) -> list[dict]:
    """Each row cut by `cut_row`, its draws from (`key`, the row's place): the same cut for the same
    key, whatever else is in the batch."""
    return [cut_row(r, min_length, length, [*_ints(key), i], fraction) for i, r in enumerate(rows)]


def cut_row(row: dict, min_length: int, length: int, entropy: list[int], fraction: float = 1.0) -> dict:
    """The row's window and negatives cut alike (`detect.cut`: the end holding the generated
    continuation), with probability `fraction`, to n tokens, n uniform in [min_length, length],
    drawn from numpy's generator of `entropy`; else the row as it is."""
    rng = np.random.default_rng(entropy)
    n = int(rng.integers(min_length, length + 1))
    if rng.random() >= fraction:
        return row
    return {**row, "positive": detect.cut(row["positive"], n, row["direction"]),
            "negatives": [detect.cut(x, n, row["direction"]) for x in row["negatives"]],
            "context_len": max(0, n - (length - int(row["context_len"])))}  # the context goes first


def _ints(key: list) -> list[int]:
    """A seed key of ints and names as numpy's SeedSequence entropy (names by their derived seed)."""
    return [k if isinstance(k, int) else derive_seed(0, k) for k in key]


class WindowBatcher:
    """(index, row of a negatives file) items -> WindowBatch. With `pick_one` (--negatives
    random), each row keeps one of its k negatives, drawn from (seed, epoch, index): only the two
    windows the loss reads are encoded, and a row meets another of its negatives each epoch (the
    rows' k negatives are a pool; resumable, since the draw depends on nothing else). With
    `min_length` (--min-length), a row is cut (with probability `cut_fraction`) to a length drawn
    from (seed, epoch, index) (`cut_rows`), its window and negatives alike."""

    def __init__(self, spec, tokenizer, vocab, pick_one: bool = False, seed: int = 0, min_length: int = 0,
                 cut_fraction: float = 1.0):
        self.spec, self.tokenizer, self.vocab = spec, tokenizer, vocab
        self.pick_one, self.seed, self.epoch, self.min_length = pick_one, seed, 0, min_length
        self.cut_fraction = cut_fraction

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def picked(self, index: int, row: dict) -> int:
        """The negative row `index` keeps this epoch."""
        return int(np.random.default_rng([self.seed, self.epoch, index]).integers(len(row["negatives"])))

    def __call__(self, items: list[tuple[int, dict]]) -> WindowBatch:
        rows = self.rows(items)
        batch = encode_windows(window_seqs(rows), self.spec, self.tokenizer, self.vocab)
        return WindowBatch(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           k=len(rows[0]["negatives"]))

    def rows(self, items: list[tuple[int, dict]]) -> list[dict]:
        """The rows a batch of `items` encodes: this epoch's negative of each (`pick_one`), cut to
        this epoch's length (`min_length`)."""
        rows = [r for _, r in items]
        if self.pick_one:
            rows = [{**r, "negatives": [r["negatives"][self.picked(i, r)]]} for i, r in items]
        if self.min_length:
            length = len(rows[0]["positive"])
            rows = [cut_row(r, self.min_length, length, [*_ints([self.seed, "length", self.epoch, i]), 0],
                            self.cut_fraction) for (i, _), r in zip(items, rows)]
        return rows


def residual_step(model, batch: WindowBatch, loss: str, negatives: str, margin: float) -> tuple[torch.Tensor, dict]:
    """The loss of one batch and what to log (NCE accuracy, P@1)."""

    k = batch.k
    e = model(batch.input_ids, batch.attention_mask).float().view(-1, 1 + k)  # (B, 1+k)
    e_pos, e_neg = e[:, 0], e[:, 1:]  # (B,), (B, k)
    if loss == "bce":
        out = residual_bce(e_pos, e_neg, negatives)
        value, logs = out.loss, {"acc": float(out.accuracy)}
    else:
        value, logs = ranking_loss(e_pos, e_neg, margin, negatives), {}
    logs["p_at_1"] = float(precision_at_1(e_pos.detach(), e_neg.detach()))
    return value, logs


def detect_train(cfg: DetectTrainConfig) -> dict:
    """Train the energy, then fit and write its decision rule on the validation windows."""

    check_config(cfg)
    options = options_dict(cfg)  # as RUN/config.json records them
    check_run_dir(cfg, None)
    seed_everything(cfg.seed)  # the energy's initial weights; cuts and subsets of windows have seeds of their own
    vocab = load_tokenizer(cfg.vocab, "--vocab")
    in_vocab = {"vocab_size": len(vocab), "vocab_of": f"--vocab {cfg.vocab}"}
    train_rows = read_window_files(cfg.train, "--train", **in_vocab)
    length = len(train_rows[0]["positive"])
    val_rows = read_window_files(cfg.val, "--val", length, length_of="the --train windows are that long", **in_vocab)
    prefix_len = 0
    if cfg.energy == "lmstats":
        prefix_len = one_prefix(train_rows, val_rows, "--energy lmstats")
    elif cfg.pool == "continuation":
        prefix_len = one_prefix(train_rows, val_rows, "--pool continuation")
    if cfg.min_length > length:
        raise TextebmError(f"--min-length {cfg.min_length}: the --train windows have {length} tokens; a cut window "
                           f"cannot be longer (choose a MIN of at most {length})")
    if cfg.max_windows:
        train_rows = nested_subset(train_rows, cfg.max_windows, cfg.seed)
    if cfg.min_length:  # the rule and the validation loss see every length the detector is trained on
        val_rows = val_rows + cut_rows(val_rows, cfg.min_length, length, [cfg.seed, "val"])
    model, spec, tokenizer = build_energy_model(EnergyBuildSpec(
        energy=cfg.energy, init=cfg.init, base=cfg.base, prefix_len=prefix_len, layers=cfg.layers,
        width=cfg.width, heads=cfg.heads, max_tokens=cfg.max_tokens, pool=cfg.pool, dropout=cfg.dropout,
        seed=cfg.seed), vocab, length)
    if cfg.energy == "lmstats":
        _check_lmstats_windows(spec, {"--train": train_rows, "--val": val_rows})
    batcher = WindowBatcher(spec, tokenizer, vocab, pick_one=cfg.negatives == "random", seed=cfg.seed,
                            min_length=cfg.min_length, cut_fraction=cfg.cut_fraction)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)  # lmstats: its 4, not the base LM's
    log.info("%s energy: %s trained parameters, %d training windows x (1 + %d negatives), %d validation windows",
             cfg.energy, f"{n_params:,}", len(train_rows), len(train_rows[0]["negatives"]), len(val_rows))

    config = {**options, "parameters": n_params, "spec": spec_dict(spec)}
    # The prefixes it learnt from (paper d's p): recorded in energy.json for the joint model's
    # checks, not in config.json's spec, which is the architecture (the --train files are there).
    spec.contexts = sorted({int(r["context_len"]) for r in train_rows})
    recipe = DetectorRecipe(model=model, spec=spec, tokenizer=tokenizer, vocab=vocab, dataset=list(enumerate(train_rows)),
                            lengths=[len(r["positive"]) for r in train_rows], collate=batcher, loss_kind=cfg.loss,
                            negatives=cfg.negatives, margin=cfg.margin, val_rows=val_rows,
                            eval_batch_size=cfg.eval_batch_size, keep_best=cfg.keep_best,
                            patience=cfg.patience)
    metrics_ = train(cfg, config, recipe)
    rule_file = Path(cfg.out) / detect.RULE_FILE
    if not rule_file.is_file():
        # Fitted by the final evaluation; a resumed run that had already finished (a crash between
        # the model and its rule) scores the saved model instead.
        rule = recipe.rule or rule_of(detect.EnergyScorer(Path(cfg.out) / "model").score_ids, val_rows,
                                      cfg.eval_batch_size)[0]
        detect.write_rule(rule_file, {"detector": "energy", "energy": cfg.energy, "model": "model",
                                      "length": length, "min_length": cfg.min_length or length,
                                      "val": [str(Path(v).resolve()) for v in cfg.val]}, rule)
        log.info("decision rule on validation: balanced accuracy %.3f, AUROC %.3f, ECE %.4f (T = %.3g)",
                 rule.val["balanced_accuracy"], rule.val["auroc"], rule.val["ece"], rule.temperature)
    return {**metrics_, "rule": read_json(rule_file)["rule"]}


def nested_subset(rows: list[dict], n: int, seed: int) -> list[dict]:
    """The first `n` rows of a seeded permutation of `rows`, in their file order: the subset of a
    smaller `n` lies inside a larger one's (same seed), so a learning curve adds windows."""
    if n >= len(rows):
        return rows
    order = np.random.default_rng(derive_seed(seed, "max-windows")).permutation(len(rows))[:n]  # (n,)
    return [rows[i] for i in sorted(order.tolist())]


def rule_of(score_ids, val_rows: list[dict], batch_size: int):
    """(decision rule fitted on the validation windows, their P@1) under `score_ids`."""

    real, fake = detect.window_scores(score_ids, val_rows, batch_size)
    return detect.fit_rule(real, fake.ravel()), float((real < fake.min(1)).mean())


@dataclass(kw_only=True)
class DetectorRecipe(Recipe):
    """`detect train` on the loop: the energy's loss on windows and their negatives; the final
    evaluation fits the decision rule on the validation windows (kept in `rule`)."""

    model: torch.nn.Module
    spec: Any  # EnergySpec
    tokenizer: Any
    vocab: Any
    dataset: list[tuple[int, dict]]  # (index, row): the index seeds the row's negative under --negatives random
    lengths: list[int]
    collate: WindowBatcher
    loss_kind: str  # bce | ranking
    negatives: str  # worst | random | all
    margin: float
    val_rows: list[dict]
    eval_batch_size: int
    rule: Any = None
    keep_best: bool = False
    patience: int = 0
    run_files = ("detector.json",)  # detect.RULE_FILE, written after training: --overwrite replaces it too

    def loss(self, model, batch, at):
        return residual_step(model, batch, self.loss_kind, self.negatives, self.margin)

    def start_epoch(self, epoch):
        self.collate.set_epoch(epoch)

    def _score(self, seqs, batch_size):
        return detect.energies(self.model, self.spec, self.tokenizer, self.vocab, seqs, batch_size)

    def validate(self):
        real, fake = detect.window_scores(self._score, self.val_rows, self.eval_batch_size)  # (N,), (N, k)
        e_pos, e_neg = torch.as_tensor(real, dtype=torch.float64), torch.as_tensor(fake, dtype=torch.float64)
        return float(residual_bce(e_pos, e_neg, "all").loss)

    def evaluate(self):
        self.rule, p_at_1 = rule_of(self._score, self.val_rows, self.eval_batch_size)
        val = self.rule.val  # threshold of best balanced accuracy, fitted on these very windows
        return {"val_balanced_accuracy": val["balanced_accuracy"], "val_auroc": val["auroc"], "val_p_at_1": p_at_1}

    def save(self, folder):
        save_energy(self.model, self.spec, self.tokenizer, folder, self.vocab)
