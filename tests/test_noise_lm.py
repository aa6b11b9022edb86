"""The DNCE noise LM (models/noise_lm.py): q sums to one over every sentence of a tiny space
(two words besides padding, lengths 1..3), and its samples follow q (chi-square, fixed seed)."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chi2

from textebm.models.noise_lm import NoiseLM

PI = torch.tensor([0.0, 0.2, 0.5, 0.3], dtype=torch.float64)  # lengths 1..3
WORDS = (1, 2)  # vocabulary {0: padding, 1, 2}


def _model() -> NoiseLM:
    torch.manual_seed(3)
    model = NoiseLM(3, PI, embed=4, hidden=5, pad_id=0).double()
    with torch.no_grad():  # larger weights than the init so that q is far from uniform
        for p in model.parameters():
            p.mul_(3.0)
    return model


def _space():
    """Every sentence over WORDS of length 1..3, right-padded to 3, and its mask."""
    seqs = [s for n in (1, 2, 3) for s in itertools.product(WORDS, repeat=n)]
    ids = torch.tensor([list(s) + [0] * (3 - len(s)) for s in seqs])  # (14, 3)
    return seqs, ids, ids != 0


def test_log_q_sums_to_one_over_all_sentences():
    model = _model()
    seqs, ids, mask = _space()
    log_q = model.log_prob(ids, mask)  # (14,)
    assert torch.logsumexp(log_q, 0).item() == pytest.approx(0.0, abs=1e-12)
    # per length, the sentences of that length carry π_l
    for n in (1, 2, 3):
        sel = torch.tensor([len(s) == n for s in seqs])
        assert torch.logsumexp(log_q[sel], 0).exp().item() == pytest.approx(PI[n].item(), abs=1e-12)
    # q is not uniform within a length (the test above would pass for a uniform q too)
    assert log_q[2:6].max() - log_q[2:6].min() > 0.1


def test_samples_follow_q_by_chi_square():
    model = _model()
    seqs, ids, mask = _space()
    q = model.log_prob(ids, mask).exp()  # (14,)
    n = 20000
    got, got_mask, got_logq = model.sample(n, generator=torch.Generator().manual_seed(0))
    index = {s: i for i, s in enumerate(seqs)}
    counts = torch.zeros(len(seqs))
    for row, m in zip(got.tolist(), got_mask.tolist()):
        counts[index[tuple(w for w, keep in zip(row, m) if keep)]] += 1
    expected = n * q
    stat = ((counts - expected) ** 2 / expected).sum().item()
    assert stat < chi2.ppf(0.999, len(seqs) - 1), f"chi-square {stat:.1f}"
    # the log q returned with the samples is log_prob's
    torch.testing.assert_close(got_logq, model.log_prob(got, got_mask), rtol=0, atol=1e-12)
    assert not (got[~got_mask] != 0).any()  # padding past each length
    # same seed, same samples
    again = model.sample(n, generator=torch.Generator().manual_seed(0))[0]
    assert torch.equal(again, got)


def test_compact_sampling_draws_what_the_plain_loop_draws():
    # a realistic shape: 300 words, lengths 1..30 skewed short, so most rows stop early
    torch.manual_seed(1)
    pi = torch.distributions.Poisson(6.0).log_prob(torch.arange(31.0)).exp()
    pi[0] = 0
    model = NoiseLM(300, pi / pi.sum(), embed=16, hidden=24, pad_id=0)
    for seed in range(3):
        fast = model.sample(257, generator=torch.Generator().manual_seed(seed))
        plain = model.sample(257, generator=torch.Generator().manual_seed(seed), compact=False)
        assert torch.equal(fast[0], plain[0]) and torch.equal(fast[1], plain[1])
        torch.testing.assert_close(fast[2], plain[2], rtol=0, atol=1e-9)
        assert int(fast[1].sum(1).float().mean()) < fast[1].shape[1] / 2  # the compaction had rows to drop
    torch.testing.assert_close(fast[2], model.log_prob(fast[0], fast[1]), rtol=0, atol=1e-4)


def test_bad_lengths_are_refused():
    with pytest.raises(ValueError, match="length_probs"):
        NoiseLM(3, torch.tensor([0.5, 0.5]))
    model = _model()
    with pytest.raises(ValueError, match="lengths must lie in"):
        model.log_prob(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.bool))
