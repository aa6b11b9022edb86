"""Temperature scaling, scaling-binning and the dev-halving protocol."""

import warnings

import numpy as np
import pytest
import torch

from textebm.calibration import (
    CalibrationWarning,
    ScalingBinning,
    TemperatureScaling,
    ece_classwise,
    ece_toplabel,
    halve_dev,
    nll,
    softmax,
)
from textebm.calibration.calibrators import _sigmoid, bin_means, equal_mass_edges, platt_fit


def synthetic(n, c, t_true, seed, scale=3.0):
    """Logits z; labels drawn from softmax(z / t_true), so the calibrated temperature is t_true."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * scale
    p = softmax(z / t_true)
    u = rng.random(n)[:, None]
    y = (u > np.cumsum(p, axis=1)).sum(axis=1)
    return z, np.minimum(y, c - 1)


# --- halve_dev ------------------------------------------------------------------------------------


def test_halve_dev_deterministic_disjoint_complete():
    a_dev, a_test = halve_dev(101, seed=3)
    b_dev, b_test = halve_dev(101, seed=3)
    np.testing.assert_array_equal(a_dev, b_dev)
    np.testing.assert_array_equal(a_test, b_test)
    assert len(a_dev) == 50 and len(a_test) == 51
    assert not set(a_dev) & set(a_test)
    np.testing.assert_array_equal(np.sort(np.concatenate([a_dev, a_test])), np.arange(101))
    assert np.all(np.diff(a_dev) > 0) and np.all(np.diff(a_test) > 0)
    c_dev, _ = halve_dev(101, seed=4)
    assert not np.array_equal(a_dev, c_dev)


def test_halve_dev_pinned_values():
    # pins numpy's PCG64 stream: if this changes, every reported dev/test split changes
    dev, test = halve_dev(10, seed=0)
    assert dev.tolist() == [2, 3, 4, 6, 7]
    assert test.tolist() == [0, 1, 5, 8, 9]


def test_halve_dev_tiny():
    assert [len(x) for x in halve_dev(0)] == [0, 0]
    assert [len(x) for x in halve_dev(1)] == [0, 1]
    with pytest.raises(ValueError):
        halve_dev(-1)


# --- temperature scaling ----------------------------------------------------------------------


@pytest.mark.parametrize("t_true", [0.5, 1.0, 2.5])
def test_temperature_recovered(t_true):
    z, y = synthetic(20000, 4, t_true, seed=int(t_true * 10))
    ts = TemperatureScaling().fit(z, y)
    assert ts.temperature_ == pytest.approx(t_true, rel=0.05)


def test_objective_gradient_matches_autograd_and_finite_difference():
    z, y = synthetic(200, 3, 2.0, seed=1)
    beta = 0.7
    f, g, h = TemperatureScaling.objective(beta, z, y)
    b = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    ft = torch.nn.functional.cross_entropy(b * torch.from_numpy(z), torch.from_numpy(y))
    (gt,) = torch.autograd.grad(ft, b, create_graph=True)
    (ht,) = torch.autograd.grad(gt, b)
    assert f == pytest.approx(ft.item(), rel=1e-12)
    assert g == pytest.approx(gt.item(), rel=1e-9)
    assert h == pytest.approx(ht.item(), rel=1e-9)
    eps = 1e-6
    f_plus = TemperatureScaling.objective(beta + eps, z, y)[0]
    f_minus = TemperatureScaling.objective(beta - eps, z, y)[0]
    fd = (f_plus - f_minus) / (2 * eps)
    assert g == pytest.approx(fd, rel=1e-6)


def test_temperature_is_the_nll_minimiser():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    z, y = synthetic(3000, 5, 1.7, seed=2)
    ts = TemperatureScaling().fit(z, y)
    ref = scipy_optimize.minimize_scalar(
        lambda s: nll(softmax(z / np.exp(s)), y),
        bounds=(np.log(0.05), np.log(100)),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert ts.temperature_ == pytest.approx(np.exp(ref.x), rel=1e-5)
    assert nll(ts.predict_proba(z), y) <= nll(softmax(z), y)


def test_temperature_accepts_torch_and_rows_sum_to_one():
    z, y = synthetic(500, 3, 2.0, seed=3)
    ts = TemperatureScaling().fit(torch.from_numpy(z).float(), torch.from_numpy(y))
    p = ts.predict_proba(torch.from_numpy(z))
    np.testing.assert_allclose(p.sum(1), 1.0)
    assert ts.temperature_ == pytest.approx(TemperatureScaling().fit(z, y).temperature_, rel=1e-5)


def test_temperature_separable_data_clamped_with_warning():
    z = np.array([[5.0, 0.0], [0.0, 5.0], [4.0, 1.0], [1.0, 3.0]])
    y = z.argmax(1)
    with pytest.warns(CalibrationWarning, match="clamped to 0.05"):
        ts = TemperatureScaling().fit(z, y)
    assert ts.temperature_ == 0.05
    assert np.isfinite(ts.predict_proba(z)).all()


def test_temperature_all_one_class():
    # all labels one class and that class always predicted: separable -> clamp, finite
    z = np.array([[2.0, 0.0, -1.0], [1.0, 0.5, 0.0], [3.0, 2.0, 2.0]])
    y = np.zeros(3, dtype=int)
    with pytest.warns(CalibrationWarning):
        ts = TemperatureScaling().fit(z, y)
    assert 0.05 <= ts.temperature_ <= 100 and np.isfinite(ts.predict_proba(z)).all()
    # all labels one class, sometimes mispredicted: an interior optimum, no warning
    z = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [1.0, 0.0]])
    y = np.zeros(4, dtype=int)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = TemperatureScaling().fit(z, y)
    assert 0.05 < ts.temperature_ < 100


def test_temperature_always_wrong_clamped_high():
    z = np.array([[5.0, 0.0], [0.0, 5.0]] * 3)
    y = 1 - z.argmax(1)
    with pytest.warns(CalibrationWarning, match="clamped to 100"):
        ts = TemperatureScaling().fit(z, y)
    assert ts.temperature_ == 100.0


@pytest.mark.parametrize("n", [0, 1])
def test_temperature_too_few_samples(n):
    z = np.ones((n, 3))
    with pytest.warns(CalibrationWarning):
        ts = TemperatureScaling().fit(z, np.zeros(n, dtype=int))
    assert ts.temperature_ == 1.0


def test_temperature_constant_logits():
    with pytest.warns(CalibrationWarning, match="constant"):
        ts = TemperatureScaling().fit(np.zeros((5, 3)), np.array([0, 1, 2, 0, 1]))
    assert ts.temperature_ == 1.0


def test_temperature_predict_before_fit():
    with pytest.raises(RuntimeError):
        TemperatureScaling().predict_proba(np.zeros((2, 2)))


# --- scaling-binning --------------------------------------------------------------------------


def test_platt_fit_matches_sklearn():
    lm = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(0)
    x = rng.normal(size=2000) * 2
    t = (rng.random(2000) < _sigmoid(0.6 * x - 0.3)).astype(float)
    a, b = platt_fit(x, t)
    ref = lm.LogisticRegression(C=1e10, tol=1e-12, max_iter=10000).fit(x[:, None], t)
    assert a == pytest.approx(ref.coef_[0, 0], rel=1e-4)
    assert b == pytest.approx(ref.intercept_[0], abs=1e-4)


def test_platt_fit_separable_is_finite():
    x = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    t = np.array([0, 0, 0, 1, 1, 1.0])
    a, b = platt_fit(x, t)
    assert np.isfinite([a, b]).all() and a > 0


def test_equal_mass_bins_match_reference():
    utils = pytest.importorskip("calibration.utils")
    rng = np.random.default_rng(1)
    for n, bins in [(1000, 20), (37, 20), (5, 20), (200, 7)]:
        v = rng.random(n)
        edges = equal_mass_edges(v, bins)
        np.testing.assert_allclose(edges, utils.get_equal_bins(list(v), num_bins=bins))
        ref = utils.get_discrete_calibrator(v, list(edges))
        w = rng.random(50)
        np.testing.assert_allclose(bin_means(v, edges)[np.searchsorted(edges, w, side="left")], ref(w))


def test_scaling_binning_matches_reference_pieces():
    """Our fit = the reference package's Platt scaler on the first half + its equal-mass binning
    on the second half, per class, then rows renormalised."""
    cal_utils = pytest.importorskip("calibration.utils")
    z, y = synthetic(4000, 3, 2.0, seed=5)
    z_test, _ = synthetic(500, 3, 2.0, seed=6)
    sb = ScalingBinning(n_bins=20, seed=0).fit(z, y)
    first, second = halve_dev(len(y), 0)
    p, p_test = softmax(z), softmax(z_test)
    ref = np.zeros_like(p_test)
    for k in range(3):
        platt = cal_utils.get_platt_scaler(p[first, k], (y[first] == k).astype(int))
        scaled = platt(p[second, k])
        bins = cal_utils.get_equal_bins(scaled, num_bins=20)
        ref[:, k] = cal_utils.get_discrete_calibrator(scaled, bins)(platt(p_test[:, k]))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(sb.predict_proba(z_test), ref, atol=2e-3)


def test_scaling_binning_outputs_distributions_deterministically():
    z, y = synthetic(3000, 4, 3.0, seed=7)
    a = ScalingBinning().fit(z, y).predict_proba(z)
    b = ScalingBinning().fit(z, y).predict_proba(z)
    np.testing.assert_array_equal(a, b)
    assert (a >= 0).all()
    np.testing.assert_allclose(a.sum(1), 1.0)
    # at most n_bins distinct values per class before renormalisation
    sb = ScalingBinning().fit(z, y)
    assert all(len(e) <= 20 for e in sb.edges_)


@pytest.mark.parametrize("calibrator", [ScalingBinning, TemperatureScaling])
def test_calibrators_reduce_ece_on_miscalibrated_data(calibrator):
    # overconfident model: true temperature 3 -> softmax(z) is far too sharp
    z, y = synthetic(8000, 3, 3.0, seed=8)
    dev, test = halve_dev(len(y), seed=0)
    cal = calibrator().fit(z[dev], y[dev])
    before = softmax(z[test])
    after = cal.predict_proba(z[test])
    assert ece_classwise(after, y[test]) < 0.5 * ece_classwise(before, y[test])
    assert ece_toplabel(after, y[test]) < 0.5 * ece_toplabel(before, y[test])


def test_scaling_binning_degenerate_inputs():
    # a class that never occurs in the scaling half -> identity scaling, warning, valid output
    z, y = synthetic(400, 3, 2.0, seed=9)
    y[y == 2] = 0
    with pytest.warns(CalibrationWarning, match="class 2"):
        sb = ScalingBinning().fit(z, y)
    p = sb.predict_proba(z)
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p.sum(1), 1.0)
    # three samples -> no split, warning, still valid
    with pytest.warns(CalibrationWarning):
        sb = ScalingBinning().fit(z[:3], np.array([0, 1, 2]))
    np.testing.assert_allclose(sb.predict_proba(z).sum(1), 1.0)
    with pytest.raises(ValueError):
        ScalingBinning().fit(np.zeros((0, 3)), np.zeros(0, dtype=int))
    with pytest.raises(ValueError):
        sb.predict_proba(np.zeros((2, 4)))

