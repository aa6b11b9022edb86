"""DNCE (losses/dnce.py) against a hand computation on fixed numbers, against the generic NCE
formula at α = 1, its exact gradient, and its population minimiser (p_θ = p_d)."""

from __future__ import annotations

import math

import pytest
import torch

from textebm.losses.dnce import (
    dnce_loss,
    interpolated_log_density,
    mixed_noise_count,
    noise_nll,
    trf_log_density,
)

LOG_P = [-2.0, -3.0, -1.0, -4.0, -0.5]
LOG_Q = [-2.5, -2.0, -1.5, -3.0, -1.0]
IS_DATA = [True, True, True, False, False]


def _hand(log_p, log_q, is_data, alpha, nu):
    """−log P(side | x) summed, / number of data-side samples, in plain floats."""
    total, n_data = 0.0, 0
    for lp, lq, d in zip(log_p, log_q, is_data):
        r = alpha * math.exp(lp) + (1 - alpha) * math.exp(lq)
        p_data = r / (r + nu * math.exp(lq))
        total += -math.log(p_data) if d else -math.log(1 - p_data)
        n_data += d
    return total / n_data


def test_dnce_matches_a_hand_computation():
    out = dnce_loss(torch.tensor(LOG_P, dtype=torch.float64), torch.tensor(LOG_Q, dtype=torch.float64),
                    torch.tensor(IS_DATA), alpha=0.6, nu=2 / 3)
    assert out.loss.item() == pytest.approx(_hand(LOG_P, LOG_Q, IS_DATA, 0.6, 2 / 3), rel=1e-12)
    # the interpolated log-density itself
    torch.testing.assert_close(interpolated_log_density(torch.tensor([-2.0]), torch.tensor([-2.5]), 0.6),
                               torch.tensor([math.log(0.6 * math.exp(-2.0) + 0.4 * math.exp(-2.5))]))


def test_alpha_one_with_nu_the_noise_ratio_is_generic_nce():
    data_p, data_q = [-1.0, -2.0], [-1.5, -1.8]
    noise_p = [-3.0, -0.7, -2.2, -1.1, -4.0, -2.9]
    noise_q = [-2.0, -1.2, -2.5, -0.9, -3.3, -2.0]
    nu = len(noise_p) / len(data_p)  # 3
    # Gutmann & Hyvärinen: −mean_data log p/(p + νq) − ν mean_noise log νq/(p + νq)
    want = (-sum(math.log(math.exp(p) / (math.exp(p) + nu * math.exp(q))) for p, q in zip(data_p, data_q)) / 2
            - nu * sum(math.log(nu * math.exp(q) / (math.exp(p) + nu * math.exp(q)))
                       for p, q in zip(noise_p, noise_q)) / 6)
    out = dnce_loss(torch.tensor(data_p + noise_p, dtype=torch.float64),
                    torch.tensor(data_q + noise_q, dtype=torch.float64),
                    torch.tensor([True] * 2 + [False] * 6), alpha=1.0, nu=nu)
    assert out.loss.item() == pytest.approx(want, rel=1e-12)


def test_gradient_is_exact_and_the_noise_gets_none():
    log_p = torch.tensor(LOG_P, dtype=torch.float64, requires_grad=True)
    log_q = torch.tensor(LOG_Q, dtype=torch.float64, requires_grad=True)
    alpha, nu = 0.5, 2 / 3
    dnce_loss(log_p, log_q, torch.tensor(IS_DATA), alpha, nu).loss.backward()
    assert log_q.grad is None  # q_φ learns from its own likelihood only
    want = []
    for lp, lq, d in zip(LOG_P, LOG_Q, IS_DATA):
        r = alpha * math.exp(lp) + (1 - alpha) * math.exp(lq)
        z = math.log(r) - lq - math.log(nu)
        s = 1 / (1 + math.exp(-z))  # P(data side | x)
        share = alpha * math.exp(lp) / r  # d log r / d log p
        want.append((-(1 - s) if d else s) * share / 3)  # 3 data-side samples
    torch.testing.assert_close(log_p.grad, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0)


def test_population_minimiser_is_the_data_distribution():
    """Over a 4-point space, minimising the expected DNCE loss over a free log p gives p = p_d
    (not the interpolation p_int), for α < 1."""
    p_d = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    alpha, nu = 0.5, 2.0
    p_int = alpha * p_d + (1 - alpha) * q
    log_p = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_p], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14)
    one_data, one_noise = torch.tensor([True]), torch.tensor([False])

    def closure():
        opt.zero_grad()
        # the expected loss: each point's DNCE loss as a data-side sample, weighted by p_int, and as
        # a noise sample, weighted by ν q (one sample per call: the "data" reduction divides by 1)
        loss = sum(p_int[i] * dnce_loss(log_p[i:i + 1], q.log()[i:i + 1], one_data, alpha, nu).loss
                   + nu * q[i] * dnce_loss(log_p[i:i + 1], q.log()[i:i + 1], one_noise, alpha, nu).loss
                   for i in range(4))
        loss.backward()
        return loss

    opt.step(closure)
    torch.testing.assert_close(log_p.detach().exp(), p_d, rtol=1e-4, atol=0)  # p_int would be 0.1 at the last point


def test_trf_log_density_noise_nll_and_counts():
    zeta = torch.tensor([0.0, 1.0, 2.5, 4.0])
    log_pi = torch.tensor([float("-inf"), math.log(0.2), math.log(0.5), math.log(0.3)])
    got = trf_log_density(torch.tensor([1.0, -2.0]), torch.tensor([2, 3]), zeta, log_pi)
    torch.testing.assert_close(got, torch.tensor([1.0 - 2.5 + math.log(0.5), -2.0 - 4.0 + math.log(0.3)]))
    with pytest.raises(ValueError, match="lengths must lie in"):
        trf_log_density(torch.tensor([1.0]), torch.tensor([4]), zeta, log_pi)
    assert noise_nll(torch.tensor([-6.0, -4.0]), 5).item() == pytest.approx(2.0)
    assert mixed_noise_count(10, 1.0) == 0 and mixed_noise_count(10, 0.5) == 10 and mixed_noise_count(12, 0.75) == 4
    with pytest.raises(ValueError, match="alpha"):
        mixed_noise_count(10, 0.0)
    with pytest.raises(ValueError, match="nu"):
        dnce_loss(torch.zeros(2), torch.zeros(2), torch.tensor([True, False]), 0.5, 0.0)
