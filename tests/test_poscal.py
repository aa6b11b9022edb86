"""PosCal penalty and statistics against a hand example and the released code's computation."""

import math

import numpy as np
import pytest
import torch

from textebm.calibration.metrics import ece_classwise
from textebm.losses.poscal import PosCalStats, confidence_bins, poscal_penalty

# Hand example: C = 2, 4 bins with edges 0, .25, .5, .75, 1.
TRAIN_PROBS = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]], dtype=torch.float64)
TRAIN_LABELS = torch.tensor([0, 1, 0, 1])
# class 0: p = .9 .8 -> bin 3 (labels 0, 1: 1 hit of 2 -> .5); .6 -> bin 2 (hit -> 1); .3 -> bin 1 (miss -> 0)
# class 1: p = .1 .2 -> bin 0 (labels 0, 1: 1 hit of 2 -> .5); .4 -> bin 1 (miss -> 0); .7 -> bin 2 (hit -> 1)
NAN = float("nan")
HAND_TABLE = torch.tensor([[NAN, 0.5], [0.0, 0.0], [1.0, 1.0], [0.5, NAN]], dtype=torch.float64)


def hand_stats():
    stats = PosCalStats(num_classes=2, n_bins=4)
    stats.update(TRAIN_PROBS[:2], TRAIN_LABELS[:2])  # two batches, like a pass over the data
    stats.update(TRAIN_PROBS[2:], TRAIN_LABELS[2:])
    return stats


def test_table_by_hand():
    stats = hand_stats()
    torch.testing.assert_close(stats.table(), HAND_TABLE, equal_nan=True)
    torch.testing.assert_close(stats.counts, torch.tensor([[0, 2], [1, 1], [1, 1], [2, 0]], dtype=torch.float64))


def test_penalty_by_hand():
    table = hand_stats().table()
    logits = torch.tensor([[0.8, 0.2]], dtype=torch.float64).log()
    # p0 = .8 -> bin 3 -> q = .5; p1 = .2 -> bin 0 -> q = .5
    # KL = 1/(B·C) [.5 log(.5/.8) + .5 log(.5/.2)] = .25 log(1.5625)
    assert poscal_penalty(logits, table, "kl").item() == pytest.approx(0.25 * math.log(1.5625))
    # MSE = 1/2 [(.8 - .5)^2 + (.2 - .5)^2] = .09
    assert poscal_penalty(logits, table, "mse").item() == pytest.approx(0.09)
    logits = torch.tensor([[0.55, 0.45]], dtype=torch.float64).log()
    # p0 = .55 -> bin 2 -> q = 1; p1 = .45 -> bin 1 -> q = 0
    # KL = 1/2 [1 · log(1/.55) + 0] ; MSE = 1/2 [.45^2 + .45^2]
    assert poscal_penalty(logits, table, "kl").item() == pytest.approx(0.5 * math.log(1 / 0.55))
    assert poscal_penalty(logits, table, "mse").item() == pytest.approx(0.2025)
    # both entries land in bins that were empty -> no target -> 0
    logits = torch.tensor([[0.1, 0.9]], dtype=torch.float64).log()
    assert poscal_penalty(logits, table, "kl").item() == 0.0
    assert poscal_penalty(logits, table, "mse").item() == 0.0


def test_penalty_off_before_first_table():
    stats = PosCalStats(num_classes=3)
    logits = torch.randn(4, 3, requires_grad=True)
    out = poscal_penalty(logits, stats.table())
    assert out.item() == 0.0
    out.backward()
    assert torch.all(logits.grad == 0)


def test_bins_edges_and_one():
    p = torch.tensor([[0.0, 0.05, 0.0499, 1.0, 0.95, 0.9999]], dtype=torch.float64)
    assert confidence_bins(p, 20).tolist() == [[0, 1, 0, 19, 19, 19]]


def released_poscal_kl(logits, labels, train_logits, train_labels, n_bins):
    """The released PosCal computation (classify_bert.py / modeling_bert.py), transcribed."""
    num_labels = logits.shape[1]
    bins = np.linspace(0, 1, n_bins + 1)
    freq_p_hats = np.zeros((n_bins, num_labels))
    freq_p_trues = np.zeros((n_bins, num_labels))
    p_hats = torch.softmax(train_logits, dim=1).numpy()
    p_binums = np.digitize(p_hats, bins) - 1
    p_trues = np.eye(num_labels)[train_labels.numpy()]
    for sample in np.dstack((p_binums, p_trues, p_hats)):
        for col_idx, subsample in enumerate(sample):
            row_idx = int(subsample[0])
            if row_idx >= n_bins:
                row_idx -= 1
            freq_p_hats[row_idx][col_idx] += 1
            freq_p_trues[row_idx][col_idx] += subsample[1]
    with np.errstate(invalid="ignore"):
        p_emps = freq_p_trues / freq_p_hats
    p_emps[np.isnan(p_emps)] = 0
    pred = torch.softmax(logits, dim=1)
    empprob = np.zeros(pred.shape)
    for sample, empmaps in enumerate(np.digitize(pred.detach().numpy(), bins) - 1):
        for clas, empprob_idx in enumerate(empmaps):
            empprob[sample][clas] = p_emps[min(empprob_idx, n_bins - 1)][clas]
    kl = torch.nn.KLDivLoss(reduction="batchmean")
    return kl(torch.log(pred).view(-1), torch.from_numpy(empprob).view(-1))


@pytest.mark.parametrize("num_classes", [2, 3])
def test_matches_released_code(num_classes):
    g = torch.Generator().manual_seed(num_classes)
    train_logits = torch.randn(300, num_classes, generator=g, dtype=torch.float64) * 2
    train_labels = torch.randint(0, num_classes, (300,), generator=g)
    logits = torch.randn(16, num_classes, generator=g, dtype=torch.float64) * 2
    labels = torch.randint(0, num_classes, (16,), generator=g)
    stats = PosCalStats(num_classes, n_bins=20)
    for i in range(0, 300, 64):
        stats.update(torch.softmax(train_logits[i : i + 64], -1), train_labels[i : i + 64])
    ours = poscal_penalty(logits, stats.table(), "kl")
    ref = released_poscal_kl(logits, labels, train_logits, train_labels, 20)
    torch.testing.assert_close(ours, ref.to(ours.dtype))


def test_gradcheck():
    table = hand_stats().table()
    torch.manual_seed(0)
    logits = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    for kind in ("kl", "mse"):
        assert torch.autograd.gradcheck(lambda z: poscal_penalty(z, table, kind), (logits,))


def test_stats_ece_equals_classwise_ece():
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(500, 4, generator=g) * 2, -1)
    labels = torch.randint(0, 4, (500,), generator=g)
    stats = PosCalStats(4, n_bins=20)
    stats.update(probs, labels)
    assert stats.ece() == pytest.approx(ece_classwise(probs, labels, 20), rel=1e-9)


def test_bad_inputs():
    with pytest.raises(ValueError):
        poscal_penalty(torch.zeros(2, 3), torch.zeros(20, 2))
    with pytest.raises(ValueError):
        poscal_penalty(torch.zeros(2, 2), torch.zeros(20, 2), kind="rmse")
    with pytest.raises(ValueError):
        PosCalStats(3).update(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long))
