"""Predictions of a classifier on encoded examples (a library: `classify eval`, the dev evaluation
and the PosCal refresh of `classify train` use it).

`predict` runs the model as it is placed (device, dtype) in length-sorted batches
(`textebm.inference.batched`) and returns float64 numpy arrays in the examples' order, so every
metric computed from them is at least fp32-exact whatever precision the model ran in.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from textebm.classify.data import batch_inputs
from textebm.inference import batched
from textebm.losses.poscal import PosCalStats

log = logging.getLogger(__name__)


@torch.no_grad()
def predict(model, examples, pad_id: int, batch_size: int, progress: bool = False) -> dict:
    """Logits, probabilities, energies and labels of `examples` (`textebm.classify.data.Encoded`),
    in their order: {"logits": (N, |Y|), "probs": (N, |Y|), "energy": (N,) (NaN without an
    energy), "labels": (N,) (-1 where unlabelled)}, float64 / int numpy arrays."""

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    n_labels = len(model.spec.labels)

    def run(batch) -> list[torch.Tensor]:
        inputs = batch_inputs([(e.ids, e.type_ids) for e in batch], pad_id)
        logits, energy = model(**{k: v.to(device) for k, v in inputs.items()})  # (B, |Y|), (B,) | None
        if energy is None:
            energy = torch.full((len(batch),), float("nan"))  # (B,)
        rows = torch.cat([logits.double(), energy.double().unsqueeze(-1).to(logits.device)], -1)  # (B, |Y|+1)
        return list(rows.cpu())

    try:
        rows = batched(examples, [len(e.ids) for e in examples], batch_size, run, progress=progress,
                       desc="predicting", unit="example")
    finally:
        model.train(was_training)
    table = torch.stack(rows) if rows else torch.zeros(0, n_labels + 1, dtype=torch.float64)  # (N, |Y|+1)
    logits = table[:, :n_labels]  # (N, |Y|)
    return {"logits": logits.numpy(),
            "probs": torch.softmax(logits, -1).numpy(),
            "energy": table[:, n_labels].numpy(),
            "labels": np.array([e.label for e in examples], dtype=np.int64)}


@torch.no_grad()
def refresh_poscal_table(model, examples, collate, batch_size: int) -> None:
    """Rebuild the PosCal table by a no-grad pass over the training set (as the released code)."""

    m = getattr(model, "module", model)
    out = predict(m, examples, collate.pad_id, batch_size * 2)
    stats = PosCalStats(len(m.spec.labels), m.poscal_table.shape[0])
    stats.update(torch.as_tensor(out["probs"]), torch.as_tensor(out["labels"]))
    m.poscal_table.copy_(stats.table().to(m.poscal_table))
    log.info("PosCal table refreshed (train class-wise ECE %.4f)", stats.ece())
