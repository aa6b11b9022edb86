"""Sequence energy functions E(x | c) of Bakhtin et al. (2019), sec. 4.3, over a window of token ids.

Every module maps (input_ids (B, T), attention_mask (B, T)) to energies (B,) in fp32 (the
output layer runs in fp32 whatever precision the body ran in); low energy = real text. The window
holds the context and the continuation together, as the paper scores them.

    linear     a learnt scalar per vocabulary token, summed over the window (a bag of tokens)
    bilstm     token embeddings, a bidirectional LSTM, mean-pooled over the window, linear to a scalar
    unitransf  a causal transformer (Llama blocks; started from a causal LM in the shared
               vocabulary, as the paper starts from its LM), mean-pooled over the window (or, with
               pool="continuation", over the continuation after its prefix of p tokens only), linear
               to a scalar
    bitransf   a bidirectional transformer (BERT blocks, or a pretrained encoder such as MiniLM),
               its first position (paper c), or its top states mean-pooled (pool="mean": Deng et
               al.'s BiT, sec. 4.1; "continuation": over the continuation only), linear to a scalar
    lmstats    the sceptic's control for paper d: linear in three statistics of a frozen base LM
               P_LM on the continuation (the window after its prefix of p tokens) and a bias,

                   E(x) = w_1 Σ_t log P_LM(x_t | x_<t) + w_2 Σ_t H(P_LM(· | x_<t)) + w_3 (T − p) + b,

               t over the continuation, P_LM as `textebm.residual.joint.BaseLM` defines it ([bos]
               first, [eos] and the layout symbols banned, the rest renormalised). It can only
               re-temper or re-scale the base LM: an energy must beat it to claim more.

Deng et al. (2020) train the same energies as the residual of a language model; these modules
are shared by both systems.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from textebm import specs
from textebm.data.batching import right_pad
from textebm.energy import fp32_linear, pool
from textebm.checkpoint import save_weights
from textebm.errors import InputError
from textebm.io import write_json
from textebm.models.kinds import ModelKind
from textebm.precision import fp32_or_better

KINDS = ("linear", "bilstm", "unitransf", "bitransf", "lmstats")


def _head(h: Tensor, layer: nn.Linear) -> Tensor:
    return fp32_linear(h, layer.weight, layer.bias).squeeze(-1)  # (B, H) -> (B,)


class LinearEnergy(nn.Module):
    """E(x) = Σ_t w[x_t] + b."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.weight = nn.Embedding(vocab_size, 1)
        nn.init.zeros_(self.weight.weight)
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        w = self.weight(input_ids).squeeze(-1).float()  # (B, T)
        return torch.where(attention_mask.bool(), w, torch.zeros_like(w)).sum(1) + self.bias.float()  # (B,)


class BiLSTMEnergy(nn.Module):
    FP32_MODULES = ("out",)  # the energy stays fp32 (models/mixed.py)

    def __init__(self, vocab_size: int, embed: int = 256, hidden: int = 256, layers: int = 1, pad_id: int = 0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed, padding_idx=pad_id)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        lengths = attention_mask.sum(1).clamp(min=1).cpu()  # (B,)
        x = self.embed(input_ids)  # (B, T, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=input_ids.shape[1])  # (B, T, 2H)
        return _head(pool(h, attention_mask, "mean"), self.out)


def pooling_mask(attention_mask: Tensor, how: str, prefix_len: int) -> Tensor:
    """The positions a mean pools (B, T): the real tokens, or with how="continuation" those after
    the first `prefix_len` (the window's prefix, identical for a positive and its negatives)."""
    if how != "continuation":
        return attention_mask
    keep = torch.arange(attention_mask.shape[1], device=attention_mask.device) >= prefix_len  # (T,)
    return attention_mask * keep.to(attention_mask.dtype)  # (B, T)


class UniTransfEnergy(nn.Module):
    """A causal transformer body (e.g. the `.model` of a LlamaForCausalLM), mean-pooled over the
    window or (`pool="continuation"`) over its positions from `prefix_len` on; `dropout` on the
    pooled vector while training."""
    FP32_MODULES = ("out",)  # the energy stays fp32 (models/mixed.py)

    def __init__(self, body: nn.Module, pool: str = "mean", prefix_len: int = 0, dropout: float = 0.0):
        super().__init__()
        if pool not in UNITRANSF_POOLS:
            raise ValueError(f"unknown pooling {pool!r}; expected one of {', '.join(UNITRANSF_POOLS)}")
        self.body, self.pool, self.prefix_len = body, pool, prefix_len
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(body.config.hidden_size, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        h = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        pooled = pool(h, pooling_mask(attention_mask, self.pool, self.prefix_len), "mean")  # (B, H)
        return _head(self.drop(pooled), self.out)


UNITRANSF_POOLS = ("mean", "continuation")
BITRANSF_POOLS = ("first", "mean", "continuation")


class BiTransfEnergy(nn.Module):
    """A bidirectional encoder (BERT-like): its first position ([CLS] / <s>; Bakhtin et al.), or
    the mean of its top states over the real tokens (`pool="mean"`; Deng et al.'s BiT)."""
    FP32_MODULES = ("out",)  # the energy stays fp32 (models/mixed.py)

    def __init__(self, encoder: nn.Module, pool: str = "first", prefix_len: int = 0, dropout: float = 0.0):
        super().__init__()
        if pool not in BITRANSF_POOLS:
            raise ValueError(f"unknown pooling {pool!r}; expected one of {', '.join(BITRANSF_POOLS)}")
        self.encoder, self.pool, self.prefix_len = encoder, pool, prefix_len
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        pooled = h[:, 0] if self.pool == "first" else pool(
            h, pooling_mask(attention_mask, self.pool, self.prefix_len), "mean")  # (B, H)
        return _head(self.drop(pooled), self.out)  # (B,)


LMSTATS_FEATURES = ("logprob", "entropy", "length")  # the order of LMStatsEnergy's features and weights


def continuation_stats(logits: Tensor, targets: Tensor, mask: Tensor, banned: Tensor) -> Tensor:
    """[Σ_t log P(x_t | x_<t), Σ_t H(P(· | x_<t)), number of tokens] per sequence (B, 3), in fp32
    (fp64 stays fp64), over the positions where `mask` is 1, P the softmax of `logits` with the
    `banned` token ids at probability 0 and the rest renormalised (`BaseLM`'s P_LM).

    logits: (B, m, V), those predicting the targets; targets: (B, m) token ids; mask: (B, m);
    banned: (K,) token ids. A real target the distribution never writes is a ValueError."""
    acc = fp32_or_better(logits.dtype)
    lg = logits.to(acc).index_fill(-1, banned, float("-inf"))  # (B, m, V)
    logp = lg.log_softmax(-1)  # (B, m, V)
    keep = mask.bool()  # (B, m)
    tok = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, m)
    if torch.isinf(tok[keep]).any():
        raise ValueError("a continuation holds a token the base LM never writes ([eos] or a layout symbol)")
    ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)  # (B, m): 0 · log 0 = 0 for the banned
    zero = torch.zeros((), dtype=acc, device=logits.device)
    return torch.stack([torch.where(keep, tok, zero).sum(1), torch.where(keep, ent, zero).sum(1),
                        keep.to(acc).sum(1)], -1)  # (B, 3)


class LMStatsEnergy(nn.Module):
    """E(x) = w · [Σ log P_LM, Σ H(P_LM), length] + b over the continuation (the window's tokens
    from position `prefix_len` on): 3 weights and a bias (`LMSTATS_FEATURES`), zero at the start.
    `lm` is a causal LM (a Hugging Face `...ForCausalLM`), frozen, always in eval mode and in fp32
    (autocast off; `FP32_MODULES` keeps it out of `mixed_precision`)."""
    FP32_MODULES = ("lm",)

    def __init__(self, lm: nn.Module, prefix_len: int, bos_id: int, banned: list[int]):
        super().__init__()
        self.lm, self.prefix_len, self.bos_id = lm, prefix_len, bos_id
        lm.requires_grad_(False)
        lm.eval()
        self.register_buffer("banned", torch.tensor(sorted(banned), dtype=torch.long), persistent=False)
        self.weight = nn.Parameter(torch.zeros(len(LMSTATS_FEATURES)))  # 1-D: no weight decay
        self.bias = nn.Parameter(torch.zeros(()))

    def train(self, mode: bool = True) -> LMStatsEnergy:
        super().train(mode)
        self.lm.eval()  # frozen: no dropout, whatever the loop asks
        return self

    @torch.no_grad()
    def features(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The statistics (B, 3) of windows (B, T), right-padded: P_LM reads [bos] x_1..x_{T−1} and
        predicts x_{p+1}..x_T. A window no longer than the prefix has none (zeros)."""
        b, t = input_ids.shape
        p = self.prefix_len
        dtype = fp32_or_better(self.weight.dtype)
        if t <= p:
            return torch.zeros(b, len(LMSTATS_FEATURES), dtype=dtype, device=input_ids.device)
        bos = torch.full((b, 1), self.bos_id, dtype=input_ids.dtype, device=input_ids.device)  # (B, 1)
        ids = torch.cat([bos, input_ids[:, :-1]], 1)  # (B, T): position j predicts x_{j+1}
        mask = torch.cat([torch.ones_like(bos), attention_mask[:, :-1].to(bos.dtype)], 1)  # (B, T)
        with torch.autocast(input_ids.device.type, enabled=False):
            logits = self.lm(input_ids=ids, attention_mask=mask, use_cache=False,
                             logits_to_keep=t - p).logits  # (B, T − p, V) predicting x_{p+1..T}
        return continuation_stats(logits, input_ids[:, p:], attention_mask[:, p:], self.banned).to(dtype)  # (B, 3)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        f = self.features(input_ids, attention_mask)  # (B, 3)
        return f @ self.weight.to(f.dtype) + self.bias.to(f.dtype)  # (B,)


# ---------------------------------------------------------------- a saved energy: spec, build, save

SPEC_FILE = "energy.json"
KIND = ModelKind("energy", SPEC_FILE, "a textebm sequence energy",
                 "a sequence energy trained with `textebm detect train` (RUN or RUN/model)")


@dataclass
class EnergySpec:
    """What `energy.json` records of a trained sequence energy (`detect train`)."""

    kind: str  # linear | bilstm | unitransf | bitransf | lmstats
    vocab_size: int  # of the inputs the energy reads
    length: int  # window length it was trained on (L)
    embed: int = 0  # bilstm
    hidden: int = 0  # bilstm
    layers: int = 0  # bilstm
    pad_id: int = 0
    retokenize: bool = False  # reads its own tokenizer's ids: windows are decoded from the shared
    #                           vocabulary (saved in vocab/) and re-tokenised (e.g. MiniLM WordPiece)
    max_tokens: int = 0  # retokenize: cap on the re-tokenised length
    init: str = ""  # what the body started from (provenance; lmstats: the base LM's --base)
    pool: str = "first"  # bitransf: its first position, or the mean of its top states over the window or
    #                      the continuation (BITRANSF_POOLS); unitransf: "first" (the default, written
    #                      before the field existed) is its mean over the window, or "continuation"
    dropout: float = 0.0  # unitransf, bitransf: on the pooled vector while training
    contexts: list[int] = dataclasses.field(default_factory=list)  # context lengths c of its training
    #                                                                 windows (paper d: the prefix p;
    #                                                                 lmstats: exactly one)
    bos_id: int = -1  # lmstats: the base LM's [bos], read before every window
    banned: list[int] = dataclasses.field(default_factory=list)  # lmstats: the tokens the base LM never
    #                                                               writes (BaseLM: [eos], layout symbols)


def spec_dict(spec: EnergySpec) -> dict:
    """`spec` as energy.json records it: `pool` only where it is not "first" (the only pooling
    before the field existed), `contexts` only where known and `bos_id`, `banned` only for
    lmstats, so the energies trained before, and their runs' config.json, read the same."""
    out = dataclasses.asdict(spec)
    if out["pool"] == "first":
        del out["pool"]
    if not out["dropout"]:
        del out["dropout"]
    if not out["contexts"]:
        del out["contexts"]
    if spec.kind != "lmstats":
        del out["bos_id"], out["banned"]
    return out


def spec_from_dict(raw: dict, where) -> EnergySpec:
    """An `EnergySpec` from the parsed `energy.json` at `where` (InputError naming file and field)."""
    spec = specs.spec_from_dict(EnergySpec, raw, where)
    if spec.kind not in KINDS:
        raise InputError(where, f"kind must be one of {', '.join(KINDS)}, got {spec.kind!r}")
    if spec.pool not in BITRANSF_POOLS:
        raise InputError(where, f"pool must be one of {', '.join(BITRANSF_POOLS)}, got {spec.pool!r}")
    if spec.pool != "first" and spec.kind not in ("bitransf", "unitransf"):
        raise InputError(where, f"pool {spec.pool!r} is not a pooling of a {spec.kind} energy")
    if spec.pool == "continuation" and (len(spec.contexts) != 1 or spec.retokenize):
        raise InputError(where, "pool 'continuation' needs `contexts` (its one prefix length) and windows read "
                                f"in the shared vocabulary, got {spec.contexts} (retokenize {spec.retokenize})")
    if not 0.0 <= spec.dropout < 1.0:
        raise InputError(where, f"dropout must lie in [0, 1), got {spec.dropout}")
    if spec.kind == "lmstats" and (len(spec.contexts) != 1 or spec.bos_id < 0):
        raise InputError(where, "an lmstats energy needs `contexts` (its one prefix length) and `bos_id` "
                                f"(the base LM's [bos]), got {spec.contexts} and {spec.bos_id}")
    return spec


def build_energy(spec: EnergySpec, body: nn.Module | None = None) -> nn.Module:
    """The module of `spec`; transformer kinds wrap `body` (a LlamaModel / encoder; lmstats: the
    base LM, a causal LM with its head)."""
    if spec.kind == "linear":
        return LinearEnergy(spec.vocab_size)
    if spec.kind == "bilstm":
        return BiLSTMEnergy(spec.vocab_size, spec.embed, spec.hidden, spec.layers, spec.pad_id)
    if body is None:
        raise ValueError(f"a {spec.kind} energy needs its transformer body (lmstats: the base LM)")
    if spec.kind == "lmstats":
        return LMStatsEnergy(body, spec.contexts[0], spec.bos_id, spec.banned)
    p = spec.contexts[0] if spec.pool == "continuation" else 0
    if spec.kind == "unitransf":
        return UniTransfEnergy(body, "continuation" if spec.pool == "continuation" else "mean", p, spec.dropout)
    return BiTransfEnergy(body, spec.pool, p, spec.dropout)


def body_of(model: nn.Module) -> nn.Module | None:
    return getattr(model, "body", None) or getattr(model, "encoder", None) or getattr(model, "lm", None)


def save_energy(model: nn.Module, spec: EnergySpec, tokenizer, path, vocab=None) -> None:
    """energy.json, model.safetensors, the input tokenizer, the body's config.json (transformer
    kinds; lmstats: the base LM's, its weights in model.safetensors beside the 4 of the energy)
    and, for a re-tokenising energy, the shared vocabulary in vocab/."""
    from pathlib import Path


    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    body = body_of(model)
    if body is not None:
        body.config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    if spec.retokenize:
        vocab.save_pretrained(path / "vocab")
    save_weights(model, path / "model.safetensors")
    write_json(path / SPEC_FILE, spec_dict(spec))


def encode_windows(seqs, spec: EnergySpec, tokenizer, vocab) -> dict:
    """Energy inputs {input_ids (B, T), attention_mask (B, T)} of windows given as shared-vocabulary
    ids: padded as they are, or (`spec.retokenize`) decoded and re-tokenised by the energy's own
    tokenizer with its special tokens ([CLS] first), cut at `spec.max_tokens`."""

    if spec.retokenize:
        enc = tokenizer(vocab.batch_decode([list(s) for s in seqs]), truncation=True, max_length=spec.max_tokens,
                        padding=True, return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    ids, mask = right_pad([list(s) for s in seqs], spec.pad_id)  # (B, T)
    return {"input_ids": ids, "attention_mask": mask}
