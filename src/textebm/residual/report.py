"""The reports of `residual ppl`, `residual generate` and `residual repetitions`: a Markdown page a
person reads first, and the figures and tables of Deng et al. (2020): the bound gap against the
number of samples (figure 2 left), the per-position perplexity gain (figure 1), the density of
real, base and joint continuations' log-probability under the base LM and under the joint model
(figure 3), P(x_t | x_<t) of both models on repetitions (table 3)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from textebm.figures import new_figure, save_png
from textebm.markdown import table


def position_summary(per_window: Sequence[dict]) -> list[dict]:
    """Per position (eq. 5) over the windows: the base LM's perplexity, the joint model's lower and
    upper estimates (upper perplexity from the lower log-probability bound) and, where scored,
    the exact value; each also as a ratio to the base LM (figure 1's "gain")."""
    m = len(per_window[0]["positions"])
    out = []
    for i in range(m):
        rows = [w["positions"][i] for w in per_window]
        base = math.exp(-np.mean([r["lp_lm"] for r in rows]))
        item = {"position": i + 1, "base_ppl": base,
                "joint_ppl_lower": math.exp(-np.mean([r["upper"] for r in rows])),
                "joint_ppl_upper": math.exp(-np.mean([r["lower"] for r in rows]))}
        if all("exact" in r for r in rows):
            item["joint_ppl_exact"] = math.exp(-np.mean([r["exact"] for r in rows]))
        for k in [k for k in item if k.startswith("joint_ppl")]:
            item[k.replace("joint_ppl", "gain")] = item[k] / base
        out.append(item)
    return out


def _f(x, digits: int = 2) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def run_name(path: str) -> str:
    """A model's short name: its run folder's (RUN for RUN/model), else its own."""
    p = Path(path)
    return p.parent.name if p.name == "model" else p.name


def joint_label(model: dict) -> str:
    init = f" from {run_name(model['init'])}" if model.get("init") else ""
    return f"joint {model['kind']}{init} ({run_name(model['energy'])})"


def _interval(d: dict) -> str:
    return "" if d["lo"] is None else f"[{d['lo']:+.2f}, {d['hi']:+.2f}]"


def _tell(d: dict) -> str:
    if d["can_tell_from_zero"] is None:
        return "(no resamples)"
    if not d["can_tell_from_zero"]:
        return "no"
    return "yes: A lower" if d["upper"]["hi"] < 0 else "yes: A higher"


def differences_section(metrics: dict) -> list[str]:
    """The report's lines on every perplexity difference: its paired bootstrap interval over the
    test windows from each of the joint model's estimates, and log Z's gap beside it."""
    b, diffs = metrics["bootstrap"], metrics["differences"]
    rows = [[d["a"], d["b"], f"{d['upper']['diff']:+.2f}", _interval(d["upper"]), f"{d['lower']['diff']:+.2f}",
             _interval(d["lower"]), _f(d["gap_a"]) + ("" if d["gap_b"] is None else f" / {_f(d['gap_b'])}"), _tell(d)]
            for d in diffs]
    resampled = (f"its 95 % interval comes from {b['resamples']} paired bootstrap resamples of the "
                 f"{metrics['windows']} test windows (every model scored on the same draw; seeded by "
                 f"--seed {b['seed']})" if b["resamples"] else "no interval: `--bootstrap 0`, or a single test window")
    return ["## Differences, with 95 % intervals over the test windows", "",
            (f"A minus B in perplexity on the same tokens; {resampled}. Each window's log Z estimate is held "
             "fixed, so the interval is the test windows' doubt only. A joint model's perplexity is a range, so a "
             "difference is given from its upper (U_n) and its lower (T_n) perplexity; the log Z gap (its upper "
             "minus lower perplexity; A's / B's for two joint models) is log Z's own doubt. A difference can be "
             "told from 0 when both intervals exclude 0 on the same side."), "",
            table(["A", "B", "A − B (upper)", "95 % interval", "A − B (lower)", "95 % interval", "log Z gap",
                   "can tell from 0"], rows, ["left", "left"] + ["right"] * 5 + ["left"]), ""]


def write_ppl_report(folder: Path, metrics: dict) -> None:
    """report.md, gap.png and (with per-position estimates) positions.png."""
    rows = [["base LM", _f(metrics["base_ppl"]), ""]]
    rows += [[f"{run_name(c['model'])} ({c['parameters'] / 1e6:.2f}M)", _f(c["ppl"]), ""] for c in metrics["compare"]]
    rows += [[joint_label(m), f"{_f(m['joint_ppl_lower'])} – {_f(m['joint_ppl_upper'])}", str(m["samples"])]
             for m in metrics["models"]]
    lines = [f"# Perplexity of the joint model ({metrics['corpus']}, {metrics['split']})", "",
             (f"{metrics['windows']} test windows, a prefix of {metrics['prefix_len']} tokens and "
             f"{metrics['length']} scored continuation tokens each ({metrics['tokens']} tokens); models in "
             f"{metrics['precision']}. The joint model's perplexity is a range: lower from T_n, upper from U_n "
             "(Theorem 2; both only asymptotically bounds)."), "",
             table(["model", "perplexity", "samples per prefix"], rows, ["left", "right", "right"]), ""]
    if metrics.get("reused"):
        lines += ["Rows taken from earlier runs of the same base LM, windows, samples and seed (`--reuse`): "
                  + "; ".join(f"{run_name(r['energy'])} from {r['from']}" for r in metrics["reused"]) + ".", ""]
    lines += differences_section(metrics)
    fig = new_figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot()
    for m in metrics["models"]:
        g = m["gap_by_samples"]
        ax.plot([x["samples"] for x in g], [x["gap"] for x in g], marker="o", label=joint_label(m))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("samples per prefix (n)")
    ax.set_ylabel("upper − lower perplexity")
    ax.legend(fontsize=7)
    save_png(fig, folder / "gap.png")
    lines += ["## The bound gap against n (figure 2, left)", "", "![gap](gap.png)", "",
              table(["n", *[joint_label(m) for m in metrics["models"]]],
                    [[str(g["samples"]), *[f"{_f(m['gap_by_samples'][i]['lower'])} – {_f(m['gap_by_samples'][i]['upper'])}"
                                           for m in metrics["models"]]]
                     for i, g in enumerate(metrics["models"][0]["gap_by_samples"])]), ""]
    if metrics.get("positions"):
        fig = new_figure(figsize=(5.5, 3.6))
        ax = fig.add_subplot()
        for m, pos in zip(metrics["models"], metrics["positions"]):
            x = [p["position"] for p in pos]
            line, = ax.plot(x, [p["gain_upper"] for p in pos], label=f"{joint_label(m)} upper")
            ax.plot(x, [p["gain_lower"] for p in pos], linestyle="--", color=line.get_color(), label="lower")
            if "gain_exact" in pos[-1]:
                ax.plot([x[-1]], [pos[-1]["gain_exact"]], marker="*", markersize=10, color=line.get_color(),
                        linestyle="none", label="exact")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xlabel("position in the continuation")
        ax.set_ylabel("perplexity / base LM's")
        ax.legend(fontsize=7)
        save_png(fig, folder / "positions.png")
        lines += ["## Per position (eq. 5; figure 1)", "", "![positions](positions.png)", ""]
        for m, pos in zip(metrics["models"], metrics["positions"]):
            lines += [f"### {joint_label(m)}", "",
                      table(["position", "base LM", "joint lower", "joint upper", "joint exact"],
                            [[str(p["position"]), _f(p["base_ppl"]), _f(p["joint_ppl_lower"]),
                              _f(p["joint_ppl_upper"]), _f(p.get("joint_ppl_exact"))] for p in pos],
                            ["right"] * 5), ""]
    (folder / "report.md").write_text("\n".join(lines), encoding="utf-8")


def write_generate_report(folder: Path, metrics: dict, rows: list[dict], base, vocab) -> None:
    """report.md and density.png: diversity, the ESS, the judge, log-density plot, examples."""
    groups = metrics["groups"]
    names = list(groups)
    orders = [k for k in groups["joint"] if k.startswith(("unique_", "set_unique_"))]  # per sequence, then the set
    lines = [f"# Joint sampling (Algorithm 1): {metrics['prefixes']} prefixes", "",
             (f"{metrics['n']} candidates per prefix from the base LM (top-k {metrics['top_k'] or 'off'}), "
             f"{metrics['length']} tokens after a prefix of {metrics['prefix_len']}; one resampled in proportion "
             f"to exp(−E). Effective sample size of the weights: mean {metrics['ess_mean']:.1f}, median "
             f"{metrics['ess_median']:.1f} of {metrics['n']}. `base` is candidate 0, a plain top-k sample of the base "
             "LM."), "",
             "unique n: distinct n-grams per continuation, averaged; set n: over all the continuations "
             "together (the paper's figure 2, right).", "",
             table(["continuations", *[o.replace("set_unique_", "set ").replace("unique_", "unique ") for o in orders],
                    "mean log P_LM",
                    "mean energy"],
                   [[n, *[_f(groups[n][o], 3) for o in orders], _f(groups[n]["lm_logprob_mean"]),
                     _f(groups[n]["energy_mean"], 3)] for n in names], ["left"] + ["right"] * (len(orders) + 2)), ""]
    if "judge" in metrics:
        j = metrics["judge"]
        cols = ["p_generated_mean", "flagged", "auroc", "accuracy"]
        lines += [f"## The judge: {j['detector']}", "",
                  "A detector trained on another base LM's negatives; lower means harder to tell from real text.", "",
                  table(["continuations", *cols], [[n, *[_f(j[n].get(c), 3) for c in cols]] for n in ("base", "joint")],
                        ["left"] + ["right"] * len(cols)), ""]
    scores = {"base LM": {n: np.asarray(groups[n]["lm_logprob"]) for n in names},
              "joint model": {n: np.asarray(groups[n]["lm_logprob"]) - np.asarray(groups[n]["energy"]) for n in names}}
    fig = new_figure(figsize=(9.0, 3.6), layout="constrained")
    for i, (model, by_group) in enumerate(scores.items()):
        ax = fig.add_subplot(1, 2, i + 1)
        for n in names:
            ax.hist(by_group[n], bins=30, density=True, histtype="step", label=n)
        ax.set_xlabel("log P_LM(x | prefix)" if i == 0 else "log P_LM(x | prefix) − E(x)")
        ax.set_ylabel("density")
        ax.set_title(model, fontsize=9)
        ax.legend()
    save_png(fig, folder / "density.png")
    lines += ["## Log-probability under the base LM and under the joint model (figure 3)", "",
              "![density](density.png)", "",
              ("Left: the untruncated base LM's log-probability of each continuation; right: the joint model's, "
               "log P_LM − E, without log Z(prefix): one constant per prefix, the same for every group's "
               "continuation of it, so it moves no difference of means (its estimate needs untruncated samples). "
               "The paper's statistic is each model's own samples' mean minus the real continuations' under that "
               "model (21.64 for its base LM's samples under the base LM, 6.20 for the joint model's under the joint "
               "model): the closer to 0, the better a model's samples match real text by its own score."), ""]
    if "real" in names:
        lines += [table(["continuations", "mean − real's, base LM", "mean − real's, joint model"],
                        [[n, *[f"{float(scores[m][n].mean() - scores[m]['real'].mean()):+.2f}" for m in scores]]
                         for n in names if n != "real"], ["left", "right", "right"]), ""]
    lines += ["## Examples", ""]
    for r in rows[:5]:
        lines += [f"- **prefix** …{vocab.decode(r['prefix'][-24:])}",
                  f"  - joint: {vocab.decode(r['joint'])}", f"  - base: {vocab.decode(r['base'])}"]
        if r["real"]:
            lines.append(f"  - real: {vocab.decode(r['real'])}")
    (folder / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_repetitions_report(folder: Path, metrics: dict) -> None:
    """report.md: table 3's shape (per example, the context's end, then each model's top 5 next
    tokens with their probabilities, the repeated token in bold) and the summary over examples."""
    s, n = metrics["summary"], metrics["examples"]
    source = (f"the base LM's own continuation (top-k {metrics['top_k'] or 'off'})" if metrics["source"] == "sample"
              else "the real continuation")
    ci = "" if s["lo"] is None else (f" (95 % bootstrap interval over the examples [{s['lo']:+.3f}, {s['hi']:+.3f}], "
                                     f"{s['resamples']} resamples)")
    lines = [f"# P(x_t | x_<t) on repetitions (table 3): {metrics['corpus']}, {metrics['split']}", "",
             (f"{s['examples']} positions where {source} after a prefix of {metrics['prefix_len']} tokens writes a "
              f"token x_t already in x_<t (the first such position of a window; {metrics['windows_with_repetition']} "
              f"of {metrics['windows_searched']} windows searched). At each, the base LM's {metrics['candidates']} "
              "most likely next tokens w (and x_t where it is not among them), the joint model's P(w | x_<t) ∝ "
              f"P_LM(w | x_<t) · E[exp(−E(x_<t, w, x_>t))] over {metrics['completions']} completions x_>t of the "
              f"untruncated base LM to the energy's window ({metrics['prefix_len'] + metrics['length']} tokens), "
              "renormalised over those candidates (the paper's approximation: 128 candidates, 10,000 completions); "
              f"the base LM's probabilities renormalised over the same candidates. Energy: {joint_label(metrics)}; "
              f"models in {metrics['precision']}."), "",
             (f"**The joint model lowers the repeated token's probability in {s['lowered']} of {s['examples']} "
              f"examples** (raises it in {s['raised']}); mean log P_joint(x_t) / P_LM(x_t) {s['mean_log_ratio']:+.3f}"
              f"{ci}."), ""]
    rows = []
    for ex in n:
        for model, key in (("Base LM", "base"), ("joint", "joint")):
            for rank, c in enumerate(ex[key]):
                word = f"**{c['token']}**" if c["id"] == ex["token_id"] else c["token"]
                first = rank == 0 and model == "Base LM"
                rows.append([f"…{ex['context_tail']}" if first else "", model if rank == 0 else "", str(rank), word,
                             f"{c['p']:.2f}"])
    lines += [table(["Context x_<t", "Model", "Rank", "x_t", "P(x_t | x_<t)"], rows,
                    ["left", "left", "right", "left", "right"]), "",
              "## The repeated token", "",
              ("P_LM over the whole vocabulary, both models over the candidates; rank 0 is the most likely; the "
               "candidates' share of each model's next-token mass (the joint's from an estimate of eq. 5's "
               "denominator, so it may exceed 1)."), "",
              table(["window", "x_t", "P_LM", "P_LM (cand.)", "P_joint (cand.)", "log ratio", "rank LM → joint",
                     "mass LM / joint"],
                    [[ex["key"], ex["token"], _f(ex["p_token"]["lm"], 3), _f(ex["p_token"]["lm_candidates"], 3),
                      _f(ex["p_token"]["joint"], 3), f"{ex['log_ratio']:+.3f}",
                      f"{ex['rank']['lm']} → {ex['rank']['joint']}",
                      f"{_f(ex['mass']['lm'], 2)} / {_f(ex['mass']['joint'], 2)}"] for ex in n],
                    ["left", "left"] + ["right"] * 6), ""]
    (folder / "report.md").write_text("\n".join(lines), encoding="utf-8")
