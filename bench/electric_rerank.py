"""The reranking table of issue 10: Electric, ELECTRA-TT, a masked LM and a TwoTower model of equal
size and training compute, started from MiniLM and trained on PTB train, plus a causal LM, each
reranking the offline ASR n-best lists of bench/asr_nbest (dev-tuned lambda) against the 1-best,
the Kneser-Ney 3-gram and the oracle.

    python bench/electric_rerank.py [--out runs/electric-rerank] [--steps 200] [--top 10] [--threads 1]
        [--lists ptb|spoken] [--normalize none [ptb ...]]

Every stage is cached in OUT and resumable (training resumes from its checkpoint, scoring from
its partial file): kill it and run it again. Stages:
  1. PTB (`textebm data prepare ptb`), the n-best lists (OUT/dev.json, OUT/test.json): with
     `--lists ptb` the committed ones, in PTB's tokens ("do n't"); with `--lists spoken`, references
     and hypotheses with clitics joined ("don't", "company's"), as the recogniser's dictionary
     writes them before bench/asr_nbest/build.py splits them (the case of issue 25);
     the unique texts of each list's --top best hypotheses in the form of each --normalize preset
     (`textebm rerank --top N --normalize P --write-texts`; masked-LM PLL of all 50 per utterance
     costs hours on a CPU), all of them once in OUT/hyps.txt;
  2. `cloze train --init minilm-l6` for electric, then electra, mlm and twotower with --flops set
     to Electric's measured training FLOPs (equal compute, appendix A); a causal LM of MiniLM's
     shape (6 layers, width 384) for --steps steps;
  3. `textebm score` of OUT/hyps.txt by each model (and by the 3-gram of bench/asr_nbest, trained
     on PTB train, words outside its vocabulary scored as <unk>);
  4. `textebm rerank --top N --normalize P` over all score files for each preset P, with paired
     bootstrap intervals against the 1-best and the masked LM; reports OUT/rerank-P/report.md (wide
     lambda grid) and OUT/rerank-P-paper-grid/report.md (the paper's grid). WER always compares
     the lists' texts as written (for `spoken`, "don't" is one word);
  5. with several presets, for each model, one rerank of its scores in each form side by side
     (a copy of its score file per preset, its rows marked with that form and the method named
     MODEL-PRESET), `--versus MODEL-FIRST_PRESET`: the paired bootstrap interval of what the form
     changes; OUT/compare-MODEL/report.md.
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
sys.path.insert(0, str(HERE / "asr_nbest"))
from common import join_clitics  # noqa: E402  (bench/asr_nbest's PTB <-> recogniser word forms)


def run(cmd: list[str], env: dict) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, env=env)


def textebm(*args) -> list[str]:
    return [sys.executable, "-m", "textebm", *map(str, args)]


def write_lists(src: Path, dst: Path, lists: str) -> None:
    """The n-best lists as committed (ptb), or with clitics joined in every text (spoken)."""
    if dst.is_file():
        return
    data = json.loads(src.read_text())
    if lists == "spoken":
        join = lambda t: " ".join(join_clitics(t.split()))  # noqa: E731
        data = {u: {k: join(v) if k == "ref" else {**v, "text": join(v["text"])} if k.startswith("hyp_") else v
                    for k, v in e.items()} for u, e in data.items()}
    tmp = dst.with_suffix(".partial")
    tmp.write_text(json.dumps(data, indent=0))
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
    ap.add_argument("--top", type=int, default=10, help="hypotheses kept per utterance (rerank --top)")
    ap.add_argument("--lists", choices=["ptb", "spoken"], default="ptb",
                    help="the committed lists (PTB tokens) or the same with clitics joined, as spoken")
    ap.add_argument("--normalize", nargs="+", default=["none"], choices=["none", "ptb", "asr"],
                    help="rerank once with each preset (rerank --normalize)")
    ap.add_argument("--models", nargs="+", default=["electric", "electra", "mlm", "twotower", "causal"],
                    choices=["electric", "electra", "mlm", "twotower", "causal"], help="models to train and score")
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
        write_lists(NBEST / f"{split}.json", out / f"{split}.json", args.lists)
    lists = ["--dev", out / "dev.json", "--test", out / "test.json", "--top", args.top]
    hyps = out / "hyps.txt"
    if not hyps.is_file():
        texts: dict[str, None] = {}
        for preset in args.normalize:
            f = out / f"texts-{preset}.txt"
            if not f.is_file():
                run(textebm("rerank", *lists, "--normalize", preset, "--write-texts", f), env)
            texts.update(dict.fromkeys(f.read_text().splitlines()))
        hyps.write_text("".join(t + "\n" for t in texts))
    common = ["--data", ptb, "--init", "minilm-l6", "--batch-size", "32", "--max-len", "64", "--lr", "1e-4",
              "--checkpoint-every", "25", "--no-progress", "--precision", args.precision, "--eval-split", "dev"]
    runs = out / "runs"
    train(textebm("cloze", "train", "--objective", "electric", "--max-steps", args.steps, "--out",
                  runs / "electric", *common), runs / "electric", env)
    budget = json.loads((runs / "electric" / "config.json").read_text())["compute"]["train_flops"]
    for objective in ("electra", "mlm", "twotower"):
        if objective in args.models:
            train(textebm("cloze", "train", "--objective", objective, "--flops", f"{budget:.6g}", "--out",
                          runs / objective, *common), runs / objective, env)
    if "causal" in args.models:
        train(textebm("lm", "train", "--data", ptb, "--objective", "causal", "--layers", "6", "--width", "384",
                      "--heads", "6", "--max-steps", args.steps * 2, "--batch-size", "32", "--lr", "1e-3",
                      "--max-len", "64", "--checkpoint-every", "50", "--no-progress", "--precision", args.precision,
                      "--out", runs / "causal"), runs / "causal", env)
    scores = out / "scores"
    scores.mkdir(exist_ok=True)
    files = []
    for name in sorted(args.models, key=lambda m: m == "mlm"):  # the slow masked-LM PLL last
        f = scores / f"{name}.jsonl"
        if not f.is_file():
            run(textebm("score", "--model", runs / name, "--input", hyps, "--out", f, "--no-progress",
                        "--precision", args.precision, "--batch-size", "32", "--threads", args.threads), env)
        files.append(f)
    ngram = scores / "ngram.jsonl"
    if not ngram.is_file():
        hyps_jsonl = out / "hyps.jsonl"
        hyps_jsonl.write_text("".join(json.dumps({"id": f"h{i:06d}", "text": t}) + "\n"
                                      for i, t in enumerate(hyps.read_text().splitlines())))
        run([sys.executable, HERE / "asr_nbest" / "ngram_scores.py", "--train", ptb / "train.jsonl", "--input",
             hyps_jsonl, "--out", ngram], env)
    files.append(ngram)
    versus = ["--versus", "mlm"] if "mlm" in args.models else []
    for preset in args.normalize:
        for grid, rerank in (("paper", out / f"rerank-{preset}-paper-grid"), ("wide", out / f"rerank-{preset}")):
            run(textebm("rerank", *lists, "--normalize", preset, "--scores", *files, "--out", rerank, "--grid", grid,
                        *versus, "--overwrite"), env)
        print((rerank / "report.md").read_text())
    if len(args.normalize) > 1:
        compare_forms(files, args.normalize, lists, out, env)


def compare_forms(files: list[Path], presets: list[str], lists: list, out: Path, env: dict) -> None:
    """Stage 5: each model's scores reranked in every form side by side, with paired intervals."""
    forms = out / "scores" / "forms"
    forms.mkdir(exist_ok=True)
    for f in files:
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        copies = []
        for preset in presets:
            g = forms / f"{f.stem}-{preset}.jsonl"
            if not g.is_file():
                marked = [{**r, "method": f"{f.stem}-{preset}", **({"normalize": preset} if preset != "none" else {})}
                          for r in rows]
                g.write_text("".join(json.dumps(r) + "\n" for r in marked))
            copies.append(g)
        run(textebm("rerank", *lists, "--scores", *copies, "--out", out / f"compare-{f.stem}", "--grid", "wide",
                    "--versus", f"{f.stem}-{presets[0]}", "--overwrite"), env)


if __name__ == "__main__":
    main()
