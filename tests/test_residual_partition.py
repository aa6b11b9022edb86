"""T_n and U_n of Deng et al. (2020), Theorem 2: against a 60-digit evaluation, and their biases
over many repetitions on a world small enough to know log Z exactly."""

import math

import mpmath
import numpy as np
import pytest

from textebm.residual.partition import log_partition_estimates

mpmath.mp.dps = 60


def _reference(energies):
    """T_n and U_n term by term in 60-digit arithmetic, leave-one-out sums formed directly."""
    e = [mpmath.mpf(float(x)) for x in energies]
    n = len(e)
    t = mpmath.log(mpmath.fsum(mpmath.exp(-x) for x in e) / n)
    loo = [mpmath.log(mpmath.fsum(mpmath.exp(-x) for j, x in enumerate(e) if j != i) / (n - 1)) for i in range(n)]
    return float(t), float((2 * n - 1) * t - 2 * (n - 1) * mpmath.fsum(loo) / n)


@pytest.mark.parametrize("energies", [
    [0.0, 1.0, 2.0],
    [3.5, 3.5],
    list(np.random.default_rng(0).normal(size=50) * 4),
    [-800.0, 0.0, 0.0, 0.0],  # one dominant weight: exp(800) overflows a plain sum
    [900.0, 901.0, 905.0, 950.0],  # every weight underflows a plain sum
    [-30.0] + [10.0] * 199,  # the dominant one is a rounding error of none of the leave-one-out sums
])
def test_against_high_precision(energies):
    t, u = log_partition_estimates(energies)
    rt, ru = _reference(energies)
    assert t == pytest.approx(rt, rel=1e-12, abs=1e-12)
    assert u == pytest.approx(ru, rel=1e-10, abs=1e-9)


def test_batches_equal_rows():
    e = np.random.default_rng(1).normal(size=(5, 7))
    t, u = log_partition_estimates(e)
    for i in range(5):
        assert (t[i], u[i]) == pytest.approx(log_partition_estimates(e[i]), rel=1e-14)


@pytest.mark.parametrize("bad", [[1.0], [], [0.0, float("nan")], [0.0, float("inf")]])
def test_bad_input(bad):
    with pytest.raises(ValueError):
        log_partition_estimates(bad)


def test_biases_have_the_papers_order_and_opposite_signs():
    """A base LM over 4 outcomes with known energies: Z = Σ p exp(-E) exactly. Over 40,000
    repetitions, E[T_n] < log Z at every n, and n (E[T_n] - log Z) → -μ₂/(2μ²),
    n (E[U_n] - log Z) → +μ₂/(2μ²) (appendix A.2)."""
    p = np.array([0.4, 0.3, 0.2, 0.1])
    energy = np.array([0.0, 1.0, 2.0, 3.0])
    w = np.exp(-energy)
    z = float(p @ w)
    mu2 = float(p @ (w - z) ** 2)
    limit = mu2 / (2 * z * z)
    rng = np.random.default_rng(0)
    reps = 40_000
    for n in (2, 4, 8, 16, 64):
        draws = energy[rng.choice(4, size=(reps, n), p=p)]
        t, u = log_partition_estimates(draws)
        se = t.std() / math.sqrt(reps)
        assert t.mean() < math.log(z) - 2 * se, n
        if n == 64:
            assert n * (t.mean() - math.log(z)) == pytest.approx(-limit, abs=0.1 * limit + n * 3 * se)
            se_u = u.std() / math.sqrt(reps)
            assert n * (u.mean() - math.log(z)) == pytest.approx(limit, abs=0.1 * limit + n * 3 * se_u)
            assert u.mean() > math.log(z)


def test_resampling_frequencies_match_the_weights_chi_square():
    """Algorithm 1's resampling step: over 5,000 seeded draws the chosen candidates follow
    exp(−E_i) / Σ exp(−E_j) (chi-square test at the 0.1 % level), ESS by hand."""
    import torch
    from scipy.stats import chisquare

    from textebm.residual.resample import resample

    e = np.array([0.0, 0.5, 2.0, 2.0, 5.0])
    w = np.exp(-e) / np.exp(-e).sum()
    g = torch.Generator().manual_seed(0)
    counts = np.bincount([resample(e, g).index for _ in range(5_000)], minlength=5)
    assert chisquare(counts, 5_000 * w).pvalue > 1e-3
    r = resample(e, torch.Generator().manual_seed(1))
    np.testing.assert_allclose(r.weights, w, rtol=1e-14)
    assert r.ess == pytest.approx(1 / np.sum(w ** 2))
    assert resample([3.0, 3.0, 3.0], g).ess == pytest.approx(3.0)
    assert resample([-900.0, 0.0, 0.0], g).index == 0  # a dominant weight, no overflow
    with pytest.raises(ValueError):
        resample([0.0, float("nan")], g)
