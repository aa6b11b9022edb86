"""SGLD (langevin.py) on a known energy: long chains on a correlated 2-D Gaussian recover its mean
and covariance; JEM's form with σ² = 2α equals the Langevin step; the replay buffer's draws."""

from __future__ import annotations

import math

import pytest
import torch

from textebm.langevin import ReplayBuffer, sgld

MU = torch.tensor([1.0, -2.0], dtype=torch.float64)
SIGMA = torch.tensor([[1.0, 0.6], [0.6, 0.5]], dtype=torch.float64)  # eigenvalues 1.4 and 0.1
PREC = torch.linalg.inv(SIGMA)


def gaussian_energy(x):
    """E(x) = ½ (x − μ)ᵀ Σ⁻¹ (x − μ), x (N, 2) -> (N,)."""
    d = x - MU
    return 0.5 * ((d @ PREC) * d).sum(-1)


def test_long_chains_recover_the_gaussian_mean_and_covariance():
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(4000, 2, generator=g, dtype=torch.float64) * 2 - 1  # uniform in [−1, 1]², far from μ
    x = sgld(gaussian_energy, x0, steps=2000, step_size=0.01, generator=g)
    mean = x.mean(0)
    cov = torch.cov(x.T)
    # sampling error: mean ~ 0.016, covariance entries ~ 0.02 (4000 chains); the step's own bias
    # inflates the variance along Σ's short axis by ~ αλ/4 = 2.5 % of 0.1
    torch.testing.assert_close(mean, MU, rtol=0, atol=0.06)
    torch.testing.assert_close(cov, SIGMA, rtol=0, atol=0.06)
    # and the chains did move: the start was centred at 0 with variance 1/3
    assert (x0.mean(0) - MU).abs().max() > 1.5


def test_jem_form_with_sigma_squared_two_alpha_is_the_langevin_step():
    x0 = torch.randn(50, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a = sgld(gaussian_energy, x0, 30, 0.02, generator=torch.Generator().manual_seed(2))
    b = sgld(gaussian_energy, x0, 30, 0.01, noise_std=math.sqrt(0.02), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    c = sgld(gaussian_energy, x0, 30, 0.02, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, c)  # same seed, same chain


def test_sampling_gives_the_energy_no_gradient_and_clamps():
    w = torch.nn.Parameter(torch.tensor(2.0))
    x = sgld(lambda x: w * (x ** 2).sum(-1), torch.ones(8, 3), 5, 0.1, noise_std=0.5,
             generator=torch.Generator().manual_seed(0), clamp=(-0.2, 0.3))
    assert w.grad is None and not x.requires_grad
    assert x.min() >= -0.2 and x.max() <= 0.3
    with pytest.raises(ValueError, match="step_size"):
        sgld(gaussian_energy, torch.zeros(1, 2), 1, 0.0)


def test_replay_buffer_draws_five_percent_fresh_noise_and_stores_chain_ends():
    g = torch.Generator().manual_seed(0)
    buf = ReplayBuffer(100, (3,), low=-1.0, high=1.0, reinit=0.05, generator=g)
    assert len(buf) == 100 and buf.samples.min() >= -1 and buf.samples.max() <= 1
    buf.samples.fill_(5.0)  # stored samples are all 5: a fresh draw is anything in [−1, 1]
    n = 20000
    x0, idx, fresh = buf.draw(n, generator=g)
    share = fresh.double().mean().item()
    assert abs(share - 0.05) < 4 * math.sqrt(0.05 * 0.95 / n)
    assert torch.equal(x0[~fresh], buf.samples[idx[~fresh]])
    assert x0[fresh].abs().max() <= 1.0
    buf.update(idx[:3], torch.zeros(3, 3))
    assert (buf.samples[idx[:3]] == 0).all()
