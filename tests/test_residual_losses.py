"""Losses of paper c (Bakhtin et al. 2019) against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from textebm.losses.residual import pick_negatives, precision_at_1, ranking_loss, residual_bce


def sp(x: float) -> float:
    return math.log1p(math.exp(x))


E_POS = torch.tensor([-1.0, 0.5], dtype=torch.float64)
E_NEG = torch.tensor([[2.0, -0.3, 1.0], [0.7, 3.0, 0.1]], dtype=torch.float64)


def test_most_offending_negative_is_the_lowest_energy():
    assert pick_negatives(E_NEG, "worst").squeeze(1).tolist() == [-0.3, 0.1]


def test_bce_with_the_worst_negative_by_hand():
    # −log σ(−E+) − log σ(E−) = softplus(E+) + softplus(−E−), averaged over the 2 rows
    expected = ((sp(-1.0) + sp(0.3)) + (sp(0.5) + sp(-0.1))) / 2
    out = residual_bce(E_POS, E_NEG, "worst")
    assert out.loss.item() == pytest.approx(expected, rel=1e-9)
    # real when E < 0: positive 1 right, positive 2 wrong; negatives -0.3 wrong, 0.1 right
    assert out.acc_data.item() == 0.5 and out.acc_noise.item() == 0.5


def test_bce_with_all_negatives_averages_them_and_random_picks_one():
    expected = (sp(-1.0) + sp(0.5)) / 2 + sum(sp(-e) for e in E_NEG.flatten().tolist()) / 6
    assert residual_bce(E_POS, E_NEG, "all").loss.item() == pytest.approx(expected, rel=1e-9)
    g = torch.Generator().manual_seed(0)
    picked = pick_negatives(E_NEG, "random", g).squeeze(1)
    assert all(p in row for p, row in zip(picked.tolist(), E_NEG.tolist()))
    g = torch.Generator().manual_seed(0)
    loss = residual_bce(E_POS, E_NEG, "random", g).loss.item()
    assert loss == pytest.approx(((sp(-1.0) + sp(-picked[0].item())) + (sp(0.5) + sp(-picked[1].item()))) / 2)


def test_bce_gradient_flows_only_through_the_chosen_negative():
    e = E_NEG.clone().requires_grad_(True)
    residual_bce(E_POS, e, "worst").loss.backward()
    assert (e.grad != 0).tolist() == [[False, True, False], [False, False, True]]
    assert torch.autograd.gradcheck(lambda p, n: residual_bce(p, n, "all").loss,
                                    (E_POS.clone().requires_grad_(True), E_NEG.clone().requires_grad_(True)))


def test_ranking_loss_by_hand_with_both_margins():
    # worst negatives -0.3 and 0.1: max(0, m + E+ − E−)
    for m in (1.0, 0.1):
        expected = (max(0, m - 1.0 + 0.3) + max(0, m + 0.5 - 0.1)) / 2
        assert ranking_loss(E_POS, E_NEG, m).item() == pytest.approx(expected)
    with pytest.raises(ValueError):
        ranking_loss(E_POS, E_NEG, -1.0)


def test_precision_at_1():
    assert precision_at_1(E_POS, E_NEG).item() == 0.5  # row 1: −1 < −0.3; row 2: 0.5 > 0.1
