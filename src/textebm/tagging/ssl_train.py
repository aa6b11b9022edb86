"""`tag train --method pretrain` and `--method joint`: paper e's semi-supervised taggers (sec. 3.2-3.3).

    textebm tag train --method pretrain --data data/brown-pos --out runs/pre --labelled 2500 --proportion 0.1 --ratio 50
    textebm tag train --method joint --init runs/sup --data data/brown-pos --out runs/joint --labelled 2500 --proportion 0.1 --ratio 50

Both read the labelled set of `--labelled` / `--proportion` and an unlabelled pool of `--ratio`
times as many sentences, drawn by the nested split from the training sentences outside the
--labelled set (dev and test sentences left out; their tags are never read), and build the word
vocabulary from both. Their TRF is trained by DNCE (`tagging/ssl.py`) with a 1-layer LSTM noise LM
trained along by maximum likelihood in a parameter group of its own (`--noise-lr`); ζ per length
learnt, π the unlabelled sentences' length distribution.

pretrain: stage 1 is a run of its own in RUN/pretrain (`--pretrain-epochs`, `--pretrain-lr`,
`--pretrain-steps`; the TRF language model of eq. (3) over the BiLSTM, on the unlabelled
sentences only), keyed by its inputs (data, split, vocabulary, options) and resumed by itself;
stage 2 is RUN's own run: the embeddings and the BiLSTM loaded from stage 1 and frozen, the linear
output layer (new, as initialised) and A trained on the labelled sentences by the CRF NLL.

joint: one run, the unlabelled sentences the main stream (epochs count passes over them: they
are the many, and the cost) and the labelled ones a cycling stream (they are few, so each
unlabelled epoch passes over them ratio times); loss = CRF NLL (labelled batch) + w(step) · DNCE
of the JRF's marginal (unlabelled batch) + the noise LM's NLL, w(step) = --unlabelled-weight ·
sqrt(min(step, N) / N), N = --ramp-steps. `--init RUN` starts from a supervised tagger.

RUN/model is a tagger folder like the supervised method's, so `tag eval` and `tag predict` read it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import load_file, save_file

from textebm.data.batching import right_pad
from textebm.data.readers import split_path
from textebm.data.tagging import load_tagged
from textebm.errors import TextebmError
from textebm.fingerprint import file_sha256, json_sha256
from textebm.losses.crf import crf_nll
from textebm.models.crf import BiLSTMCRF, TaggerSpec, save_tagger
from textebm.models.noise_lm import NoiseLM
from textebm.models.trf import TRFHead, length_distribution
from textebm.seeds import derive_seed
from textebm.tagging.folder import load_tagging_model
from textebm.tagging.ssl import (
    DNCESpec,
    SemiSupervisedTagger,
    dnce_step,
    estimate_zeta,
    ramp_weight,
)
from textebm.tagging.train import TaggerRecipe, TagTrainConfig, ssl_rows
from textebm.tagging.vocab import WordVocab, build_vocab, save_vocab
from textebm.train import (
    MAIN,
    ParamGroup,
    Recipe,
    Stream,
    TrainOptions,
    options_dict,
    run_completed,
    train,
)

log = logging.getLogger(__name__)

STAGE1 = "pretrain"  # RUN/pretrain: stage 1 of --method pretrain
TRF_FILE = "trf.safetensors"  # beside a stage-1 tagger: the TRF head and the noise LM


@dataclass(kw_only=True)
class PretrainStageOptions(TrainOptions):
    """Stage 1 of `tag train --method pretrain`, the run in RUN/pretrain (made from the command's
    options, never given by the user)."""

    COMMAND: ClassVar[str] = "tag train --method pretrain (stage 1)"


def encode(vocab: WordVocab, rows: list[dict[str, Any]]) -> list[list[int]]:
    return [vocab.encode(r["tokens"]) for r in rows]


def pad_batch(items: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Word-id lists -> {"input_ids", "mask"}, each (B, T), right-padded."""
    ids, mask = right_pad(items, pad_id)  # (B, T)
    return {"input_ids": ids, "mask": mask.bool()}


class TRFRecipe(Recipe):
    """Stage 1 of pre-training: the TRF language model (eq. 3 over the BiLSTM) by DNCE on
    unlabelled sentences, the noise LM by maximum likelihood, in one loop."""

    def __init__(self, model: SemiSupervisedTagger, vocab: WordVocab, sentences: list[list[int]], spec: DNCESpec,
                 noise_lr: float):
        self.model, self.vocab, self.spec = model, vocab, spec
        self.dataset, self.lengths = sentences, [len(s) for s in sentences]
        self.collate = lambda items: pad_batch(items, vocab.pad_id)
        self.param_groups = [ParamGroup(name="noise", prefix="noise.", lr=noise_lr)]

    def loss(self, model, batch, at):
        out = dnce_step(model.pretrain_log_density, model.noise, batch["input_ids"], batch["mask"], self.spec)
        return out.dnce + out.noise_nll, {"dnce": float(out.dnce.detach()), "noise_nll": float(out.noise_nll.detach()),
                                          "nce_accuracy": out.accuracy}

    def save(self, folder):
        save_tagger(self.model.tagger, folder)
        save_vocab(self.vocab, folder)
        state = {f"trf.{k}": v for k, v in self.model.trf.state_dict().items()}
        state.update({f"noise.{k}": v for k, v in self.model.noise.state_dict().items()})
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(Path(folder) / TRF_FILE))


FROZEN = ("embed.", "lstm.")  # what stage 2 of pre-training keeps from stage 1


class FineTuneRecipe(TaggerRecipe):
    """Stage 2 of pre-training: `prepare` runs stage 1 (RUN/pretrain) and loads its embeddings and
    BiLSTM into the tagger, whose embeddings and BiLSTM are frozen: the output layer and A learn."""

    run_files = (STAGE1,)

    def __init__(self, *args, stage1: Callable[[Path], Path], **kwargs):
        super().__init__(*args, **kwargs)
        self.stage1 = stage1
        for name, p in self.model.named_parameters():
            p.requires_grad_(not name.startswith(FROZEN))

    def prepare(self, run):
        folder = self.stage1(run)
        weights = load_file(str(folder / "model.safetensors"))
        kept = {k: v for k, v in weights.items() if k.startswith(FROZEN)}
        missing = sorted(k for k, _ in self.model.named_parameters() if k.startswith(FROZEN) and k not in kept)
        if missing:
            raise TextebmError(f"{folder}: the pre-trained tagger lacks {missing[:3]}")
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if name in kept:
                    p.copy_(kept[name])
        return True


class JointRecipe(TaggerRecipe):
    """The JRF (eq. 6): CRF NLL on a labelled batch + w(step) · DNCE of the marginal on an
    unlabelled batch + the noise LM's NLL; the unlabelled sentences are the main stream."""

    def __init__(self, model: SemiSupervisedTagger, vocab: WordVocab, rows: list[dict[str, Any]],
                 unlabelled: list[list[int]], eval_split: str, eval_rows: list[dict[str, Any]], batch_size: int,
                 spec: DNCESpec, weight: float, ramp_steps: int, noise_lr: float):
        super().__init__(model.tagger, vocab, rows, eval_split, eval_rows, batch_size)
        labelled = Stream(dataset=self.dataset, lengths=self.lengths, collate=self.collate, batch_size=batch_size,
                          lockstep=False)
        self.streams = {"labelled": labelled}
        self.model, self.spec, self.weight, self.ramp_steps = model, spec, weight, ramp_steps
        self.dataset, self.lengths = unlabelled, [len(s) for s in unlabelled]
        self.collate = lambda items: pad_batch(items, vocab.pad_id)
        self.param_groups = [ParamGroup(name="noise", prefix="noise.", lr=noise_lr)]

    def loss(self, model, batch, at):
        lab, unl = batch["labelled"], batch[MAIN]
        tagger = model.tagger
        phi = tagger(lab["input_ids"], lab["mask"])  # (B, T, K) in fp32
        nll = crf_nll(phi, tagger.transitions, lab["tags"], lab["mask"])
        w = ramp_weight(at.step, self.weight, self.ramp_steps)
        out = dnce_step(model.joint_log_density, model.noise, unl["input_ids"], unl["mask"], self.spec)
        return nll + w * out.dnce + out.noise_nll, {"crf_nll": float(nll.detach()), "dnce": float(out.dnce.detach()),
                                                    "noise_nll": float(out.noise_nll.detach()), "weight": w,
                                                    "nce_accuracy": out.accuracy}


def transfer_tagger(init: BiLSTMCRF, init_vocab: WordVocab, vocab: WordVocab, dropout: float) -> BiLSTMCRF:
    """A tagger over `vocab` with `init`'s weights: each word's embedding is init's for the same
    word, or init's unknown word's (what init gave it); so it tags every sentence as init does."""
    spec = dataclasses.replace(init.spec, vocab_size=len(vocab), dropout=dropout, pad_id=vocab.pad_id)
    model = BiLSTMCRF(spec)
    state = {k: v for k, v in init.state_dict().items() if not k.startswith("embed.")}
    rows = torch.tensor([init_vocab.index.get(w, init_vocab.unk_id) for w in vocab.words])  # (V,)
    rows[vocab.pad_id] = init_vocab.pad_id
    state["embed.weight"] = init.embed.weight.detach()[rows].clone()  # (V, E)
    model.load_state_dict(state)
    return model


def start_zeta(model: SemiSupervisedTagger, joint: bool, seed: int) -> None:
    """ζ of `model`'s TRF set to `estimate_zeta`'s log Z_l of its potential at the start (the
    tagger in eval mode: no dropout), instead of l·log V, the zero potential's: the JRF of a trained
    tagger (--init) has log-partitions far above zero, which DNCE would otherwise first push down."""
    potential = ((lambda ids, m: TRFHead.marginal_potential(model.tagger, ids, m)) if joint
                 else (lambda ids, m: model.trf.potential(model.tagger, ids, m)))
    generator = torch.Generator().manual_seed(derive_seed(seed, "tag-train", "zeta"))
    was = model.training
    model.eval()
    spec = model.tagger.spec
    zeta = estimate_zeta(potential, model.trf.log_pi.exp(), spec.vocab_size, spec.pad_id, generator=generator)
    with torch.no_grad():
        model.trf.zeta.copy_(zeta)
    model.train(was)


def ssl_train(cfg: TagTrainConfig, train_rows: list[dict[str, Any]], tags: list[str], eval_split: str,
              eval_rows: list[dict[str, Any]]) -> dict:
    """`tag train --method pretrain | joint` (see the module doc); returns metrics.json."""
    init = None
    if cfg.init:
        init, init_vocab, init_path = load_tagging_model(cfg.init, "cpu", option="--init")
        if init.spec.tags != tags:
            raise TextebmError(f"--init {cfg.init}: its tags {init.spec.tags} are not the training split's {tags}")
    exclude = [r["tokens"] for r in eval_rows]
    if Path(cfg.data).is_dir() and eval_split != "test" and split_path(cfg.data, "test").is_file():
        exclude += [r["tokens"] for r in load_tagged(cfg.data, "test", tags=False)]
    rows, unlabelled_rows = ssl_rows(train_rows, cfg.labelled, cfg.proportion, cfg.ratio, cfg.split_seed, cfg.data,
                                     exclude)
    lowercase = init_vocab.lowercase if init is not None else cfg.lowercase
    vocab = build_vocab(rows + unlabelled_rows, lowercase, cfg.min_count)
    unlabelled = encode(vocab, unlabelled_rows)
    lengths = [len(s) for s in unlabelled]
    pi = length_distribution(lengths, max(lengths))
    if init is not None:
        tagger = transfer_tagger(init, init_vocab, vocab, cfg.dropout)
    else:
        tagger = BiLSTMCRF(TaggerSpec(vocab_size=len(vocab), tags=tags, embed=cfg.embed, hidden=cfg.hidden,
                                      layers=cfg.layers, dropout=cfg.dropout, pad_id=vocab.pad_id))
    noise = NoiseLM(len(vocab), pi, embed=cfg.noise_embed, hidden=cfg.noise_hidden, pad_id=vocab.pad_id)
    spec = DNCESpec(alpha=cfg.dnce_alpha, nu=cfg.noise_ratio)
    log.info("%s: %d labelled sentences, %d unlabelled (%d tokens, lengths 1..%d), %d words, %d tags", cfg.method,
             len(rows), len(unlabelled), sum(lengths), max(lengths), len(vocab), len(tags))
    inputs = {"train_sha256": file_sha256(split_path(cfg.data, "train")), "labelled_sentences": len(rows),
              "unlabelled_sentences": len(unlabelled), "unlabelled_sha256": json_sha256(unlabelled),
              "vocab_size": len(vocab), "vocab_sha256": json_sha256(list(vocab.words)), "tags": tags}
    if init is not None:
        inputs["init_sha256"] = file_sha256(init_path / "model.safetensors")
    config = {**options_dict(cfg), **inputs}
    if cfg.method == "joint":
        model = SemiSupervisedTagger(tagger, TRFHead(len(vocab), None, pi), noise)
        start_zeta(model, joint=True, seed=cfg.seed)
        recipe = JointRecipe(model, vocab, rows, unlabelled, eval_split, eval_rows, cfg.batch_size, spec,
                             cfg.unlabelled_weight, cfg.ramp_steps, cfg.noise_lr)
        return train(cfg, config, recipe)
    # pretrain: stage 1 in RUN/pretrain, trained (or resumed, or found finished) by the stage-2 recipe's prepare
    trf_model = SemiSupervisedTagger(BiLSTMCRF(tagger.spec), TRFHead(len(vocab), tagger.spec.hidden, pi), noise)
    stage1_keys = ["seed", "batch_size", "grad_accum", "weight_decay", "warmup", "schedule", "grad_clip",
                   "precision", "checkpoint_every", "log_every", "keep_checkpoint", "threads", "progress"]

    def stage1(run: Path) -> Path:
        out = run / STAGE1
        opts = PretrainStageOptions(out=str(out), epochs=cfg.pretrain_epochs, max_steps=cfg.pretrain_steps,
                                    lr=cfg.pretrain_lr, resume=(out / "config.json").is_file(),
                                    **{k: getattr(cfg, k) for k in stage1_keys})
        own = {k: getattr(cfg, k) for k in ("data", "labelled", "proportion", "split_seed", "ratio", "lowercase",
                                            "min_count", "embed", "hidden", "layers", "dropout", "dnce_alpha",
                                            "noise_ratio", "noise_lr", "noise_embed", "noise_hidden")}
        log.info("stage 1 (the TRF language model) in %s", out)
        if not run_completed(out):
            start_zeta(trf_model, joint=False, seed=cfg.seed)  # a checkpoint, if any, then replaces it
        train(opts, {**options_dict(opts), **own, **inputs}, TRFRecipe(trf_model, vocab, unlabelled, spec,
                                                                         cfg.noise_lr))
        log.info("stage 2: the output layer and A on the labelled sentences, the BiLSTM frozen")
        return out / "model"

    recipe = FineTuneRecipe(tagger, vocab, rows, eval_split, eval_rows, cfg.batch_size, stage1=stage1)
    return train(cfg, config, recipe)

