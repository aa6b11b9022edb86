"""The paired percentile bootstrap of perplexity differences (`textebm.bootstrap`): the resampled
perplexities against a loop, the interval against the exact bootstrap distribution of three windows
(every ordered resample enumerated) and against scipy.stats.bootstrap (paired), seeding, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from textebm.bootstrap import paired_perplexity_diffs, resample_indices, resampled_perplexities


def _ppl(nll, tokens, draw):
    return math.exp(sum(nll[i] for i in draw) / sum(tokens[i] for i in draw))


def test_resampled_perplexities_equal_a_loop_over_the_draws():
    rng = np.random.default_rng(0)
    nll = rng.uniform(5, 30, size=(3, 7))  # (M, W)
    tokens = rng.integers(1, 9, size=7).astype(float)  # (W,)
    idx = resample_indices(7, 50, seed=3)  # (50, W)
    got = resampled_perplexities(nll, tokens, idx)  # (50, M)
    want = np.array([[_ppl(nll[m], tokens, draw) for m in range(3)] for draw in idx])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_interval_of_three_windows_is_the_exact_bootstrap_distributions():
    """Three windows: each of the 27 ordered resamples has probability 1/27 > 2.5 %, so the exact
    bootstrap distribution's 2.5 % and 97.5 % quantiles are its smallest and largest values, and
    20,000 seeded resamples find exactly those (about 740 draws land on each)."""
    nll = np.array([[12.0, 20.0, 7.0], [10.0, 23.0, 9.5]])  # (M=2, W=3) summed NLL
    tokens = np.array([4.0, 6.0, 3.0])
    diffs = [_ppl(nll[0], tokens, d) - _ppl(nll[1], tokens, d) for d in itertools.product(range(3), repeat=3)]
    got = paired_perplexity_diffs(nll, tokens, [(0, 1)], n_boot=20000, seed=0)[0]
    assert got["diff"] == pytest.approx(_ppl(nll[0], tokens, [0, 1, 2]) - _ppl(nll[1], tokens, [0, 1, 2]), rel=1e-12)
    assert got["lo"] == pytest.approx(min(diffs), rel=1e-12) and got["hi"] == pytest.approx(max(diffs), rel=1e-12)
    assert min(diffs) < 0 < max(diffs) and got["excludes_zero"] is False
    assert got["p_below_zero"] == pytest.approx(np.mean(np.array(diffs) < 0), abs=0.015)


def test_the_interval_matches_scipys_paired_percentile_bootstrap():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    tokens = rng.integers(10, 20, size=60).astype(float)  # (W,)
    a = tokens * rng.normal(3.0, 0.4, size=60)  # (W,) summed NLL: per-token about 3 nats
    b = a + tokens * rng.normal(0.05, 0.1, size=60)  # paired: B a little worse on most windows

    def diff(x, y, t, axis=-1):
        return np.exp(x.sum(axis) / t.sum(axis)) - np.exp(y.sum(axis) / t.sum(axis))

    ref = stats.bootstrap((a, b, tokens), diff, paired=True, vectorized=True, n_resamples=20000,
                          method="percentile", confidence_level=0.95, random_state=7).confidence_interval
    got = paired_perplexity_diffs(np.stack([a, b]), tokens, [(0, 1)], n_boot=20000, seed=0)[0]
    width = ref.high - ref.low
    assert got["lo"] == pytest.approx(ref.low, abs=0.05 * width)
    assert got["hi"] == pytest.approx(ref.high, abs=0.05 * width)
    assert got["diff"] == pytest.approx(diff(a, b, tokens), rel=1e-12) and got["hi"] < 0 and got["excludes_zero"]


def test_a_seed_gives_the_same_numbers_twice_and_another_seed_others():
    rng = np.random.default_rng(2)
    nll, tokens = rng.uniform(5, 30, size=(3, 20)), np.full(20, 8.0)
    pairs = [(0, 1), (0, 2), (1, 2)]
    one = paired_perplexity_diffs(nll, tokens, pairs, n_boot=300, seed=5)
    assert paired_perplexity_diffs(nll, tokens, pairs, n_boot=300, seed=5) == one
    other = paired_perplexity_diffs(nll, tokens, pairs, n_boot=300, seed=6)
    assert [d["diff"] for d in other] == [d["diff"] for d in one] and [d["lo"] for d in other] != [d["lo"] for d in one]


def test_no_resamples_give_the_difference_alone():
    got = paired_perplexity_diffs([[4.0, 6.0], [5.0, 5.0]], [2.0, 2.0], [(0, 1)], n_boot=0)[0]
    assert got == {"diff": 0.0, "lo": None, "hi": None, "excludes_zero": None, "p_below_zero": None}


def test_one_window_gives_no_interval():
    """Every resample of one window is that window: a zero-width interval that "excludes 0" would
    claim a sure difference from one window; none is given (as without resamples)."""
    got = paired_perplexity_diffs([[4.0], [5.0]], [2.0], [(0, 1)], n_boot=100)[0]
    assert got["lo"] is None and got["excludes_zero"] is None and got["diff"] == pytest.approx(math.exp(2) - math.exp(2.5))
    from textebm.bootstrap import mean_interval

    assert mean_interval([-0.5], n_boot=100) is None


@pytest.mark.parametrize("nll, tokens, pairs, n_boot", [
    ([[1.0, 2.0]], [1.0], [(0, 0)], 10),  # tokens of another length
    ([[1.0, float("nan")]], [1.0, 1.0], [(0, 0)], 10),
    ([[1.0, 2.0]], [0.0, 0.0], [(0, 0)], 10),  # no tokens
    ([[1.0, 2.0]], [1.0, 1.0], [(0, 1)], 10),  # no row 1
    ([[1.0, 2.0]], [1.0, 1.0], [(0, 0)], -1),
])
def test_bad_input_raises(nll, tokens, pairs, n_boot):
    with pytest.raises(ValueError, match="paired_perplexity_diffs"):
        paired_perplexity_diffs(nll, tokens, pairs, n_boot=n_boot)


def test_mean_interval_of_three_values_is_the_exact_bootstrap_range():
    """Three values: each of the 27 ordered resamples has probability 1/27 > 2.5 %, so the interval
    of the mean is the smallest and the largest resampled mean: the smallest and largest value."""
    from textebm.bootstrap import mean_interval

    assert mean_interval([-1.0, 0.5, -0.2], n_boot=20000, seed=0) == pytest.approx((-1.0, 0.5), rel=1e-12)
    assert mean_interval([2.0, 3.0], n_boot=100, seed=1) == mean_interval([2.0, 3.0], n_boot=100, seed=1)
    assert mean_interval([1.0], n_boot=0) is None
    for bad in ([], [1.0, float("nan")]):
        with pytest.raises(ValueError, match="mean_interval"):
            mean_interval(bad)
