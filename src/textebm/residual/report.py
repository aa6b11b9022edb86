"""The reports of `residual ppl` and `residual generate`: a Markdown page a person reads first,
and the figures of Deng et al. (2020): the bound gap against the number of samples (figure 2
left), the per-position perplexity gain (figure 1), the base LM's log-probability density of
real, base and joint continuations (figure 3)."""

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
                 f"--seed {b['seed']})" if b["resamples"] else "no interval was asked for (`--bootstrap 0`)")
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
    fig = new_figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot()
    for n in names:
        ax.hist(groups[n]["lm_logprob"], bins=30, density=True, histtype="step", label=n)
    ax.set_xlabel("log P_LM(continuation | prefix), untruncated base LM")
    ax.set_ylabel("density")
    ax.legend()
    save_png(fig, folder / "density.png")
    lines += ["## Log-probability under the base LM (figure 3)", "", "![density](density.png)", "",
              "## Examples", ""]
    for r in rows[:5]:
        lines += [f"- **prefix** …{vocab.decode(r['prefix'][-24:])}",
                  f"  - joint: {vocab.decode(r['joint'])}", f"  - base: {vocab.decode(r['base'])}"]
        if r["real"]:
            lines.append(f"  - real: {vocab.decode(r['real'])}")
    (folder / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
