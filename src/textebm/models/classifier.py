"""A pretrained encoder with a classifier f_CLS and, for the scalar variant, an energy head g_S.

    enc(x)        mean-pooled (or [CLS]) encoder output                      (B, H)
    f_CLS(enc(x)) logits, linear or MLP                                      (B, |Y|)
    g_S(enc(x))   scalar energy, only for --energy scalar (eq. 3)            (B,)

Pooling and the energy of each variant (eqs. 3-5) come from `textebm.energy` (`pool`,
`sequence_energy`). A PosCal table, when used, is a buffer of the module so checkpoints carry it.

Saved as a folder: the encoder's HF config and tokenizer, `model.safetensors` (the whole module)
and `classifier.json` (labels, energy variant, head, pooling). Loading (with the checks of what a
folder holds) lives in `textebm.models.load`: `load_classifier`, and `load_encoder` for the
pretrained encoder `build_classifier` starts from.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from textebm import specs
from textebm.energy import ENERGY_CHOICES, POOLINGS, energy_head, pool, sequence_energy
from textebm.checkpoint import save_weights
from textebm.errors import InputError
from textebm.io import write_json
from textebm.models.kinds import ModelKind

SPEC_FILE = "classifier.json"
KIND = ModelKind("classifier", SPEC_FILE, "a textebm classifier",
                 "a classifier trained with `textebm classify train` (RUN or RUN/model)", shows_encoder=True)
HEADS = ("mlp", "linear")


@dataclass
class ClassifierSpec:
    labels: list[str]
    energy: str = "none"  # none | scalar | hidden | sharp-hidden
    head: str = "mlp"  # linear | mlp
    pooling: str = "mean"  # mean | cls
    dropout: float = 0.1
    max_len: int = 64
    poscal_bins: int = 0  # > 0 when trained with PosCal
    pairs: bool | None = None  # trained on text pairs (text, text_pair); None: saved before textebm recorded it


def spec_from_dict(raw, path: str | Path) -> ClassifierSpec:
    """A `ClassifierSpec` from the parsed `classifier.json` at `path`; InputError naming the file
    and the field when anything is missing, unknown or out of range."""
    if isinstance(raw, dict):
        labels = raw.get("labels")
        if not isinstance(labels, list) or len(labels) < 2 or not all(isinstance(x, str) for x in labels):
            raise InputError(path, f"'labels' must be a list of at least 2 label names, got {labels!r}")
    spec = specs.spec_from_dict(ClassifierSpec, raw, path)
    rules = [("energy", spec.energy in ENERGY_CHOICES, f"one of {', '.join(ENERGY_CHOICES)}"),
             ("head", spec.head in HEADS, f"one of {', '.join(HEADS)}"),
             ("pooling", spec.pooling in POOLINGS, f"one of {', '.join(POOLINGS)}"),
             ("dropout", 0 <= spec.dropout < 1, "a number in [0, 1)"),
             ("max_len", spec.max_len >= 1, "an integer >= 1"),
             ("poscal_bins", spec.poscal_bins >= 0, "an integer >= 0")]
    for name, ok, expected in rules:
        if not ok:
            raise InputError(path, f"'{name}' must be {expected}, got {getattr(spec, name)!r}")
    return spec


class EBMClassifier(nn.Module):
    FP32_MODULES = ("cls", "energy_head")  # the logits and energies stay fp32 (models/mixed.py)

    def __init__(self, encoder: nn.Module, spec: ClassifierSpec):
        super().__init__()
        self.encoder = encoder
        self.spec = spec
        hidden = encoder.config.hidden_size
        n = len(spec.labels)
        if spec.head == "mlp":  # as RoBERTa's classification head: dense, tanh, dropout, proj
            self.cls = nn.Sequential(nn.Dropout(spec.dropout), nn.Linear(hidden, hidden), nn.Tanh(),
                                     nn.Dropout(spec.dropout), nn.Linear(hidden, n))
        else:
            self.cls = nn.Sequential(nn.Dropout(spec.dropout), nn.Linear(hidden, n))
        self.energy_head = energy_head(spec.energy, hidden)
        if spec.poscal_bins:
            self.register_buffer("poscal_table", torch.full((spec.poscal_bins, n), float("nan")))
        # MPNet and other encoders without segment embeddings take no token_type_ids.
        self._takes_types = "token_type_ids" in inspect.signature(encoder.forward).parameters

    def pool(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        kw = {"token_type_ids": token_type_ids} if token_type_ids is not None and self._takes_types else {}
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state  # (B, T, H)
        return pool(h, attention_mask, self.spec.pooling)  # (B, H)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (logits (B, |Y|) in fp32, energy Ê (B,) or None for the baseline)."""
        z = self.pool(input_ids, attention_mask, token_type_ids)  # (B, H)
        logits = self.cls(z).float()  # (B, |Y|)
        return logits, sequence_energy(self.spec.energy, logits, z, self.energy_head)  # (B,) | None


def save_classifier(model: EBMClassifier, tokenizer, path: str | Path) -> None:

    path = Path(path)
    model.encoder.config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    save_weights(model, path / "model.safetensors")
    write_json(path / SPEC_FILE, dataclasses.asdict(model.spec))
