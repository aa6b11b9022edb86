"""Calibration metrics: hand-worked examples, literal loop re-implementations, scikit-learn and
netcal as references, several bin counts, float32 / float64 / torch inputs, edge cases."""

import math

import numpy as np
import pytest
import torch

from textebm.calibration.metrics import (
    accuracy,
    brier,
    calibration_summary,
    ece_classwise,
    ece_toplabel,
    entropy,
    matthews_corrcoef,
    nll,
    reliability_bins,
)

HAND_P = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
HAND_Y = np.array([0, 1, 1, 0])


def random_case(n=500, c=4, seed=0, sharpness=3.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, c)) * sharpness
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = rng.integers(0, c, size=n)
    return p, y


def loop_ece_classwise(p, y, n_bins):
    """Eq. (15) with plain loops: bin b = [b/B, (b+1)/B), the last bin closed at 1."""
    n, c = p.shape
    total = 0.0
    for k in range(c):
        for b in range(n_bins):
            lo, hi = b / n_bins, (b + 1) / n_bins
            members = [i for i in range(n) if lo <= p[i, k] < hi or (b == n_bins - 1 and p[i, k] == 1.0)]
            if not members:
                continue
            acc = sum(1.0 for i in members if y[i] == k) / len(members)
            conf = sum(p[i, k] for i in members) / len(members)
            total += len(members) / n * abs(acc - conf)
    return total / c


def loop_ece_toplabel(p, y, n_bins):
    """Second formulation: (1/n) Σ_b |Σ_{i in b} (correct_i − conf_i)|."""
    n = len(y)
    sums = [0.0] * n_bins
    for i in range(n):
        conf = max(p[i])
        pred = list(p[i]).index(conf)
        b = min(int(math.floor(conf * n_bins)), n_bins - 1)
        sums[b] += (1.0 if pred == y[i] else 0.0) - conf
    return sum(abs(s) for s in sums) / n


# --- hand-worked ----------------------------------------------------------------------------


def test_hand_example_two_bins():
    # bins [0, .5), [.5, 1]
    # class 0: p = .9 .6 | .3 .2, label==0: 1 0 | 0 1
    #   bin 1: conf .75, acc .5 -> 2/4 * .25 = .125 ; bin 0: conf .25, acc .5 -> .125 ; sum .25
    # class 1: p = .1 .4 | .7 .8, label==1: 0 1 | 1 0 -> likewise .25
    # class-wise ECE = (.25 + .25) / 2 = .25
    assert ece_classwise(HAND_P, HAND_Y, n_bins=2) == pytest.approx(0.25)
    # top-label: conf .9 .6 .7 .8 (all in bin 1), pred 0 0 1 1, correct 1 0 1 0
    #   conf mean 3.0 / 4 = .75, acc .5 -> ECE = .25
    assert ece_toplabel(HAND_P, HAND_Y, n_bins=2) == pytest.approx(0.25)


def test_hand_example_twenty_bins():
    # every top-label confidence in its own bin: (|1-.9| + |0-.6| + |1-.7| + |0-.8|) / 4 = 1.8 / 4
    assert ece_toplabel(HAND_P, HAND_Y, n_bins=20) == pytest.approx(0.45)
    # class 0: every p alone in its bin: (|1-.9| + |0-.6| + |0-.3| + |1-.2|) / 4 = 1.8 / 4 = .45
    # class 1: (|0-.1| + |1-.4| + |1-.7| + |0-.8|) / 4 = 1.8 / 4 = .45 ; mean = .45
    assert ece_classwise(HAND_P, HAND_Y, n_bins=20) == pytest.approx(0.45)


def test_hand_example_other_metrics():
    assert accuracy(HAND_P, HAND_Y) == pytest.approx(0.5)
    # -(log .9 + log .4 + log .7 + log .2) / 4
    assert nll(HAND_P, HAND_Y) == pytest.approx(-(math.log(0.9) + math.log(0.4) + math.log(0.7) + math.log(0.2)) / 4)
    # per sample Σ_c (p_c − 1[y=c])²: .01+.01, .36+.36, .09+.09, .64+.64 -> mean = 2.2 / 4
    assert brier(HAND_P, HAND_Y) == pytest.approx(0.55)
    # confusion: pred 0 0 1 1, true 0 1 1 0 -> c = 2, s = 4, p_k = t_k = (2, 2)
    # MCC = (2*4 - 8) / sqrt((16 - 8)(16 - 8)) = 0
    assert matthews_corrcoef(HAND_P, HAND_Y) == pytest.approx(0.0)
    h = entropy(HAND_P)
    assert h[0] == pytest.approx(-(0.9 * math.log(0.9) + 0.1 * math.log(0.1)))


def test_probability_on_a_decimal_edge_opens_its_bin():
    # with 20 bins: 0.6 belongs to [0.6, 0.65) (bin 12; linspace edges would give bin 11),
    # 0.4 to bin 8, 0.05 to bin 1, 0.95 and 1.0 to the last bin, 0.0 to bin 0
    p = np.array([[0.6, 0.4], [0.05, 0.95], [1.0, 0.0]])
    rb = reliability_bins(p, np.array([0, 1, 0]), n_bins=20, mode="classwise")
    expected = np.zeros(20)
    expected[[12, 8, 1, 0]] = 1
    expected[19] = 2
    np.testing.assert_array_equal(rb.counts, expected)


# --- independent references -------------------------------------------------------------------


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15, 20, 50])
def test_classwise_matches_literal_loop(n_bins):
    p, y = random_case(n=300, c=3, seed=n_bins)
    assert ece_classwise(p, y, n_bins) == pytest.approx(loop_ece_classwise(p, y, n_bins), abs=1e-12)


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15, 20, 50])
def test_toplabel_matches_second_formulation(n_bins):
    p, y = random_case(n=300, c=4, seed=100 + n_bins)
    assert ece_toplabel(p, y, n_bins) == pytest.approx(loop_ece_toplabel(p, y, n_bins), abs=1e-12)


@pytest.mark.parametrize("n_bins", [5, 10, 15, 20])
@pytest.mark.parametrize("sharpness", [0.5, 3.0, 10.0])
def test_toplabel_matches_netcal(n_bins, sharpness):
    netcal = pytest.importorskip("netcal.metrics")
    p, y = random_case(n=800, c=4, seed=n_bins, sharpness=sharpness)
    ref = netcal.ECE(bins=n_bins).measure(p, y)
    assert ece_toplabel(p, y, n_bins) == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize("n_bins", [10, 20])
@pytest.mark.parametrize("c", [2, 3, 5])
def test_classwise_matches_netcal_per_class(n_bins, c):
    # eq. (15) = the mean over classes of the binary ECE of p(y|x) against [label = y]
    netcal = pytest.importorskip("netcal.metrics")
    p, y = random_case(n=600, c=c, seed=7 * c)
    ref = np.mean([netcal.ECE(bins=n_bins).measure(p[:, k], (y == k).astype(int)) for k in range(c)])
    assert ece_classwise(p, y, n_bins) == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize("c", [2, 3, 6])
def test_against_sklearn(c):
    sk = pytest.importorskip("sklearn.metrics")
    p, y = random_case(n=400, c=c, seed=c)
    pred = p.argmax(1)
    assert accuracy(p, y) == pytest.approx(sk.accuracy_score(y, pred))
    assert matthews_corrcoef(p, y) == pytest.approx(sk.matthews_corrcoef(y, pred), abs=1e-12)
    assert nll(p, y) == pytest.approx(sk.log_loss(y, p, labels=list(range(c))), rel=1e-9)
    assert brier(p, y) == pytest.approx(sk.brier_score_loss(y, p, labels=list(range(c)), scale_by_half=False), rel=1e-9)


def test_mcc_degenerate_is_zero_like_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    p = np.array([[0.9, 0.1]] * 4)  # always predicts class 0
    y = np.array([0, 1, 0, 1])
    assert matthews_corrcoef(p, y) == sk.matthews_corrcoef(y, p.argmax(1)) == 0.0


# --- dtypes and input types -------------------------------------------------------------------


def test_float32_float64_and_torch_agree():
    p, y = random_case(n=400, c=3, seed=5)
    for fn in (ece_classwise, ece_toplabel, nll, brier):
        v64 = fn(p, y)
        v32 = fn(p.astype(np.float32), y.astype(np.int32))
        vt = fn(torch.from_numpy(p).float(), torch.from_numpy(y))
        assert v32 == pytest.approx(v64, abs=1e-5)
        assert vt == pytest.approx(v64, abs=1e-5)


# --- edge cases -------------------------------------------------------------------------------


def test_exact_zero_and_one_probabilities():
    right = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert ece_classwise(right, np.array([0, 1])) == 0.0
    assert ece_toplabel(right, np.array([0, 1])) == 0.0
    # both wrong: each class has p = 1 (never its label) in the last bin and p = 0 (always) in the first
    # -> 1/2 * 1 + 1/2 * 1 = 1 per class; top-label: conf 1, acc 0 -> 1
    assert ece_classwise(right, np.array([1, 0])) == pytest.approx(1.0)
    assert ece_toplabel(right, np.array([1, 0])) == pytest.approx(1.0)
    assert nll(right, np.array([1, 0])) == pytest.approx(-math.log(1e-12))
    assert brier(right, np.array([1, 0])) == pytest.approx(2.0)
    assert np.all(entropy(right) == 0.0)


def test_more_bins_than_samples_and_empty_bins():
    p = np.array([[0.97, 0.03]])
    assert ece_toplabel(p, np.array([0]), n_bins=100) == pytest.approx(0.03)
    rb = reliability_bins(p, np.array([0]), n_bins=100)
    assert rb.counts.sum() == 1 and np.isnan(rb.accuracy).sum() == 99


def test_entropy_uniform():
    assert entropy(np.full((2, 5), 0.2)) == pytest.approx([math.log(5)] * 2)


def test_reliability_bins_are_consistent_with_ece():
    p, y = random_case(n=300, c=3, seed=11)
    rb = reliability_bins(p, y, n_bins=20, mode="toplabel")
    full = rb.counts > 0
    assert np.sum(rb.counts[full] / 300 * np.abs(rb.accuracy[full] - rb.confidence[full])) == pytest.approx(rb.ece)
    rb = reliability_bins(p, y, n_bins=20, mode="classwise")
    assert rb.counts.sum() == 300 * 3
    assert rb.ece == pytest.approx(ece_classwise(p, y, 20))


def test_summary_keys():
    s = calibration_summary(HAND_P, HAND_Y)
    assert set(s) == {"accuracy", "mcc", "ece_classwise", "ece_toplabel", "nll", "brier"}


@pytest.mark.parametrize(
    "probs,labels",
    [
        (np.zeros((3,)), np.zeros(3, dtype=int)),  # 1-D probs
        (np.full((3, 2), 0.5), np.zeros(2, dtype=int)),  # length mismatch
        (np.full((3, 2), 0.5), np.array([0, 1, 2])),  # label out of range
        (np.full((3, 2), 0.5), np.array([0.0, 1.0, 0.0])),  # float labels
        (np.array([[np.nan, 1.0]]), np.array([0])),  # NaN
        (np.zeros((0, 2)), np.zeros(0, dtype=int)),  # empty
    ],
)
def test_bad_inputs(probs, labels):
    with pytest.raises(ValueError):
        ece_classwise(probs, labels)
