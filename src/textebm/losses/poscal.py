"""PosCal: posterior calibrated training (Jung et al., ACL 2020), as a penalty added to the CE loss.

Idea. Keep, over the training set, a table q[b, c] = empirical frequency that the true label is c
among the predictions whose probability for class c fell in confidence bin b (B equal-width bins
on [0, 1]). During training, pull every predicted probability p(c | x_i) toward the q of its own
bin, so that predicted confidence and empirical frequency agree:

    L = L_CE + λ · L_PosCal,      L_PosCal = d(p̂, q̂)

where q̂_ic = q[bin(p̂_ic), c]. This module follows the authors' released code
(github.com/theejung/PosCal, `modeling_bert.py` / `classify_bert.py`):

- bins: B equal-width bins, bin(p) = the b with edges[b] <= p < edges[b+1], p = 1.0 in the last
  bin (their `np.digitize(p, linspace(0, 1, B + 1)) - 1` with the IndexError fallback); default
  B = 20. Edges here are k / B, as in `textebm.calibration.metrics`, so a probability exactly on
  a decimal edge (0.6) opens its bin; `linspace` rounds some edges up by one ulp;
- the table is rebuilt from scratch by a no-grad pass over the whole training set, `num_updates`
  times per epoch (default once, at the end of each epoch); before the first rebuild the penalty
  is off (their `np.sum(empprob_ref) > 0` check);
- d = "KL" (their default): `KLDivLoss(reduction="batchmean")` on the flattened (B·C,) vectors,
  i.e. L_PosCal = 1/(B·C) Σ_i Σ_c q̂_ic (log q̂_ic − log p̂_ic), with 0·log 0 = 0;
  d = "MSE": 1/(B·C) Σ_i Σ_c (p̂_ic − q̂_ic)²;
- λ defaults to 1 (`--calloss_lambda`); the caller multiplies.

Deviations (documented in docs/calibration.md):
- the penalty takes logits and uses log_softmax instead of log(softmax(·)) (same value, no -inf);
- bins that were empty in the last training pass are NaN in the table and contribute nothing.
  For "kl" this is exactly the released behaviour (their q = 0 and 0·log(0/p) = 0); for "mse" the
  released code pulls such entries toward 0, here they are skipped. The denominator stays B·C.
- the released code collects the table with the model in train mode (dropout on); which mode to
  use is the caller's choice (`PosCalStats.update` just takes the predictions).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

KINDS = ("kl", "mse")


def confidence_bins(probs: Tensor, n_bins: int) -> Tensor:
    """Equal-width bin index of each probability: edges[b] <= p < edges[b+1], 1.0 in the last bin.

    probs: (..., C) in [0, 1] -> LongTensor (..., C) in [0, n_bins)."""
    edges = torch.arange(n_bins + 1, dtype=torch.float64, device=probs.device) / n_bins  # (n_bins+1,) k / B
    idx = torch.bucketize(probs.detach().double(), edges, right=True) - 1  # (..., C)
    return idx.clamp_(0, n_bins - 1)


def poscal_penalty(logits: Tensor, table: Tensor, kind: str = "kl") -> Tensor:
    """L_PosCal for one batch (without λ).

    logits: (B, C) classifier logits; gradients flow through them.
    table: (n_bins, C) empirical frequencies q[b, c] from `PosCalStats.table()`; NaN = empty bin.
    kind: "kl" (released default) or "mse".
    Returns a 0-d tensor; 0 (with a zero gradient) while the table is all NaN.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown PosCal distance {kind!r}; expected one of {', '.join(KINDS)}")
    if logits.dim() != 2 or table.dim() != 2 or table.shape[1] != logits.shape[1]:
        raise ValueError(f"logits (B, C) and table (n_bins, C) disagree: {tuple(logits.shape)} vs {tuple(table.shape)}")
    b, c = logits.shape
    log_p = F.log_softmax(logits, dim=-1)  # (B, C)
    p = log_p.exp()  # (B, C)
    bins = confidence_bins(p, table.shape[0])  # (B, C)
    table = table.to(device=logits.device, dtype=p.dtype)  # (n_bins, C)
    q = table[bins, torch.arange(c, device=logits.device)]  # (B, C) q̂_ic = table[bin(p_ic), c]
    valid = ~torch.isnan(q)  # (B, C)
    q = torch.where(valid, q, torch.zeros_like(q))  # (B, C)
    if kind == "kl":
        terms = torch.special.xlogy(q, q) - q * log_p  # (B, C) q (log q - log p), 0 where q = 0
    else:
        terms = torch.where(valid, (p - q) ** 2, torch.zeros_like(p))  # (B, C)
    return terms.sum() / (b * c)


class PosCalStats:
    """Accumulates the per class × bin statistics of one pass over the training predictions.

    Usage (once per refresh): `stats = PosCalStats(C)`; `stats.update(probs, labels)` for every
    training batch (no grad); `table = stats.table()`; then `poscal_penalty(logits, table)` in
    the following training steps.
    """

    def __init__(self, num_classes: int, n_bins: int = 20):
        self.num_classes = num_classes
        self.n_bins = n_bins
        self.counts = torch.zeros(n_bins, num_classes, dtype=torch.float64)  # predictions per bin
        self.hits = torch.zeros(n_bins, num_classes, dtype=torch.float64)  # ... whose label is c
        self.conf_sum = torch.zeros(n_bins, num_classes, dtype=torch.float64)  # sum of p in the bin

    def update(self, probs: Tensor, labels: Tensor) -> None:
        """probs: (B, C) predicted probabilities; labels: (B,) int class ids."""
        probs = probs.detach().to("cpu", torch.float64)  # (B, C)
        labels = labels.detach().to("cpu", torch.long)  # (B,)
        if probs.dim() != 2 or probs.shape[1] != self.num_classes or labels.shape != probs.shape[:1]:
            raise ValueError(
                f"expected probs (B, {self.num_classes}) and labels (B,), got {tuple(probs.shape)}, {tuple(labels.shape)}"
            )
        bins = confidence_bins(probs, self.n_bins)  # (B, C)
        onehot = F.one_hot(labels, self.num_classes).double()  # (B, C)
        cls = torch.arange(self.num_classes).expand_as(bins)  # (B, C)
        flat = (bins * self.num_classes + cls).reshape(-1)  # (B*C,) index into (n_bins*C,)
        size = self.n_bins * self.num_classes
        self.counts += torch.bincount(flat, minlength=size).double().view(self.n_bins, -1)
        self.hits += torch.bincount(flat, weights=onehot.reshape(-1), minlength=size).view(self.n_bins, -1)
        self.conf_sum += torch.bincount(flat, weights=probs.reshape(-1), minlength=size).view(self.n_bins, -1)

    def table(self) -> Tensor:
        """(n_bins, C) empirical frequency hits / counts; NaN where a bin saw no prediction."""
        empty = torch.full_like(self.counts, float("nan"))
        return torch.where(self.counts > 0, self.hits / self.counts.clamp(min=1), empty)

    def ece(self) -> float:
        """Class-wise ECE (He et al. eq. (15)) of the accumulated predictions.

        The released PosCal code logs the same sum without the 1/|Y| factor (`train_ece`)."""
        n = self.counts[:, 0].sum()
        if n == 0:
            return float("nan")
        conf = self.conf_sum / self.counts.clamp(min=1)  # (n_bins, C)
        acc = self.hits / self.counts.clamp(min=1)  # (n_bins, C)
        return float((self.counts * (conf - acc).abs()).sum() / n / self.num_classes)
