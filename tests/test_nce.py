"""nce_loss against eq. (7) and eq. (6) of He et al. (2021), written literally."""

import math

import pytest
import torch

from textebm.losses.nce import nce_loss


def eq7_literal(e_pos, e_neg, k):
    """Eq. (7) term by term with exp / log in float64."""
    pos = [-math.log(1.0 / (1.0 + k * math.exp(e))) for e in e_pos]
    neg = [-math.log(k / (k + math.exp(-e))) for e in e_neg]
    return sum(pos) / len(pos) + k * sum(neg) / len(neg)


def eq6_literal(e_pos_hat, e_neg_hat, logpn_pos, logpn_neg, k):
    """Eq. (6) with E = Ê − log P_N and P̃ = exp(−E): P_N must cancel."""
    total_pos = 0.0
    for e_hat, lpn in zip(e_pos_hat, logpn_pos):
        pn = math.exp(lpn)
        p_tilde = math.exp(-(e_hat - lpn))
        total_pos += -math.log(p_tilde / (p_tilde + k * pn))
    total_neg = 0.0
    for e_hat, lpn in zip(e_neg_hat, logpn_neg):
        pn = math.exp(lpn)
        p_tilde = math.exp(-(e_hat - lpn))
        total_neg += -math.log(k * pn / (p_tilde + k * pn))
    return total_pos / len(e_pos_hat) + k * total_neg / len(e_neg_hat)


@pytest.mark.parametrize("k", [1, 8])
def test_matches_eq7_by_hand(k):
    torch.manual_seed(k)
    e_pos = torch.randn(5, dtype=torch.float64) * 2
    e_neg = torch.randn(5 * k, dtype=torch.float64) * 2
    out = nce_loss(e_pos, e_neg, k)
    expected = eq7_literal(e_pos.tolist(), e_neg.tolist(), k)
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)
    assert (out.pos + out.neg).item() == pytest.approx(expected, rel=1e-12)


def test_tiny_example_worked_on_paper():
    # K = 1, Ê(x+) = 0, Ê(x-) = 0: both terms are -log(1/2), loss = 2 log 2.
    out = nce_loss(torch.zeros(1), torch.zeros(1), 1)
    assert out.loss.item() == pytest.approx(2 * math.log(2.0))
    # K = 2, Ê(x+) = log 2 (so K exp(Ê) = 4): pos = log 5; Ê(x-) = -log 2 for both noise
    # samples (exp(-Ê) = 2): each -log(2 / 4) = log 2, neg = 2 * log 2.
    out = nce_loss(torch.tensor([math.log(2.0)]), torch.full((1, 2), -math.log(2.0)), 2)
    assert out.pos.item() == pytest.approx(math.log(5.0))
    assert out.neg.item() == pytest.approx(2 * math.log(2.0))


@pytest.mark.parametrize("k", [1, 8])
def test_log_pn_cancels_eq6_equals_eq7(k):
    torch.manual_seed(10 + k)
    e_pos = torch.randn(4, dtype=torch.float64)
    e_neg = torch.randn(4 * k, dtype=torch.float64)
    # arbitrary (even very small) noise log-probabilities
    logpn_pos = (torch.rand(4, dtype=torch.float64) * -60).tolist()
    logpn_neg = (torch.rand(4 * k, dtype=torch.float64) * -60).tolist()
    eq6 = eq6_literal(e_pos.tolist(), e_neg.tolist(), logpn_pos, logpn_neg, k)
    assert nce_loss(e_pos, e_neg, k).loss.item() == pytest.approx(eq6, rel=1e-9)


def test_neg_accepts_flat_and_2d():
    e_pos = torch.randn(3)
    e_neg = torch.randn(3, 8)
    a = nce_loss(e_pos, e_neg, 8)
    b = nce_loss(e_pos, e_neg.reshape(-1), 8)
    torch.testing.assert_close(a.loss, b.loss)


@pytest.mark.parametrize("k", [1, 8])
def test_gradcheck_float64(k):
    torch.manual_seed(k)
    e_pos = (torch.randn(3, dtype=torch.float64) * 3).requires_grad_()
    e_neg = (torch.randn(3 * k, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(lambda p, n: nce_loss(p, n, k).loss, (e_pos, e_neg))


def test_analytic_gradient():
    # d/dÊ+ of mean softplus(Ê + log K) = sigmoid(Ê + log K) / B
    k = 8
    e_pos = torch.tensor([0.3, -1.2], dtype=torch.float64, requires_grad=True)
    e_neg = torch.zeros(2 * k, dtype=torch.float64, requires_grad=True)
    nce_loss(e_pos, e_neg, k).loss.backward()
    torch.testing.assert_close(e_pos.grad, torch.sigmoid(e_pos.detach() + math.log(k)) / 2)
    # d/dÊ- of K * mean softplus(-Ê - log K) = -K sigmoid(-Ê - log K) / (B K)
    torch.testing.assert_close(e_neg.grad, -torch.sigmoid(torch.full((2 * k,), -math.log(k), dtype=torch.float64)) / 2)


@pytest.mark.parametrize("k", [1, 8])
def test_stable_for_huge_energies(k):
    e_pos = torch.tensor([1000.0, -1000.0], requires_grad=True)
    e_neg = torch.tensor([1000.0, -1000.0] * k, requires_grad=True)
    out = nce_loss(e_pos, e_neg, k)
    assert torch.isfinite(out.loss)
    # data with Ê = 1000 costs ≈ 1000 + log K; data with Ê = -1000 costs ≈ 0
    assert out.pos.item() == pytest.approx((1000.0 + math.log(k)) / 2, rel=1e-6)
    # noise with Ê = -1000 costs ≈ 1000 - log K; noise with Ê = 1000 costs ≈ 0
    assert out.neg.item() == pytest.approx(k * (1000.0 - math.log(k)) / 2, rel=1e-6)
    out.loss.backward()
    assert torch.isfinite(e_pos.grad).all() and torch.isfinite(e_neg.grad).all()


def test_accuracy_threshold_at_minus_log_k():
    k = 4
    t = -math.log(k)
    e_pos = torch.tensor([t - 0.1, t + 0.1])  # first classified as data, second not
    e_neg = torch.tensor([t + 0.1, t + 0.2, t - 0.1, t - 0.2, t + 1, t + 2, t + 3, t + 4])  # 6 of 8 as noise
    out = nce_loss(e_pos, e_neg, k)
    assert out.acc_data.item() == pytest.approx(0.5)
    assert out.acc_noise.item() == pytest.approx(6 / 8)
    assert out.accuracy.item() == pytest.approx(7 / 10)


def test_bad_shapes():
    with pytest.raises(ValueError):
        nce_loss(torch.zeros(2), torch.zeros(3), 2)
    with pytest.raises(ValueError):
        nce_loss(torch.zeros(2), torch.zeros(2, 3), 2)
    with pytest.raises(ValueError):
        nce_loss(torch.zeros(2), torch.zeros(2), 0)
