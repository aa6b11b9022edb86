"""A pretrained encoder with a classifier f_CLS and, for the scalar variant, an energy head g_S.

    enc(x)        mean-pooled (or [CLS]) encoder output                      (B, H)
    f_CLS(enc(x)) logits, linear or MLP                                      (B, |Y|)
    g_S(enc(x))   scalar energy, only for --energy scalar (eq. 3)            (B,)

The energy of each variant comes from `textebm.energy.energy_from` (eqs. 3-5). A PosCal table,
when used, is a buffer of the module so checkpoints carry it.

Saved as a folder: the encoder's HF config and tokenizer, `model.safetensors` (the whole module)
and `classifier.json` (labels, energy variant, head, pooling).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from textebm.energy import ScalarEnergyHead, energy_from
from textebm.errors import TextebmError

SPEC_FILE = "classifier.json"


@dataclass
class ClassifierSpec:
    labels: list[str]
    energy: str = "none"  # none | scalar | hidden | sharp-hidden
    head: str = "mlp"  # linear | mlp
    pooling: str = "mean"  # mean | cls
    dropout: float = 0.1
    max_len: int = 64
    poscal_bins: int = 0  # > 0 when trained with PosCal


class EBMClassifier(nn.Module):
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
        self.energy_head = ScalarEnergyHead(hidden) if spec.energy == "scalar" else None
        if spec.poscal_bins:
            self.register_buffer("poscal_table", torch.full((spec.poscal_bins, n), float("nan")))

    def pool(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state  # (B, T, H)
        if self.spec.pooling == "cls":
            return h[:, 0]  # (B, H)
        m = attention_mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
        return (h * m).sum(1) / m.sum(1).clamp(min=1)  # (B, H)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (logits (B, |Y|), energy Ê (B,) or None for the baseline)."""
        z = self.pool(input_ids, attention_mask, token_type_ids)  # (B, H)
        logits = self.cls(z).float()  # (B, |Y|)
        if self.spec.energy == "none":
            return logits, None
        scalar = self.energy_head(z).float() if self.energy_head is not None else None  # (B,)
        return logits, energy_from(self.spec.energy, logits, scalar)  # (B,)


def build_classifier(encoder_path: str | Path, spec: ClassifierSpec):
    """(EBMClassifier, tokenizer) from a pretrained HF encoder folder."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    tok = AutoTokenizer.from_pretrained(encoder_path, local_files_only=True)
    # The pooler is dropped on purpose (textebm pools itself); its weights in the checkpoint would
    # otherwise fill the log with an "UNEXPECTED keys" report on every run.
    kw = _without_pooler(json.loads((Path(encoder_path) / "config.json").read_text())["model_type"])
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        enc = AutoModel.from_pretrained(encoder_path, dtype=torch.float32, local_files_only=True, **kw)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    return EBMClassifier(enc, spec), tok


def _without_pooler(model_type: str) -> dict:
    """from_pretrained / from_config arguments that drop the pooler of BERT-like encoders."""
    return {"add_pooling_layer": False} if model_type in ("bert", "roberta", "xlm-roberta", "electra") else {}


def save_classifier(model: EBMClassifier, tokenizer, path: str | Path) -> None:
    from safetensors.torch import save_model

    from textebm.io import write_json

    path = Path(path)
    model.encoder.config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    save_model(model, str(path / "model.safetensors"))
    write_json(path / SPEC_FILE, dataclasses.asdict(model.spec))


def load_classifier(path: str | Path):
    """(EBMClassifier, tokenizer) from a folder written by `save_classifier` (a run's model/)."""
    from safetensors.torch import load_model
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    path = Path(path)
    if (path / "model" / SPEC_FILE).is_file():
        path = path / "model"
    if not (path / SPEC_FILE).is_file():
        raise TextebmError(f"{path}: not a textebm classifier (no {SPEC_FILE}); train one with `textebm classify train`")
    spec = ClassifierSpec(**json.loads((path / SPEC_FILE).read_text()))
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    model = EBMClassifier(AutoModel.from_config(config, **_without_pooler(config.model_type)), spec)
    load_model(model, str(path / "model.safetensors"))
    model.eval()
    return model, AutoTokenizer.from_pretrained(path, local_files_only=True)
