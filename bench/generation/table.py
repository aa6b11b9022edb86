"""Table 1 of Deng et al. (2020) from a `bench/generation/pipeline.sh` folder, and the generation
figures beside it: one Markdown page, printed (or written with --out).

    PYTHONPATH=src python bench/generation/table.py WORK [--out results.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from textebm.markdown import table
from textebm.residual.report import run_name


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _interim(part: Path) -> list[str]:
    """The bounds over the windows an unfinished `residual ppl` has written so far (its .partial)."""
    from textebm.residual.bounds import WindowBounds, perplexities

    rows = [json.loads(x) for x in part.read_text().splitlines()[1:] if x.strip()]
    wins = [r for r in rows if r.get("part") == "window"]
    if not wins:
        return []
    out = [f"## {part.name}: interim, {len(wins)} windows so far", ""]
    for k in range(len(wins[0]["terms"])):
        p = perplexities([WindowBounds.from_row(r["terms"][k]) for r in wins])
        out.append(f"- energy {k + 1}: base LM {p['base_ppl']:.2f}, joint {p['joint_ppl_lower']:.2f} – "
                   f"{p['joint_ppl_upper']:.2f} (n = {p['samples']}, {p['tokens']} tokens)")
    return [*out, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    work = Path(args.work)
    lines = []
    corpora = (sorted(p.name for p in (work / "ppl").iterdir() if (p / "metrics.json").is_file())
               if (work / "ppl").is_dir() else [])
    for c in corpora:
        m = _load(work / "ppl" / c / "metrics.json")
        rows = [["base LM", f"{m['base_ppl']:.2f}"]]
        rows += [[run_name(x["model"]), f"{x['ppl']:.2f}"] for x in m["compare"]]
        rows += [[f"joint {x['kind']} ({run_name(x['energy'])})",
                  f"{x['joint_ppl_lower']:.2f} – {x['joint_ppl_upper']:.2f}"] for x in m["models"]]
        lines += [(f"## {c}: test perplexity over {m['tokens']} continuation tokens ({m['windows']} prefixes of "
                  f"{m['prefix_len']} tokens, {m['length']} generated; n = {m['models'][0]['samples']} samples "
                  f"per prefix; models in {m['precision']})"), "", table(["model", "perplexity"], rows, ["left", "right"]), ""]
        if m.get("positions"):
            for x, pos in zip(m["models"], m["positions"]):
                last = pos[-1]
                lines.append(f"- {run_name(x['energy'])}, last position: base {last['base_ppl']:.2f}, joint "
                             f"{last['joint_ppl_lower']:.2f} – {last['joint_ppl_upper']:.2f}, exact "
                             f"{last.get('joint_ppl_exact', float('nan')):.2f}")
            lines.append("")
        gens = sorted((work / "gen").glob(f"{c}-*/metrics.json")) if (work / "gen").is_dir() else []
        for g in gens:
            gm = _load(g)
            grp = gm["groups"]
            rows = [[n, *[f"{grp[n][f'unique_{k}gram']:.3f}" if grp[n][f"unique_{k}gram"] is not None else ""
                          for k in (1, 2, 3, 4)], f"{grp[n]['lm_logprob_mean']:.2f}", f"{grp[n]['energy_mean']:.3f}"]
                    for n in grp]
            lines += [(f"### {g.parent.name}: joint sampling, n = {gm['n']}, top-k {gm['top_k']}, ESS mean "
                      f"{gm['ess_mean']:.1f}"), "",
                      table(["continuations", "unique 1-grams", "2-grams", "3-grams", "4-grams", "mean log P_LM",
                             "mean energy"], rows, ["left"] + ["right"] * 6), ""]
            if "judge" in gm:
                j = gm["judge"]
                lines += [table(["judged", "mean P(generated)", "flagged", "AUROC vs real"],
                                [[n, f"{j[n]['p_generated_mean']:.3f}", f"{j[n]['flagged']:.3f}",
                                  f"{j[n].get('auroc', float('nan')):.3f}"] for n in ("base", "joint")],
                                ["left", "right", "right", "right"]), ""]
    for part in sorted((work / "ppl").glob("*.partial")) if (work / "ppl").is_dir() else []:
        lines += _interim(part)
    text = "\n".join(lines) if lines else "no `residual ppl` rows yet\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
