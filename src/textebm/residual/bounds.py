"""Perplexity of the joint model, bounded (Deng et al. 2020, sec. 3.2, eq. 4 and 5).

For a test window x = x_{1..p} x_{p+1..T} the joint model gives

    log P(x_{p+1..T} | x_{1..p}) = log P_LM(x_{p+1..T} | x_{1..p}) − E(x) − log Z(x_{1..p})

and log Z(x_{1..p}) = log E_{x' ~ P_LM(·|x_{1..p})} exp(−E(x_{1..p} x')) is estimated from n samples
of the base LM (`textebm.residual.joint.BaseLM`: untruncated, fixed length) by T_n (below log Z
for large n) and U_n (above): U_n gives the upper perplexity, T_n the lower
(`textebm.residual.partition`). The samples of a prefix are drawn in chunks and only their
energies kept, so n = 10,000 costs memory for 10,000 floats, not 10,000 windows.

Per position (eq. 5): with Z_j the expectation of exp(−E) over the rest of the window given x_{1..j}
(Z_p = Z(x_{1..p}); Z_T = exp(−E(x)), exact),

    log P(x_t | x_<t) = log P_LM(x_t | x_<t) + log Z_t − log Z_{t−1}

The lower bound pairs the numerator's lower estimate with the denominator's upper one (and the
other way round); one set of samples per j serves position j (numerator) and j + 1
(denominator). The last position is exact: Z_{T−1} = Σ_v P_LM(v | x_<T) exp(−E(x_<T v)) over every
token the base LM can write, scored in one batch (a causal energy runs x_<T once).

The next token under the joint model (appendix A.1, table 3): eq. 5 for the base LM's K most
likely tokens w at one position, each numerator Z(x_<t w) estimated from n completions of the base
LM, and the K values renormalised among themselves (the paper's approximation of the denominator:
top 128 words, 10,000 completions each).

How sure a difference of perplexities is (`perplexity_differences`): a paired bootstrap over the
test windows, each window's log Z estimate held fixed, beside the gap between the upper and lower
perplexity that log Z's estimate leaves open.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from textebm.bootstrap import mean_interval, paired_perplexity_diffs
from textebm.residual.joint import BaseLM, JointEnergy
from textebm.residual.partition import log_partition_estimates
from textebm.seeds import derive_seed


def sample_energies_many(base: BaseLM, energies: Sequence[JointEnergy], prefix: Sequence[int], length: int,
                        n: int, seed: int, chunk: int = 256, batch_size: int = 64,
                        tick: Callable[[int], None] | None = None) -> np.ndarray:
    """E(prefix + x') under each energy of n untruncated samples x' of `length` tokens, (k, n)
    float64 for k energies: the samples are drawn once and scored by every energy. Sample i is
    seeded by (seed, i); they are drawn and scored `chunk` at a time and only the energies kept.
    `tick(c)` after each chunk of c samples (progress)."""
    ctx = base.context(prefix)
    out = np.empty((len(energies), n), dtype=np.float64)
    for s in range(0, n, chunk):
        c = min(chunk, n - s)
        conts = [g.tokens for g in base.sample([ctx] * c, length, [derive_seed(seed, i) for i in range(s, s + c)],
                                               0, batch_size)]
        for k, energy in enumerate(energies):
            out[k, s:s + c] = energy.continuation_energies(prefix, conts, batch_size)
        if tick:
            tick(c)
    if not np.all(np.isfinite(out)):
        raise FloatingPointError("the energy of a sample is NaN or infinite")
    return out


def sample_energies(base: BaseLM, energy: JointEnergy, prefix: Sequence[int], length: int, n: int, seed: int,
                    chunk: int = 256, batch_size: int = 64, tick: Callable[[int], None] | None = None) -> np.ndarray:
    """`sample_energies_many` with one energy: (n,) float64."""
    return sample_energies_many(base, [energy], prefix, length, n, seed, chunk, batch_size, tick)[0]


def ladder(n: int) -> list[int]:
    """Sample sizes at which the bound gap is reported: 2, 4, 8, ... and n itself."""
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n]


def estimates_by_size(energies: np.ndarray, sizes: Sequence[int]) -> dict[int, tuple[float, float]]:
    """(T_k, U_k) from the first k samples, for each k in `sizes`."""
    return {k: log_partition_estimates(energies[:k]) for k in sizes}


@dataclass
class WindowBounds:
    """One test window's terms: the base LM's log-probabilities of its continuation tokens, its
    energy, and log Z's estimates (T_k, U_k) at each sample size k of the ladder."""

    key: str
    lp_lm: list[float]  # (m,) log P_LM of each continuation token
    energy: float  # E(x)
    estimates: dict[int, tuple[float, float]]  # k -> (T_k, U_k)

    def as_row(self) -> dict:
        return {"key": self.key, "lp_lm": self.lp_lm, "energy": self.energy,
                "estimates": {str(k): list(v) for k, v in self.estimates.items()}}

    @classmethod
    def from_row(cls, row: dict) -> WindowBounds:
        return cls(row["key"], row["lp_lm"], row["energy"],
                   {int(k): (float(v[0]), float(v[1])) for k, v in row["estimates"].items()})


def window_bounds_many(base: BaseLM, energies: Sequence[JointEnergy], key: str, window: Sequence[int],
                       prefix_len: int, n: int, seed: int, chunk: int = 256, batch_size: int = 64,
                       tick=None) -> list[WindowBounds]:
    """The terms of one test window under each energy (one `WindowBounds` each; the base LM's
    samples drawn once, seeded by (seed, key), and scored by every energy)."""
    prefix, cont = list(window[:prefix_len]), list(window[prefix_len:])
    lp = [float(x) for x in base.continuation_logprobs([prefix], [cont])[0]]  # (m,)
    e = [float(en.energies([list(window)])[0]) for en in energies]
    if not all(math.isfinite(x) for x in e):
        raise FloatingPointError(f"the energy of window {key} is NaN or infinite")
    z = sample_energies_many(base, energies, prefix, len(cont), n, derive_seed(seed, key, prefix_len, "z"), chunk,
                             batch_size, tick)  # (k, n)
    return [WindowBounds(key, lp, e[k], estimates_by_size(z[k], ladder(n))) for k in range(len(energies))]


def window_bounds(base: BaseLM, energy: JointEnergy, key: str, window: Sequence[int], prefix_len: int, n: int,
                  seed: int, chunk: int = 256, batch_size: int = 64, tick=None) -> WindowBounds:
    """The terms of one test window (see `WindowBounds`); samples seeded by (seed, key)."""
    return window_bounds_many(base, [energy], key, window, prefix_len, n, seed, chunk, batch_size, tick)[0]


def perplexities(rows: Sequence[WindowBounds], n: int | None = None) -> dict:
    """Token perplexities over every continuation token of `rows`: the base LM's, and the joint
    model's upper (from U_n) and lower (from T_n) estimates at n samples (default: the most)."""
    tokens = sum(len(r.lp_lm) for r in rows)
    lp = math.fsum(math.fsum(r.lp_lm) for r in rows)
    e = math.fsum(r.energy for r in rows)
    n = n or min(max(r.estimates) for r in rows)
    t = math.fsum(r.estimates[n][0] for r in rows)
    u = math.fsum(r.estimates[n][1] for r in rows)
    return {"windows": len(rows), "tokens": tokens, "samples": n,
            "base_ppl": math.exp(-lp / tokens),
            "joint_ppl_lower": math.exp(-(lp - e - t) / tokens),
            "joint_ppl_upper": math.exp(-(lp - e - u) / tokens)}


def window_nll(rows: Sequence[WindowBounds], n: int | None = None) -> dict[str, np.ndarray]:
    """Per window, the summed negative log-likelihood of its continuation tokens: the base LM's
    ("base"), the joint model's from T_n ("lower" perplexity) and from U_n ("upper") at n samples
    (default: the most), and its token count ("tokens"); (W,) float64 each. Summed over the
    windows and divided by the tokens they give `perplexities`' figures."""
    n = n or min(max(r.estimates) for r in rows)
    lp = np.array([math.fsum(r.lp_lm) for r in rows])  # (W,) log P_LM of the continuation
    e = np.array([r.energy for r in rows])  # (W,)
    t, u = np.array([r.estimates[n] for r in rows]).T  # (W,) each
    return {"tokens": np.array([len(r.lp_lm) for r in rows], dtype=np.float64), "base": -lp,
            "lower": -(lp - e - t), "upper": -(lp - e - u)}


def perplexity_differences(joint: Sequence[tuple[str, dict]], others: Sequence[tuple[str, np.ndarray]],
                           n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> list[dict]:
    """Every perplexity difference of table 1, each with its paired bootstrap interval over the
    test windows (`textebm.bootstrap.paired_perplexity_diffs`, one set of resamples for all):
    each joint model against each of `others` (the base LM, RALM, BALM), and each pair of joint
    models. A joint model's perplexity is a range, so each difference is given twice: with its
    upper perplexity (U_n) and its lower (T_n); each window's log Z estimate is held fixed, so the
    intervals say how much the test windows move the difference, and the gap (upper − lower
    perplexity, "gap_a" and for two joint models "gap_b") how much log Z's estimate leaves open.
    "can_tell_from_zero": both intervals exclude 0 on the same side (None without resamples, or
    with one window).

    joint: (name, `window_nll` of its windows); others: (name, (W,) summed NLL per window), all
    over the same windows in the same order."""
    if not joint:
        raise ValueError("perplexity_differences: no joint model")
    tokens = joint[0][1]["tokens"]
    rows = [nll for _, nll in others]  # (M, W) once stacked: others, then each joint's lower, upper
    for _, w in joint:
        if not np.array_equal(w["tokens"], tokens):
            raise ValueError("perplexity_differences: the joint models were scored on different windows")
        rows += [w["lower"], w["upper"]]
    lower = {k: len(others) + 2 * k for k in range(len(joint))}  # row of joint k's lower; upper is the next
    ppl = np.exp(np.stack(rows).sum(1) / tokens.sum())  # (M,)
    specs = []  # (a, b, [row pairs: upper's, lower's], gap of a, gap of b)
    for k, (name, _) in enumerate(joint):
        gap = float(ppl[lower[k] + 1] - ppl[lower[k]])
        specs += [(name, o, [(lower[k] + 1, i), (lower[k], i)], gap, None) for i, (o, _) in enumerate(others)]
    for j in range(len(joint)):
        for k in range(j + 1, len(joint)):
            specs.append((joint[j][0], joint[k][0], [(lower[j] + 1, lower[k] + 1), (lower[j], lower[k])],
                          float(ppl[lower[j] + 1] - ppl[lower[j]]), float(ppl[lower[k] + 1] - ppl[lower[k]])))
    diffs = paired_perplexity_diffs(np.stack(rows), tokens, [p for s in specs for p in s[2]], n_boot, seed, level)
    out = []
    for i, (a, b, _, gap_a, gap_b) in enumerate(specs):
        up, lo = diffs[2 * i], diffs[2 * i + 1]
        tell = None if up["lo"] is None else bool((up["hi"] < 0 and lo["hi"] < 0) or (up["lo"] > 0 and lo["lo"] > 0))
        out.append({"a": a, "b": b, "upper": up, "lower": lo, "gap_a": gap_a, "gap_b": gap_b,
                    "can_tell_from_zero": tell})
    return out


def gap_by_size(rows: Sequence[WindowBounds]) -> list[dict]:
    """The perplexity bounds and their gap at every sample size of the ladder (figure 2 left)."""
    sizes = sorted(set.intersection(*(set(r.estimates) for r in rows)))
    out = []
    for k in sizes:
        p = perplexities(rows, k)
        out.append({"samples": k, "lower": p["joint_ppl_lower"], "upper": p["joint_ppl_upper"],
                    "gap": p["joint_ppl_upper"] - p["joint_ppl_lower"]})
    return out


# ---------------------------------------------------------------- per position (eq. 5)


def exact_last_log_z(base: BaseLM, energy: JointEnergy, head: Sequence[int], batch_size: int = 256) -> float:
    """log Z_{T−1} = log Σ_v P_LM(v | head) exp(−E(head v)) over every token v the base LM can write,
    `head` = x_{1..T−1} (the window without its last token). Exact, in float64."""
    lp = base.next_logprobs([base.context(head)])[0].numpy()  # (V,)
    allowed = np.flatnonzero(np.isfinite(lp))  # (V',)
    e = energy.continuation_energies(list(head), [[int(v)] for v in allowed], batch_size)  # (V',)
    terms = lp[allowed] - e
    return float(np.logaddexp.reduce(terms))


def position_bounds_many(base: BaseLM, energies: Sequence[JointEnergy], key: str, window: Sequence[int],
                         prefix_len: int, n: int, seed: int, chunk: int = 256, batch_size: int = 64,
                         exact: bool = True, tick=None) -> list[dict]:
    """Eq. 5 at every continuation position t = p+1..T of one window under each energy: log
    P_LM(x_t | x_<t), and the joint model's lower and upper estimates (n samples per conditioning
    length j = p..T−1, drawn once for all energies, each set shared by positions j and j + 1);
    `exact` adds the last position's exact value."""
    window = list(window)
    big_t = len(window)
    lp = base.continuation_logprobs([window[:prefix_len]], [window[prefix_len:]])[0]  # (m,)
    e_x = [float(en.energies([window])[0]) for en in energies]
    tu = [{} for _ in energies]  # per energy: j -> (T_n, U_n) of log Z_j
    for j in range(prefix_len, big_t):
        z = sample_energies_many(base, energies, window[:j], big_t - j, n, derive_seed(seed, key, j, "z"), chunk,
                                 batch_size, tick)  # (k, n)
        for k in range(len(energies)):
            tu[k][j] = log_partition_estimates(z[k])
    out = []
    for k, en in enumerate(energies):
        tu[k][big_t] = (-e_x[k], -e_x[k])  # Z_T = exp(−E(x)), exact
        rows = []
        for i, t in enumerate(range(prefix_len + 1, big_t + 1)):
            num, den = tu[k][t], tu[k][t - 1]
            rows.append({"position": i + 1, "lp_lm": float(lp[i]),
                         "lower": float(lp[i] + num[0] - den[1]), "upper": float(lp[i] + num[1] - den[0])})
        if exact:
            rows[-1]["exact"] = float(lp[-1] - e_x[k] - exact_last_log_z(base, en, window[:-1], batch_size))
        out.append({"key": key, "positions": rows})
    return out


def position_bounds(base: BaseLM, energy: JointEnergy, key: str, window: Sequence[int], prefix_len: int, n: int,
                    seed: int, chunk: int = 256, batch_size: int = 64, exact: bool = True, tick=None) -> dict:
    """`position_bounds_many` with one energy."""
    return position_bounds_many(base, [energy], key, window, prefix_len, n, seed, chunk, batch_size, exact, tick)[0]


# ---------------------------------------------------------------- the next token (eq. 5; table 3)


def log_normalise(scores) -> np.ndarray:
    """scores − log Σ exp(scores): log-probabilities over the candidates, (K,) float64."""
    s = np.asarray(scores, dtype=np.float64)  # (K,)
    return s - np.logaddexp.reduce(s)


def candidate_log_z(base: BaseLM, energy: JointEnergy, context: Sequence[int], candidates: Sequence[int], rest: int,
                    n: int, seed: int, chunk: int = 256, batch_size: int = 64,
                    tick: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(T_n, U_n) of log Z(x_<t w) = log E_{x_>t ~ P_LM(·| x_<t, w)} exp(−E(x_<t, w, x_>t)) for each
    candidate next token w, (K,) each: eq. 5's numerator, from n untruncated completions of `rest`
    tokens per candidate (`sample_energies`), seeded by (seed, "candidate", w), so a candidate's
    estimate depends neither on the others nor on its rank. `rest` 0 (the window's last token):
    exact, −E(x_<t w), from one batch."""
    if rest == 0:
        e = energy.continuation_energies(list(context), [[int(w)] for w in candidates], batch_size)  # (K,)
        if not np.all(np.isfinite(e)):
            raise FloatingPointError("the energy of a candidate is NaN or infinite")
        if tick:
            tick(len(candidates))
        return -e, -e
    est = [log_partition_estimates(sample_energies(base, energy, [*context, int(w)], rest, n,
                                                   derive_seed(seed, "candidate", int(w)), chunk, batch_size, tick))
           for w in candidates]
    t, u = np.array(est, dtype=np.float64).reshape(-1, 2).T  # (K,) each
    return t, u


@dataclass
class NextToken:
    """Eq. 5 at one position for a set of candidate next tokens (table 3 of Deng et al. 2020):
    log P_LM(w | x_<t) over the whole vocabulary, and the estimates of log Z(x_<t w); with them the
    base LM and the joint model renormalised over the candidates, and (from an estimate of the
    denominator log Z(x_<t) over every token) how much of each model's mass the candidates hold."""

    candidates: list[int]  # (K',) the base LM's K most likely tokens, then any included one
    lp_lm: list[float]  # (K',) log P_LM(w | x_<t), the whole vocabulary's softmax
    log_z: list[float]  # (K',) T_n of log Z(x_<t w)
    log_z_upper: list[float]  # (K',) U_n of log Z(x_<t w)
    log_z_context: float | None = None  # T_n of log Z(x_<t), eq. 5's denominator (None: not estimated)
    settings: dict = field(default_factory=dict)  # {"k": top candidates, "completions": n, "rest": tokens after w}

    def lm(self) -> np.ndarray:
        """log P_LM(w | x_<t) renormalised over the candidates (K',)."""
        return log_normalise(self.lp_lm)

    def joint(self) -> np.ndarray:
        """The paper's approximation: log P_LM(w | x_<t) + log Z(x_<t w) renormalised over the
        candidates (K',)."""
        return log_normalise(np.add(self.lp_lm, self.log_z))

    def mass(self) -> dict:
        """The candidates' share of each model's next-token distribution: the base LM's exact, the
        joint model's estimated as Σ_w P_LM(w) Z(x_<t w) / Z(x_<t) (both Z from samples: it may
        come out above 1)."""
        lm = float(np.exp(np.logaddexp.reduce(self.lp_lm)))
        joint = (None if self.log_z_context is None
                 else float(np.exp(np.logaddexp.reduce(np.add(self.lp_lm, self.log_z)) - self.log_z_context)))
        return {"lm": lm, "joint": joint}

    def as_row(self) -> dict:
        return {"candidates": self.candidates, "lp_lm": self.lp_lm, "log_z": self.log_z,
                "log_z_upper": self.log_z_upper, "log_z_context": self.log_z_context, "settings": self.settings}

    @classmethod
    def from_row(cls, row: dict) -> NextToken:
        return cls(row["candidates"], row["lp_lm"], row["log_z"], row["log_z_upper"], row["log_z_context"],
                   row["settings"])


def next_token_joint(base: BaseLM, energy: JointEnergy, context: Sequence[int], rest: int, k: int, n: int,
                     seed: int, include: Sequence[int] = (), denominator: bool = True, chunk: int = 256,
                     batch_size: int = 64, tick: Callable[[int], None] | None = None) -> NextToken:
    """Eq. 5 at the position after `context` (x_<t, its window ending `rest` tokens after x_t) for
    the base LM's `k` most likely next tokens (ties by id) and the tokens of `include` not among
    them: log P_LM of each, log Z(x_<t w) from n completions each (`candidate_log_z`), and with
    `denominator` log Z(x_<t) from n completions of rest + 1 tokens (seeded by (seed, "context")).
    ValueError when k is not in 1 .. the tokens the base LM can write, or an included token is one
    it never writes."""
    lp = base.next_logprobs([base.context(context)])[0].numpy()  # (V,) banned at −inf
    allowed = int(np.isfinite(lp).sum())
    if not 1 <= k <= allowed:
        raise ValueError(f"k {k}: the base LM writes {allowed} tokens; ask for 1 to {allowed} candidates")
    top = [int(v) for v in np.argsort(-lp, kind="stable")[:k]]
    extra = [int(v) for v in dict.fromkeys(include) if int(v) not in top]
    if any(not np.isfinite(lp[v]) for v in extra):
        raise ValueError("an included token is one the base LM never writes ([eos] or a layout symbol)")
    cands = top + extra
    t, u = candidate_log_z(base, energy, context, cands, rest, n, seed, chunk, batch_size, tick)
    ctx_z = None
    if denominator:
        z = sample_energies(base, energy, list(context), rest + 1, n, derive_seed(seed, "context"), chunk, batch_size,
                            tick)  # (n,)
        ctx_z = log_partition_estimates(z)[0]
    return NextToken(cands, [float(lp[v]) for v in cands], t.tolist(), u.tolist(), ctx_z,
                     {"k": k, "completions": n if rest else 0, "rest": rest})


def repetition_example(nt: NextToken, token: int, top: int = 5) -> dict:
    """One row of table 3 in numbers: the base LM's and the joint model's `top` candidates (ids and
    probabilities, both renormalised over the same candidates), the repeated `token`'s probability
    under each (and P_LM's over the whole vocabulary), its rank, the log-ratio joint / base LM,
    and the candidates' mass (`NextToken.mass`)."""
    i = nt.candidates.index(int(token))
    lm, joint = nt.lm(), nt.joint()  # (K',) each

    def ranked(lp: np.ndarray) -> list[dict]:
        order = np.argsort(-lp, kind="stable")
        return [{"id": nt.candidates[j], "p": float(np.exp(lp[j]))} for j in order[:top]]

    return {"token_id": int(token), "in_top_k": i < nt.settings["k"], "base": ranked(lm), "joint": ranked(joint),
            "p_token": {"lm": float(np.exp(nt.lp_lm[i])), "lm_candidates": float(np.exp(lm[i])),
                        "joint": float(np.exp(joint[i]))},
            "rank": {"lm": int((lm > lm[i]).sum()), "joint": int((joint > joint[i]).sum())},
            "log_ratio": float(joint[i] - lm[i]), "mass": nt.mass()}


def repetition_summary(examples: Sequence[dict], n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Over the examples (`repetition_example`): in how many the joint model gives the repeated
    token a lower probability than the base LM (over the same candidates), and the mean log-ratio
    log P_joint / P_LM with its percentile-bootstrap interval over the examples."""
    r = np.array([x["log_ratio"] for x in examples], dtype=np.float64)  # (N,)
    ci = mean_interval(r, n_boot, seed, level)
    return {"examples": int(r.size), "lowered": int((r < 0).sum()), "raised": int((r > 0).sum()),
            "mean_log_ratio": float(r.mean()), "lo": None if ci is None else ci[0],
            "hi": None if ci is None else ci[1], "level": level, "resamples": 0 if ci is None else n_boot,
            "excludes_zero": None if ci is None else bool(ci[0] > 0 or ci[1] < 0)}
