"""Rerank the benchmark's n-best lists with text scores and print the WER table.

    python bench/asr_nbest/rerank.py data/ngram_scores.jsonl [more scores.jsonl ...]

Each scores file is JSONL in the format of `textebm score` / ngram_scores.py ({"text", "score",
...}; matched to hypotheses by text). For each file: new score = recogniser score + lam * text
score, lam tuned on dev over a grid (the lowest dev WER; ties -> smaller lam), then applied to
test. Rows: the recogniser's 1-best, each scorer alone (lam -> infinity), each scorer with tuned
lam, and the oracle (the hypothesis with the fewest word errors).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import edit_distance  # noqa: E402

HERE = Path(__file__).resolve().parent
GRID = [0.0] + [round(10 ** (e / 20), 4) for e in range(-40, 41)]  # 0.01 .. 100


def load_nbest(path: Path) -> list[tuple[list[str], list[tuple[str, float, int]]]]:
    """[(ref words, [(text, recogniser score, word errors)])] per utterance."""
    data = json.loads(path.read_text())
    out = []
    for entry in data.values():
        ref = entry["ref"].split()
        hyps = [(h["text"], float(h["score"]), edit_distance(ref, h["text"].split()))
                for k, h in entry.items() if k.startswith("hyp_")]
        out.append((ref, hyps))
    return out


def wer(utts, pick) -> float:
    edits = sum(min(hyps, key=pick)[2] for _, hyps in utts)  # min over key: ties -> first (best AM)
    return edits / sum(len(r) for r, _ in utts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scores", nargs="*", help="scores JSONL files (text -> score)")
    ap.add_argument("--data", default=str(HERE / "data"), help="folder with dev.json, test.json")
    args = ap.parse_args()
    dev, test = (load_nbest(Path(args.data) / f"{s}.json") for s in ("dev", "test"))
    rows = [("recogniser 1-best", "-", wer(dev, lambda h: -h[1]), wer(test, lambda h: -h[1]))]
    for path in args.scores:
        scores: dict[str, float] = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    scores[r["text"]] = float(r["score"])
        missing = {h[0] for _, hs in dev + test for h in hs} - scores.keys()
        if missing:
            sys.exit(f"{path}: no score for {len(missing)} hypothesis texts, e.g. {next(iter(missing))!r}")
        name = Path(path).stem
        rows.append((f"{name} alone", "inf", wer(dev, lambda h: -scores[h[0]]),
                     wer(test, lambda h: -scores[h[0]])))
        best = min(GRID, key=lambda lam: (wer(dev, lambda h: -(h[1] + lam * scores[h[0]])), lam))
        rows.append((f"recogniser + lam * {name}", f"{best:g}",
                     wer(dev, lambda h: -(h[1] + best * scores[h[0]])),
                     wer(test, lambda h: -(h[1] + best * scores[h[0]]))))
    rows.append(("oracle", "-", wer(dev, lambda h: h[2]), wer(test, lambda h: h[2])))
    print("| scores | lam (tuned on dev) | dev WER % | test WER % |")
    print("| --- | --- | --- | --- |")
    for name, lam, d, t in rows:
        print(f"| {name} | {lam} | {100 * d:.2f} | {100 * t:.2f} |")


if __name__ == "__main__":
    main()
