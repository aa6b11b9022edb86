"""The linear-chain CRF (losses/crf.py) against brute-force enumeration of every tag sequence, in
float64, on sentences of lengths 1, 3 and 4 padded to 5; gradients by gradcheck; padding and
batching change nothing."""

from __future__ import annotations

import itertools

import pytest
import torch

from textebm.losses.crf import (
    crf_log_partition,
    crf_marginals,
    crf_nll,
    crf_score,
    viterbi,
)

K = 3
LENGTHS = (1, 3, 4)
T = 5  # one padding position past the longest sentence


def _case(seed: int = 0, pad_value: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    B = len(LENGTHS)
    phi = torch.randn(B, T, K, generator=g, dtype=torch.float64) * 2
    A = torch.randn(K, K, generator=g, dtype=torch.float64) * 2
    mask = torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]  # (B, T)
    phi = phi.masked_fill(~mask[..., None], pad_value)
    return phi, A, mask


def _u(phi_b, A, y) -> float:
    """u(x, y) of eq. (6) written out for one sentence (phi_b (l, K), y a tuple of l tags)."""
    return (sum(float(phi_b[t, y[t]]) for t in range(len(y)))
            + sum(float(A[y[t - 1], y[t]]) for t in range(1, len(y))))


def _enumerate(phi, A, lengths):
    """Per sentence: {tag sequence: u(x, y)} over all K^l sequences."""
    return [{y: _u(phi[b, :n], A, y) for y in itertools.product(range(K), repeat=n)}
            for b, n in enumerate(lengths)]


def test_log_partition_score_and_nll_match_enumeration():
    phi, A, mask = _case()
    table = _enumerate(phi, A, LENGTHS)
    log_z = crf_log_partition(phi, A, mask)
    expected = torch.tensor([torch.logsumexp(torch.tensor(list(s.values()), dtype=torch.float64), 0).item() for s in table],
                            dtype=torch.float64)
    torch.testing.assert_close(log_z, expected, rtol=0, atol=1e-12)

    g = torch.Generator().manual_seed(1)
    tags = torch.randint(0, K, (len(LENGTHS), T), generator=g).masked_fill(~mask, -1)  # -1 at padding
    want = torch.tensor([table[b][tuple(tags[b, :n].tolist())] for b, n in enumerate(LENGTHS)], dtype=torch.float64)
    torch.testing.assert_close(crf_score(phi, A, tags, mask), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(crf_nll(phi, A, tags, mask, reduction="none"), expected - want, rtol=0, atol=1e-12)
    torch.testing.assert_close(crf_nll(phi, A, tags, mask), (expected - want).mean(), rtol=0, atol=1e-12)


def test_marginals_match_enumeration():
    phi, A, mask = _case(seed=2)
    table = _enumerate(phi, A, LENGTHS)
    marg = crf_marginals(phi, A, mask)
    want = torch.zeros(len(LENGTHS), T, K, dtype=torch.float64)
    for b, scores in enumerate(table):
        log_z = torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.float64), 0)
        for y, u in scores.items():
            for t, k in enumerate(y):
                want[b, t, k] += torch.exp(torch.tensor(u, dtype=torch.float64) - log_z)
    torch.testing.assert_close(marg, want, rtol=0, atol=1e-12)
    # and they are the gradient of log Z with respect to phi
    phi_g = phi.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(crf_log_partition(phi_g, A, mask).sum(), phi_g)
    torch.testing.assert_close(grad, want, rtol=0, atol=1e-12)


def test_viterbi_matches_enumeration():
    for seed in range(5):
        phi, A, mask = _case(seed=10 + seed)
        table = _enumerate(phi, A, LENGTHS)
        tags, scores = viterbi(phi, A, mask)
        for b, n in enumerate(LENGTHS):
            best = max(table[b], key=table[b].get)
            assert tuple(tags[b, :n].tolist()) == best
            assert tags[b, n:].tolist() == [-1] * (T - n)
            assert scores[b].item() == pytest.approx(table[b][best], abs=1e-12)
    assert viterbi(phi, A, mask, pad=7)[0][0, 1:].tolist() == [7] * (T - 1)


def test_gradcheck_of_the_nll():
    phi, A, mask = _case(seed=3)
    tags = torch.randint(0, K, (len(LENGTHS), T), generator=torch.Generator().manual_seed(4))
    phi.requires_grad_(True)
    A.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p, a: crf_nll(p, a, tags, mask, reduction="none"), (phi, A))


def test_padding_changes_nothing():
    """Arbitrary potentials (inf and nan included) and tags at padding positions, and extra padding
    columns, give the same values and the same gradients."""
    phi, A, mask = _case(seed=5)
    tags = torch.randint(0, K, (len(LENGTHS), T), generator=torch.Generator().manual_seed(6)).masked_fill(~mask, 0)
    junk = torch.randn(len(LENGTHS), T + 3, K, dtype=torch.float64) * 100
    junk[0, 2, 1], junk[1, 6, 0] = float("inf"), float("nan")
    big_mask = torch.cat([mask, torch.zeros(len(LENGTHS), 3, dtype=torch.bool)], 1)  # (B, T+3)
    big_phi = torch.where(big_mask[..., None], torch.cat([phi, torch.zeros(len(LENGTHS), 3, K,
                                                                            dtype=torch.float64)], 1), junk)
    big_tags = torch.where(big_mask, torch.cat([tags, tags[:, :3]], 1), torch.full_like(big_mask, 2, dtype=torch.long))

    def grads(p, y, m):
        p = p.clone().requires_grad_(True)
        a = A.clone().requires_grad_(True)
        nll = crf_nll(p, a, y, m, reduction="none")
        gp, ga = torch.autograd.grad(nll.sum(), (p, a))
        return nll, gp, ga

    nll, gp, ga = grads(phi, tags, mask)
    big_nll, big_gp, big_ga = grads(big_phi, big_tags, big_mask)
    torch.testing.assert_close(big_nll, nll, rtol=0, atol=1e-12)
    torch.testing.assert_close(big_ga, ga, rtol=0, atol=1e-12)
    torch.testing.assert_close(big_gp[:, :T], gp, rtol=0, atol=1e-12)
    assert torch.all(big_gp[~big_mask] == 0)
    torch.testing.assert_close(crf_marginals(big_phi, A, big_mask)[:, :T], crf_marginals(phi, A, mask))
    torch.testing.assert_close(viterbi(big_phi, A, big_mask)[0][:, :T], viterbi(phi, A, mask)[0])


def test_a_batch_equals_its_rows_one_by_one():
    g = torch.Generator().manual_seed(7)
    lengths = torch.tensor([6, 1, 9, 4, 9, 2])
    B, Tm, Km = len(lengths), 9, 5
    phi = torch.randn(B, Tm, Km, generator=g)
    A = torch.randn(Km, Km, generator=g)
    mask = torch.arange(Tm)[None] < lengths[:, None]
    tags = torch.randint(0, Km, (B, Tm), generator=g)
    log_z, nll, marg = crf_log_partition(phi, A, mask), crf_nll(phi, A, tags, mask, "none"), crf_marginals(phi, A, mask)
    path, best = viterbi(phi, A, mask)
    for b, n in enumerate(lengths.tolist()):
        one = (phi[b:b + 1, :n], A, mask[b:b + 1, :n])
        torch.testing.assert_close(log_z[b:b + 1], crf_log_partition(*one))
        torch.testing.assert_close(nll[b:b + 1], crf_nll(one[0], A, tags[b:b + 1, :n], one[2], "none"))
        torch.testing.assert_close(marg[b:b + 1, :n], crf_marginals(*one))
        p, s = viterbi(*one)
        assert path[b, :n].tolist() == p[0].tolist()
        torch.testing.assert_close(best[b:b + 1], s)
    torch.testing.assert_close(marg.sum(-1), mask.float())


def test_low_precision_inputs_are_computed_in_fp32():
    phi, A, mask = _case(seed=8)
    out = crf_log_partition(phi.to(torch.bfloat16), A.to(torch.bfloat16), mask)
    assert out.dtype == torch.float32
    want = crf_log_partition(phi.to(torch.bfloat16).double(), A.to(torch.bfloat16).double(), mask)
    torch.testing.assert_close(out.double(), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("bad, message", [
    (lambda p, a, m: (p[0], a, m), "phi must have shape"),
    (lambda p, a, m: (p, a[:2], m), "A must have shape"),
    (lambda p, a, m: (p, a, m[:, :2]), "mask must have shape"),
    (lambda p, a, m: (p, a, m & (torch.arange(T) > 0)), "at least one token"),
    (lambda p, a, m: (p, a, m | (torch.arange(T) == T - 1)), "right-padded"),
])
def test_bad_shapes_and_masks_are_refused(bad, message):
    phi, A, mask = _case()
    with pytest.raises(ValueError, match=message):
        crf_log_partition(*bad(phi, A, mask))
    with pytest.raises(ValueError, match="tags must lie in"):
        crf_score(phi, A, torch.full(mask.shape, K), mask)


def test_agrees_with_pytorch_crf_without_start_and_end_transitions():
    """pytorch-crf (an independent implementation, a dev dependency) with its start and end
    transitions at zero is the paper's CRF: the same log-likelihoods and Viterbi paths."""
    torchcrf = pytest.importorskip("torchcrf")
    g = torch.Generator().manual_seed(9)
    lengths = torch.tensor([7, 3, 1, 7, 5])
    B, Tm, Km = len(lengths), 7, 4
    mask = torch.arange(Tm)[None] < lengths[:, None]
    phi = torch.randn(B, Tm, Km, generator=g, dtype=torch.float64)
    tags = torch.randint(0, Km, (B, Tm), generator=g)
    ref = torchcrf.CRF(Km, batch_first=True).double()
    with torch.no_grad():
        ref.start_transitions.zero_()
        ref.end_transitions.zero_()
        ref.transitions.normal_(generator=g)
        want = ref(phi, tags, mask, reduction="none")
        torch.testing.assert_close(-crf_nll(phi, ref.transitions, tags, mask, "none"), want, rtol=0, atol=1e-12)
        paths = viterbi(phi, ref.transitions, mask)[0]
    assert [paths[b, :n].tolist() for b, n in enumerate(lengths.tolist())] == ref.decode(phi, mask)
