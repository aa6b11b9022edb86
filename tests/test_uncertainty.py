"""Bootstrap intervals and seed summaries against scipy (an independent implementation)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from textebm.calibration import metrics as M
from textebm.calibration.uncertainty import (bootstrap_ci, metric_fn, paired_bootstrap_diff, resample_indices,
                                             resampled_metric, seed_summary, summarise_seeds, t_quantile)

stats = pytest.importorskip("scipy.stats")


def _probs(n: int, seed: int, sharp: float = 2.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    logits = rng.normal(size=(n, 3))
    logits[np.arange(n), y] += sharp
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return p, y


def test_bootstrap_ci_matches_scipys_percentile_bootstrap():
    p, y = _probs(400, 0)
    ours = bootstrap_ci(p, y, ("accuracy", "ece_classwise"), n_boot=1500, seed=1)
    for name, f in (("accuracy", M.accuracy), ("ece_classwise", lambda a, b: M.ece_classwise(a, b, 20))):
        ref = stats.bootstrap((np.arange(len(y)),), lambda i, f=f: f(p[i], y[i]), vectorized=False,
                              n_resamples=1500, method="percentile",
                              random_state=np.random.default_rng(2)).confidence_interval
        assert ours[name][0] == pytest.approx(ref.low, abs=0.015)
        assert ours[name][1] == pytest.approx(ref.high, abs=0.015)
        point = f(p, y)
        assert ours[name][0] < point < ours[name][1]


def test_paired_difference_of_a_method_with_itself_is_exactly_zero_and_a_better_one_is_detected():
    p, y = _probs(300, 3, sharp=1.0)
    same = paired_bootstrap_diff(p, p, y, "accuracy", n_boot=200)
    assert same == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p_below_zero": 0.0}
    better = p.copy()
    wrong = better.argmax(1) != y
    better[wrong] = np.eye(3)[y[wrong]] * 0.9 + 0.1 / 3  # fix every mistake
    d = paired_bootstrap_diff(better, p, y, "accuracy", n_boot=500)
    assert d["diff"] == pytest.approx(wrong.mean()) and d["lo"] > 0 and d["p_below_zero"] == 0.0


def test_seed_summary_matches_scipys_t_interval():
    v = [0.072, 0.061, 0.066, 0.081]
    s = seed_summary(v)
    lo, hi = stats.t.interval(0.95, df=3, loc=np.mean(v), scale=stats.sem(v))
    assert s["mean"] == pytest.approx(np.mean(v)) and s["std"] == pytest.approx(np.std(v, ddof=1))
    assert (s["lo"], s["hi"]) == pytest.approx((lo, hi))
    assert seed_summary([0.5]) == {"n": 1, "mean": 0.5, "std": None, "lo": None, "hi": None}


def test_t_quantile_without_scipy_is_close(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # import fails: the fallback runs
    for df in (2, 3, 4, 9, 30):
        for q in (0.975, 0.95, 0.025):
            assert t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), abs=1e-6)


def test_summarise_seeds_per_method():
    tables = [{"baseline": {"accuracy": a, "ece_classwise": e}, "only-once": {"accuracy": 1.0}}
              for a, e in ((0.8, 0.1), (0.9, 0.2), (0.85, 0.15))]
    tables[1].pop("only-once")
    out = summarise_seeds(tables, ("accuracy", "ece_classwise"))
    assert set(out) == {"baseline"}
    assert out["baseline"]["accuracy"]["mean"] == pytest.approx(0.85)
    assert out["baseline"]["ece_classwise"]["std"] == pytest.approx(0.05)


@pytest.mark.parametrize("name", ["accuracy", "ece_classwise", "ece_toplabel", "nll"])
@pytest.mark.parametrize("n_bins", [5, 20])
def test_vectorised_resampling_equals_one_metric_call_per_resample(name, n_bins):
    p, y = _probs(150, 4, sharp=1.5)
    p[:5] = np.eye(3)[y[:5]]  # probabilities exactly 1.0 and 0.0: the edge bins
    idx = resample_indices(len(y), 40, seed=9)
    fast = resampled_metric(name, p, y, idx, n_bins)
    slow = np.array([metric_fn(name, n_bins)(p[i], y[i]) for i in idx])
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-14)
