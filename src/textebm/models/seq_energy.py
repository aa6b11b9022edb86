"""Sequence energy functions E(x | c) of Bakhtin et al. (2019), sec. 4.3, over a window of token ids.

Every module maps (input_ids (B, T), attention_mask (B, T)) to energies (B,) in fp32 (the
output layer runs in fp32 whatever precision the body ran in); low energy = real text. The window
holds the context and the continuation together, as the paper scores them.

    linear     a learnt scalar per vocabulary token, summed over the window (a bag of tokens)
    bilstm     token embeddings, a bidirectional LSTM, mean-pooled over the window, linear to a scalar
    unitransf  a causal transformer (Llama blocks; started from a causal LM in the shared
               vocabulary, as the paper starts from its LM), mean-pooled, linear to a scalar
    bitransf   a bidirectional transformer (BERT blocks, or a pretrained encoder such as MiniLM),
               its first position (paper c), or its top states mean-pooled (pool="mean": Deng et
               al.'s BiT, sec. 4.1), linear to a scalar

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
from textebm.errors import InputError
from textebm.io import write_json
from textebm.models.kinds import ModelKind

KINDS = ("linear", "bilstm", "unitransf", "bitransf")


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


class UniTransfEnergy(nn.Module):
    """A causal transformer body (e.g. the `.model` of a LlamaForCausalLM), mean-pooled."""
    FP32_MODULES = ("out",)  # the energy stays fp32 (models/mixed.py)

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body
        self.out = nn.Linear(body.config.hidden_size, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        h = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        return _head(pool(h, attention_mask, "mean"), self.out)


BITRANSF_POOLS = ("first", "mean")


class BiTransfEnergy(nn.Module):
    """A bidirectional encoder (BERT-like): its first position ([CLS] / <s>; Bakhtin et al.), or
    the mean of its top states over the real tokens (`pool="mean"`; Deng et al.'s BiT)."""
    FP32_MODULES = ("out",)  # the energy stays fp32 (models/mixed.py)

    def __init__(self, encoder: nn.Module, pool: str = "first"):
        super().__init__()
        if pool not in BITRANSF_POOLS:
            raise ValueError(f"unknown pooling {pool!r}; expected one of {', '.join(BITRANSF_POOLS)}")
        self.encoder, self.pool = encoder, pool
        self.out = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        return _head(h[:, 0] if self.pool == "first" else pool(h, attention_mask, "mean"), self.out)  # (B,)


# ---------------------------------------------------------------- a saved energy: spec, build, save

SPEC_FILE = "energy.json"
KIND = ModelKind("energy", SPEC_FILE, "a textebm sequence energy",
                 "a sequence energy trained with `textebm residual train` (RUN or RUN/model)")


@dataclass
class EnergySpec:
    """What `energy.json` records of a trained sequence energy (`residual train`)."""

    kind: str  # linear | bilstm | unitransf | bitransf
    vocab_size: int  # of the inputs the energy reads
    length: int  # window length it was trained on (L)
    embed: int = 0  # bilstm
    hidden: int = 0  # bilstm
    layers: int = 0  # bilstm
    pad_id: int = 0
    retokenize: bool = False  # reads its own tokenizer's ids: windows are decoded from the shared
    #                           vocabulary (saved in vocab/) and re-tokenised (e.g. MiniLM WordPiece)
    max_tokens: int = 0  # retokenize: cap on the re-tokenised length
    init: str = ""  # what the body started from (provenance)
    pool: str = "first"  # bitransf: its first position or the mean of its top states (BITRANSF_POOLS)
    contexts: list[int] = dataclasses.field(default_factory=list)  # context lengths c of its training
    #                                                                 windows (paper d: the prefix p)


def spec_dict(spec: EnergySpec) -> dict:
    """`spec` as energy.json records it: `pool` only where it is not "first" (the only pooling
    before the field existed) and `contexts` only where known, so the energies trained before,
    and their runs' config.json, read the same."""
    out = dataclasses.asdict(spec)
    if out["pool"] == "first":
        del out["pool"]
    if not out["contexts"]:
        del out["contexts"]
    return out


def spec_from_dict(raw: dict, where) -> EnergySpec:
    """An `EnergySpec` from the parsed `energy.json` at `where` (InputError naming file and field)."""
    spec = specs.spec_from_dict(EnergySpec, raw, where)
    if spec.kind not in KINDS:
        raise InputError(where, f"kind must be one of {', '.join(KINDS)}, got {spec.kind!r}")
    if spec.pool not in BITRANSF_POOLS:
        raise InputError(where, f"pool must be one of {', '.join(BITRANSF_POOLS)}, got {spec.pool!r}")
    if spec.pool != "first" and spec.kind != "bitransf":
        raise InputError(where, f"pool {spec.pool!r} is for a bitransf energy only, not {spec.kind}")
    return spec


def build_energy(spec: EnergySpec, body: nn.Module | None = None) -> nn.Module:
    """The module of `spec`; transformer kinds wrap `body` (a LlamaModel / encoder)."""
    if spec.kind == "linear":
        return LinearEnergy(spec.vocab_size)
    if spec.kind == "bilstm":
        return BiLSTMEnergy(spec.vocab_size, spec.embed, spec.hidden, spec.layers, spec.pad_id)
    if body is None:
        raise ValueError(f"a {spec.kind} energy needs its transformer body")
    return UniTransfEnergy(body) if spec.kind == "unitransf" else BiTransfEnergy(body, spec.pool)


def body_of(model: nn.Module) -> nn.Module | None:
    return getattr(model, "body", None) or getattr(model, "encoder", None)


def save_energy(model: nn.Module, spec: EnergySpec, tokenizer, path, vocab=None) -> None:
    """energy.json, model.safetensors, the input tokenizer, the body's config.json (transformer
    kinds) and, for a re-tokenising energy, the shared vocabulary in vocab/."""
    from pathlib import Path

    from safetensors.torch import save_model

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    body = body_of(model)
    if body is not None:
        body.config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    if spec.retokenize:
        vocab.save_pretrained(path / "vocab")
    save_model(model, str(path / "model.safetensors"))
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
