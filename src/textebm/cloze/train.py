"""`textebm cloze train`: Electric, ELECTRA-TT, a masked LM or the TwoTower model (Clark et al. 2020).

Per batch of clean sequences x (framed [start] x [end], right-padded; n real tokens each):

  electric  q = the two-tower noise model on the CLEAN x; L_MLE = −mean_t log q(x_t | x_\\t);
            k = ceil(f·n) unique positions R (f = --mask-fraction, 0.15), x̂_t ~ q(· | x_\\t) for t ∈ R,
            x^noised; the Electric encoder on x^noised gives E_t; L_NCE = Algorithm 2
            (`textebm.losses.electric.electric_nce`, log q detached) / number of real tokens;
            L = --mle-weight · L_MLE + --disc-weight · L_NCE (released code: 1 and 50).
            `--estimator naive` trains with Algorithm 1 instead (k + 1 passes; for small studies).
  electra   the same noise and x^noised; the encoder's logit s_t of "replaced", binary
            cross-entropy against t ∈ R (`electra_rtd`), same weights.
  mlm       the same k positions; BERT's 80 / 10 / 10 rule ([MASK] / random token / kept);
            cross-entropy of the masked-LM head at those positions.
  twotower  the TwoTower baseline alone: L_MLE over every real position.

The model starts from `--init` (an encoder folder or `minilm-l6`; heads and noise towers start
fresh) or is built from scratch from the size flags with a WordPiece tokenizer trained on the data.
Training compute is measured, not guessed: the FLOPs of one forward and backward step on a probe
batch (torch's FLOP counter: matrix multiplies and attention) per real token, times the tokens
trained on; `--flops` sets the step count from a compute budget, so models of different cost get
equal compute (appendix A).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from textebm.data.batching import right_pad
from textebm.data.readers import eval_split_of, load_split, split_file
from textebm.errors import InputError, TextebmError
from textebm.lm.scoring import item_texts
from textebm.losses.electric import (
    electra_rtd,
    electric_nce,
    electric_nce_naive,
    num_replaced,
)
from textebm.models.build import SmallLMConfig, build_encoder
from textebm.models.cloze import (
    OBJECTIVES,
    ClozeModel,
    ClozeSpec,
    frame_ids,
    real_positions,
    save_cloze,
    scaled_tower,
)
from textebm.models.load import load_encoder, load_tokenizer
from textebm.options import check_config, keep_best_field, options_dict, patience_field, refuse_unused
from textebm.runfolder import check_keep_best, check_run_dir
from textebm.tokenizer import train_tokenizer
from textebm.train import ParamGroup, Recipe, seed_everything, train, TrainOptions

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ClozeTrainConfig(TrainOptions):
    COMMAND: ClassVar[str] = "cloze train"
    data: str = field(metadata={"help": "dataset directory (train.jsonl, dev.jsonl) or a data file of texts"})
    objective: str = field(default="electric", metadata={"help": "training objective", "choices": list(OBJECTIVES)})
    estimator: str = field(default="efficient", metadata={
        "help": "electric: Algorithm 2 (one pass) or Algorithm 1 (k + 1 passes)", "choices": ["efficient", "naive"]})
    init: str = field(default="", metadata={"help": "start the encoder from this pretrained encoder (HF folder "
                                                    "or models-fetch id, e.g. minilm-l6); default: from scratch"})
    tokenizer: str = field(default="", metadata={"help": "from scratch: tokenizer folder (default: train one)"})
    vocab_size: int = field(default=8000, metadata={"help": "from scratch: WordPiece vocabulary", "min": 64})
    layers: int = field(default=4, metadata={"help": "from scratch: encoder layers", "min": 1})
    width: int = field(default=256, metadata={"help": "from scratch: encoder width", "min": 8})
    heads: int = field(default=4, metadata={"help": "from scratch: attention heads", "min": 1})
    ffn: int = field(default=0, metadata={"help": "from scratch: feed-forward width (0: 4 x width)", "min": 0})
    noise_scale: float = field(default=0.25, metadata={
        "help": "electric/electra: each noise tower's width, feed-forward and heads relative to the encoder "
                "(appendix A: 1/4)", "gt": 0, "max": 1})
    twotower_scale: float = field(default=2 / 3, metadata={
        "help": "twotower: each tower relative to the encoder shape (appendix A: 2/3)", "gt": 0, "max": 1})
    mask_fraction: float = field(default=0.15, metadata={"help": "k = ceil(f n) positions replaced / masked",
                                                         "gt": 0, "lt": 1})
    mle_weight: float = field(default=1.0, metadata={"help": "weight of the noise model's MLE loss", "gt": 0})
    disc_weight: float = field(default=50.0, metadata={
        "help": "weight of the NCE / replaced-token loss (released code: 50)", "gt": 0})
    flops: float = field(default=0.0, metadata={
        "help": "training compute budget in FLOPs: sets --max-steps from the measured cost of a step (0: off)",
        "min": 0})
    max_len: int = field(default=128, metadata={"help": "tokens per text, framing included", "min": 4})
    eval_split: str | None = field(default=None, metadata={
        "help": "split evaluated after training (default: dev when --data is a dataset folder; '' to skip)"})
    lr: float = field(default=1e-4, metadata={"help": "peak learning rate (AdamW)", "gt": 0})
    keep_best: bool = keep_best_field("the objective's loss on the evaluation split (mlm: the masked tokens' NLL; "
                                      "electric, electra: the NCE / replaced-token loss; twotower: the NLL)")
    patience: int = patience_field()
    noise_lr: float | None = field(default=None, metadata={
        "help": "electric/electra: peak learning rate of the noise towers (default: 10 x --lr; they start "
                "from scratch)", "gt": 0})

    def check(self) -> None:
        super().check()
        if not self.keep_best:
            refuse_unused(self, ["patience"], "without --keep-best")
        if self.objective != "electric":
            refuse_unused(self, ["estimator"], "with --objective other than electric")
        if self.objective not in ("electric", "electra"):
            refuse_unused(self, ["noise_scale", "mle_weight", "disc_weight", "noise_lr"],
                          f"with --objective {self.objective} (no noise model)")
        if self.objective != "twotower":
            refuse_unused(self, ["twotower_scale"], "without --objective twotower")
        if self.init:
            refuse_unused(self, ["tokenizer", "vocab_size", "layers", "width", "heads", "ffn"],
                          "with --init (the encoder's own size and tokenizer are used)")
        elif self.width % self.heads:
            raise TextebmError(f"--width {self.width} must be divisible by --heads {self.heads}")
        if self.flops and self.max_steps:
            raise TextebmError("--flops sets the number of steps; drop --max-steps")


@dataclass(kw_only=True)
class ClozeBuildSpec:
    """What `build_cloze` builds: the encoder from `init` (heads and noise towers fresh) or from
    scratch at the given size, with the tokenizer at `tokenizer` (or one trained on the texts)."""

    objective: str = "electric"  # one of textebm.models.cloze.OBJECTIVES
    init: str = ""
    tokenizer: str = ""
    vocab_size: int = 8000  # of a WordPiece tokenizer trained on the texts
    layers: int = 4
    width: int = 256
    heads: int = 4
    ffn: int = 0  # 0: 4 x width
    noise_scale: float = 0.25  # electric / electra: noise towers relative to the encoder
    twotower_scale: float = 2 / 3  # twotower: towers relative to the encoder
    mask_fraction: float = 0.15
    max_len: int = 128
    seed: int = 0  # of the initial weights


def build_cloze(want: ClozeBuildSpec, train_texts: list[str]):
    """(ClozeModel, tokenizer) ready to train."""

    if want.init:
        encoder, tokenizer = load_encoder(want.init, option="--init")
        c = encoder.config
        shape = dict(width=c.hidden_size, ffn=c.intermediate_size, heads=c.num_attention_heads,
                     layers=c.num_hidden_layers)
        context = getattr(c, "max_position_embeddings", 512)
    else:
        if want.tokenizer:
            tokenizer = load_tokenizer(want.tokenizer, "--tokenizer")
        else:
            log.info("training a %d-token WordPiece tokenizer on %d texts", want.vocab_size, len(train_texts))
            tokenizer = train_tokenizer(train_texts, vocab_size=want.vocab_size, kind="wordpiece")
        shape = dict(width=want.width, ffn=want.ffn or 4 * want.width, heads=want.heads, layers=want.layers)
        context = max(want.max_len, 8)
        encoder = None
        if want.objective != "twotower":
            encoder = build_encoder(SmallLMConfig(layers=want.layers, width=want.width, heads=want.heads,
                                                  context=context, ffn=shape["ffn"], dropout=0.1), tokenizer,
                                    seed=want.seed)
            encoder.pooler = None  # textebm reads the token states; a pooler would get no gradient
    start, end, pad, mask = frame_ids(tokenizer)
    if want.objective == "mlm" and mask is None:
        raise TextebmError("--objective mlm needs a tokenizer with a [MASK] token")
    tower = None
    option, scale = (("--twotower-scale", want.twotower_scale) if want.objective == "twotower"
                     else ("--noise-scale", want.noise_scale))
    if want.objective in ("electric", "electra", "twotower"):
        try:
            tower = scaled_tower(**shape, scale=scale)
        except ValueError as e:
            raise TextebmError(f"{option} {scale}: {e}") from None
    if want.objective == "twotower":
        encoder = None
    spec = ClozeSpec(objective=want.objective, vocab_size=len(tokenizer), start_id=start, end_id=end, pad_id=pad,
                     mask_id=mask, tower=None if tower is None else tower.__dict__,
                     embedding_dim=encoder.config.hidden_size if encoder is not None else tower.width,
                     mask_fraction=want.mask_fraction, max_len=want.max_len, context=context)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(want.seed + 1)
        model = ClozeModel(encoder, spec)
    return model, tokenizer


# ---------------------------------------------------------------- the losses of one batch


def choose_positions(real: torch.Tensor, fraction: float, generator: torch.Generator | None = None
                     ) -> torch.Tensor:
    """R: k = ceil(fraction · n) unique random real positions per sequence.  (B, T) bool."""

    k = num_replaced(real.sum(1), fraction)  # (B,)
    u = torch.rand(real.shape, generator=generator, device=real.device)  # (B, T)
    u = torch.where(real, u, torch.full_like(u, 2.0))  # non-real positions last
    rank = u.argsort(1).argsort(1)  # (B, T) rank of each position's draw
    return rank < k[:, None]


def samplable(log_q: torch.Tensor) -> bool:
    """True when every position's q is a distribution `sample_tokens` can draw from. A row's max
    log-probability is NaN when the row holds a NaN, +inf when it holds +inf and −inf when every
    probability is 0; a finite max (at least −log V for a normalised row) means finite
    probabilities with a positive sum.  log_q: (B, T, V)."""
    return bool(torch.isfinite(log_q.detach().amax(-1)).all())  # (B, T) row maxima


def sample_tokens(log_q: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per position from q.  log_q: (B, T, V) → (B, T) long."""
    b, t, v = log_q.shape
    probs = log_q.detach().float().exp().reshape(b * t, v)  # (B*T, V)
    return torch.multinomial(probs, 1, generator=generator).reshape(b, t)


def cloze_losses(model, batch: dict, generator: torch.Generator | None = None,
                 estimator: str = "efficient") -> dict[str, torch.Tensor]:
    """Every loss term of the model's objective on one batch, per real token (see the module doc).
    Returns tensors: "loss_mle" / "loss_disc" / "loss_mlm" as the objective has them, and
    diagnostics ("nce_acc", "rtd_acc", "tokens")."""

    spec = model.spec
    ids, attn = batch["input_ids"], batch["attention_mask"]  # (B, T)
    real = real_positions(ids, attn)  # (B, T)
    n_tokens = real.sum().clamp(min=1)
    out: dict[str, torch.Tensor] = {"tokens": real.sum().float()}
    if spec.objective == "mlm":
        chosen = choose_positions(real, spec.mask_fraction, generator)  # (B, T)
        u = torch.rand(ids.shape, generator=generator, device=ids.device)  # (B, T) 80/10/10
        rand_tok = torch.randint(0, spec.vocab_size, ids.shape, generator=generator, device=ids.device)
        inp = torch.where(chosen & (u < 0.8), torch.full_like(ids, spec.mask_id), ids)
        inp = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand_tok, inp)  # (B, T)
        h = model.hidden(inp, attn)[chosen]  # (N, H) states of the chosen positions
        logits = model.mlm_head(h).float()  # (N, V)
        # a batch of one-token texts has no position (k <= n - 1): loss 0, not the NaN of an empty mean
        out["loss_mlm"] = F.cross_entropy(logits, ids[chosen], reduction="sum") / chosen.sum().clamp(min=1)
        return out
    log_q = model.noise_log_probs(ids, attn)  # (B, T, V) fp32, from the clean x
    nll = -log_q.gather(-1, ids[..., None]).squeeze(-1)  # (B, T)
    out["loss_mle"] = torch.where(real, nll, torch.zeros_like(nll)).sum() / n_tokens
    if spec.objective == "twotower":
        return out
    if not samplable(log_q):
        # A diverged noise model (NaN / inf logits): q cannot be sampled. A NaN loss stops the
        # run as any other does (TrainingDiverged, the last good checkpoint kept).
        return {**out, "loss_disc": torch.full((), float("nan"), device=ids.device)}
    if estimator == "naive":
        return {**out, **_naive_nce(model, ids, attn, real, log_q, generator, n_tokens)}
    replaced = choose_positions(real, spec.mask_fraction, generator)  # (B, T) R
    with torch.no_grad():
        noised = torch.where(replaced, sample_tokens(log_q, generator), ids)  # (B, T) x^noised
    log_q_noised = log_q.detach().gather(-1, noised[..., None]).squeeze(-1)  # (B, T) no NCE gradient to q
    scores = model.token_scores(noised, attn)  # (B, T) E_t or s_t
    if spec.objective == "electric":
        nce = electric_nce(scores, log_q_noised, replaced, real)
        out["loss_disc"] = nce.loss / n_tokens
        out["nce_acc"] = nce.accuracy.detach()
        out["disc_positions"] = nce.count
    else:
        loss, acc, count = electra_rtd(scores, replaced, real)
        out["loss_disc"] = loss / n_tokens
        out["rtd_acc"] = acc
        out["disc_positions"] = count
    return out


def _naive_nce(model, ids, attn, real, log_q, generator, n_tokens) -> dict[str, torch.Tensor]:
    """Algorithm 1: k negatives per sequence, each a copy of x with one position t ~ unif{real}
    replaced by x̂ ~ q(· | x_\\t), scored at that position (k + 1 passes)."""

    b, t = ids.shape
    k = num_replaced(real.sum(1), model.spec.mask_fraction)  # (B,)
    kmax = int(k.max().clamp(min=1))
    weights = real.float() + (~real.any(1, keepdim=True)).float()  # (B, T) a row with no real token: any
    pos = torch.multinomial(weights, kmax, replacement=True, generator=generator)  # (B, K) t_j
    with torch.no_grad():
        lq_at = log_q.detach().gather(1, pos[..., None].expand(b, kmax, log_q.shape[-1]))  # (B, K, V)
        x_hat = torch.multinomial(lq_at.exp().reshape(b * kmax, -1), 1, generator=generator).reshape(b, kmax)
    log_q_hat = lq_at.gather(-1, x_hat[..., None]).squeeze(-1)  # (B, K)
    copies = ids[:, None].repeat(1, kmax, 1)  # (B, K, T)
    copies.scatter_(2, pos[..., None], x_hat[..., None])  # position t_j of copy j replaced
    e_clean = model.token_scores(ids, attn)  # (B, T)
    e_copies = model.token_scores(copies.reshape(b * kmax, t), attn.repeat_interleave(kmax, 0))  # (B*K, T)
    e_noise = e_copies.reshape(b, kmax, t).gather(2, pos[..., None]).squeeze(-1)  # (B, K)
    noise_mask = torch.arange(kmax, device=ids.device)[None] < k[:, None]  # (B, K)
    log_q_data = log_q.detach().gather(-1, ids[..., None]).squeeze(-1)  # (B, T)
    nce = electric_nce_naive(e_clean, log_q_data, real, e_noise, log_q_hat, noise_mask)
    return {"loss_disc": nce.loss / n_tokens, "nce_acc": nce.accuracy.detach(), "disc_positions": nce.count}


class ClozeObjective(torch.nn.Module):
    """The model with its objective as `forward`, so the training loop (and DDP's gradient
    synchronisation, which hooks `forward`) sees one module call per step."""

    def __init__(self, model, estimator: str = "efficient"):
        super().__init__()
        self.model, self.estimator = model, estimator

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        return cloze_losses(self.model, batch, estimator=self.estimator)


def total_loss(parts: dict[str, torch.Tensor], mle_weight: float, disc_weight: float) -> torch.Tensor:
    if "loss_mlm" in parts:
        return parts["loss_mlm"]
    loss = mle_weight * parts["loss_mle"]
    if "loss_disc" in parts:
        loss = loss + disc_weight * parts["loss_disc"]
    return loss


# ---------------------------------------------------------------- data, compute, evaluation


class ClozeBatcher:
    """Token-id lists (framing included) → right-padded input_ids and attention_mask."""

    def __init__(self, pad: int):
        self.pad = pad

    def __call__(self, items: list[list[int]]) -> dict:
        ids, attn = right_pad(items, self.pad)  # (B, T), (B, T)
        return {"input_ids": ids, "attention_mask": attn}


def encode_texts(tokenizer, spec, texts: list[str]) -> list[list[int]]:
    """[start] tokens [end], the tokens cut to max_len − 2; texts of no token dropped. A special
    token's string in a text ("[MASK]", "</s>") is read as plain text, never as that token."""
    body = tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return [[spec.start_id, *ids[: spec.max_len - 2], spec.end_id] for ids in body if ids]


def split_ids(tokenizer, spec, texts: list[str], data: str, split: str) -> list[list[int]]:
    """`encode_texts` of one split of --data; a warning counts the texts dropped (no token: a line
    of zero-width spaces), and InputError naming the split's file when none is left, or (but for
    TwoTower, which scores every token) when every text is one token long: Electric, ELECTRA and
    the masked LM learn at k = ceil(f n) <= n − 1 positions, so such a split has nothing to train
    or validate on (its loss would read 0)."""
    ids = encode_texts(tokenizer, spec, texts)
    if not ids:
        example = f", e.g. {texts[0]!r}" if texts else ""
        raise InputError(split_file(data, split), f"no text of the {split} split (--data {data}) has a token for "
                                                  f"the tokenizer (non-blank texts: {len(texts)}{example})")
    if spec.objective != "twotower" and all(len(x) <= 3 for x in ids):  # [start] token [end]
        raise InputError(split_file(data, split), f"every text of the {split} split is one token long; --objective "
                                                  f"{spec.objective} learns at k = ceil(f n) positions of a text, at "
                                                  "most n − 1, so a text needs two tokens or more")
    if dropped := len(texts) - len(ids):
        log.warning("--data %s: %d of the %d texts of the %s split have no token for the tokenizer; left out",
                    data, dropped, len(texts), split)
    return ids


def step_flops(model, batch: dict, fn) -> float:
    """FLOPs of one forward and backward pass of `fn(model, batch)` (torch's FLOP counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        loss, _ = fn(model, batch)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


@torch.no_grad()
def evaluate_cloze(model, ids: list[list[int]], batch_size: int, seed: int, split: str, pll: bool = True) -> dict:
    """On a split, per real token: the noise model's perplexity (electric, electra, twotower), the
    objective's loss and accuracy with positions and samples drawn from `seed`, and (electric) the
    mean PLL per token; mlm: the perplexity of [MASK]-ed positions."""

    model.eval()
    device = next(model.parameters()).device
    g = torch.Generator(device=device).manual_seed(seed + 7919)  # draws where the batch is (a GPU's own)
    batcher = ClozeBatcher(model.spec.pad_id)
    spec = model.spec

    def per_batch(items):
        batch = {k: v.to(device) for k, v in batcher(items).items()}
        ids_, attn = batch["input_ids"], batch["attention_mask"]
        real = real_positions(ids_, attn)
        row = {"tokens": float(real.sum())}
        if spec.objective == "mlm":
            chosen = choose_positions(real, spec.mask_fraction, g)
            inp = torch.where(chosen, torch.full_like(ids_, spec.mask_id), ids_)
            logits = model.mlm_head(model.hidden(inp, attn)[chosen]).float()
            row.update(masked=float(chosen.sum()), masked_nll=float(F.cross_entropy(logits, ids_[chosen], reduction="sum")))
            return row
        parts = cloze_losses(model, batch, g)
        row["q_nll"] = float(parts["loss_mle"]) * row["tokens"]
        if "loss_disc" in parts:
            row["disc"] = float(parts["loss_disc"]) * row["tokens"]
            # the accuracy is over the positions that took part (a batch of one-token texts has none)
            row["disc_positions"] = float(parts["disc_positions"])
            acc = float(parts.get("nce_acc", parts.get("rtd_acc")))
            row["acc"] = acc * row["disc_positions"] if row["disc_positions"] else 0.0
        if spec.objective == "electric" and pll:
            row["pll"] = float(-torch.where(real, model.token_scores(ids_, attn), 0.0).sum())
        return row

    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths together
    rows = [per_batch([ids[i] for i in order[j: j + batch_size]]) for j in range(0, len(order), batch_size)]
    tot = {k: math.fsum(r.get(k, 0.0) for r in rows) for k in rows[0]}
    n = max(tot["tokens"], 1.0)
    if spec.objective == "mlm":
        return {f"{split}_masked_perplexity": math.exp(tot["masked_nll"] / max(tot["masked"], 1.0)),
                f"{split}_tokens": int(tot["tokens"])}
    res = {f"{split}_noise_perplexity" if spec.objective != "twotower" else f"{split}_perplexity":
           math.exp(tot["q_nll"] / n), f"{split}_tokens": int(tot["tokens"])}
    if "disc" in tot:
        name = "nce" if spec.objective == "electric" else "rtd"
        res[f"{split}_{name}_loss_per_token"] = tot["disc"] / n
        res[f"{split}_{name}_accuracy"] = tot["acc"] / tot["disc_positions"] if tot["disc_positions"] else None
    if "pll" in tot:
        res[f"{split}_pll_per_token"] = tot["pll"] / n
    return res


def cloze_train(cfg: ClozeTrainConfig) -> dict:
    """Train Electric, ELECTRA-TT, a masked LM or a TwoTower cloze model (Clark et al. 2020)."""

    check_config(cfg)
    check_run_dir(cfg, None)  # a bad --out fails before the tokenizer and the model are built
    eval_split = eval_split_of(cfg.data, cfg.eval_split)
    check_keep_best(cfg, eval_split, "the evaluation split's loss")
    seed_everything(cfg.seed)
    train_texts = [t for t in item_texts(load_split(cfg.data, "train"))[0] if t.strip()]
    if not train_texts:
        raise TextebmError(f"{cfg.data}: the training split has no texts")
    eval_texts = [t for t in item_texts(load_split(cfg.data, eval_split))[0] if t.strip()] if eval_split else []
    model, tokenizer = build_cloze(ClozeBuildSpec(
        objective=cfg.objective, init=cfg.init, tokenizer=cfg.tokenizer, vocab_size=cfg.vocab_size, layers=cfg.layers,
        width=cfg.width, heads=cfg.heads, ffn=cfg.ffn, noise_scale=cfg.noise_scale, twotower_scale=cfg.twotower_scale,
        mask_fraction=cfg.mask_fraction, max_len=cfg.max_len, seed=cfg.seed), train_texts)
    train_ids = split_ids(tokenizer, model.spec, train_texts, cfg.data, "train")
    batcher = ClozeBatcher(model.spec.pad_id)
    n_params = sum(p.numel() for p in model.parameters())
    noise_params = sum(p.numel() for n, p in model.named_parameters() if n.startswith("noise."))  # shared embedding not counted

    # Compute: FLOPs of one training step on a probe batch of typical length, per real token.
    objective = ClozeObjective(model, cfg.estimator)
    probe = batcher(train_ids[: cfg.batch_size])
    with torch.random.fork_rng(devices=[]):
        flops = step_flops(objective, probe, lambda m, batch: cloze_step(m, batch, cfg.mle_weight, cfg.disc_weight))
    tokens_probe = float((probe["attention_mask"].sum(1) - 2).clamp(min=0).sum())
    flops_per_token = flops / max(tokens_probe, 1.0)
    train_tokens = sum(len(x) - 2 for x in train_ids)
    steps_per_epoch = math.ceil(len(train_ids) / cfg.batch_size / cfg.grad_accum)
    if cfg.flops:
        max_steps = max(1, int(cfg.flops / (flops_per_token * train_tokens / steps_per_epoch)))
        cfg = replace(cfg, max_steps=max_steps, epochs=max(cfg.epochs, math.ceil(max_steps / steps_per_epoch)))
        log.info("--flops %.3g: %d steps at %.3g FLOPs per token", cfg.flops, cfg.max_steps, flops_per_token)
    steps = min(cfg.max_steps or 10**12, math.ceil(steps_per_epoch * cfg.epochs))
    compute = {"flops_per_token": flops_per_token, "steps": steps,
               "train_flops": flops_per_token * train_tokens * steps / steps_per_epoch,
               "note": "forward + backward FLOPs of one step on a probe batch (torch.utils.flop_counter), "
                       "per real token, times the tokens of the steps trained"}
    log.info("cloze %s: %.1fM parameters (noise model %.1fM), %d training texts, %d steps, %.3g FLOPs",
             cfg.objective, n_params / 1e6, noise_params / 1e6, len(train_ids), steps, compute["train_flops"])

    eval_ids = split_ids(tokenizer, model.spec, eval_texts, cfg.data, eval_split) if eval_split else []
    groups = []
    if cfg.objective in ("electric", "electra"):
        groups = [ParamGroup(name="noise", prefix="model.noise.", lr=cfg.noise_lr or 10 * cfg.lr)]
    config = {**options_dict(cfg), "parameters": n_params, "noise_parameters": noise_params,
              "vocab_size": len(tokenizer), "compute": compute}
    recipe = ClozeRecipe(model=objective, tokenizer=tokenizer, dataset=train_ids,
                         lengths=[len(x) for x in train_ids], collate=batcher, param_groups=groups,
                         mle_weight=cfg.mle_weight, disc_weight=cfg.disc_weight,
                         eval_split=eval_split, eval_ids=eval_ids, batch_size=cfg.batch_size, seed=cfg.seed)
    recipe.keep_best, recipe.patience = cfg.keep_best, cfg.patience
    return train(cfg, config, recipe)


def cloze_step(model: ClozeObjective, batch: dict, mle_weight: float, disc_weight: float
               ) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted loss of one batch and every term to log."""
    parts = model(batch)
    loss = total_loss(parts, mle_weight, disc_weight)
    logs = {k: float(v.detach()) for k, v in parts.items()}
    if logs.get("disc_positions") == 0:  # no position took part (one-token texts): no accuracy, not NaN or 0
        logs.pop("nce_acc", None)
        logs.pop("rtd_acc", None)
    return loss, logs


@dataclass(kw_only=True)
class ClozeRecipe(Recipe):
    """`cloze train` on the loop: the model with its objective (`ClozeObjective`), the noise towers
    at their own learning rate."""

    model: ClozeObjective
    tokenizer: Any
    dataset: list[list[int]]
    lengths: list[int]
    collate: ClozeBatcher
    param_groups: list
    mle_weight: float
    disc_weight: float
    eval_split: str
    eval_ids: list[list[int]]
    batch_size: int
    seed: int

    def loss(self, model, batch, at):
        return cloze_step(model, batch, self.mle_weight, self.disc_weight)

    def evaluate(self):
        if not self.eval_split:
            return None
        return evaluate_cloze(self.model.model, self.eval_ids, self.batch_size, self.seed, self.eval_split)

    def validate(self):
        """The objective's evaluation loss (`--keep-best`), from `evaluate`'s figures: mlm the masked
        tokens' NLL, electric / electra the NCE / replaced-token loss per token, twotower the NLL."""
        # the same figures as `evaluate` (same seeded positions), without the PLL pass validation does not read
        res, s = evaluate_cloze(self.model.model, self.eval_ids, self.batch_size, self.seed, self.eval_split,
                                pll=False), self.eval_split
        for name in ("nce_loss_per_token", "rtd_loss_per_token"):
            if f"{s}_{name}" in res:
                return res[f"{s}_{name}"]
        return math.log(res.get(f"{s}_masked_perplexity", res.get(f"{s}_perplexity")))

    def save(self, folder):
        save_cloze(self.model.model, self.tokenizer, folder)
