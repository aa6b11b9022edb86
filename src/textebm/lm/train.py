"""`textebm lm train`: causal or infill language models (noise models and generators).

- causal: plain next-token LM over [bos] x [eos] (l2r) or reversed x (r2l, paper c).
- infill: paper a, sec. 2.4 / appendix B, eq. (9): every token is masked independently with
  probability M, runs of masked tokens become one [mask], and the model learns to generate the
  full sentence after [sep] given the masked sentence. Masks are drawn afresh every epoch.

A model either starts from `--init` (a local HF causal-LM folder or a `models fetch` id, e.g.
smollm2-135m) or is built from scratch from the size flags with a tokenizer trained on the data
(or given by `--tokenizer`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from textebm.data.batching import right_pad
from textebm.data.readers import eval_split_of, load_split
from textebm.data.streams import chunks, doc_streams
from textebm.errors import TextebmError
from textebm.fingerprint import folder_sha256
from textebm.inference import batched
from textebm.lm.scoring import item_texts, labelled_logits, next_token_logprobs
from textebm.models.build import SmallLMConfig, build_causal_lm
from textebm.models.lm import ensure_special_tokens, save_lm, special_ids
from textebm.models.lm_format import IGNORE_INDEX, causal_example, infill_example
from textebm.models.load import CAUSAL_LM, find_model, load_lm, load_tokenizer
from textebm.models.ralm import BaseRef, ResidualLM, save_residual_lm
from textebm.options import check_config, keep_best_field, options_dict, patience_field, refuse_unused
from textebm.runfolder import check_keep_best, check_run_dir
from textebm.seeds import derive_seed
from textebm.tokenizer import train_tokenizer
from textebm.train import Recipe, seed_everything, train, TrainOptions

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class LMTrainConfig(TrainOptions):
    COMMAND: ClassVar[str] = "lm train"
    data: str = field(metadata={"help": "dataset directory (train.jsonl, dev.jsonl) or a data file"})
    objective: str = field(default="causal", metadata={"help": "causal LM or paper a's infill objective",
                                                       "choices": ["causal", "infill"]})
    mask_ratio: float = field(default=0.4, metadata={"help": "infill: probability of masking each token (M)",
                                                      "gt": 0, "lt": 1})
    direction: str = field(default="l2r", metadata={"help": "token order; r2l trains on reversed text",
                                                    "choices": ["l2r", "r2l"]})
    init: str = field(default="", metadata={"help": "start from this model (HF folder or models-fetch id)"})
    residual_of: str = field(default="", metadata={
        "help": "train a RALM (paper d, eq. 6) on this frozen causal LM: a transformer phi of --layers/--width/"
                "--heads in its vocabulary, trained on the cross-entropy of the summed logits"})
    tokenizer: str = field(default="", metadata={"help": "tokenizer folder for a model from scratch "
                                                         "(default: train one on the data)"})
    vocab_size: int = field(default=8000, metadata={"help": "vocabulary of a tokenizer trained on the data",
                                                        "min": 64})
    arch: str = field(default="transformer", metadata={
        "help": "from scratch: a transformer (Llama blocks) or a gated convolutional LM (Dauphin et al. 2017)",
        "choices": ["transformer", "gcnn"]})
    kernel: int = field(default=4, metadata={"help": "from scratch, --arch gcnn: convolution width", "min": 2})
    layers: int = field(default=4, metadata={"help": "from scratch: transformer or convolution layers", "min": 1})
    width: int = field(default=256, metadata={"help": "from scratch: hidden size", "min": 8})
    heads: int = field(default=4, metadata={"help": "from scratch: attention heads", "min": 1})
    context: int = field(default=256, metadata={"help": "from scratch: maximum positions", "min": 8})
    max_len: int = field(default=128, metadata={"help": "truncate texts to this many tokens", "min": 1})
    chunk: int = field(default=0, metadata={
        "help": "train on running text: each document's texts (rows sharing `doc`) joined and cut into "
                "pieces of this many tokens, as generators of windows need (0: one text per example)",
        "min": 0})
    eval_split: str | None = field(default=None, metadata={
        "help": "split for the final perplexity (default: dev when --data is a dataset folder; '' to skip)"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (AdamW)", "gt": 0})
    keep_best: bool = keep_best_field("the per-token NLL on the evaluation split")
    patience: int = patience_field()

    def check(self) -> None:
        super().check()
        if not self.keep_best:
            refuse_unused(self, ["patience"], "without --keep-best")
        if self.objective != "infill":
            refuse_unused(self, ["mask_ratio"], "with --objective causal")
        if self.residual_of:
            refuse_unused(self, ["init", "vocab_size", "arch"], "with --residual-of (phi is a transformer in the "
                                                                 "base LM's vocabulary)")
            if self.objective != "causal":
                raise TextebmError("--residual-of trains a causal RALM; it does not apply to --objective infill")
        if self.init:
            refuse_unused(self, ["tokenizer", "vocab_size", "arch", "kernel", "layers", "width", "heads", "context"],
                          "with --init (the model's own size and tokenizer are used)")
        elif self.tokenizer:
            refuse_unused(self, ["vocab_size"], "with --tokenizer (its vocabulary is used)")
        if self.chunk:
            refuse_unused(self, ["max_len"], "with --chunk (pieces are --chunk tokens long)")
            if self.objective != "causal":
                raise TextebmError("--chunk trains causal LMs on running text; it does not apply to --objective infill")
        if self.arch != "gcnn":
            refuse_unused(self, ["kernel"], "without --arch gcnn")
        else:
            refuse_unused(self, ["heads"], "with --arch gcnn (it has no attention)")
        if not self.init and self.arch == "transformer" and self.width % self.heads:
            raise TextebmError(f"--width {self.width} must be divisible by --heads {self.heads}")


def _texts(rows: list[dict]) -> list[str]:
    """Every text and text_pair of the rows, in order (an LM learns each as its own sequence)."""

    return [t for t in item_texts(rows)[0] if t.strip()]


def _docs(rows: list[dict]) -> list[tuple[str, str]]:
    """(text, document) of each row; a row without `doc` is its own document."""
    return [(r["text"], str(r.get("doc", r.get("id", i)))) for i, r in enumerate(rows) if r["text"].strip()]


@dataclass(kw_only=True)
class LMSpec:
    """What `build_lm` builds: a model from `init` (its own size and tokenizer), or from scratch
    at the given size with the tokenizer at `tokenizer` (or one trained on the texts)."""

    objective: str = "causal"  # causal | infill
    direction: str = "l2r"  # l2r | r2l
    mask_ratio: float | None = None  # infill: M
    init: str = ""
    residual_of: str = ""  # a RALM's frozen base LM: phi is built from scratch in its vocabulary
    tokenizer: str = ""
    vocab_size: int = 8000  # of a tokenizer trained on the texts
    arch: str = "transformer"  # transformer | gcnn
    kernel: int = 4
    layers: int = 4
    width: int = 256
    heads: int = 4
    context: int = 256
    seed: int = 0  # of the initial weights


def build_lm(spec: LMSpec, train_texts: list[str]):
    """(model, tokenizer, meta) ready to train, special tokens added as the objective needs."""

    if spec.residual_of:
        return build_ralm(spec)
    if spec.init:
        model, tokenizer, _ = load_lm(spec.init, dtype=torch.float32, option="--init")  # checks its kind
    else:
        if spec.tokenizer:
            tokenizer = load_tokenizer(spec.tokenizer, "--tokenizer")
        else:
            log.info("training a %d-token BPE tokenizer on %d texts", spec.vocab_size, len(train_texts))
            tokenizer = train_tokenizer(train_texts, vocab_size=spec.vocab_size, kind="bpe", lowercase=False)
        meta = ensure_special_tokens(tokenizer, None, infill=spec.objective == "infill")
        if spec.arch == "gcnn":
            sp = special_ids(tokenizer, meta)
            from textebm.models.gcnn import build_gcnn  # transformers' model classes: only when a GCNN is built

            model = build_gcnn(len(tokenizer), spec.width, spec.layers, spec.kernel, spec.context, sp.pad, sp.bos,
                               sp.eos, seed=spec.seed)
        else:
            model = build_causal_lm(SmallLMConfig(layers=spec.layers, width=spec.width, heads=spec.heads,
                                                  context=spec.context), tokenizer, seed=spec.seed)
    meta = ensure_special_tokens(tokenizer, model, infill=spec.objective == "infill")
    meta.objective, meta.direction = spec.objective, spec.direction
    meta.mask_ratio = spec.mask_ratio if spec.objective == "infill" else None
    return model, tokenizer, meta


def build_ralm(spec: LMSpec):
    """(ResidualLM, the base's tokenizer, the base's meta): the frozen base of `spec.residual_of`
    and a from-scratch phi at the spec's size in its vocabulary (paper d, eq. 6)."""
    base_info = find_model(spec.residual_of, CAUSAL_LM, "--residual-of")
    if base_info.kind != CAUSAL_LM:
        raise TextebmError(f"--residual-of {base_info.path}: {base_info.describe()}; the base of a RALM must be "
                           "a plain causal LM (`lm train` without --residual-of)")
    base, tokenizer, meta = load_lm(base_info.path, dtype=torch.float32, option="--residual-of")
    if meta.objective != "causal":
        raise TextebmError(f"--residual-of {base_info.path}: an {meta.objective} LM; a RALM needs a causal base")
    if meta.direction != spec.direction:
        raise TextebmError(f"--residual-of {base_info.path}: the base reads {meta.direction}, but --direction is "
                           f"{spec.direction}; give --direction {meta.direction}")
    if spec.tokenizer and load_tokenizer(spec.tokenizer, "--tokenizer").get_vocab() != tokenizer.get_vocab():
        raise TextebmError(f"--tokenizer {spec.tokenizer}: another vocabulary than the base LM's; a RALM uses the "
                           "base's tokenizer (leave --tokenizer out)")
    phi = build_causal_lm(SmallLMConfig(layers=spec.layers, width=spec.width, heads=spec.heads,
                                        context=spec.context), tokenizer, seed=spec.seed)
    if phi.config.vocab_size != base.config.vocab_size:  # the base's embeddings may have spare rows
        phi.resize_token_embeddings(base.config.vocab_size, mean_resizing=False)
    path = base_info.path.resolve()
    ref = BaseRef(base=str(path), base_sha256=folder_sha256(path),
                  base_parameters=sum(p.numel() for p in base.parameters()))
    return ResidualLM(base, phi, ref), tokenizer, meta


class LMBatcher:
    """Token ids -> padded (input_ids, labels, attention_mask).

    Infill masks: training items are (example index, ids), and each example's mask comes from its
    own generator seeded by (seed, epoch, index), so the masks do not depend on the batching, the
    number of processes, or the global RNG. (The loader collates one batch ahead: masks drawn from
    the global RNG would be drawn before the checkpoint of the step before, and a resumed run would
    draw them again from a later state.) Evaluation passes plain ids and one `generator`.
    """

    def __init__(self, sp, objective: str, direction: str, mask_ratio: float, seed: int = 0):
        self.sp, self.objective, self.direction, self.mask_ratio = sp, objective, direction, mask_ratio
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the recipe at every epoch start: every epoch masks each example afresh."""
        self.epoch = epoch

    def __call__(self, items: list, generator: torch.Generator | None = None) -> dict:
        seqs = []
        for item in items:
            index, ids = item if isinstance(item, tuple) else (None, item)
            if self.objective == "infill":
                g = generator
                if g is None:
                    if index is None:
                        raise ValueError("infill masks need (index, ids) items or a generator")
                    g = torch.Generator().manual_seed(derive_seed(self.seed, self.epoch, index, "infill-mask"))
                seq, lab, _ = infill_example(ids, self.sp, self.mask_ratio, g, self.direction)
            else:
                seq, lab = causal_example(ids, self.sp, self.direction)
            seqs.append((seq, lab))
        input_ids, attn = right_pad([s for s, _ in seqs], self.sp.pad)  # (B, T), (B, T)
        labels, _ = right_pad([lab for _, lab in seqs], IGNORE_INDEX)  # (B, T)
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attn}


def lm_loss(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of token NLLs over labelled positions and their count (next-token shift inside)."""

    logits, target = labelled_logits(model, batch["input_ids"], batch["attention_mask"], batch["labels"])  # (N, V), (N,)
    nll = torch.nn.functional.cross_entropy(logits, target, reduction="sum")
    return nll, torch.tensor(target.numel())


def lm_train(cfg: LMTrainConfig) -> dict:
    """Train a causal or infill LM (paper a's noise model; paper c/d's generators)."""

    check_config(cfg)  # bounds and rules between options, also when called from Python
    check_run_dir(cfg, None)  # a bad --out fails before the tokenizer and the model are built
    eval_split = eval_split_of(cfg.data, cfg.eval_split)
    check_keep_best(cfg, eval_split, "the evaluation split's NLL")
    seed_everything(cfg.seed)
    train_rows = load_split(cfg.data, "train")
    train_texts = _texts(train_rows)
    if not train_texts:
        raise TextebmError(f"{cfg.data}: the training split has no texts")
    eval_rows = load_split(cfg.data, eval_split) if eval_split else []  # read before any work
    eval_texts = _texts(eval_rows)
    spec = LMSpec(objective=cfg.objective, direction=cfg.direction, mask_ratio=cfg.mask_ratio, init=cfg.init,
                  residual_of=cfg.residual_of, tokenizer=cfg.tokenizer, vocab_size=cfg.vocab_size, arch=cfg.arch, kernel=cfg.kernel,
                  layers=cfg.layers, width=cfg.width, heads=cfg.heads, context=cfg.context, seed=cfg.seed)
    model, tokenizer, meta = build_lm(spec, train_texts)
    sp = special_ids(tokenizer, meta)
    limit = min(cfg.max_len, model.config.max_position_embeddings // (2 if cfg.objective == "infill" else 1) - 3)
    encode = lambda texts: [ids[:limit] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    if cfg.chunk:
        room = model.config.max_position_embeddings - 2  # [bos] and [eos] take two positions, as lm eval's
        if cfg.chunk > room:
            raise TextebmError(f"--chunk {cfg.chunk}: a piece and its [bos] and [eos] take {cfg.chunk + 2} positions; "
                               f"the model has {model.config.max_position_embeddings} (--context): --chunk {room} "
                               "at most")
        encode = lambda texts: chunks(doc_streams([{"text": t, "doc": d} for t, d in texts], tokenizer),
                                      cfg.chunk)
        train_texts, eval_texts = _docs(train_rows), _docs(eval_rows)  # (text, document) pairs
    train_ids = [ids for ids in encode(train_texts) if ids]
    batcher = LMBatcher(sp, cfg.objective, cfg.direction, cfg.mask_ratio, seed=cfg.seed)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("LM: %.1fM parameters, %d training texts, %s objective", n_params / 1e6, len(train_ids), cfg.objective)
    eval_ids = [ids for ids in encode(eval_texts) if ids] if eval_split else []
    config = {**options_dict(cfg), "parameters": n_params, "vocab_size": len(tokenizer)}
    if isinstance(model, ResidualLM):  # phi's parameters are the trained ones; the base's content keys a resume
        config.update(model.parameter_counts(), residual_of_sha256=model.base_ref.base_sha256)
        log.info("RALM: phi %.2fM trainable parameters over a frozen %.2fM-parameter base",
                 n_params / 1e6, model.base_ref.base_parameters / 1e6)
    recipe = LMRecipe(model=model, tokenizer=tokenizer, meta=meta, train_ids=train_ids, collate=batcher,
                      eval_split=eval_split, eval_ids=eval_ids, batch_size=cfg.batch_size, seed=cfg.seed)
    recipe.keep_best, recipe.patience = cfg.keep_best, cfg.patience
    return train(cfg, config, recipe)


class LMRecipe(Recipe):
    """`lm train` on the loop: token NLL per labelled token; infill masks drawn afresh every epoch."""

    def __init__(self, *, model, tokenizer, meta, train_ids: list[list[int]], collate: LMBatcher, eval_split: str,
                 eval_ids: list[list[int]], batch_size: int, seed: int):
        self.model, self.tokenizer, self.meta, self.collate = model, tokenizer, meta, collate
        self.dataset = list(enumerate(train_ids))  # (index, ids): the index keys the example's infill masks
        self.lengths = [len(x) for x in train_ids]
        self.eval_split, self.eval_ids, self.batch_size, self.seed = eval_split, eval_ids, batch_size, seed

    def loss(self, model, batch, at):
        nll, n = lm_loss(model, batch)
        return nll / n, {"tokens": float(n)}

    def start_epoch(self, epoch):
        self.collate.set_epoch(epoch)

    def evaluate(self):
        if not self.eval_split:
            return None
        return evaluate_lm(self.model, self.collate, self.eval_ids, self.batch_size, self.seed, self.eval_split)

    def validate(self):
        """The evaluation split's per-token NLL (`--keep-best`), as `evaluate` computes it."""
        return self.evaluate()[f"{self.eval_split}_nll_per_token"]

    def save(self, folder):
        if isinstance(self.model, ResidualLM):
            save_residual_lm(self.model, self.tokenizer, self.meta, folder)
        else:
            save_lm(self.model, self.tokenizer, self.meta, folder)


@torch.no_grad()
def evaluate_lm(model, batcher: LMBatcher, ids: list[list[int]], batch_size: int, seed: int,
                split: str) -> dict:
    """Token-level perplexity of the training objective on a split (infill masks from `seed`),
    in length-sorted batches (`textebm.inference.batched`)."""

    model.eval()
    g = torch.Generator().manual_seed(seed + 7919)
    device = next(model.parameters()).device

    def nll_per_text(items: list[list[int]]) -> list[tuple[float, int]]:
        batch = {k: v.to(device) for k, v in batcher(items, generator=g).items()}
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (B, T, V)
        labels = batch["labels"]  # (B, T), -100 where not predicted
        nll = -next_token_logprobs(logits, labels, labels != -100).sum(-1)  # (B,)
        count = (labels[:, 1:] != -100).sum(-1)  # (B,)
        return list(zip(nll.double().cpu().tolist(), count.cpu().tolist()))

    per_text = batched(ids, [len(x) for x in ids], batch_size, nll_per_text)
    total, count = math.fsum(n for n, _ in per_text), sum(c for _, c in per_text)
    return {f"{split}_nll_per_token": total / max(count, 1),
            f"{split}_perplexity": math.exp(total / max(count, 1)), f"{split}_tokens": count}
