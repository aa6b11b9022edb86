"""joint_loss (He et al. 2021, eq. 8: L_CE + L_NCE, optionally + λ L_PosCal) against a hand
computation on a tiny deterministic fake model."""

import math

import pytest
import torch
from torch import nn

from textebm.classify.data import ClassifyBatch
from textebm.classify.train import joint_loss

W = [0.3, -0.2, 0.1]  # per-class slope of the logits
BIAS = [0.05, 0.0, -0.1]
V, U = 0.25, -0.4  # energy = V * feat + U
NAN = float("nan")
# PosCal table (n_bins = 5, C = 3): a 0 (0 log 0 = 0) and NaNs (empty bins, skipped)
TABLE = [[0.0, 0.1, NAN],
         [0.2, 0.3, 0.0],
         [0.5, NAN, 0.4],
         [0.6, 0.7, 0.0],
         [0.9, 0.8, 0.95]]


class FakeModel(nn.Module):
    """logits_c = W_c · feat + BIAS_c, energy = V · feat + U, feat = mean of the real token ids."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(W, dtype=torch.float64))
        self.b = nn.Parameter(torch.tensor(BIAS, dtype=torch.float64))
        self.v = nn.Parameter(torch.tensor(V, dtype=torch.float64))
        self.u = nn.Parameter(torch.tensor(U, dtype=torch.float64))
        self.register_buffer("poscal_table", torch.tensor(TABLE, dtype=torch.float64))

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        m = attention_mask.to(torch.float64)  # (B, T)
        feat = (input_ids.to(torch.float64) * m).sum(-1) / m.sum(-1)  # (B,)
        logits = feat[:, None] * self.w + self.b  # (B, C)
        energy = self.v * feat + self.u  # (B,)
        return logits, energy


DATA = [[5, 9, 2], [1, 3], [8, 7, 6, 4]]
LABELS = [0, 2, 1]
NOISE = {1: [[9, 5, 2], [3, 1, 1, 1, 2], [4, 4]],  # K noise sequences per data example, example-major
         2: [[9, 5, 2], [2, 9], [3, 1], [1, 1, 3, 7, 7], [6, 8, 4, 7], [12, 1]]}


def pad(seqs):
    t = max(len(s) for s in seqs)
    return {"input_ids": torch.tensor([s + [0] * (t - len(s)) for s in seqs]),
            "attention_mask": torch.tensor([[1] * len(s) + [0] * (t - len(s)) for s in seqs]),
            "token_type_ids": torch.zeros(len(seqs), t, dtype=torch.long)}


def make_batch(k):
    return ClassifyBatch(data=pad(DATA), labels=torch.tensor(LABELS), index=torch.arange(len(DATA)),
                         noise=pad(NOISE[k]) if k else None)


def feat(seq):
    return sum(seq) / len(seq)


def logits_of(seq):
    return [w * feat(seq) + b for w, b in zip(W, BIAS)]


def energy_of(seq):
    return V * feat(seq) + U


def ce_by_hand():
    total = 0.0
    for seq, y in zip(DATA, LABELS):
        z = logits_of(seq)
        total += -(z[y] - math.log(sum(math.exp(v) for v in z)))
    return total / len(DATA)


def nce_by_hand(k):
    """Eq. (7): mean_x+ log(1 + K exp(Ê)) + K mean_x- log(1 + exp(-Ê)/K), softplus as log1p(exp)."""
    pos = [math.log1p(math.exp(energy_of(s) + math.log(k))) for s in DATA]
    neg = [math.log1p(math.exp(-energy_of(s) - math.log(k))) for s in NOISE[k]]
    assert len(neg) == k * len(pos)
    return sum(pos) / len(pos) + k * sum(neg) / len(neg)


def poscal_by_hand():
    """KL form: 1/(B·C) Σ_i Σ_c q̂_ic (log q̂_ic − log p̂_ic), q̂_ic = TABLE[bin(p̂_ic)][c],
    bin(p) = floor(5 p) (1.0 in the last bin), 0 log 0 = 0, NaN entries skipped."""
    n_bins, c = len(TABLE), len(W)
    total, hits = 0.0, {"zero": 0, "nan": 0}
    for seq in DATA:
        z = logits_of(seq)
        norm = sum(math.exp(v) for v in z)
        for j in range(c):
            p = math.exp(z[j]) / norm
            assert min(abs(p * n_bins - round(p * n_bins)), 1.0) > 1e-6  # no probability on a bin edge
            q = TABLE[min(int(p * n_bins), n_bins - 1)][j]
            if math.isnan(q):
                hits["nan"] += 1
            elif q == 0.0:
                hits["zero"] += 1
            else:
                total += q * (math.log(q) - math.log(p))
    return total / (len(DATA) * c), hits


def test_fake_model_matches_its_hand_version():
    logits, energy = FakeModel()(**pad(DATA))
    torch.testing.assert_close(logits, torch.tensor([logits_of(s) for s in DATA], dtype=torch.float64))
    torch.testing.assert_close(energy, torch.tensor([energy_of(s) for s in DATA], dtype=torch.float64))
    _, hits = poscal_by_hand()
    assert hits["nan"] > 0 and hits["zero"] > 0  # the table exercises both special cases


@pytest.mark.parametrize("poscal", [False, True])
@pytest.mark.parametrize("k", [1, 2])
def test_joint_loss_ce_nce_poscal(k, poscal):
    lam = 0.7
    model = FakeModel()  # carries a PosCal table either way: only a λ > 0 turns the penalty on
    loss, logs = joint_loss(model, make_batch(k), noise_ratio=k, poscal_lambda=lam if poscal else 0.0)
    ce, nce = ce_by_hand(), nce_by_hand(k)
    pen, _ = poscal_by_hand()
    expected = ce + nce + (lam * pen if poscal else 0.0)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert logs["ce"] == pytest.approx(ce, rel=1e-12)
    assert logs["nce"] == pytest.approx(nce, rel=1e-12)
    if poscal:
        assert logs["poscal"] == pytest.approx(pen, rel=1e-12)
    else:
        assert "poscal" not in logs
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("poscal", [False, True])
def test_joint_loss_without_noise_is_ce_plus_poscal(poscal):
    loss, logs = joint_loss(FakeModel(), make_batch(0), noise_ratio=1, poscal_lambda=2.0 if poscal else 0.0)
    pen, _ = poscal_by_hand()
    assert loss.item() == pytest.approx(ce_by_hand() + (2.0 * pen if poscal else 0.0), rel=1e-12)
    assert "nce" not in logs


@pytest.mark.parametrize("w", [0.25, 3.0])
def test_the_nce_term_is_weighted(w):
    loss, logs = joint_loss(FakeModel(), make_batch(2), noise_ratio=2, nce_weight=w)
    assert loss.item() == pytest.approx(ce_by_hand() + w * nce_by_hand(2), rel=1e-12)
    assert logs["nce"] == pytest.approx(nce_by_hand(2), rel=1e-12)  # the unweighted term is logged


def test_nce_weight_warm_up():
    from textebm.classify.train import nce_weight_at

    assert [nce_weight_at(s, 10, 2.0, 0.0) for s in range(3)] == [2.0, 2.0, 2.0]
    assert [nce_weight_at(s, 10, 2.0, 0.4) for s in range(6)] == [0.5, 1.0, 1.5, 2.0, 2.0, 2.0]


def test_energy_head_lr_and_nce_warm_up_from_the_cli(classify_fixture, tmp_path):
    import json

    from textebm.cli import main

    d = classify_fixture
    assert main(["classify", "train", "--data", str(d / "data"), "--encoder", str(d / "encoder"),
                 "--out", str(tmp_path / "r"), "--energy", "scalar", "--noise", str(d / "noise.jsonl"),
                 "--lr", "1e-3", "--energy-lr", "4e-3", "--nce-warmup", "0.5", "--max-steps", "6",
                 "--log-every", "1", "--warmup", "0", "--no-progress", "--precision", "fp32", "--eval-split", ""]) == 0
    hist = json.loads((tmp_path / "r" / "metrics.json").read_text())["train"]["history"]
    assert all(h["lr_energy_head"] == pytest.approx(4 * h["lr"]) for h in hist)
    assert [h["nce_weight"] for h in hist] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0, 1.0, 1.0])
    assert main(["classify", "train", "--data", str(d / "data"), "--encoder", str(d / "encoder"),
                 "--out", str(tmp_path / "r2"), "--energy", "hidden", "--noise", str(d / "noise.jsonl"),
                 "--energy-lr", "4e-3"]) == 2
