"""Detectors on the user's own texts, by length and domain (issue 37): paper c's detectors trained on
whole 64-token windows of `news` against detectors trained on windows of varied lengths
(`detect train --min-length`), then

  * TPR and FPR at each detector's own threshold on held-out test windows, per length bucket
    (`detect eval --buckets`: windows cut to 8-15, 16-31 and 32-63 tokens, and whole);
  * the false-positive rate on human texts of other sources and lengths (`detect score`): held-out
    news sentences (the same domain), tweets (`health-tweets`), Shakespeare speeches, State of the
    Union sentences, Brown sentences (as the corpus writes them: tokens spaced); by length bucket of
    the text's tokens.

The recipe is docs/detection.md's on news, as the issue's first measurement ran it: one shared BPE
vocabulary, 2 x 128 transformer generators (300 steps; the test negatives from a second seed),
2,000 training windows of 64 tokens with k = 3 top-k-10 negatives, detectors trained one epoch
(125 steps of 16 windows: `--max-steps 300` with the default one epoch).
Every step is cached in WORK (a finished output is skipped), so the script resumes.

    OMP_NUM_THREADS=1 python bench/detection/lengths.py --work runs/det-lengths \
        --out bench/results/detection/lengths [--detectors unitransf bilstm minilm] [--min-length 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUCKETS = [(1, 8), (8, 16), (16, 32), (32, 64), (64, 65), (65, 10**9)]  # [lo, hi) text tokens
BUCKET_NAMES = ["1-7", "8-15", "16-31", "32-63", "64", ">64"]
SOURCES = {"news-sentences": ("news", "test"), "tweets": ("health-tweets", "test"),
           "shakespeare": ("shakespeare", "test"), "sotu": ("sotu", "test"), "brown": ("brown", "test")}
DETECTORS = {  # name: detect train options (the generator is --init for unitransf)
    "unitransf": ["--energy", "unitransf", "--init", "{gen}", "--lr", "1e-3"],
    "bilstm": ["--energy", "bilstm", "--lr", "1e-3"],
    "minilm": ["--energy", "bitransf", "--init", "minilm-l6", "--lr", "5e-5"],
}


def textebm(*args, log: Path) -> None:
    cmd = [sys.executable, "-m", "textebm", *map(str, args)]
    print("$ textebm " + " ".join(map(str, args)), flush=True)
    with open(log, "a") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")


def texts_of(data: Path, split: str, n: int, seed: int = 0) -> list[str]:
    rows = [json.loads(x)["text"] for x in (data / f"{split}.jsonl").read_text().splitlines() if x.strip()]
    rows = [" ".join(t.split()) for t in rows if t.strip()]
    return random.Random(seed).sample(rows, min(n, len(rows)))


def bucket_of(n: int) -> str:
    return next(name for (lo, hi), name in zip(BUCKETS, BUCKET_NAMES) if lo <= n < hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="runs/det-lengths")
    ap.add_argument("--out", default="bench/results/detection/lengths")
    ap.add_argument("--detectors", nargs="+", default=list(DETECTORS), choices=list(DETECTORS))
    ap.add_argument("--min-length", type=int, default=8)
    ap.add_argument("--variants", nargs="+", default=["whole", "min", "min-cutall"],
                    help="whole windows; --min-length with half the windows cut (the default --cut-fraction); "
                         "with every window cut (--cut-fraction 1)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--human", type=int, default=500, help="human texts per source")
    ap.add_argument("--only-finished", action="store_true",
                    help="train nothing: report the detectors already trained in --work")
    args = ap.parse_args()
    w = Path(args.work).resolve()
    w.mkdir(parents=True, exist_ok=True)
    log = w / "log.txt"
    data = w / "data"
    for name in {"news", *(c for c, _ in SOURCES.values())}:
        if not (data / name).is_dir():
            textebm("data", "prepare", name, "--out", data / name, log=log)
    if not (w / "vocab").is_dir():
        textebm("tokenizer", "train", "--data", data / "news", "--vocab-size", 8000, "--out", w / "vocab", log=log)
    gens = {}
    for seed in (0, 1):
        g = gens[seed] = w / f"gen-s{seed}"
        if not (g / "metrics.json").is_file():
            textebm("lm", "train", "--data", data / "news", "--tokenizer", w / "vocab", "--arch", "transformer",
                    "--layers", 2, "--width", 128, "--context", 80, "--chunk", 64, "--max-steps", 300, "--lr", "2e-3",
                    "--seed", seed, "--out", g, "--no-progress", "--overwrite", log=log)
    neg = {}
    for split, gen, n in (("train", 0, 2000), ("dev", 0, 500), ("test", 1, 1000)):
        f = neg[split] = w / f"neg-{split}.jsonl"
        if not f.is_file():
            textebm("negatives", "generate", "--data", data / "news", "--generator", gens[gen], "--vocab", w / "vocab",
                    "--split", split, "--max-windows", n, "--k", 3, "--top-k", 10, "--out", f, "--no-progress", log=log)
    human = {}
    for src, (corpus, split) in SOURCES.items():
        f = human[src] = w / "human" / f"{src}.txt"
        if not f.is_file():
            f.parent.mkdir(exist_ok=True)
            f.write_text("\n".join(texts_of(data / corpus, split, args.human)) + "\n")
    results = {"settings": {"min_length": args.min_length, "max_steps": args.steps, "human_per_source": args.human,
                            "train_windows": 2000, "length": 64, "k": 3, "top_k": 10, "precision": "fp32",
                            "cpu": platform.processor() or platform.machine(), "threads": os.environ.get(
                                "OMP_NUM_THREADS", "torch default")},
               "detectors": {}}
    for det in args.detectors:
        variants = {"whole": [], f"min{args.min_length}": ["--min-length", args.min_length],
                    f"min{args.min_length}-cutall": ["--min-length", args.min_length, "--cut-fraction", 1]}
        for variant, extra in variants.items():
            if variant.replace(str(args.min_length), "") not in args.variants:
                continue
            name = f"{det}-{variant}"
            run = w / "det" / name
            if not (run / "detector.json").is_file() and args.only_finished:
                continue
            if not (run / "detector.json").is_file():
                opts = [o.format(gen=gens[0]) for o in DETECTORS[det]]
                resume = ["--resume"] if (run / "config.json").is_file() else []
                textebm("detect", "train", "--train", neg["train"], "--val", neg["dev"], "--vocab", w / "vocab", *opts,
                        *extra, "--max-steps", args.steps, "--batch-size", 16, "--precision", "fp32", "--seed", 0,
                        "--out", run, "--no-progress", *resume, log=log)
            ev = w / "eval" / f"{name}.json"
            if not ev.is_file():
                ev.parent.mkdir(exist_ok=True)
                textebm("detect", "eval", "--model", run, "--test", neg["test"], "--out", ev, log=log)
            m = json.loads(ev.read_text())
            trained = json.loads((run / "metrics.json").read_text())["train"]
            row = {"steps": trained["steps"], "epochs": trained.get("epochs_completed"), "test_auroc": m["auroc"],
                   "test_tpr_at_1pct_fpr": m["tpr_at_0.01_fpr"],
                   "by_length": {b["bucket"]: {k: b[k] for k in ("auroc", "tpr", "fpr", "accuracy", "tpr_decision",
                                                                 "fpr_decision")}
                                 for b in m["by_length"]["buckets"]},
                   "human_fpr": {}}
            for src, f in human.items():
                out = w / "scores" / f"{name}-{src}.jsonl"
                if not out.is_file():
                    out.parent.mkdir(exist_ok=True)
                    textebm("detect", "score", "--model", run, "--input", f, "--out", out, log=log)
                rows = [json.loads(x) for x in out.read_text().splitlines()]
                per = {}
                for r in rows:
                    per.setdefault(bucket_of(r["tokens"]), []).append(r["generated"])
                row["human_fpr"][src] = {"all": sum(r["generated"] for r in rows) / len(rows), "n": len(rows),
                                         "by_length": {b: {"fpr": sum(v) / len(v), "n": len(v)}
                                                       for b, v in sorted(per.items(), key=lambda x:
                                                                          BUCKET_NAMES.index(x[0]))}}
            results["detectors"][name] = row
            wh = row["by_length"]["whole"]
            print(f"{name}: test AUROC {row['test_auroc']:.4f}; whole windows at 1 % FPR on validation: TPR "
                  f"{wh['tpr']:.3f} FPR {wh['fpr']:.3f}; at the decision threshold: TPR {wh['tpr_decision']:.3f} "
                  f"FPR {wh['fpr_decision']:.3f}; "
                  + ", ".join(f"{s} FPR {v['all']:.3f}" for s, v in row["human_fpr"].items()), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "tables.md").write_text(tables(results))
    print(f"written {out}/results.json and tables.md")


def tables(res: dict) -> str:
    s = res["settings"]
    steps = sorted({r["steps"] for r in res["detectors"].values()})
    lines = [f"# Detectors by length and domain (news, {s['train_windows']} windows of {s['length']} tokens, "
             f"k = {s['k']}, {'/'.join(map(str, steps))} steps of 16 windows (one epoch), {s['precision']}; "
             f"--min-length {s['min_length']})", "",
             "## Test windows (news, a second generator seed): TPR / FPR by length", "",
             "At the operating threshold (1 % FPR on validation windows), then at the decision threshold "
             "(`detect score`'s: best balanced accuracy on validation).", "",
             "| detector | AUROC | " + " | ".join(f"{b} TPR / FPR" for b in ("8-16", "16-32", "32-64", "whole"))
             + " | whole, decision TPR / FPR |", "|---|---:|" + "---:|" * 5]
    for name, r in res["detectors"].items():
        cells = [f"{r['by_length'][b]['tpr']:.3f} / {r['by_length'][b]['fpr']:.3f}" if b in r["by_length"] else ""
                 for b in ("8-16", "16-32", "32-64", "whole")]
        wh = r["by_length"]["whole"]
        cells.append(f"{wh['tpr_decision']:.3f} / {wh['fpr_decision']:.3f}")
        lines.append(f"| {name} | {r['test_auroc']:.4f} | " + " | ".join(cells) + " |")
    lines += ["", "## Human texts flagged as generated at the decision threshold (false-positive rate), all "
              "and, for held-out news sentences, by text tokens", ""]
    srcs = list(next(iter(res["detectors"].values()))["human_fpr"]) if res["detectors"] else []
    lines += ["| detector | " + " | ".join(srcs) + " | " + " | ".join(f"news {b}" for b in BUCKET_NAMES) + " |",
              "|---|" + "---:|" * (len(srcs) + len(BUCKET_NAMES))]
    for name, r in res["detectors"].items():
        h = r["human_fpr"]
        news = h.get("news-sentences", {}).get("by_length", {})
        lines.append(f"| {name} | " + " | ".join(f"{h[x]['all']:.3f}" for x in srcs) + " | "
                     + " | ".join(f"{news[b]['fpr']:.3f} (n={news[b]['n']})" if b in news else "" for b in BUCKET_NAMES)
                     + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
