"""Paper d's joint model on a toy world small enough to enumerate: a vocabulary of 4 tokens (plus
the layout symbols the base LM never writes), 3 generated tokens after a prefix, a tiny random
Llama as the base LM and a causal energy. Every probability here is checked against brute-force
enumeration of the 4^3 continuations."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from conftest import word_tokenizer

from textebm.models.build import SmallLMConfig, build_causal_lm
from textebm.models.lm import LMMeta
from textebm.models.seq_energy import EnergySpec, build_energy
from textebm.residual.joint import BaseLM, JointEnergy

WORDS = ["a", "b", "c", "d"]
PREFIX = [3, 4, 6, 5]  # a b d c
M = 3  # generated tokens


def toy_tokenizer():
    return word_tokenizer(WORDS)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The toy models' ops are tiny: a second thread only waits on a busy CPU (50x slower here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def world():
    torch.manual_seed(0)
    tok = toy_tokenizer()
    meta = LMMeta(bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    lm = build_causal_lm(SmallLMConfig(1, 16, 2, context=16), tok, seed=0).eval()
    with torch.no_grad():  # sharper than a fresh init: P_LM far from uniform (top continuation 0.16,
        lm.lm_head.weight.mul_(5)  # entropy 3.55 nats of log 64 = 4.16), yet every continuation reachable
    body = build_causal_lm(SmallLMConfig(1, 16, 2, context=16), tok, seed=1).model
    spec = EnergySpec(kind="unitransf", vocab_size=len(tok), length=len(PREFIX) + M)
    energy = build_energy(spec, body).eval()
    with torch.no_grad():
        energy.out.weight.normal_(0, 3.0)
    # float64 throughout: the enumerations below are exact to 1e-10
    return {"base": BaseLM(lm.double(), tok, meta, tok), "energy": JointEnergy(energy.double(), spec, tok, tok),
            "tok": tok}


def all_continuations():
    return [list(c) for c in itertools.product(range(3, 7), repeat=M)]


def test_base_lm_bans_layout_symbols_and_normalises_over_fixed_length_continuations(world):
    base = world["base"]
    conts = all_continuations()
    lp = base.continuation_logprobs([PREFIX] * len(conts), conts)  # (64, 3)
    assert math.isclose(float(np.logaddexp.reduce(lp.sum(1))), 0.0, abs_tol=1e-10)
    # each factor is the next-token distribution with [pad] [bos] [eos] removed and renormalised
    nxt = base.next_logprobs([base.context(PREFIX)])[0]
    assert torch.isinf(nxt[:3]).all() and math.isclose(float(nxt.exp().sum()), 1.0, abs_tol=1e-12)
    assert np.allclose(lp[:, 0], nxt[[c[0] for c in conts]].numpy(), atol=1e-12)


def test_unit_energy_with_the_prefix_cached_equals_the_full_pass(world):
    en = world["energy"]
    conts = all_continuations()
    fast = en.continuation_energies(PREFIX, conts, batch_size=7)
    slow = en.energies([PREFIX + c for c in conts])
    assert np.abs(fast - slow).max() < 1e-10
    assert slow.std() > 0.5  # the energies differ enough for the tests below to mean something


def test_the_cached_path_equals_the_full_pass_in_fp32_too(world):
    """`residual ppl` runs fp32 by default: a test window's energy (the full pass) and its samples'
    (the prefix-cached path) agree there too, to 1e-5, so no offset between the two enters log Z."""
    import copy

    en = world["energy"]
    fp32 = JointEnergy(copy.deepcopy(en.model).float(), en.spec, en.tokenizer, en.vocab)
    conts = all_continuations()
    fast = fp32.continuation_energies(PREFIX, conts, batch_size=7)
    slow = fp32.energies([PREFIX + c for c in conts])
    assert np.abs(fast - slow).max() < 1e-5


def test_continuation_pooling_by_hand_and_with_the_prefix_cached(world):
    """--pool continuation: the mean of the body's top states over the positions after the prefix
    (a hand computation from the body's states), identical through the prefix-cached path; a prefix
    of another length is refused there."""
    tok = world["tok"]
    body = build_causal_lm(SmallLMConfig(1, 16, 2, context=16), tok, seed=2).model
    spec = EnergySpec(kind="unitransf", vocab_size=len(tok), length=len(PREFIX) + M, pool="continuation",
                      contexts=[len(PREFIX)])
    model = build_energy(spec, body).double().eval()
    with torch.no_grad():
        model.out.weight.normal_(0, 3.0)
    en = JointEnergy(model, spec, tok, tok)
    conts = all_continuations()
    ids = torch.tensor([PREFIX + c for c in conts[:5]])  # (5, 7)
    with torch.no_grad():
        h = body(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state  # (5, 7, H)
        want = (h[:, len(PREFIX):].mean(1) @ model.out.weight.T + model.out.bias).squeeze(-1)  # (5,)
    assert np.abs(en.energies(ids.tolist()) - want.numpy()).max() < 1e-12
    fast = en.continuation_energies(PREFIX, conts, batch_size=7)
    slow = en.energies([PREFIX + c for c in conts])
    assert np.abs(fast - slow).max() < 1e-10 and slow.std() > 0.1
    with pytest.raises(ValueError, match="after 4 tokens; the prefix has 3"):
        from textebm.residual.joint import _unit_energies

        _unit_energies(model, PREFIX[:3], conts[:2], 7)
    # eq. 5's contexts: a prefix longer than the pooled one (its extra tokens pooled, run with each
    # continuation) and a shorter one (read in full) give the full pass's energies too
    for head in (PREFIX + [5], PREFIX + [5, 3], PREFIX[:3]):
        tails = [c[:len(PREFIX) + M - len(head)] for c in conts[:9]]
        got = en.continuation_energies(head, tails, batch_size=4)
        np.testing.assert_allclose(got, en.energies([head + t for t in tails]), rtol=0, atol=1e-10)


def test_exact_last_position_equals_enumeration(world):
    from textebm.residual.bounds import exact_last_log_z

    base, en = world["base"], world["energy"]
    head = PREFIX + [4, 5]
    z = exact_last_log_z(base, en, head)
    lp = base.next_logprobs([base.context(head)])[0].numpy()
    terms = [lp[v] - float(en.energies([head + [v]])[0]) for v in range(3, 7)]
    assert abs(z - float(np.logaddexp.reduce(terms))) < 1e-10


# ---------------------------------------------------------------- the toy world enumerated

LOG_NO = float("-inf")


def index_of(cont) -> int:
    """Position of a continuation in `all_continuations()` (base 4, first token most significant)."""
    return int(sum((t - 3) * 4 ** (M - 1 - i) for i, t in enumerate(cont)))


def enumerated_logq(base, prefix, top_k: int) -> np.ndarray:
    """log q(c) (64,) of each continuation under the sampling distribution of `base.sample`: at each
    step the base LM's next-token distribution (banned tokens removed), cut to its `top_k` most
    likely tokens and renormalised (0: untruncated), by scoring every context of every length."""
    logq = np.zeros(4 ** M)
    for t in range(M):
        heads = [list(h) for h in itertools.product(range(3, 7), repeat=t)]  # (4^t,)
        lp = base.next_logprobs([base.context(list(prefix) + h) for h in heads]).numpy()  # (4^t, V)
        if top_k:
            cut = np.argsort(-lp, axis=1)[:, top_k:]  # (4^t, V-k) the tokens top-k drops
            np.put_along_axis(lp, cut, LOG_NO, axis=1)
            lp = lp - np.logaddexp.reduce(lp, axis=1, keepdims=True)
        for i, c in enumerate(all_continuations()):
            logq[i] += lp[index_of(c[:t] + [3] * (M - t)) // 4 ** (M - t), c[t]]
    return logq


@pytest.fixture(scope="module")
def exact(world):
    """Everything about the prefix's 64 continuations, by enumeration: log P_LM (64,), E (64,),
    log Z = log Σ P_LM exp(−E), the joint's log-probabilities (64,) and the top-2 sampling
    distribution's log q (64,)."""
    base, en = world["base"], world["energy"]
    conts = all_continuations()
    lp = base.continuation_logprobs([PREFIX] * len(conts), conts).sum(1)  # (64,)
    e = en.energies([PREFIX + c for c in conts])  # (64,) the slow path
    log_z = float(np.logaddexp.reduce(lp - e))
    return {"conts": conts, "lp": lp, "e": e, "log_z": log_z, "joint": lp - e - log_z,
            "q0": enumerated_logq(base, PREFIX, 0), "q2": enumerated_logq(base, PREFIX, 2)}


def test_enumerated_sampling_distributions(exact):
    """The enumeration's own check: untruncated q is P_LM, top-2 q lives on 2^3 continuations."""
    np.testing.assert_allclose(exact["q0"], exact["lp"], atol=1e-10)
    for key in ("q0", "q2"):
        assert math.isclose(float(np.logaddexp.reduce(exact[key])), 0.0, abs_tol=1e-10)
    assert int(np.isfinite(exact["q2"]).sum()) == 8


def resampling_distribution(logq: np.ndarray, e: np.ndarray, n: int) -> np.ndarray:
    """Algorithm 1's EXACT output distribution (64,) for n candidates drawn i.i.d. from q:
    P(out = x) = Σ over candidate tuples of Π q(x_i) · Σ_i 1{x_i = x} w_i / Σ_j w_j, w = exp(−E),
    every tuple of the support enumerated."""
    support = np.flatnonzero(np.isfinite(logq))  # (S,)
    tuples = np.array(list(itertools.product(support, repeat=n)))  # (S^n, n)
    prob = np.exp(logq[tuples].sum(1))  # (S^n,)
    w = np.exp(-(e - e.min()))[tuples]  # (S^n, n)
    share = w / w.sum(1, keepdims=True)  # (S^n, n)
    out = np.zeros(len(logq))
    for i in range(n):
        np.add.at(out, tuples[:, i], prob * share[:, i])
    return out


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's chi-square of `counts` against `probs`, cells expected below 5 pooled; a count
    in a cell of probability 0 fails."""
    from scipy.stats import chisquare

    expected = counts.sum() * probs
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] < 5:  # the pooled cell still small: merged into the smallest other cell
        j = int(np.argmin(exp[:-1]))
        obs[j], exp[j] = obs[j] + obs[-1], exp[j] + exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    assert counts[probs == 0].sum() == 0 and len(obs) >= 3
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("n,top_k,draws", [(3, 0, 900), (2, 2, 500)])
def test_joint_sampling_frequencies_match_the_exact_finite_n_distribution(world, exact, n, top_k, draws):
    """Algorithm 1 (`joint_sample`), one seed per draw: the outputs' frequencies pass a chi-square
    test against the exact finite-n resampling distribution (0.1 % level), and the same counts
    reject the base LM's sampling distribution and the n → ∞ limit q·exp(−E)/Z, so the test can
    tell them apart."""
    from textebm.residual.generate import joint_sample

    base, en = world["base"], world["energy"]
    logq = exact["q2" if top_k else "q0"]
    counts = np.zeros(4 ** M, dtype=np.int64)
    for s in range(draws):
        out = joint_sample(base, en, PREFIX, M, n, top_k, seed=s, batch_size=n)
        counts[index_of(out.tokens)] += 1
        if s < 3:  # what a sample records: its candidates' log q (fp32 sampler) and energies
            idx = [index_of(c) for c in out.candidates]
            np.testing.assert_allclose(out.logq, logq[idx], atol=1e-5)
            np.testing.assert_allclose(out.energies, exact["e"][idx], atol=1e-10)
    finite_n = resampling_distribution(logq, exact["e"], n)
    assert math.isclose(finite_n.sum(), 1.0, abs_tol=1e-12)
    assert chi_square_pvalue(counts, finite_n) > 1e-3
    limit = np.exp(logq - exact["e"] - np.logaddexp.reduce(logq - exact["e"]))
    assert chi_square_pvalue(counts, np.exp(logq)) < 1e-4
    assert top_k or chi_square_pvalue(counts, limit) < 1e-4


def test_joint_sampling_at_large_n_approaches_the_top_k_joint(world, exact):
    """One `joint_sample` with n = 3,000 top-2 candidates: the candidates follow q (chi-square), and
    the resampling distribution they give (each candidate's weight, summed per continuation: the
    output's law given the candidates, whose draw is tested in test_residual_partition) is within
    5 standard errors (delta method, from the enumeration) of P_LM^top-2 exp(−E) / Z in every cell."""
    from textebm.residual.generate import joint_sample

    n = 3000
    logq, e = exact["q2"], exact["e"]
    out = joint_sample(world["base"], world["energy"], PREFIX, M, n, 2, seed=7)
    idx = np.array([index_of(c) for c in out.candidates])  # (n,)
    assert chi_square_pvalue(np.bincount(idx, minlength=4 ** M), np.exp(logq)) > 1e-3
    got = np.bincount(idx, weights=out.weights, minlength=4 ** M)  # (64,)
    q = np.exp(logq)
    w = np.exp(-(e - e.min()))
    limit = q * w / (q @ w)  # (64,)
    r = w / (q @ w)  # (64,) weight relative to its mean under q
    se = np.sqrt(np.array([q @ (r * ((np.arange(64) == x) - limit[x])) ** 2 for x in range(64)]) / n)
    assert np.all(np.abs(got - limit) <= 5 * se + 1e-12)
    assert 1 <= out.ess <= n and math.isclose(out.weights.sum(), 1.0, abs_tol=1e-12)


@pytest.mark.parametrize("top_k", [0, 2])
def test_joint_sample_does_not_depend_on_the_batch_size(world, top_k):
    from textebm.residual.generate import joint_sample

    base, en = world["base"], world["energy"]
    ref = joint_sample(base, en, PREFIX, M, 9, top_k, seed=3, batch_size=64)
    for bs in (1, 4):
        got = joint_sample(base, en, PREFIX, M, 9, top_k, seed=3, batch_size=bs)
        assert got.candidates == ref.candidates and got.index == ref.index
        np.testing.assert_allclose(got.energies, ref.energies, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.weights, ref.weights, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.logq, ref.logq, rtol=0, atol=1e-6)
    assert len(set(map(tuple, ref.candidates))) > 1  # seeded per candidate, not one seed for all


def test_sample_energies_do_not_depend_on_chunk_or_batch_size(world, exact):
    """Sample i is seeded by (seed, i): the same energies for any chunk and batch size, and the
    first k of n samples are the k samples of a run of k (what makes the size ladder one run)."""
    from textebm.residual.bounds import sample_energies

    base, en = world["base"], world["energy"]
    ref = sample_energies(base, en, PREFIX, M, 12, seed=5)
    assert len(set(ref.round(9))) > 3
    assert np.isin(ref.round(9), exact["e"].round(9)).all()  # each one a continuation's energy
    ticks = []
    for chunk, bs in ((5, 3), (1, 1), (12, 2)):
        got = sample_energies(base, en, PREFIX, M, 12, seed=5, chunk=chunk, batch_size=bs, tick=ticks.append)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    assert ticks[:3] == [5, 5, 2] and sum(ticks) == 36
    np.testing.assert_allclose(sample_energies(base, en, PREFIX, M, 7, seed=5, chunk=3), ref[:7], rtol=0, atol=1e-12)


def test_conditional_nce_recovers_the_energy_up_to_log_z(exact):
    """Eq. 3 (`residual_bce`, one noise sample of K = 4 drawn per positive) on a table energy over
    the 64 continuations: positives sampled from the joint P_LM exp(−E) / Z, negatives from
    P_LM, fresh minibatches every step (Adam, cosine decay). Its optimum is E + log Z (the
    classifier's log-odds log P_joint / P_LM = −E − log Z), so on every continuation both models
    visit (P ≥ 0.005 under each), E_learned − E_true is log Z within 0.02 on average (P_LM-weighted)
    and within 0.15 everywhere."""
    from textebm.losses.residual import residual_bce

    p_lm, p_joint = np.exp(exact["lp"]), np.exp(exact["joint"])
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    table = torch.zeros(4 ** M, dtype=torch.float64, requires_grad=True)  # E_θ(x) for each continuation
    opt = torch.optim.Adam([table], lr=0.1)
    steps, b, k = 800, 1024, 4
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    for _ in range(steps):
        pos = torch.from_numpy(rng.choice(4 ** M, size=b, p=p_joint / p_joint.sum()))  # (B,)
        neg = torch.from_numpy(rng.choice(4 ** M, size=(b, k), p=p_lm / p_lm.sum()))  # (B, K)
        loss = residual_bce(table[pos], table[neg], "random", gen).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    diff = table.detach().numpy() - exact["e"]  # (64,)
    seen = (p_lm >= 0.005) & (p_joint >= 0.005)
    assert seen.sum() >= 15
    wts = p_lm[seen] / p_lm[seen].sum()
    assert abs(wts @ diff[seen] - exact["log_z"]) < 0.02
    assert np.abs(diff[seen] - exact["log_z"]).max() < 0.15
    assert abs(exact["log_z"]) > 1.0  # the constant is not 0 by accident


def conditional_partitions(exact, cont) -> list[tuple[float, float]]:
    """(log Z_j, relative variance of exp(−E)) for j = 0..M tokens of `cont` fixed, by enumeration:
    Z_j = Σ over continuations starting with cont[:j] of P_LM(rest | prefix, cont[:j]) exp(−E)."""
    out = []
    for j in range(M + 1):
        match = np.array([c[:j] == list(cont[:j]) for c in exact["conts"]])  # (64,)
        lp = exact["lp"][match] - np.logaddexp.reduce(exact["lp"][match])  # (64/4^j,) P_LM(rest | ...)
        p, w = np.exp(lp), np.exp(-exact["e"][match])
        z = float(p @ w)
        out.append((math.log(z), float(p @ (w - z) ** 2) / z ** 2))
    return out


def test_position_bounds_against_enumeration(world, exact):
    """Eq. 5 at n = 2,000 on the joint's most likely continuation: the exact log P(x_t | x_<t) of
    the joint by marginalising the enumerated joint; `lp_lm` equal to P_LM's conditionals and the
    last position's `exact` equal to enumeration to 1e-10; lower ≤ upper, and each estimate within
    5 standard errors of T_n (from the enumerated relative variances) of the exact value; the
    exact values sum to log P_LM(cont) − E(x) − log Z_p, and the bounds to the window's."""
    from textebm.residual.bounds import position_bounds, window_bounds

    n = 2000
    best = int(np.argmax(exact["joint"]))
    cont = exact["conts"][best]
    joint = exact["joint"].reshape(4, 4, 4)  # (x1, x2, x3)
    lm = exact["lp"].reshape(4, 4, 4)
    a, b, c = (t - 3 for t in cont)
    marg = [np.logaddexp.reduce(joint.reshape(-1)), np.logaddexp.reduce(joint[a].reshape(-1)),
            np.logaddexp.reduce(joint[a, b]), joint[a, b, c]]  # log P_joint(x_≤t), t = 0..3
    want = np.diff(marg)  # (3,) log P(x_t | x_<t) of the joint
    lm_marg = [0.0, np.logaddexp.reduce(lm[a].reshape(-1)), np.logaddexp.reduce(lm[a, b]), lm[a, b, c]]
    want_lm = np.diff(lm_marg)  # (3,) log P_LM(x_t | x_<t)
    assert abs(want.sum() - (exact["lp"][best] - exact["e"][best] - exact["log_z"])) < 1e-10
    zs = conditional_partitions(exact, cont)
    eq5 = [want_lm[i] + zs[i + 1][0] - zs[i][0] for i in range(M)]  # eq. 5 with the exact Z_j
    np.testing.assert_allclose(eq5, want, rtol=0, atol=1e-10)

    got = position_bounds(world["base"], world["energy"], "w0", PREFIX + cont, len(PREFIX), n, seed=11)
    rows = got["positions"]
    assert got["key"] == "w0" and [r["position"] for r in rows] == [1, 2, 3]
    np.testing.assert_allclose([r["lp_lm"] for r in rows], want_lm, rtol=0, atol=1e-10)
    assert abs(rows[-1]["exact"] - want[-1]) < 1e-10
    assert all("exact" not in r for r in rows[:-1])
    for i, r in enumerate(rows):
        tol = 5 * (math.sqrt(zs[i][1] / n) + math.sqrt(zs[i + 1][1] / n))  # Z_M is exact: variance 0
        assert r["lower"] <= r["upper"]
        assert abs(r["lower"] - want[i]) < tol and abs(r["upper"] - want[i]) < tol, (i, r, want[i], tol)
    assert zs[M][1] < 1e-20 and zs[0][1] > 0.1  # the samples have something to estimate
    # summed over positions the bounds telescope to the window's, from the same samples of Z_p
    # (window_bounds draws them with position_bounds' seed): Σ lower + Σ upper
    # = 2 (log P_LM(cont) − E(x)) − T_n(Z_p) − U_n(Z_p), each inner Z_j's T and U cancelling
    win = window_bounds(world["base"], world["energy"], "w0", PREFIX + cont, len(PREFIX), n, seed=11)
    t_p, u_p = win.estimates[n]
    lp_e = math.fsum(r["lp_lm"] for r in rows) - win.energy
    total = math.fsum(r["lower"] for r in rows) + math.fsum(r["upper"] for r in rows)
    assert abs(total - (2 * lp_e - t_p - u_p)) < 1e-9
    assert math.fsum(r["lower"] for r in rows) <= lp_e - u_p + 1e-12  # wider than the window's bounds


def test_window_bounds_bracket_the_enumerated_log_z(world, exact):
    """`window_bounds` at n = 4,000: the base LM's token log-probabilities and E(x) as enumerated,
    the ladder 2, 4, .., 2048, 4000, T_n ≤ U_n at every size and T_n, U_n within 4 standard errors
    of the enumerated log Z, so the perplexity bounds bracket the exact joint perplexity within
    that tolerance."""
    from textebm.residual.bounds import (
        WindowBounds,
        ladder,
        perplexities,
        window_bounds,
    )

    n = 4000
    cont = [5, 3, 6]
    i = index_of(cont)
    row = window_bounds(world["base"], world["energy"], "w1", PREFIX + cont, len(PREFIX), n, seed=2)
    assert sorted(row.estimates) == ladder(n) == [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4000]
    assert math.isclose(math.fsum(row.lp_lm), exact["lp"][i], abs_tol=1e-10)
    assert len(row.lp_lm) == M and abs(row.energy - exact["e"][i]) < 1e-10
    assert all(t <= u for t, u in row.estimates.values())
    log_z, relvar = conditional_partitions(exact, cont)[0]
    tol = 4 * math.sqrt(relvar / n)
    t, u = row.estimates[n]
    assert t - tol <= log_z <= u + tol and u - t < tol
    ppl = perplexities([row])
    true_ppl = math.exp(-exact["joint"][i] / M)
    assert ppl["joint_ppl_lower"] * math.exp(-tol / M) <= true_ppl <= ppl["joint_ppl_upper"] * math.exp(tol / M)
    assert math.isclose(ppl["base_ppl"], math.exp(-exact["lp"][i] / M), rel_tol=1e-12)
    assert WindowBounds.from_row(row.as_row()) == row


def test_perplexities_by_hand():
    """Two hand-made windows (2 and 3 tokens): the token perplexities and the gap by size."""
    from textebm.residual.bounds import WindowBounds, gap_by_size, perplexities

    rows = [WindowBounds("a", [-1.0, -2.0], 0.5, {2: (-1.5, -0.5), 4: (-1.2, -0.9)}),
            WindowBounds("b", [-0.5, -1.5, -3.0], -1.0, {2: (0.5, 1.5), 4: (0.2, 0.4)})]
    # at n = 4: Σ log P_LM = -8, Σ E = -0.5, Σ T = -1.0, Σ U = -0.5, 5 tokens
    got = perplexities(rows)
    assert got["windows"] == 2 and got["tokens"] == 5 and got["samples"] == 4
    assert got["base_ppl"] == pytest.approx(math.exp(8 / 5), rel=1e-14)
    assert got["joint_ppl_lower"] == pytest.approx(math.exp((8 - 0.5 - 1.0) / 5), rel=1e-14)  # -(lp - E - T)/5
    assert got["joint_ppl_upper"] == pytest.approx(math.exp((8 - 0.5 - 0.5) / 5), rel=1e-14)
    at2 = perplexities(rows, 2)  # Σ T = -1.0, Σ U = 1.0
    assert at2["joint_ppl_lower"] == pytest.approx(math.exp(6.5 / 5), rel=1e-14)
    assert at2["joint_ppl_upper"] == pytest.approx(math.exp(8.5 / 5), rel=1e-14)
    gaps = gap_by_size(rows)
    assert [g["samples"] for g in gaps] == [2, 4]
    assert gaps[0]["gap"] == pytest.approx(math.exp(8.5 / 5) - math.exp(6.5 / 5), rel=1e-13)
    assert gaps[1]["lower"] == pytest.approx(got["joint_ppl_lower"], rel=1e-14)


def test_perplexity_differences_resample_windows_with_their_log_z_held_fixed():
    """Three hand-made windows against the exact bootstrap distribution: every ordered resample of
    the windows' rows (each row with its own T_n, U_n) through `perplexities`, the independent
    reference; each of the 27 has probability 1/27 > 2.5 %, so the 95 % interval is their range."""
    import itertools

    from textebm.residual.bounds import WindowBounds, perplexities, perplexity_differences, window_nll

    rows = [WindowBounds("a", [-1.0, -2.0], 0.5, {2: (-1.5, -0.9)}),  # E + U < 0: the joint model wins
            WindowBounds("b", [-0.5, -1.5, -3.0], -1.0, {2: (0.2, 0.5)}),
            WindowBounds("c", [-2.0, -0.5], 0.2, {2: (-0.6, -0.3)})]
    other = np.array([2.5, 5.5, 2.0])  # (W,) another LM's summed NLL of the same windows
    w = window_nll(rows)
    np.testing.assert_allclose(w["tokens"], [2, 3, 2])
    np.testing.assert_allclose(w["base"], [3.0, 5.0, 2.5])
    np.testing.assert_allclose(w["upper"], [3.0 + 0.5 - 0.9, 5.0 - 1.0 + 0.5, 2.5 + 0.2 - 0.3])  # -(lp - E - U)
    np.testing.assert_allclose(w["lower"], [3.0 + 0.5 - 1.5, 5.0 - 1.0 + 0.2, 2.5 + 0.2 - 0.6])  # -(lp - E - T)
    got = perplexity_differences([("joint", w)], [("base LM", w["base"]), ("ralm", other)], n_boot=20000, seed=0)
    assert [(d["a"], d["b"]) for d in got] == [("joint", "base LM"), ("joint", "ralm")]
    p = perplexities(rows)
    vs_base = got[0]
    assert vs_base["upper"]["diff"] == pytest.approx(p["joint_ppl_upper"] - p["base_ppl"], rel=1e-12)
    assert vs_base["lower"]["diff"] == pytest.approx(p["joint_ppl_lower"] - p["base_ppl"], rel=1e-12)
    assert vs_base["gap_a"] == pytest.approx(p["joint_ppl_upper"] - p["joint_ppl_lower"], rel=1e-12)
    assert vs_base["gap_b"] is None
    assert got[1]["upper"]["diff"] == pytest.approx(p["joint_ppl_upper"] - math.exp(10.0 / 7), rel=1e-12)
    draws = [perplexities([rows[i] for i in d]) for d in itertools.product(range(3), repeat=3)]
    for bound in ("upper", "lower"):
        exact = [q[f"joint_ppl_{bound}"] - q["base_ppl"] for q in draws]
        assert vs_base[bound]["lo"] == pytest.approx(min(exact), rel=1e-12)
        assert vs_base[bound]["hi"] == pytest.approx(max(exact), rel=1e-12)
    # the joint model is below the base LM on every window, so on every resample: told from 0
    assert vs_base["upper"]["hi"] < 0 and vs_base["can_tell_from_zero"] is True
    # two joint models: upper against upper, lower against lower, both gaps; one mixed difference
    shifted = {**w, "lower": w["lower"] + np.array([-1.0, 1.0, 0.0]), "upper": w["upper"] + np.array([-1.0, 1.0, 0.0])}
    two = perplexity_differences([("joint", w), ("joint 2", shifted)], [("base LM", w["base"])], n_boot=2000, seed=0)
    jj = two[-1]
    assert (jj["a"], jj["b"]) == ("joint", "joint 2") and jj["gap_b"] is not None
    assert jj["upper"]["lo"] < 0 < jj["upper"]["hi"] and jj["can_tell_from_zero"] is False
    assert perplexity_differences([("joint", w)], [("base LM", w["base"])], n_boot=0)[0]["can_tell_from_zero"] is None


# ---------------------------------------------------------------- the next token under the joint model (table 3)


def exact_next_token(exact, head: list[int]) -> dict:
    """By enumeration, after PREFIX + head (the continuation's first tokens): the joint model's
    log P(w | x_<t) (4,) marginalised from the enumerated joint, P_LM's (4,), log Z(x_<t w) (4,) and
    the relative variance of exp(−E) under each candidate's completions (4,), and log Z(x_<t)."""
    j = len(head)
    joint = exact["joint"].reshape((4,) * M)[tuple(t - 3 for t in head)]  # (4, ...) over x_t, x_>t
    lm = exact["lp"].reshape((4,) * M)[tuple(t - 3 for t in head)]
    e = exact["e"].reshape((4,) * M)[tuple(t - 3 for t in head)]
    flat = lambda a: a.reshape(4, -1)  # noqa: E731  (4, 4^(M-j-1)) candidate x completion
    lm_rest = flat(lm) - np.logaddexp.reduce(flat(lm), axis=1, keepdims=True)  # log P_LM(x_>t | x_<t w)
    p, w = np.exp(lm_rest), np.exp(-flat(e))
    z = (p * w).sum(1)  # (4,)
    relvar = (p * (w - z[:, None]) ** 2).sum(1) / z ** 2  # (4,)
    lm_next = np.logaddexp.reduce(flat(lm), axis=1) - np.logaddexp.reduce(lm.reshape(-1))  # (4,)
    joint_next = np.logaddexp.reduce(flat(joint), axis=1) - np.logaddexp.reduce(joint.reshape(-1))  # (4,)
    log_z_ctx = float(np.logaddexp.reduce(lm_next + np.log(z)))
    assert M - j - 1 > 0 or np.all(relvar < 1e-20)
    return {"joint": joint_next, "lm": lm_next, "log_z": np.log(z), "relvar": relvar, "log_z_context": log_z_ctx}


def test_next_token_joint_against_enumeration(world, exact):
    """Table 3's estimator after PREFIX + [b] (x_t with one token after it) at n = 2,000 completions:
    P_LM of every candidate exact, each candidate's log Z(x_<t w) within 5 standard errors of the
    enumerated value; with K = 4 (the whole vocabulary) the renormalised joint is eq. 5 itself, within
    the same tolerance of the enumerated joint's conditional, and its candidates hold all the joint's
    mass; at the window's last token (no completion) everything is exact."""
    from textebm.residual.bounds import next_token_joint

    base, en, n = world["base"], world["energy"], 2000
    head = [4]
    ref = exact_next_token(exact, head)
    assert np.ptp(ref["joint"] - ref["lm"]) > 0.2  # the energy moves the next-token distribution
    nt = next_token_joint(base, en, PREFIX + head, 1, 4, n, seed=3)
    ids = np.array(nt.candidates) - 3  # (4,) as indices 0..3
    assert sorted(nt.candidates) == [3, 4, 5, 6] and list(np.argsort(-ref["lm"], kind="stable")) == list(ids)
    np.testing.assert_allclose(nt.lp_lm, ref["lm"][ids], rtol=0, atol=1e-10)
    se = np.sqrt(ref["relvar"][ids] / n)  # (4,) of T_n
    assert np.all(np.abs(np.array(nt.log_z) - ref["log_z"][ids]) < 5 * se), (nt.log_z, ref["log_z"][ids], se)
    assert np.all(np.array(nt.log_z) <= np.array(nt.log_z_upper) + 1e-12)
    np.testing.assert_allclose(nt.lm(), ref["lm"][ids], rtol=0, atol=1e-10)  # K = V: nothing to renormalise
    assert np.all(np.abs(nt.joint() - ref["joint"][ids]) < 5 * (se + se.max()))
    mass = nt.mass()
    assert mass["lm"] == pytest.approx(1.0, abs=1e-10) and abs(mass["joint"] - 1.0) < 0.1
    assert abs(nt.log_z_context - ref["log_z_context"]) < 0.1
    assert nt.settings == {"k": 4, "completions": n, "rest": 1}
    # the last token: Z(x_<T w) = exp(−E(x_<T w)), so eq. 5 renormalised over all 4 is exact
    last = PREFIX + [4, 6]
    ref = exact_next_token(exact, [4, 6])
    nt = next_token_joint(base, en, last, 0, 4, 8, seed=3)
    ids = np.array(nt.candidates) - 3
    np.testing.assert_allclose(nt.joint(), ref["joint"][ids], rtol=0, atol=1e-10)
    np.testing.assert_allclose(nt.log_z, ref["log_z"][ids], rtol=0, atol=1e-10)
    assert nt.log_z == nt.log_z_upper and nt.settings["completions"] == 0


def test_next_token_joint_renormalises_over_k_and_seeds_each_candidate_alone(world, exact):
    """K = 2 and a repeated token outside the top 2: three candidates, the renormalised joint is
    the enumerated joint restricted to them and renormalised (last token: exact); each candidate's
    estimate is seeded by its own token, so it is the same in a run of K = 4, and the same for any
    batch and chunk size; another seed gives other completions."""
    from textebm.residual.bounds import log_normalise, next_token_joint

    base, en = world["base"], world["energy"]
    last = PREFIX + [4, 6]
    ref = exact_next_token(exact, [4, 6])
    order = list(np.argsort(-ref["lm"], kind="stable") + 3)
    nt = next_token_joint(base, en, last, 0, 2, 8, seed=1, include=[order[3], order[0]])
    assert nt.candidates == [order[0], order[1], order[3]]
    ids = np.array(nt.candidates) - 3
    np.testing.assert_allclose(nt.joint(), log_normalise(ref["joint"][ids]), rtol=0, atol=1e-10)
    np.testing.assert_allclose(nt.lm(), log_normalise(ref["lm"][ids]), rtol=0, atol=1e-10)
    head = PREFIX + [4]
    two = next_token_joint(base, en, head, 1, 2, 50, seed=9, include=[order[3]])
    four = next_token_joint(base, en, head, 1, 4, 50, seed=9, chunk=7, batch_size=3)
    for w, z in zip(two.candidates, two.log_z):
        assert four.log_z[four.candidates.index(w)] == pytest.approx(z, abs=1e-12)
    assert two.log_z_context == pytest.approx(four.log_z_context, abs=1e-12)
    other = next_token_joint(base, en, head, 1, 4, 50, seed=10)
    assert other.log_z != four.log_z
    for bad, match in ((0, "k 0"), (5, "k 5: the base LM writes 4 tokens")):
        with pytest.raises(ValueError, match=match):
            next_token_joint(base, en, head, 1, bad, 4, seed=0)
    with pytest.raises(ValueError, match="never writes"):
        next_token_joint(base, en, head, 1, 2, 4, seed=0, include=[2])  # </s>


def test_table3_numbers_by_hand():
    """`NextToken`'s renormalisations, the candidates' mass, one example's numbers and the summary
    over examples, on hand-made terms."""
    from textebm.bootstrap import mean_interval
    from textebm.residual.bounds import NextToken, log_normalise, repetition_example, repetition_summary

    np.testing.assert_allclose(np.exp(log_normalise(np.log([0.2, 0.6]))), [0.25, 0.75], rtol=1e-14)
    # P_LM .5 .2 .1 over the candidates (0.8 of its mass), Z(x_<t w) 1 2 6: joint ∝ .5 .4 .6 (sum 1.5)
    nt = NextToken([7, 8, 9], np.log([0.5, 0.2, 0.1]).tolist(), np.log([1.0, 2.0, 6.0]).tolist(),
                   np.log([1.1, 2.1, 6.1]).tolist(), math.log(1.875), {"k": 2, "completions": 5, "rest": 3})
    np.testing.assert_allclose(np.exp(nt.lm()), [0.625, 0.25, 0.125], rtol=1e-14)
    np.testing.assert_allclose(np.exp(nt.joint()), [1 / 3, 4 / 15, 0.4], rtol=1e-14)
    assert nt.mass() == pytest.approx({"lm": 0.8, "joint": 1.5 / 1.875}, rel=1e-14)
    assert NextToken.from_row(json.loads(json.dumps(nt.as_row()))) == nt
    ex = repetition_example(nt, 9, top=2)
    assert ex["token_id"] == 9 and ex["in_top_k"] is False  # included: outside the top K = 2
    assert [c["id"] for c in ex["base"]] == [7, 8] and [c["id"] for c in ex["joint"]] == [9, 7]
    assert [c["p"] for c in ex["joint"]] == pytest.approx([0.4, 1 / 3], rel=1e-14)
    assert ex["p_token"] == pytest.approx({"lm": 0.1, "lm_candidates": 0.125, "joint": 0.4}, rel=1e-14)
    assert ex["rank"] == {"lm": 2, "joint": 0}
    assert ex["log_ratio"] == pytest.approx(math.log(0.4 / 0.125), rel=1e-14)
    examples = [{"log_ratio": r} for r in (-1.0, 0.5, -0.2)]
    s = repetition_summary(examples, n_boot=500, seed=4)
    assert (s["examples"], s["lowered"], s["raised"]) == (3, 2, 1)
    assert s["mean_log_ratio"] == pytest.approx(-0.7 / 3, rel=1e-14)
    assert (s["lo"], s["hi"]) == mean_interval([-1.0, 0.5, -0.2], 500, 4) and s["excludes_zero"] is False
    assert repetition_summary(examples, n_boot=0)["lo"] is None
