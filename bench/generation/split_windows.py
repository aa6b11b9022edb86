"""Split a `negatives generate` file into two by document (seeded): the energy's own training and
validation windows from text the base LM never trained on (issue 35, held-out energy).

    python bench/generation/split_windows.py neg/news-devall.jsonl --fraction 0.8 --seed 0 \
        --out neg/news-held-train.jsonl neg/news-held-val.jsonl

Every window of one document goes to the same side, so no validation window shares text with a
training one (windows overlap at stride < length). Nothing is overwritten.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("windows")
    ap.add_argument("--fraction", type=float, default=0.8, help="share of the documents on the first side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", nargs=2, required=True, metavar=("FIRST", "SECOND"))
    args = ap.parse_args()
    if not 0 < args.fraction < 1:
        print(f"--fraction must be in (0, 1), got {args.fraction}", file=sys.stderr)
        return 2
    outs = [Path(p) for p in args.out]
    if any(p.exists() for p in outs):
        print(f"--out: {', '.join(str(p) for p in outs if p.exists())} exists; choose new files", file=sys.stderr)
        return 2
    lines = Path(args.windows).read_text().splitlines()
    docs = sorted({json.loads(x)["doc"] for x in lines if x.strip()})
    random.Random(args.seed).shuffle(docs)
    first = set(docs[:round(args.fraction * len(docs))])
    sides: list[list[str]] = [[], []]
    for x in lines:
        if x.strip():
            sides[json.loads(x)["doc"] not in first].append(x)
    for path, rows in zip(outs, sides):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(r + "\n" for r in rows))
        tmp.rename(path)
        print(f"{path}: {len(rows)} windows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
