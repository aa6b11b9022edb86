"""Eq. (3)'s TRF potential (models/trf.py) on a hand example: a BiLSTM with hand-set weights whose
states are known in closed form, output embeddings set by hand, u(x) worked out term by term; the
JRF's marginal potential against enumeration; DNCE with the noise LM learning a tiny language."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from textebm.losses.dnce import dnce_loss, mixed_noise_count, noise_nll
from textebm.models.crf import BiLSTMCRF, TaggerSpec
from textebm.models.noise_lm import NoiseLM
from textebm.models.trf import TRFHead, eq3_potential, length_distribution

# LSTM biases (gates i, f, g, o); every weight matrix is zero, so the state after k steps is the
# same whatever the words: c_k = σ(bf) c_{k−1} + σ(bi) tanh(bg), h_k = σ(bo) tanh(c_k).
BI, BF, BG, BO = 1.0, 0.5, 0.8, 2.0
E = {1: 0.5, 2: -1.0, 3: 2.0}  # output embedding e(w) of each word (H = 1); 0 is padding


def _sig(v: float) -> float:
    return 1 / (1 + math.exp(-v))


def _h(k: int) -> float:
    """The state after reading k words (same for both directions)."""
    c = 0.0
    for _ in range(k):
        c = _sig(BF) * c + _sig(BI) * math.tanh(BG)
    return _sig(BO) * math.tanh(c)


def _tagger() -> BiLSTMCRF:
    model = BiLSTMCRF(TaggerSpec(vocab_size=4, tags=["A", "B"], embed=2, hidden=1)).double()
    with torch.no_grad():
        for name, p in model.lstm.named_parameters():
            p.zero_()
            if name.startswith("bias_ih"):
                p.copy_(torch.tensor([BI, BF, BG, BO], dtype=torch.float64))
    return model


def _head(lengths=(1, 2, 3)) -> TRFHead:
    head = TRFHead(4, 1, length_distribution(lengths, 4)).double()
    with torch.no_grad():
        head.out_embed.copy_(torch.tensor([[0.0], [E[1]], [E[2]], [E[3]]], dtype=torch.float64))
    return head


def test_eq3_potential_matches_a_hand_computation():
    ids = torch.tensor([[1, 2, 3], [3, 1, 0], [2, 0, 0]])  # lengths 3, 2, 1
    mask = ids != 0
    u = _head().potential(_tagger(), ids, mask)
    h1, h2 = _h(1), _h(2)
    # eq. (3): Σ_{i=1..l−1} h_{f,i} e_{i+1} + Σ_{i=2..l} h_{b,i} e_{i−1}; h_{f,i} = h(i), h_{b,i} = h(l − i + 1)
    want3 = (h1 * E[2] + h2 * E[3]) + (h2 * E[1] + h1 * E[2])  # x = (1, 2, 3)
    want2 = h1 * E[1] + h1 * E[3]  # x = (3, 1): h_{f,1} e(1) + h_{b,2} e(3)
    want1 = 0.0  # one word: no neighbour on either side
    torch.testing.assert_close(u, torch.tensor([want3, want2, want1], dtype=torch.float64), rtol=0, atol=1e-12)


def test_eq3_potential_sums_neighbour_states_against_output_embeddings():
    before = torch.tensor([[[0.0, 0.0], [1.0, 2.0], [3.0, -1.0]]])  # (1, 3, 2)
    after = torch.tensor([[[0.5, 0.5], [-2.0, 1.0], [9.0, 9.0]]])  # last position is padding
    emb = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # (4, 2)
    ids = torch.tensor([[3, 1, 0]])
    mask = torch.tensor([[True, True, False]])
    # t=1: (0+0.5, 0+0.5)·(1, 1) = 1; t=2: (1−2, 2+1)·(1, 0) = −1; t=3 padding
    torch.testing.assert_close(eq3_potential(before, after, emb, ids, mask), torch.tensor([0.0]))


def test_log_density_and_length_distribution():
    pi = length_distribution([1, 2, 2, 3], 4)
    torch.testing.assert_close(pi, torch.tensor([0, 0.25, 0.5, 0.25, 0], dtype=torch.float64))
    head = TRFHead(5, 2, pi, zeta_per_token=1.5)
    assert head.max_len == 4
    u = torch.tensor([0.3, -1.0])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    want = torch.tensor([0.3 - 3.0 + math.log(0.5), -1.0 - 1.5 + math.log(0.25)])
    torch.testing.assert_close(head.log_density(u, mask), want)
    with pytest.raises(ValueError, match="lengths must lie in"):
        length_distribution([0, 2], 4)
    with pytest.raises(ValueError, match="lengths must lie in"):
        head.log_density(u, torch.ones(2, 5, dtype=torch.bool))  # length 5 > L = 4


def test_marginal_potential_is_the_crf_log_partition_and_gradients_reach_the_bilstm():
    torch.manual_seed(0)
    tagger = BiLSTMCRF(TaggerSpec(vocab_size=6, tags=["A", "B", "C"], embed=4, hidden=3))
    head = TRFHead(6, 3, length_distribution([2, 3], 3))
    ids = torch.tensor([[1, 2, 3], [4, 5, 0]])
    mask = ids != 0
    u_joint = head.marginal_potential(tagger, ids, mask)
    phi = tagger.potentials(ids, mask)
    brute = []
    for b, n in enumerate((3, 2)):
        scores = []
        for y in torch.cartesian_prod(*[torch.arange(3)] * n):
            scores.append(phi[b, torch.arange(n), y].sum() + tagger.transitions[y[:-1], y[1:]].sum())
        brute.append(torch.logsumexp(torch.stack(scores), 0))
    torch.testing.assert_close(u_joint, torch.stack(brute), rtol=1e-5, atol=1e-5)
    head.log_density(head.potential(tagger, ids, mask), mask).sum().backward()
    assert tagger.lstm.weight_hh_l0.grad.abs().sum() > 0 and head.out_embed.grad.abs().sum() > 0
    assert head.zeta.grad[2] == -1 and head.zeta.grad[3] == -1


def test_dnce_learns_a_normalised_trf_of_a_tiny_language():
    """The pieces together, one DNCE step as `tag train` will run it: real sentences, noise
    sentences mixed into the data side (α = 0.5) and as noise (ν = 1), the noise LM trained by its
    own likelihood. On every sentence of two words and lengths 1..3 the TRF ends up normalised
    (Σ_x p(l, x) ≈ 1, from 0.42) and close to p_d (KL from 1.4 to below 0.15)."""
    torch.manual_seed(0)
    seqs = [s for n in (1, 2, 3) for s in itertools.product((1, 2), repeat=n)]
    ids_all = torch.tensor([list(s) + [0] * (3 - len(s)) for s in seqs])  # (14, 3)
    mask_all = ids_all != 0
    # p_d: alternating words preferred, word 1 first preferred (one-word sentences are uniform:
    # eq. (3) gives every one-word sentence u = 0)
    w = torch.tensor([math.exp(2.0 * sum(a != b for a, b in itertools.pairwise(s)) + (1.0 if s[0] == 1 and len(s) > 1 else 0.0))
                      for s in seqs])
    pi = torch.tensor([0, 0.2, 0.3, 0.5], dtype=torch.float64)
    lens = mask_all.sum(1)
    p_d = torch.zeros(len(seqs))
    for n in (1, 2, 3):
        p_d[lens == n] = w[lens == n] / w[lens == n].sum() * pi[n]
    tagger = BiLSTMCRF(TaggerSpec(vocab_size=3, tags=["A"], embed=8, hidden=8))
    head = TRFHead(3, 8, pi)
    noise = NoiseLM(3, pi, embed=8, hidden=8)
    opt = torch.optim.Adam([*tagger.parameters(), *head.parameters(), *noise.parameters()], lr=0.03)
    g = torch.Generator().manual_seed(1)
    alpha, nu, B = 0.5, 1.0, 64

    def kl_and_mass():
        with torch.no_grad():
            lp = head.log_density(head.potential(tagger, ids_all, mask_all), mask_all)
        return (p_d * (p_d.log() - lp)).sum().item(), lp.exp().sum().item()

    kl0, mass0 = kl_and_mass()
    for _ in range(200):
        pick = torch.multinomial(p_d, B, replacement=True, generator=g)
        xd, md = ids_all[pick], mask_all[pick]  # (B, 3)
        k = mixed_noise_count(B, alpha)
        xn, _, lqn = noise.sample(k + int(nu * (B + k)), generator=g)  # data side's k, then the noise
        T = max(3, xn.shape[1])
        ids = torch.cat([torch.nn.functional.pad(xd, (0, T - 3)), torch.nn.functional.pad(xn, (0, T - xn.shape[1]))])
        mask = ids != 0
        lqd = noise.log_prob(xd, md)  # (B,) with gradient: the noise's own loss
        log_p = head.log_density(head.potential(tagger, ids, mask), mask)
        is_data = torch.arange(ids.shape[0]) < B + k
        loss = dnce_loss(log_p, torch.cat([lqd, lqn.float()]), is_data, alpha, nu).loss + noise_nll(lqd, md.sum())
        opt.zero_grad()
        loss.backward()
        opt.step()
    kl, mass = kl_and_mass()
    assert kl0 > 1.0 and mass0 < 0.6
    assert kl < 0.15 and 0.85 < mass < 1.15, (kl, mass)
