"""nce_loss against eq. (7) and eq. (6) of He et al. (2021), written literally; nce_core against
Gutmann & Hyvärinen's objective, Electric's Algorithm 2 (Clark et al. 2020), Deng et al. (2020)
eq. (3), and NCE's optimum on a discrete toy."""

import math

import pytest
import torch

from textebm.losses.nce import nce_core, nce_loss


def eq7_literal(e_pos, e_neg, k):
    """Eq. (7) term by term with exp / log in float64."""
    pos = [-math.log(1.0 / (1.0 + k * math.exp(e))) for e in e_pos]
    neg = [-math.log(k / (k + math.exp(-e))) for e in e_neg]
    return sum(pos) / len(pos) + k * sum(neg) / len(neg)


def eq6_literal(e_pos_hat, e_neg_hat, logpn_pos, logpn_neg, k):
    """Eq. (6) with E = Ê − log P_N and P̃ = exp(−E): P_N must cancel."""
    total_pos = 0.0
    for e_hat, lpn in zip(e_pos_hat, logpn_pos):
        pn = math.exp(lpn)
        p_tilde = math.exp(-(e_hat - lpn))
        total_pos += -math.log(p_tilde / (p_tilde + k * pn))
    total_neg = 0.0
    for e_hat, lpn in zip(e_neg_hat, logpn_neg):
        pn = math.exp(lpn)
        p_tilde = math.exp(-(e_hat - lpn))
        total_neg += -math.log(k * pn / (p_tilde + k * pn))
    return total_pos / len(e_pos_hat) + k * total_neg / len(e_neg_hat)


@pytest.mark.parametrize("k", [1, 8])
def test_matches_eq7_by_hand(k):
    torch.manual_seed(k)
    e_pos = torch.randn(5, dtype=torch.float64) * 2
    e_neg = torch.randn(5 * k, dtype=torch.float64) * 2
    out = nce_loss(e_pos, e_neg, k)
    expected = eq7_literal(e_pos.tolist(), e_neg.tolist(), k)
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)
    assert (out.pos + out.neg).item() == pytest.approx(expected, rel=1e-12)


def test_tiny_example_worked_on_paper():
    # K = 1, Ê(x+) = 0, Ê(x-) = 0: both terms are -log(1/2), loss = 2 log 2.
    out = nce_loss(torch.zeros(1), torch.zeros(1), 1)
    assert out.loss.item() == pytest.approx(2 * math.log(2.0))
    # K = 2, Ê(x+) = log 2 (so K exp(Ê) = 4): pos = log 5; Ê(x-) = -log 2 for both noise
    # samples (exp(-Ê) = 2): each -log(2 / 4) = log 2, neg = 2 * log 2.
    out = nce_loss(torch.tensor([math.log(2.0)]), torch.full((1, 2), -math.log(2.0)), 2)
    assert out.pos.item() == pytest.approx(math.log(5.0))
    assert out.neg.item() == pytest.approx(2 * math.log(2.0))


@pytest.mark.parametrize("k", [1, 8])
def test_log_pn_cancels_eq6_equals_eq7(k):
    torch.manual_seed(10 + k)
    e_pos = torch.randn(4, dtype=torch.float64)
    e_neg = torch.randn(4 * k, dtype=torch.float64)
    # arbitrary (even very small) noise log-probabilities
    logpn_pos = (torch.rand(4, dtype=torch.float64) * -60).tolist()
    logpn_neg = (torch.rand(4 * k, dtype=torch.float64) * -60).tolist()
    eq6 = eq6_literal(e_pos.tolist(), e_neg.tolist(), logpn_pos, logpn_neg, k)
    assert nce_loss(e_pos, e_neg, k).loss.item() == pytest.approx(eq6, rel=1e-9)


def test_neg_accepts_flat_and_2d():
    e_pos = torch.randn(3)
    e_neg = torch.randn(3, 8)
    a = nce_loss(e_pos, e_neg, 8)
    b = nce_loss(e_pos, e_neg.reshape(-1), 8)
    torch.testing.assert_close(a.loss, b.loss)


@pytest.mark.parametrize("k", [1, 8])
def test_gradcheck_float64(k):
    torch.manual_seed(k)
    e_pos = (torch.randn(3, dtype=torch.float64) * 3).requires_grad_()
    e_neg = (torch.randn(3 * k, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(lambda p, n: nce_loss(p, n, k).loss, (e_pos, e_neg))


def test_analytic_gradient():
    # d/dÊ+ of mean softplus(Ê + log K) = sigmoid(Ê + log K) / B
    k = 8
    e_pos = torch.tensor([0.3, -1.2], dtype=torch.float64, requires_grad=True)
    e_neg = torch.zeros(2 * k, dtype=torch.float64, requires_grad=True)
    nce_loss(e_pos, e_neg, k).loss.backward()
    torch.testing.assert_close(e_pos.grad, torch.sigmoid(e_pos.detach() + math.log(k)) / 2)
    # d/dÊ- of K * mean softplus(-Ê - log K) = -K sigmoid(-Ê - log K) / (B K)
    torch.testing.assert_close(e_neg.grad, -torch.sigmoid(torch.full((2 * k,), -math.log(k), dtype=torch.float64)) / 2)


@pytest.mark.parametrize("k", [1, 8])
def test_stable_for_huge_energies(k):
    e_pos = torch.tensor([1000.0, -1000.0], requires_grad=True)
    e_neg = torch.tensor([1000.0, -1000.0] * k, requires_grad=True)
    out = nce_loss(e_pos, e_neg, k)
    assert torch.isfinite(out.loss)
    # data with Ê = 1000 costs ≈ 1000 + log K; data with Ê = -1000 costs ≈ 0
    assert out.pos.item() == pytest.approx((1000.0 + math.log(k)) / 2, rel=1e-6)
    # noise with Ê = -1000 costs ≈ 1000 - log K; noise with Ê = 1000 costs ≈ 0
    assert out.neg.item() == pytest.approx(k * (1000.0 - math.log(k)) / 2, rel=1e-6)
    out.loss.backward()
    assert torch.isfinite(e_pos.grad).all() and torch.isfinite(e_neg.grad).all()


def test_accuracy_threshold_at_minus_log_k():
    k = 4
    t = -math.log(k)
    e_pos = torch.tensor([t - 0.1, t + 0.1])  # first classified as data, second not
    e_neg = torch.tensor([t + 0.1, t + 0.2, t - 0.1, t - 0.2, t + 1, t + 2, t + 3, t + 4])  # 6 of 8 as noise
    out = nce_loss(e_pos, e_neg, k)
    assert out.acc_data.item() == pytest.approx(0.5)
    assert out.acc_noise.item() == pytest.approx(6 / 8)
    assert out.accuracy.item() == pytest.approx(7 / 10)


def test_bad_shapes():
    with pytest.raises(ValueError):
        nce_loss(torch.zeros(2), torch.zeros(3), 2)
    with pytest.raises(ValueError):
        nce_loss(torch.zeros(2), torch.zeros(2, 3), 2)
    with pytest.raises(ValueError):
        nce_loss(torch.zeros(2), torch.zeros(2), 0)


# ---------------------------------------------------------------------------------------------
# nce_core


def gutmann_hyvarinen_loss(log_pm_data, log_pm_noise, log_pn_data, log_pn_noise):
    """-J_T of Gutmann & Hyvärinen (2010), eq. (3)-(5), literally: nu = T_n / T_d,
    G(u) = ln p_m(u) - ln p_n(u), h(u) = 1 / (1 + nu exp(-G(u))),
    J_T = 1/T_d (sum_t ln h(x_t) + sum_t ln(1 - h(y_t)))."""
    t_d, t_n = len(log_pm_data), len(log_pm_noise)
    nu = t_n / t_d

    def h(lpm, lpn):
        return 1.0 / (1.0 + nu * math.exp(-(lpm - lpn)))

    j = sum(math.log(h(a, b)) for a, b in zip(log_pm_data, log_pn_data))
    j += sum(math.log(1.0 - h(a, b)) for a, b in zip(log_pm_noise, log_pn_noise))
    return -j / t_d


def test_core_matches_gutmann_hyvarinen():
    torch.manual_seed(0)
    t_d, t_n = 3, 5  # nu = 5/3: a prior ratio that is not an integer
    s = torch.randn(t_d + t_n, dtype=torch.float64)  # log p̃_θ
    lpn = torch.rand(t_d + t_n, dtype=torch.float64) * -4  # log P_N
    is_data = torch.tensor([True] * t_d + [False] * t_n)
    out = nce_core(s, lpn, is_data, math.log(t_n / t_d))
    expected = gutmann_hyvarinen_loss(s[:t_d].tolist(), s[t_d:].tolist(), lpn[:t_d].tolist(), lpn[t_d:].tolist())
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)
    # accuracies: h(u) > 1/2 means "data"
    h = torch.sigmoid(s - lpn - math.log(t_n / t_d))
    assert out.acc_data.item() == pytest.approx((h[:t_d] > 0.5).double().mean().item())
    assert out.acc_noise.item() == pytest.approx((h[t_d:] <= 0.5).double().mean().item())
    assert out.accuracy.item() == pytest.approx(((h[:t_d] > 0.5).sum() + (h[t_d:] <= 0.5).sum()).item() / 8)


def test_core_tiny_worked_example():
    # one data sample with s = log 2, log P_N = 0, nu = 2: z = log 2 - log 2 = 0, loss log 2;
    # one noise sample with s = 0, log P_N = log 4, nu = 2 (log nu tensor-valued): z = -log 8,
    # loss softplus(-log 8) = log(9/8). Reduction "data": one data sample, so no division.
    out = nce_core(torch.tensor([math.log(2.0), 0.0], dtype=torch.float64),
                   torch.tensor([0.0, math.log(4.0)], dtype=torch.float64),
                   torch.tensor([True, False]), torch.tensor([math.log(2.0)], dtype=torch.float64))
    assert out.pos.item() == pytest.approx(math.log(2.0))
    assert out.neg.item() == pytest.approx(math.log(9 / 8))
    assert out.acc_data.item() == 0.0  # z = 0 is not > 0
    assert out.acc_noise.item() == 1.0
    assert out.accuracy.item() == 0.5


@pytest.mark.parametrize("reduction", ["data", "mean", "sum"])
def test_core_per_token_mask_equals_flat(reduction):
    torch.manual_seed(3)
    b, t = 3, 6
    log_model = torch.randn(b, t, dtype=torch.float64)  # (B, T)
    log_noise = torch.rand(b, t, dtype=torch.float64) * -5  # (B, T)
    is_data = torch.rand(b, t) < 0.7  # (B, T)
    prior = torch.randn(b, 1, dtype=torch.float64)  # (B, 1) per-sequence log prior ratio
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    is_data[:, 0] = True
    is_data[:, 1] = False
    # garbage where masked: it must contribute nothing, neither value nor gradient
    log_model = torch.where(mask, log_model, torch.full_like(log_model, float("inf"))).requires_grad_()
    log_noise = torch.where(mask, log_noise, torch.full_like(log_noise, float("nan")))
    out = nce_core(log_model, log_noise, is_data, prior, mask=mask, reduction=reduction)
    flat = nce_core(log_model.detach()[mask], log_noise[mask], is_data[mask], prior.expand(b, t)[mask],
                    reduction=reduction)
    for f in ("loss", "pos", "neg", "acc_data", "acc_noise", "accuracy"):
        torch.testing.assert_close(getattr(out, f), getattr(flat, f), rtol=1e-12, atol=0)
    out.loss.backward()
    assert torch.isfinite(log_model.grad).all()
    assert (log_model.grad[~mask] == 0).all()
    assert (log_model.grad[mask] != 0).all()
    # the reductions differ only by their denominator
    sums = nce_core(log_model.detach(), log_noise, is_data, prior, mask=mask, reduction="sum").loss
    denom = {"data": (is_data & mask).sum(), "mean": mask.sum(), "sum": 1}[reduction]
    torch.testing.assert_close(out.loss.detach(), sums / denom)


@pytest.mark.parametrize("k", [1, 8])
def test_core_eq6_with_explicit_pn_equals_eq7(k):
    # eq. (6) with E = Ê - log P_N: nce_core(-E, log P_N, ., log K) = nce_loss(Ê) = eq6_literal
    torch.manual_seed(20 + k)
    b = 4
    e_hat = torch.randn(b + b * k, dtype=torch.float64)  # (B + BK,) Ê
    log_pn = torch.rand(b + b * k, dtype=torch.float64) * -60  # (B + BK,) log P_N, even tiny
    energy = e_hat - log_pn  # (B + BK,) E
    is_data = torch.arange(b + b * k) < b
    core = nce_core(-energy, log_pn, is_data, math.log(k))
    eq7 = nce_loss(e_hat[:b], e_hat[b:], k)
    eq6 = eq6_literal(e_hat[:b].tolist(), e_hat[b:].tolist(), log_pn[:b].tolist(), log_pn[b:].tolist(), k)
    assert core.loss.item() == pytest.approx(eq6, rel=1e-9)
    for f in ("loss", "pos", "neg"):
        torch.testing.assert_close(getattr(core, f), getattr(eq7, f), rtol=1e-9, atol=0)


@pytest.mark.parametrize("reduction", ["data", "mean", "sum"])
def test_core_gradcheck_float64(reduction):
    torch.manual_seed(5)
    log_model = (torch.randn(2, 4, dtype=torch.float64) * 3).requires_grad_()
    log_noise = (torch.rand(2, 4, dtype=torch.float64) * -3).requires_grad_()
    prior = torch.randn(2, 1, dtype=torch.float64).requires_grad_()
    is_data = torch.tensor([[True, False, True, False], [True, True, False, False]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])

    def f(lm, ln, pr):
        return nce_core(lm, ln, is_data, pr, mask=mask, reduction=reduction).loss

    assert torch.autograd.gradcheck(f, (log_model, log_noise, prior))


@pytest.mark.parametrize("k", [1, 3])
def test_optimum_recovers_log_pdata(k):
    # 4 outcomes; the expected loss E_{P_D}[data term] + K E_{P_N}[noise term] is an exact
    # weighted sum: outcome x appears 10 p_D(x) times among 10 data samples and 10 K p_N(x) times
    # among 10 K noise samples, so reduction "data" (/10) gives it. Its minimiser over a free
    # log-score vector s is log p_D, self-normalised (Gutmann & Hyvärinen, Theorem 1).
    p_data = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    p_noise = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    data_idx = torch.repeat_interleave(torch.arange(4), (10 * p_data).round().long())  # (10,)
    noise_idx = torch.repeat_interleave(torch.arange(4), (10 * k * p_noise).round().long())  # (10K,)
    idx = torch.cat([data_idx, noise_idx])  # (10 + 10K,)
    is_data = torch.arange(idx.numel()) < data_idx.numel()
    log_pn = p_noise.log()[idx]  # (10 + 10K,)

    def expected_loss(s):  # s: (4,)
        return nce_core(s[idx], log_pn, is_data, math.log(k)).loss

    s = p_noise.log().clone()  # start away from the optimum
    for _ in range(50):  # Newton; the loss is convex and separable in s
        g = torch.autograd.functional.jacobian(expected_loss, s)
        hess = torch.autograd.functional.hessian(expected_loss, s)
        s = s - torch.linalg.solve(hess, g)
    assert torch.autograd.functional.jacobian(expected_loss, s).abs().max() < 1e-12
    torch.testing.assert_close(s, p_data.log(), rtol=0, atol=1e-10)
    assert torch.logsumexp(s, 0).item() == pytest.approx(0.0, abs=1e-10)  # Z = 1
    # and it is a minimum: any perturbation costs
    for d in torch.eye(4, dtype=torch.float64):
        assert expected_loss(s + 1e-3 * d) > expected_loss(s)
        assert expected_loss(s - 1e-3 * d) > expected_loss(s)


def electric_algorithm2_literal(energy, log_q, replaced, lengths):
    """Algorithm 2 of Clark et al. (2020), term by term: per sequence of n tokens with k replaced,
    -log (n-k) p̂ / ((n-k) p̂ + k q) for kept tokens, -log k q / ((n-k) p̂ + k q) for replaced ones;
    p̂ = exp(-E(x^noised)_t). Summed over positions and sequences."""
    total = 0.0
    for i, n in enumerate(lengths):
        k = sum(replaced[i][:n])
        for t in range(n):
            p_hat, q = math.exp(-energy[i][t]), math.exp(log_q[i][t])
            den = (n - k) * p_hat + k * q
            total += -math.log(k * q / den) if replaced[i][t] else -math.log((n - k) * p_hat / den)
    return total


def test_electric_algorithm2_per_token_priors():
    torch.manual_seed(7)
    lengths = [7, 5]
    b, t = 2, 8
    energy = torch.randn(b, t, dtype=torch.float64)  # (B, T) E(x^noised)_t
    log_q = torch.log_softmax(torch.randn(b, t, 30, dtype=torch.float64), -1)[..., 0]  # (B, T) log q
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    replaced = torch.zeros(b, t, dtype=torch.bool)
    replaced[0, [1, 4]] = True  # k = 2 of n = 7
    replaced[1, [2]] = True  # k = 1 of n = 5
    n = mask.sum(1, keepdim=True).double()  # (B, 1)
    k = (replaced & mask).sum(1, keepdim=True).double()  # (B, 1)
    out = nce_core(-energy, log_q, ~replaced, torch.log(k / (n - k)), mask=mask, reduction="sum")
    expected = electric_algorithm2_literal(energy.tolist(), log_q.tolist(), replaced.tolist(), lengths)
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)

    # the released code: fake-logit E + log q + log(p / (1 - p)), sigmoid cross-entropy averaged
    # over the non-padding tokens
    p = 0.15
    fake_logit = energy + log_q + math.log(p / (1 - p))  # (B, T)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        fake_logit, replaced.double(), weight=mask.double(), reduction="sum") / mask.sum()
    out = nce_core(-energy, log_q, ~replaced, math.log(p / (1 - p)), mask=mask, reduction="mean")
    assert out.loss.item() == pytest.approx(bce.item(), rel=1e-12)


def test_deng_eq3_residual_binary_nce():
    # Deng et al. (2020) eq. (3), to minimise: E+ -log 1/(1 + exp(E(x+))) + E- -log 1/(1 + exp(-E(x-)))
    torch.manual_seed(9)
    e = torch.randn(6, dtype=torch.float64) * 2
    is_data = torch.tensor([True, True, True, False, False, False])
    expected = (sum(-math.log(1 / (1 + math.exp(v))) for v in e[:3].tolist()) / 3
                + sum(-math.log(1 / (1 + math.exp(-v))) for v in e[3:].tolist()) / 3)
    out = nce_core(-e, 0.0, is_data, 0.0)
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)


def test_core_empty_selection():
    lm = torch.randn(2, 3, requires_grad=True)
    out = nce_core(lm, 0.0, torch.ones(2, 3, dtype=torch.bool), 0.0, mask=torch.zeros(2, 3, dtype=torch.bool))
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert (lm.grad == 0).all()
    assert math.isnan(out.acc_data.item()) and math.isnan(out.accuracy.item())


def test_core_bad_args():
    lm = torch.zeros(2, 3)
    ok = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="is_data"):
        nce_core(lm, 0.0, torch.ones(2, 3), 0.0)  # not bool
    with pytest.raises(ValueError, match="is_data"):
        nce_core(lm, 0.0, torch.ones(3, 2, dtype=torch.bool), 0.0)
    with pytest.raises(ValueError, match="mask"):
        nce_core(lm, 0.0, ok, 0.0, mask=torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="log_prior_ratio"):
        nce_core(lm, 0.0, ok, torch.zeros(3, 1))  # does not broadcast to (2, 3)
    with pytest.raises(ValueError, match="log_prior_ratio"):
        nce_core(lm, 0.0, ok, torch.zeros(4, 2, 3))  # would enlarge the shape
    with pytest.raises(ValueError, match="log_prior_ratio"):
        nce_core(lm, 0.0, ok, float("nan"))
    with pytest.raises(ValueError, match="log_noise"):
        nce_core(lm, torch.zeros(2, 4), ok, 0.0)
    with pytest.raises(ValueError, match="log_model"):
        nce_core(torch.zeros(2, 3, dtype=torch.long), 0.0, ok, 0.0)
    with pytest.raises(ValueError, match="reduction"):
        nce_core(lm, 0.0, ok, 0.0, reduction="batchmean")
