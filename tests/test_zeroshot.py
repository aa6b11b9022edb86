"""Zero-shot detectors against brute-force enumeration on a tiny vocabulary."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from textebm.detection.zeroshot import binoculars, fast_detectgpt, loglik


def _case(seed=0, v=3, t=3):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, t, v, generator=g, dtype=torch.float64) * 2
    targets = torch.randint(0, v, (2, t), generator=g)
    mask = torch.tensor([[True] * t, [True] * (t - 1) + [False]])
    return logits, targets, mask


def test_fast_detectgpt_mean_and_variance_by_enumeration():
    """μ and σ² of Σ_t log q(x̃_t) for x̃_t ~ q(. | x_<t) independently per position: enumerate all
    V^T sampled sequences and take their exact mean and variance."""
    logits, targets, mask = _case()
    q = torch.softmax(logits, -1)
    for b in range(2):
        pos = [t for t in range(3) if mask[b, t]]
        vals, probs = [], []
        for seq in itertools.product(range(3), repeat=len(pos)):
            probs.append(math.prod(q[b, t, v].item() for t, v in zip(pos, seq)))
            vals.append(sum(math.log(q[b, t, v].item()) for t, v in zip(pos, seq)))
        mu = sum(p * x for p, x in zip(probs, vals))
        var = sum(p * (x - mu) ** 2 for p, x in zip(probs, vals))
        ll = sum(math.log(q[b, t, targets[b, t]].item()) for t in pos)
        assert sum(probs) == pytest.approx(1.0)
        assert fast_detectgpt(logits, targets, mask)[b].item() == pytest.approx((ll - mu) / math.sqrt(var), rel=1e-9)
        assert loglik(logits, targets, mask)[b].item() == pytest.approx(ll, rel=1e-12)


def test_binoculars_by_hand():
    perf, targets, mask = _case(1)
    obs, _, _ = _case(2)
    lp, po = torch.log_softmax(perf, -1), torch.softmax(obs, -1)
    for b in range(2):
        pos = [t for t in range(3) if mask[b, t]]
        log_ppl = -sum(lp[b, t, targets[b, t]].item() for t in pos) / len(pos)
        x_ppl = -sum(sum(po[b, t, v].item() * lp[b, t, v].item() for v in range(3)) for t in pos) / len(pos)
        assert binoculars(perf, obs, targets, mask)[b].item() == pytest.approx(-log_ppl / x_ppl, rel=1e-9)
