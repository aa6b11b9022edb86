"""Detection metrics against scikit-learn and hand cases."""

from __future__ import annotations

import numpy as np
import pytest

from textebm.detection.metrics import (auroc, balanced_accuracy, best_threshold, fit_sign, threshold_at_fpr,
                                      tpr_at_fpr)


def test_auroc_equals_scikit_learn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    real = np.round(rng.normal(0, 1, 300), 1)  # rounded: many ties
    fake = np.round(rng.normal(0.7, 1, 200), 1)
    y = np.r_[np.zeros(300), np.ones(200)]
    assert auroc(real, fake) == pytest.approx(roc_auc_score(y, np.r_[real, fake]), abs=1e-12)
    assert auroc([0, 0], [0]) == 0.5 and auroc([0], [1]) == 1.0


def test_threshold_at_fpr_keeps_the_false_positive_rate():
    rng = np.random.default_rng(1)
    real = rng.normal(size=1000)
    for fpr in (0.0, 0.01, 0.05, 0.5):
        t = threshold_at_fpr(real, fpr)
        assert (real > t).mean() <= fpr
        assert (real >= t).mean() > fpr or fpr == 0.0  # the lowest such threshold: one step lower exceeds it
    out = tpr_at_fpr(real, rng.normal(3, 1, 500), 0.01, real_test=rng.normal(size=2000))
    assert out["tpr"] > 0.5 and out["fpr"] < 0.02


def test_balanced_accuracy_and_best_threshold_by_hand():
    real, fake = [0.0, 1.0, 2.0], [1.5, 3.0]
    assert balanced_accuracy(real, fake, 1.2) == pytest.approx((2 / 3 + 1) / 2)
    assert best_threshold(real, fake) == 1.25  # between 1 and 1.5: 2/3 real and all generated right
    assert fit_sign([5, 6], [1, 2]) == -1 and fit_sign([1, 2], [5, 6]) == 1


def test_best_threshold_fast_path_equals_trying_every_candidate():
    from textebm.detection.metrics import balanced_accuracy, best_threshold

    rng = np.random.default_rng(3)
    for n in (1, 5, 40):
        real = rng.integers(0, 6, n).astype(float)  # ties on purpose
        fake = rng.integers(2, 9, n + 3).astype(float)
        s = np.unique(np.concatenate([real, fake]))
        cands = np.concatenate([[s[0] - 1.0], (s[:-1] + s[1:]) / 2, [s[-1] + 1.0]])
        slow = cands[int(np.argmax([balanced_accuracy(real, fake, t) for t in cands]))]
        assert best_threshold(real, fake) == slow
