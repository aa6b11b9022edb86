"""`textebm classify train`: fine-tune an encoder for classification, optionally jointly with an
energy-based model of the inputs trained by NCE (paper a, eq. 8), or with the PosCal penalty.

    L_joint = L_CE + L_NCE            (eq. 8; L_NCE is eq. 7, textebm.losses.nce)
    L_PosCal = L_CE + λ · d(p, q)     (Jung et al. 2020; textebm.losses.poscal)

Data and noise go through the encoder as two passes, each padded to its own length: noise
batches are bucketed by their own length (`textebm.classify.data.noise_stream`), so the joint step
costs about (1 + K) baseline steps. `joint_forward(..., separate=False)` is the reference that
concatenates both into one padded batch; they agree (tests/test_classify.py).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from textebm.calibration.metrics import calibration_summary
from textebm.classify.data import (
    ClassifyBatch,
    Collator,
    attach_noise,
    check_eval_labels,
    encode,
    encode_examples,
    label_vocab,
    pairs_problem,
    noise_stream,
    read_noise,
    warn_noise_reuse,
)
from textebm.classify.predict import predict, refresh_poscal_table
from textebm.data.readers import eval_split_of, load_split, split_file
from textebm.energy import ENERGY_CHOICES, POOLINGS
from textebm.errors import InputError, TextebmError
from textebm.losses.nce import nce_loss
from textebm.losses.poscal import poscal_penalty
from textebm.models.classifier import ClassifierSpec, save_classifier
from textebm.models.load import build_classifier
from textebm.options import check_config, options_dict, refuse_unused
from textebm.runfolder import check_run_dir
from textebm.train import MAIN, ParamGroup, Recipe, seed_everything, train, TrainOptions

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ClassifyTrainConfig(TrainOptions):
    COMMAND: ClassVar[str] = "classify train"
    data: str = field(metadata={"help": "dataset directory with train.jsonl (text, [text_pair], label)"})
    encoder: str = field(default="minilm-l6", metadata={"help": "pretrained encoder: HF folder or models-fetch id"})
    energy: str = field(default="none", metadata={"help": "energy variant of sec. 2.2 (none: plain fine-tuning)",
                                                  "choices": list(ENERGY_CHOICES)})
    noise: str = field(default="", metadata={"help": "noise JSONL from `lm sample --mode infill` (needed with --energy)"})
    noise_ratio: int = field(default=1, metadata={"help": "K noise samples per data sample (paper: 8, sometimes 1)",
                                                      "min": 1})
    poscal: bool = field(default=False, metadata={"help": "add the PosCal calibration penalty (baseline of Jung et al.)"})
    poscal_lambda: float = field(default=1.0, metadata={"help": "weight of the PosCal penalty", "gt": 0})
    poscal_bins: int = field(default=20, metadata={"help": "PosCal confidence bins", "min": 2})
    nce_weight: float = field(default=1.0, metadata={
        "help": "weight of the NCE term: L = L_CE + w L_NCE (paper: 1)", "gt": 0})
    nce_warmup: float = field(default=0.0, metadata={
        "help": "fraction of the steps over which the NCE weight rises linearly from 0 to --nce-weight",
        "min": 0, "lt": 1})
    energy_lr: float | None = field(default=None, metadata={
        "help": "peak learning rate of the scalar energy head g_S (default: --lr)", "gt": 0})
    head: str = field(default="mlp", metadata={"help": "classifier f_CLS", "choices": ["linear", "mlp"]})
    pooling: str = field(default="mean", metadata={"help": "sentence representation", "choices": list(POOLINGS)})
    max_len: int = field(default=64, metadata={"help": "truncate inputs to this many tokens", "min": 2})
    limit: int = field(default=0, metadata={"help": "use only the first N training examples (0: all)", "min": 0})
    epochs: float = field(default=3.0, metadata={"help": "passes over the training data", "gt": 0})
    lr: float = field(default=5e-5, metadata={"help": "peak learning rate (AdamW)", "gt": 0})
    eval_split: str | None = field(default=None, metadata={
        "help": "split evaluated after training (default: dev when --data is a dataset folder; '' to skip)"})

    def check(self) -> None:
        super().check()
        if not self.poscal:
            refuse_unused(self, ["poscal_lambda", "poscal_bins"], "without --poscal")
        elif self.energy != "none":
            raise TextebmError(f"--poscal with --energy {self.energy}: the paper's methods are one or the other "
                               "(PosCal: cross-entropy + PosCal; the EBMs: cross-entropy + NCE); choose one")
        if self.energy != "scalar":
            refuse_unused(self, ["energy_lr"], "without --energy scalar (the other energies have no head of their own)")
        if self.energy == "none":
            refuse_unused(self, ["noise_ratio", "nce_weight", "nce_warmup"], "without --energy")
            if self.noise:
                raise TextebmError("--noise is only used with --energy scalar|hidden|sharp-hidden")
        elif not self.noise:
            raise TextebmError(f"--energy {self.energy} needs --noise FILE.jsonl (make it with "
                               "`textebm lm sample --mode infill`)")


def classify_train(cfg: ClassifyTrainConfig) -> dict:
    """Fine-tune a classifier, jointly with an EBM (--energy) or PosCal (--poscal)."""

    check_config(cfg)  # bounds and rules between options, also when called from Python
    options = options_dict(cfg)  # as RUN/config.json records them
    check_run_dir(cfg, None)  # a bad --out fails before the data and the encoder are read
    eval_split = eval_split_of(cfg.data, cfg.eval_split)
    rows = load_split(cfg.data, "train")[:cfg.limit or None]
    eval_rows = load_split(cfg.data, eval_split) if eval_split else []
    files = {split: split_file(cfg.data, split) for split in ("train", eval_split) if split}
    labels = label_vocab(rows, files["train"])
    pairs = any(r.get("text_pair") is not None for r in rows)  # a classifier of text pairs
    if eval_split:  # checked before training, so a finished training is never thrown away
        check_eval_labels(eval_rows, labels, files[eval_split])  # classify.data
        if pairs_problem(eval_rows, pairs):
            raise InputError(files[eval_split], f"the training split holds {'text pairs' if pairs else 'single texts'}, "
                                                f"this split {'single texts' if pairs else 'text pairs'}; a classifier "
                                                "reads one kind")
    noise_rows = read_noise(cfg.noise, pairs) if cfg.energy != "none" else []  # read before the encoder loads
    spec = ClassifierSpec(labels=labels, energy=cfg.energy, head=cfg.head, pooling=cfg.pooling,
                          max_len=cfg.max_len, poscal_bins=cfg.poscal_bins if cfg.poscal else 0,
                          pairs=pairs)
    seed_everything(cfg.seed)  # the new head's initial weights
    model, tokenizer = build_classifier(cfg.encoder, spec)  # a folder or a `models fetch` id
    positions = getattr(model.encoder.config, "max_position_embeddings", None)
    if positions and cfg.max_len > positions:  # before any work: a long text would fail mid-training
        raise TextebmError(f"--max-len {cfg.max_len}: the encoder {cfg.encoder} takes at most {positions} tokens")
    examples = encode_examples(tokenizer, rows, labels, cfg.max_len)
    noise = None
    if cfg.energy != "none":
        attach_noise(examples, rows, noise_rows, cfg.noise)
        warn_noise_reuse(examples, cfg.noise_ratio, cfg.epochs, cfg.noise)
        noise = encode(tokenizer, noise_rows, cfg.max_len)
    lengths = [len(e.ids) for e in examples]

    collate = Collator(tokenizer.pad_token_id or 0)
    streams = None
    if noise is not None:  # each epoch's K samples per example, bucketed by their own length
        streams = {"noise": noise_stream(examples, noise, cfg.noise_ratio, cfg.batch_size, collate.pad_id)}
    groups = [ParamGroup(name="energy_head", prefix="energy_head.", lr=cfg.energy_lr)] if cfg.energy_lr is not None else []
    eval_ex = encode_examples(tokenizer, eval_rows, labels, cfg.max_len) if eval_split else None
    recipe = ClassifyRecipe(model=model, tokenizer=tokenizer, dataset=examples, lengths=lengths, collate=collate,
                            streams=streams, param_groups=groups,
                            loss_spec=JointLossSpec(noise_ratio=cfg.noise_ratio, nce_weight=cfg.nce_weight,
                                                    nce_warmup=cfg.nce_warmup,
                                                    poscal_lambda=cfg.poscal_lambda if cfg.poscal else 0.0),
                            batch_size=cfg.batch_size, eval_split=eval_split, eval_examples=eval_ex)
    config = {**options, "labels": labels, "train_examples": len(rows)}
    return train(cfg, config, recipe)


@dataclass(kw_only=True)
class JointLossSpec:
    """The joint objective: L = L_CE + w L_NCE (+ λ L_PosCal); w rises linearly from 0 over the
    first `nce_warmup` fraction of the steps; λ = 0: no PosCal."""

    noise_ratio: int = 1  # K noise samples per data sample
    nce_weight: float = 1.0
    nce_warmup: float = 0.0
    poscal_lambda: float = 0.0


@dataclass(kw_only=True)
class ClassifyRecipe(Recipe):
    """`classify train` on the loop: a classifier, jointly with its NCE energy (noise stream) or
    PosCal (its table refreshed after every epoch)."""

    model: torch.nn.Module
    tokenizer: Any
    dataset: list
    lengths: list[int]
    collate: Any
    streams: dict | None
    param_groups: list
    loss_spec: JointLossSpec
    batch_size: int
    eval_split: str = ""
    eval_examples: list | None = None

    def loss(self, model, batch, at):
        s = self.loss_spec
        if self.streams:  # {MAIN: data batch, "noise": noise batch of K x its size}
            batch = dataclasses.replace(batch[MAIN], noise=batch["noise"])
        w = nce_weight_at(at.step, at.total, s.nce_weight, s.nce_warmup)
        loss, logs = joint_loss(model, batch, s.noise_ratio, s.poscal_lambda, nce_weight=w)
        if self.streams and s.nce_warmup:
            logs["nce_weight"] = w
        return loss, logs

    def end_epoch(self, epoch):
        if self.loss_spec.poscal_lambda:
            refresh_poscal_table(self.model, self.dataset, self.collate, self.batch_size)

    def evaluate(self):
        if not self.eval_split:
            return None
        out = predict(self.model, self.eval_examples, self.collate.pad_id, self.batch_size * 2)
        return {f"{self.eval_split}_{k}": v for k, v in calibration_summary(out["probs"], out["labels"]).items()}

    def save(self, folder):
        save_classifier(self.model, self.tokenizer, folder)


def nce_weight_at(step: int, total: int, weight: float, warmup: float) -> float:
    """The NCE weight of the batch after `step` of `total` optimizer steps: `weight`, reached
    linearly over the first `warmup` fraction of the steps (step 0 gets weight / warm-up steps)."""
    ramp = int(warmup * total)
    return weight if ramp <= 0 else weight * min(1.0, (step + 1) / ramp)


def joint_loss(model, batch: ClassifyBatch, noise_ratio: int, poscal_lambda: float = 0.0, nce_weight: float = 1.0
               ) -> tuple[torch.Tensor, dict[str, float]]:
    """CE (+ w NCE of eq. 7 with K = `noise_ratio`, when the batch has noise) (+ λ PosCal, when
    `poscal_lambda` > 0 and the model has a PosCal table) for one batch; eq. (8) is w = 1."""

    data, labels = batch.data, batch.labels
    if batch.noise is not None:
        logits, e_pos, e_neg = joint_forward(model, data, batch.noise)  # (B, |Y|), (B,), (B*K,)
        nce = nce_loss(e_pos, e_neg, noise_ratio)
    else:
        logits, _ = model(**data)  # (B, |Y|)
        nce = None
    ce = F.cross_entropy(logits, labels)
    loss, logs = ce, {"ce": float(ce.detach())}
    if nce is not None:
        loss = loss + nce_weight * nce.loss
        logs.update(nce=float(nce.loss.detach()), nce_acc=float(nce.accuracy))
    unwrapped = getattr(model, "module", model)
    if poscal_lambda and hasattr(unwrapped, "poscal_table"):
        pen = poscal_penalty(logits, unwrapped.poscal_table)
        loss = loss + poscal_lambda * pen
        logs["poscal"] = float(pen.detach())
    return loss, logs


def joint_forward(model, data: dict, noise: dict, separate: bool = True
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(data logits (B, |Y|), data energies Ê (B,), noise energies Ê (B*K,)).

    separate=True: two passes, each padded to its own longest sequence (the fast path).
    separate=False: one pass over data and noise padded together (the reference).
    """
    if separate:
        logits, e_pos = model(**data)  # (B, |Y|), (B,)
        _, e_neg = model(**noise)  # (B*K,)
        return logits, e_pos, e_neg
    B = data["input_ids"].shape[0]
    logits, energy = model(**_concat(data, noise))  # (B+BK, |Y|), (B+BK,)
    return logits[:B], energy[:B], energy[B:]


def _concat(a: dict, b: dict) -> dict:
    """Stack two padded input dicts along the batch, padding both to the longer length."""
    T = max(a["input_ids"].shape[1], b["input_ids"].shape[1])
    out = {}
    for k in a:
        x, y = a[k], b[k]
        pad_val = 0
        x = F.pad(x, (0, T - x.shape[1]), value=pad_val)
        y = F.pad(y, (0, T - y.shape[1]), value=pad_val)
        out[k] = torch.cat([x, y], 0)
    return out
