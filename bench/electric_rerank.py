"""The reranking table of issue 10: Electric, ELECTRA-TT, a masked LM and a TwoTower model of equal
size and training compute, started from MiniLM and trained on PTB train, plus a causal LM, each
reranking the offline ASR n-best lists of bench/asr_nbest (dev-tuned lambda) against the 1-best,
the Kneser-Ney 3-gram and the oracle.

    python bench/electric_rerank.py [--out runs/electric-rerank] [--steps 200] [--top 10] [--threads 1]

Every stage is cached in OUT and resumable (training resumes from its checkpoint, scoring from
its partial file): kill it and run it again. Stages:
  1. PTB (`textebm data prepare ptb`), the n-best lists cut to their --top best hypotheses
     (OUT/dev.json, OUT/test.json; masked-LM PLL of all 50 per utterance costs hours on a CPU),
     and the unique hypothesis texts (OUT/hyps.txt);
  2. `cloze train --init minilm-l6` for electric, then electra, mlm and twotower with --flops set
     to Electric's measured training FLOPs (equal compute, appendix A); a causal LM of MiniLM's
     shape (6 layers, width 384) for --steps steps;
  3. `textebm score` of the hypotheses by each model (and the 3-gram of bench/asr_nbest);
  4. `textebm rerank` over all score files, with paired bootstrap intervals against the 1-best and
     the masked LM; reports OUT/rerank/report.md (wide lambda grid) and
     OUT/rerank-paper-grid/report.md (the paper's grid).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NBEST = HERE / "asr_nbest" / "data"


def run(cmd: list[str], env: dict) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, env=env)


def textebm(*args) -> list[str]:
    return [sys.executable, "-m", "textebm", *map(str, args)]


def cut_nbest(src: Path, dst: Path, top: int) -> None:
    if dst.is_file():
        return
    data = json.loads(src.read_text())
    cut = {u: {"ref": e["ref"], **{f"hyp_{i}": e[f"hyp_{i}"] for i in range(1, top + 1) if f"hyp_{i}" in e}}
           for u, e in data.items()}
    tmp = dst.with_suffix(".partial")
    tmp.write_text(json.dumps(cut, indent=0))
    tmp.replace(dst)


def trained(run_dir: Path) -> bool:
    m = run_dir / "metrics.json"
    return m.is_file() and json.loads(m.read_text()).get("completed", False)


def train(cmd: list, run_dir: Path, env: dict) -> None:
    if trained(run_dir):
        return
    resume = ["--resume"] if (run_dir / "checkpoint" / "state.json").is_file() else (
        ["--overwrite"] if run_dir.exists() else [])
    run([*cmd, *resume], env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/electric-rerank")
    ap.add_argument("--steps", type=int, default=200, help="Electric's training steps (batch 32); the others "
                                                           "get its FLOPs")
    ap.add_argument("--top", type=int, default=10, help="hypotheses kept per utterance")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", default="auto")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    ptb = out / "ptb"
    if not (ptb / "dataset.json").is_file():
        run(textebm("data", "prepare", "ptb", "--out", ptb), env)
    for split in ("dev", "test"):
        cut_nbest(NBEST / f"{split}.json", out / f"{split}.json", args.top)
    hyps = out / "hyps.txt"
    if not hyps.is_file():
        texts = dict.fromkeys(h["text"] for s in ("dev", "test") for e in json.loads((out / f"{s}.json").read_text()).values()
                              for k, h in e.items() if k != "ref")
        hyps.write_text("".join(t + "\n" for t in texts))
    common = ["--data", ptb, "--init", "minilm-l6", "--batch-size", "32", "--max-len", "64", "--lr", "1e-4",
              "--checkpoint-every", "25", "--no-progress", "--precision", args.precision, "--eval-split", "dev"]
    runs = out / "runs"
    train(textebm("cloze", "train", "--objective", "electric", "--max-steps", args.steps, "--out",
                  runs / "electric", *common), runs / "electric", env)
    budget = json.loads((runs / "electric" / "config.json").read_text())["compute"]["train_flops"]
    for objective in ("electra", "mlm", "twotower"):
        train(textebm("cloze", "train", "--objective", objective, "--flops", f"{budget:.6g}", "--out",
                      runs / objective, *common), runs / objective, env)
    train(textebm("lm", "train", "--data", ptb, "--objective", "causal", "--layers", "6", "--width", "384",
                  "--heads", "6", "--max-steps", args.steps * 2, "--batch-size", "32", "--lr", "1e-3",
                  "--max-len", "64", "--checkpoint-every", "50", "--no-progress", "--precision", args.precision,
                  "--out", runs / "causal"), runs / "causal", env)
    scores = out / "scores"
    scores.mkdir(exist_ok=True)
    files = []
    for name in ("electric", "electra", "mlm", "twotower", "causal"):
        f = scores / f"{name}.jsonl"
        if not f.is_file():
            run(textebm("score", "--model", runs / name, "--input", hyps, "--out", f, "--no-progress",
                        "--precision", args.precision, "--batch-size", "32"), env)
        files.append(f)
    ngram = NBEST / "ngram_scores.jsonl"
    if not ngram.is_file():
        run([sys.executable, HERE / "asr_nbest" / "hyps.py"], env)
        run([sys.executable, HERE / "asr_nbest" / "ngram_scores.py"], env)
    files.append(ngram)
    for grid, rerank in (("paper", out / "rerank-paper-grid"), ("wide", out / "rerank")):
        run(textebm("rerank", "--dev", out / "dev.json", "--test", out / "test.json", "--scores", *files, "--out",
                    rerank, "--grid", grid, "--versus", "mlm", "--overwrite"), env)
    print((rerank / "report.md").read_text())


if __name__ == "__main__":
    main()
