"""The training recipes of `tag train` on the one loop (`textebm.train`), free of the command's
options (the command, `tagging/train.py`, builds them):

    TaggerRecipe        the supervised tagger: CRF NLL per sentence, dev accuracy (span F1 for a BIO
                        tag set) after each epoch;
                        also stage 2 of pre-training, its tagger started from stage 1's encoder
                        (`load_encoder`; with --freeze, `freeze_encoder`: only the new output
                        layer and A learn)
    TRFRecipe           stage 1 of pre-training: the TRF language model of eq. (3) over the BiLSTM
                        by DNCE on unlabelled sentences, the noise LM by maximum likelihood (3.2)
    TaggerJointRecipe   the JRF (eq. 6): CRF NLL on a labelled batch + w(step) · DNCE of the
                        marginal on an unlabelled batch + the noise LM's NLL (3.3); from stage 1
                        with `load_stage1`

with `transfer_tagger` (a tagger moved onto a larger vocabulary, tagging as before) and
`start_zeta` (ζ started at an estimate of log Z_l). A method that starts from stage 1 trains it
first, as a run of its own; the command (`tagging/train.py`) runs the two stages.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from textebm.data.batching import right_pad, Stream
from textebm.errors import TextebmError
from textebm.losses.crf import crf_nll
from textebm.models.crf import BiLSTMCRF, TaggerSpec, save_tagger
from textebm.models.trf import TRFHead
from textebm.seeds import derive_seed
from textebm.tagging.folder import TRF_FILE, tag_batch, tag_sentences
from textebm.tagging.metrics import SCORE_NAMES, selected_score, tagging_scores
from textebm.tagging.ssl import (
    DNCESpec,
    SemiSupervisedTagger,
    dnce_step,
    estimate_zeta,
    ramp_weight,
)
from textebm.tagging.vocab import WordVocab, save_vocab
from textebm.train import MAIN, ParamGroup, Recipe

log = logging.getLogger(__name__)

STAGE1 = "pretrain"  # RUN/pretrain: stage 1 of --method pretrain (and of joint --from-pretrained)


class TaggerRecipe(Recipe):
    """The supervised tagger on the loop: CRF NLL per sentence, dev scores after each epoch. Also
    stage 2 of pre-training, on a tagger the command started from stage 1's encoder.

    `--keep-best` selects by the task's own metric, as thu-spmi/semi-EBM's `train/crf.py` keeps its
    best checkpoint: span F1 for a BIO tag set (chunking, NER), token accuracy otherwise (POS). On a
    small NER set accuracy would prefer the tagger that tags every word O (WNUT-16: 94.6 %, F1 0)."""

    def __init__(self, model: BiLSTMCRF, vocab: WordVocab, rows: list[dict[str, Any]], eval_split: str,
                 eval_rows: list[dict[str, Any]], batch_size: int):
        self.model, self.vocab, self.eval_split, self.eval_rows = model, vocab, eval_split, eval_rows
        self.batch_size = batch_size
        tag_id = {t: k for k, t in enumerate(model.spec.tags)}
        spelt = bool(model.spec.char_vocab)  # a character CNN reads each token as written
        self.dataset = [(vocab.encode(r["tokens"]), [tag_id[t] for t in r["tags"]],
                         *([vocab.encode_chars(r["tokens"])] if spelt else [])) for r in rows]
        self.lengths = [len(item[0]) for item in self.dataset]
        self.collate = lambda items: tag_batch(items, vocab.pad_id)
        self.select = selected_score(model.spec.tags)  # what --keep-best maximises
        self.keep_best = False  # set by the command; ties keep the earlier epoch
        self.by_epoch: list[float] = []  # dev accuracy after each full epoch (kept in checkpoints)
        self.f1_by_epoch: list[float] = []  # and span F1, for a BIO tag set
        self.stage1_run: Path | None = None  # the stage 1 of pre-training it started from (metrics.json names it)
        self._just_measured: float | None = None  # end_epoch's selected score, for the validation that follows

    def loss(self, model, batch, at):
        phi = model(batch["input_ids"], batch["mask"], batch.get("chars"))  # (B, T, K) in fp32
        nll = crf_nll(phi, self.model.transitions, batch["tags"], batch["mask"])  # mean over sentences
        return nll, {"tokens": float(batch["mask"].sum())}

    def _scores(self) -> dict[str, float]:
        """Dev metrics in fp32 (autocast off), as `tag eval` computes them."""
        device = next(self.model.parameters()).device
        with torch.autocast(device.type, enabled=False):
            pred = tag_sentences(self.model, self.vocab, self.eval_rows, self.batch_size)
        gold = [r["tags"] for r in self.eval_rows]
        return tagging_scores(gold, pred, self.model.spec.tags, self.eval_split)

    def _selected(self, scores: dict[str, Any]) -> float:
        return scores[f"{self.eval_split}_{self.select}"]

    def validate(self):
        """1 − the selected dev score (`--keep-best`): what `end_epoch` has just measured, or, after
        the last step, measured now."""
        score, self._just_measured = self._just_measured, None
        if score is None:
            score = self._selected(self._scores())
        return 1.0 - score

    def end_epoch(self, epoch):
        if self.eval_rows:
            scores = self._scores()
            self._just_measured = self._selected(scores)
            self.by_epoch.append(scores[f"{self.eval_split}_accuracy"])
            if self.select == "span_f1":
                self.f1_by_epoch.append(scores[f"{self.eval_split}_span_f1"])
                log.info("epoch %d: %s accuracy %.4f, span F1 %.4f", epoch + 1, self.eval_split, self.by_epoch[-1],
                         self.f1_by_epoch[-1])
            else:
                log.info("epoch %d: %s accuracy %.4f", epoch + 1, self.eval_split, self.by_epoch[-1])

    def state(self):
        out = {"by_epoch": torch.tensor(self.by_epoch, dtype=torch.float64)} if self.by_epoch else {}
        if self.f1_by_epoch:
            out["f1_by_epoch"] = torch.tensor(self.f1_by_epoch, dtype=torch.float64)
        return out

    def load_state(self, tensors):
        self.by_epoch = tensors["by_epoch"].tolist() if "by_epoch" in tensors else []
        self.f1_by_epoch = tensors["f1_by_epoch"].tolist() if "f1_by_epoch" in tensors else []
        if self.select == "span_f1" and len(self.f1_by_epoch) != len(self.by_epoch):
            raise TextebmError("this checkpoint of a BIO tag set measured dev accuracy only (it was written before "
                               "the tagger measured span F1 after each epoch); --overwrite to train the run again")

    def evaluate(self):
        out = {}
        if self.eval_rows:
            out = self._scores()
            split = self.eval_split
            out[f"{split}_accuracy_by_epoch"] = [*self.by_epoch, out[f"{split}_accuracy"]]
            if self.select == "span_f1":
                out[f"{split}_span_f1_by_epoch"] = [*self.f1_by_epoch, out[f"{split}_span_f1"]]
            if self.keep_best:
                out["selected_by"] = f"{split} {SCORE_NAMES[self.select]}"
        if self.stage1_run is not None:
            out["stage1"] = str(self.stage1_run)
        return out or None

    def save(self, folder):
        save_tagger(self.model, folder)
        save_vocab(self.vocab, folder)


def encode(vocab: WordVocab, rows: list[dict[str, Any]]) -> list[list[int]]:
    return [vocab.encode(r["tokens"]) for r in rows]


def pad_batch(items: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Word-id lists -> {"input_ids", "mask"}, each (B, T), right-padded."""
    ids, mask = right_pad(items, pad_id)  # (B, T)
    return {"input_ids": ids, "mask": mask.bool()}


def trf_groups(noise_lr: float, zeta_lr: float) -> list[ParamGroup]:
    """The parameter groups of a loop that trains a TRF: the noise LM at its own rate, and ζ (the
    log-normalisers, `trf.zeta`) at its own when `zeta_lr` > 0 (else with the TRF's weights)."""
    groups = [ParamGroup(name="noise", prefix="noise.", lr=noise_lr)]
    if zeta_lr > 0:
        groups.append(ParamGroup(name="zeta", prefix="trf.zeta", lr=zeta_lr))
    return groups


class TRFRecipe(Recipe):
    """Stage 1 of pre-training: the TRF language model (eq. 3 over the BiLSTM) by DNCE on
    unlabelled sentences, the noise LM by maximum likelihood, in one loop."""

    def __init__(self, model: SemiSupervisedTagger, vocab: WordVocab, sentences: list[list[int]], spec: DNCESpec,
                 noise_lr: float, zeta_lr: float = 0.0):
        self.model, self.vocab, self.spec = model, vocab, spec
        self.dataset, self.lengths = sentences, [len(s) for s in sentences]
        self.collate = lambda items: pad_batch(items, vocab.pad_id)
        self.param_groups = trf_groups(noise_lr, zeta_lr)

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


FROZEN = ("embed.", "char_embed.", "char_convs.", "lstm.")  # what stage 2 of pre-training takes from stage 1 (and keeps, with `freeze`)


def freeze_encoder(tagger: BiLSTMCRF) -> None:
    """Stage 2 of pre-training with --freeze (sec. 3.2's last sentence read alone: "fine-tune ...
    the output layer"), the ablation: the embeddings, character CNN and BiLSTM (FROZEN) leave the
    optimizer and stay as stage 1 left them; only the new output layer and A learn. Without it
    every weight trains on the labelled sentences, as thu-spmi/semi-EBM's `run_trf_finetune.sh`
    does (`run_crf.py --model` restores all but `edge_mat` and `final_linear` and trains every
    trainable variable)."""
    for name, p in tagger.named_parameters():
        if name.startswith(FROZEN):
            p.requires_grad_(False)


def load_encoder(tagger: BiLSTMCRF, folder: Path) -> None:
    """Stage 1's encoder (the FROZEN parts: embeddings, character CNN, BiLSTM) from the tagger
    folder `folder` into `tagger`; the output layer and A stay as they are."""
    weights = load_file(str(folder / "model.safetensors"))
    kept = {k: v for k, v in weights.items() if k.startswith(FROZEN)}
    missing = sorted(k for k, _ in tagger.named_parameters() if k.startswith(FROZEN) and k not in kept)
    if missing:
        raise TextebmError(f"{folder}: the pre-trained tagger lacks {missing[:3]}")
    with torch.no_grad():
        for name, p in tagger.named_parameters():
            if name in kept:
                p.copy_(kept[name])


def load_stage1(model: SemiSupervisedTagger, folder: Path, seed: int, zeta_draws: int) -> None:
    """The JRF started from stage 1 of pre-training (this paper's run_trf_semi.py --model
    <trf_pretrain>): its encoder and noise LM from the tagger folder `folder` (and its
    `trf.safetensors`), a new output layer and A, ζ estimated anew for the JRF."""
    load_encoder(model.tagger, folder)
    noise = load_file(str(folder / TRF_FILE))
    model.noise.load_state_dict({k[len("noise."):]: v for k, v in noise.items() if k.startswith("noise.")})
    model.noise.to(next(model.tagger.parameters()).device)
    # ζ from uniform sentences: on a trained TRF the noise LM as proposal spread far more (24 nats over
    # seeds at 8 draws, 5 at 512, against about 2: bench/results/tagging/zeta_spread.json)
    start_zeta(model, joint=True, seed=seed, draws=zeta_draws)
    log.info("joint training from stage 1's encoder and noise LM (%s)", folder)


class TaggerJointRecipe(Recipe):
    """The JRF (eq. 6): CRF NLL on a labelled batch + w(step) · DNCE of the marginal on an
    unlabelled batch + the noise LM's NLL. The unlabelled sentences are the main stream; the
    labelled ones, the dev accuracy and the saved tagger are those of the supervised recipe of its
    tagger (`self.supervised`), which it holds."""

    def __init__(self, model: SemiSupervisedTagger, vocab: WordVocab, rows: list[dict[str, Any]],
                 unlabelled: list[list[int]], eval_split: str, eval_rows: list[dict[str, Any]], batch_size: int,
                 spec: DNCESpec, weight: float, ramp_steps: int, noise_lr: float, zeta_lr: float = 0.0):
        self.supervised = TaggerRecipe(model.tagger, vocab, rows, eval_split, eval_rows, batch_size)
        sup = self.supervised
        self.model, self.spec, self.weight, self.ramp_steps = model, spec, weight, ramp_steps
        self.dataset, self.lengths = unlabelled, [len(s) for s in unlabelled]
        self.collate = lambda items: pad_batch(items, vocab.pad_id)
        self.streams = {"labelled": Stream(dataset=sup.dataset, lengths=sup.lengths, collate=sup.collate,
                                           batch_size=batch_size, lockstep=False)}
        self.param_groups = trf_groups(noise_lr, zeta_lr)

    def loss(self, model, batch, at):
        lab, unl = batch["labelled"], batch[MAIN]
        tagger = model.tagger
        phi = tagger(lab["input_ids"], lab["mask"], lab.get("chars"))  # (B, T, K) in fp32
        nll = crf_nll(phi, tagger.transitions, lab["tags"], lab["mask"])
        w = ramp_weight(at.step, self.weight, self.ramp_steps)
        out = dnce_step(model.joint_log_density, model.noise, unl["input_ids"], unl["mask"], self.spec)
        return nll + w * out.dnce + out.noise_nll, {"crf_nll": float(nll.detach()), "dnce": float(out.dnce.detach()),
                                                    "noise_nll": float(out.noise_nll.detach()), "weight": w,
                                                    "nce_accuracy": out.accuracy}

    # the tagger's own, as supervised training measures and writes it
    def end_epoch(self, epoch):
        self.supervised.end_epoch(epoch)

    def validate(self):
        return self.supervised.validate()

    def state(self):
        return self.supervised.state()

    def load_state(self, tensors):
        self.supervised.load_state(tensors)

    def evaluate(self):
        return self.supervised.evaluate()

    def save(self, folder):
        self.supervised.save(folder)


def tagger_for(spec: TaggerSpec, vocab: WordVocab) -> BiLSTMCRF:
    """A fresh tagger of `spec` over `vocab`, with its words' characters in the character CNN's
    table when it has one."""
    model = BiLSTMCRF(spec)
    if spec.char_vocab:
        model.set_word_chars(vocab.word_chars())
    return model


def transfer_tagger(init: BiLSTMCRF, init_vocab: WordVocab, vocab: WordVocab, dropout: float) -> BiLSTMCRF:
    """A tagger over `vocab` with `init`'s weights: each word's embedding is init's for the same
    word, or init's unknown word's (what init gave it); so it tags every sentence as init does.
    With a character CNN, `vocab` spells with init's characters and the word table is rebuilt."""
    if vocab.chars != init_vocab.chars:
        raise ValueError("the new vocabulary must spell with the initial tagger's characters")
    spec = dataclasses.replace(init.spec, vocab_size=len(vocab), dropout=dropout, pad_id=vocab.pad_id)
    model = tagger_for(spec, vocab)
    state = {k: v for k, v in init.state_dict().items() if not k.startswith(("embed.", "word_chars"))}
    if spec.char_vocab:
        state["word_chars"] = model.word_chars
    rows = torch.tensor([init_vocab.index.get(w, init_vocab.unk_id) for w in vocab.words])  # (V,)
    rows[vocab.pad_id] = init_vocab.pad_id
    state["embed.weight"] = init.embed.weight.detach()[rows].clone()  # (V, E)
    model.load_state_dict(state)
    return model


def start_zeta(model: SemiSupervisedTagger, joint: bool, seed: int, draws: int = 8) -> None:
    """ζ of `model`'s TRF set to `estimate_zeta`'s log Z_l of its potential at the start (the
    tagger in eval mode: no dropout), instead of l·log V, the zero potential's: the JRF of a trained
    tagger (--init) has log-partitions far above zero, which DNCE would otherwise first push down."""
    potential = ((lambda ids, m: TRFHead.marginal_potential(model.tagger, ids, m)) if joint
                 else (lambda ids, m: model.trf.potential(model.tagger, ids, m)))
    generator = torch.Generator().manual_seed(derive_seed(seed, "tag-train", "zeta"))
    was = model.training
    model.eval()
    spec = model.tagger.spec
    zeta = estimate_zeta(potential, model.trf.log_pi.exp(), spec.vocab_size, spec.pad_id, n=draws,
                         generator=generator)
    with torch.no_grad():
        model.trf.zeta.copy_(zeta)
    model.train(was)
