"""Same seed, same numbers: every training recipe on the one loop, a few steps on tiny data.

Records, per recipe, the loss history of every step (log_every 1), the evaluation metrics and a
SHA-256 of the final weights (every tensor of RUN/model/*.safetensors, in name order, fp32 bytes),
as JSON. Run it before and after a change of the loop and compare the two files: losses and
weights must be equal exactly (fp32, one thread); a difference in an evaluation is reported with
its size (exit 0 then, so that a deliberate change of an evaluation's arithmetic can be recorded).

usage: python bench/same_numbers_loop.py OUT.json [--compare EARLIER.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

POS = ["great", "wonderful", "moving", "funny", "brilliant", "charming", "smart"]
NEG = ["dull", "awful", "boring", "clumsy", "tedious", "bland", "messy"]
FILL = ["the", "film", "story", "cast", "is", "a", "truly", "and", "plot", "really", "with", "ending"]
COMMON = ["--precision", "fp32", "--threads", "1", "--no-progress", "--log-every", "1", "--seed", "5"]


def _sentence(rng: random.Random, label: str) -> str:
    words = rng.sample(FILL, rng.randint(2, 8)) + [rng.choice(POS if label == "positive" else NEG)]
    rng.shuffle(words)
    return " ".join(words)


def fixtures(root: Path) -> dict:
    """A labelled dataset with a noise file, a tiny encoder, a BPE vocabulary and negatives files."""
    from textebm.data.layout import write_dataset
    from textebm.models.build import SmallLMConfig, build_encoder
    from textebm.tokenizer import train_tokenizer

    rng = random.Random(0)
    splits = {s: [{"text": _sentence(rng, lab), "label": lab} for lab in ["positive", "negative"] * (n // 2)]
              for s, n in (("train", 48), ("dev", 16), ("test", 8))}
    write_dataset(root / "data", splits, {"name": "toy-sentiment"})
    with open(root / "noise.jsonl", "w") as f:
        for line in (root / "data" / "train.jsonl").read_text().splitlines():
            row = json.loads(line)
            for j in range(2):
                words = row["text"].split()
                rng.shuffle(words)
                f.write(json.dumps({"id": f"{row['id']}-n{j}", "source_id": row["id"],
                                    "text": " ".join(words[: max(1, len(words) - j)])}) + "\n")
    texts = [r["text"] for rows in splits.values() for r in rows]
    tok = train_tokenizer(texts, vocab_size=200, kind="wordpiece")
    enc = build_encoder(SmallLMConfig(layers=1, width=32, heads=2, context=64), tok, seed=0)
    enc.save_pretrained(root / "encoder")
    tok.save_pretrained(root / "encoder")
    bpe = train_tokenizer(texts, vocab_size=300)
    bpe.save_pretrained(root / "vocab")
    for split, n in (("train", 24), ("dev", 12)):  # windows of 12 tokens, 2 negatives each
        with open(root / f"neg-{split}.jsonl", "w") as f:
            for _ in range(n):
                pos = [rng.randrange(5, 60) for _ in range(12)]
                negs = [pos[:6] + [rng.randrange(60, 290) for _ in range(6)] for _ in range(2)]
                f.write(json.dumps({"positive": pos, "negatives": negs, "context_len": 6, "direction": "l2r"}) + "\n")
    return {"data": root / "data", "noise": root / "noise.jsonl", "encoder": root / "encoder",
            "vocab": root / "vocab", "neg_train": root / "neg-train.jsonl", "neg_dev": root / "neg-dev.jsonl"}


def recipes(fx: dict) -> dict[str, list[str]]:
    d, enc = str(fx["data"]), str(fx["encoder"])
    lm = ["lm", "train", "--data", d, "--tokenizer", str(fx["vocab"]), "--layers", "1", "--width", "32",
          "--heads", "2", "--context", "48", "--batch-size", "8", "--max-steps", "6", "--lr", "3e-3"]
    cloze = ["cloze", "train", "--data", d, "--tokenizer", enc, "--layers", "1", "--width", "32", "--heads", "2",
             "--max-len", "24", "--batch-size", "8", "--max-steps", "5"]
    res = ["detect", "train", "--train", str(fx["neg_train"]), "--val", str(fx["neg_dev"]), "--vocab",
           str(fx["vocab"]), "--batch-size", "4", "--max-steps", "5"]
    return {
        "classify-plain": ["classify", "train", "--data", d, "--encoder", enc, "--batch-size", "8",
                           "--max-steps", "5"],
        "classify-scalar-nce-poscal": ["classify", "train", "--data", d, "--encoder", enc, "--batch-size", "8",
                                       "--epochs", "2", "--energy", "scalar", "--noise", str(fx["noise"]),
                                       "--noise-ratio", "2", "--energy-lr", "1e-3", "--nce-warmup", "0.5",
                                       "--poscal", "--grad-accum", "2"],
        "classify-hidden-nce": ["classify", "train", "--data", d, "--encoder", enc, "--batch-size", "8",
                                "--max-steps", "4", "--energy", "hidden", "--noise", str(fx["noise"])],
        "lm-causal": [*lm],
        "lm-infill": [*lm, "--objective", "infill", "--epochs", "2", "--max-steps", "0"],
        "lm-causal-chunk-gcnn": ["lm", "train", "--data", d, "--tokenizer", str(fx["vocab"]), "--arch", "gcnn",
                                 "--kernel", "3", "--chunk", "16", "--layers", "1", "--width", "32", "--context",
                                 "48", "--batch-size", "4", "--max-steps", "5", "--lr", "3e-3"],
        "cloze-electric": [*cloze],
        "cloze-electric-naive": [*cloze, "--estimator", "naive", "--max-steps", "3"],
        "cloze-mlm": [*cloze, "--objective", "mlm"],
        "cloze-electra": [*cloze, "--objective", "electra", "--noise-lr", "1e-3"],
        "cloze-twotower": [*cloze, "--objective", "twotower", "--max-steps", "3"],
        "residual-linear": [*res, "--energy", "linear", "--lr", "0.05"],
        "residual-unitransf-ranking": [*res, "--energy", "unitransf", "--layers", "1", "--width", "32", "--heads",
                                       "2", "--loss", "ranking", "--negatives", "all"],
        "residual-bilstm": [*res, "--energy", "bilstm", "--width", "16", "--negatives", "random"],
    }


def weights_hash(model_dir: Path) -> str:
    from safetensors.torch import load_file

    h = hashlib.sha256()
    for f in sorted(model_dir.rglob("*.safetensors")):
        for name, t in sorted(load_file(str(f)).items()):
            h.update(name.encode())
            h.update(t.float().contiguous().numpy().tobytes())
    return h.hexdigest()


def run_all(only: list[str] | None = None) -> dict:
    from textebm.cli import main

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fx = fixtures(root)
        for name, args in recipes(fx).items():
            if only and name not in only:
                continue
            run = root / "runs" / name
            rc = main([*args, *COMMON, "--out", str(run)])
            if rc != 0:
                raise SystemExit(f"{name}: exit {rc}")
            m = json.loads((run / "metrics.json").read_text())
            out[name] = {"history": [{k: v for k, v in e.items()} for e in m["train"]["history"]],
                         "eval": m.get("eval"), "weights_sha256": weights_hash(run / "model")}
            print(f"{name}: {len(out[name]['history'])} steps, final loss "
                  f"{out[name]['history'][-1]['loss']!r}, weights {out[name]['weights_sha256'][:16]}", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--compare", default=None)
    p.add_argument("--only", nargs="*", default=None)
    a = p.parse_args(argv)
    res = run_all(a.only)
    Path(a.out).write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    if a.compare:
        old = json.loads(Path(a.compare).read_text())
        bad = []
        for name, now in res.items():
            was = old.get(name, {})
            for part in ("history", "weights_sha256", "eval"):
                if now[part] != was.get(part):
                    bad.append((name, part))
                    if part == "eval" and isinstance(was.get(part), dict):
                        rel = max(abs(now[part][k] - v) / max(abs(v), 1e-300) for k, v in was[part].items()
                                  if isinstance(v, (int, float)) and v is not None)
                        print(f"{name}: eval differs, at most {rel:.2g} relative")
                    else:
                        print(f"{name}: {part} differs")
        print("same numbers for every recipe" if not bad else f"DIFFERENT: {bad}")
        return 1 if any(part != "eval" for _, part in bad) else 0  # losses and weights must be equal
    return 0


if __name__ == "__main__":
    sys.exit(main())
