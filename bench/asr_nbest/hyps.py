"""Write hyps.jsonl: each unique hypothesis text of dev.json and test.json once, with an id.

    python3 bench/asr_nbest/hyps.py [--data bench/asr_nbest/data]

The input for `textebm score --input DATA/hyps.jsonl` and ngram_scores.py (pure Python, no
dependencies). Ids are h000000, h000001, ... in order of first appearance (dev before test, each
utterance's hypotheses in rank order), so they follow from the two JSON files alone; build.py
writes the same file at the end of a build.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def unique_hypotheses(nbest_files: list[Path]) -> dict[str, str]:
    """text -> id over the n-best JSON files, in order of first appearance."""
    ids: dict[str, str] = {}
    for path in nbest_files:
        for entry in json.loads(path.read_text(encoding="utf-8")).values():
            for i in range(1, len(entry)):
                hyp = entry.get(f"hyp_{i}")
                if hyp is None:
                    break
                ids.setdefault(hyp["text"], f"h{len(ids):06d}")
    return ids


def write_hyps(data: Path) -> int:
    ids = unique_hypotheses([data / "dev.json", data / "test.json"])
    tmp = data / "hyps.jsonl.partial"
    tmp.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n"
                           for t, i in ids.items()), encoding="utf-8")
    tmp.replace(data / "hyps.jsonl")
    return len(ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(HERE / "data"))
    args = ap.parse_args()
    n = write_hyps(Path(args.data))
    print(f"wrote {Path(args.data) / 'hyps.jsonl'} ({n} texts)")


if __name__ == "__main__":
    main()
