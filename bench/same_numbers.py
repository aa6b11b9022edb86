"""Same seed, same numbers: a recorded comparison of every figure textebm reports, per system, for
refactors that must change no result (issue 20).

    # record (each step cached in WORK: a rerun skips the finished ones; one WORK per code version)
    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/same_numbers.py --work /tmp/sn-after --out after.json
    # compare with a record made from other code (exit 1 if a figure differs)
    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/same_numbers.py --work /tmp/sn-after --out after.json \
        --compare bench/results/same_numbers/before-aa392e4.json
    # or compare two records without running anything
    python bench/same_numbers.py --compare before.json --against after.json

It drives textebm only through its command line (`python -m textebm ...`, whose commands and
options a refactor keeps), so the code under test is whichever `textebm` the interpreter imports
(PYTHONPATH). Every step runs in fp32 (`--precision fp32` wherever the option exists), one thread,
on the CPU, with fixed seeds, on tiny data the script makes itself (no network):

  * a toy sentiment dataset (word lists, seeded), and a running-text corpus: the reference
    transcripts of bench/asr_nbest (PTB sentences) outside the n-best slice reranked below, cut
    into documents of 8 sentences;
  * paper a: `lm train --objective infill` (noise LM), `lm sample --mode infill`, `classify train`
    (baseline, `--energy hidden`, `--energy sharp-hidden`) of a tiny from-scratch BERT made with
    transformers alone, `classify eval` (accuracy, ECE, NLL, Brier, calibrators, bootstrap), and a
    tiny `quickstart` (every classifier of the comparison);
  * paper b: `tokenizer train`, `cloze train --objective electric` and `--objective mlm`, `score`
    of the hypotheses of a slice of the ASR n-best lists (per-sentence and per-token scores), and
    `rerank` (dev-chosen lambda, test WER, bootstrap interval);
  * paper c: `lm train` (causal generators, l2r and r2l), `negatives generate`, `detect train`
    (linear and UniTransf energies), `detect fit --zeroshot loglik`, `detect eval` (accuracy,
    AUROC, TPR at 1 % FPR, P@1), and a tiny `detect matrix` (its generators and energies run at
    the precision `auto` picks: the matrix has no precision option);
  * `lm eval` (perplexity) and `lm score` (log P per text).

The figures are every number in the commands' metrics files (timings left out), every score a
command writes, and a SHA-256 of every text a command generates. The record also holds a SHA-256
of each trained model's weights: those are shown but do not fail a comparison (a refactor may
rename a parameter without changing a number). A comparison fails when a figure differs by more
than 1e-6 relative or is missing from the new record; new figures are listed, not failed. The
record of the code before issue 20's refactor, and the machine it needs (fp32 is bit-identical
only on the same CPU and torch), are in bench/results/same_numbers/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NBEST = HERE / "asr_nbest" / "data"
RTOL = 1e-6
SEED = 0

# keys of metrics files that measure time, speed or memory, not results
VOLATILE = re.compile(r"(^|_)(seconds|secs?|time|times|timings|elapsed|wall|duration|rate|throughput|per_s|per_second|"
                      r"gflops|probe|speedup|memory|rss|mb|gb|bytes|eta|date|started|finished|timestamp|"
                      r"fp32_gflops|bf16_gflops|tokens_per_s|steps_per_s|examples_per_s|s)($|_)")

SKIPPED: set[str] = set()  # keys left out as timings (listed in the record)

POS = ["great", "wonderful", "moving", "funny", "brilliant", "charming", "smart", "superb", "tender"]
NEG = ["dull", "awful", "boring", "clumsy", "tedious", "bland", "messy", "shallow", "lifeless"]
FILL = ["the", "film", "story", "cast", "is", "a", "truly", "and", "plot", "really", "with", "ending",
        "its", "director", "script", "feels", "at", "times", "this", "was"]


# ---------------------------------------------------------------- running steps


class Runner:
    """Runs `python -m textebm ...` steps in WORK, each once: a step is done when its marker
    WORK/.done/NAME.json holds the same arguments and the same textebm, and no step before it ran
    in this call (the steps are called in the order of their inputs)."""

    def __init__(self, work: Path, textebm_at: str):
        self.work, self.textebm_at, self.ran = work, textebm_at, False
        (work / ".done").mkdir(parents=True, exist_ok=True)
        (work / "logs").mkdir(exist_ok=True)
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
                    "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                    "TRANSFORMERS_OFFLINE": "1"}

    def done(self, name: str, argv: list[str]) -> bool:
        marker = self.work / ".done" / f"{name}.json"
        if self.ran or not marker.is_file():  # once a step ran, every later step (its inputs may be new) runs
            self.ran = True
            return False
        got = json.loads(marker.read_text())
        if got["textebm"] != self.textebm_at:
            sys.exit(f"same_numbers: {self.work} was made with the textebm at {got['textebm']}, not "
                     f"{self.textebm_at}: use another --work")
        self.ran = got["argv"] != argv
        return not self.ran

    def mark(self, name: str, argv: list[str], seconds: float = 0.0) -> None:
        (self.work / ".done" / f"{name}.json").write_text(
            json.dumps({"argv": argv, "textebm": self.textebm_at, "seconds": round(seconds, 1)}))

    def step_seconds(self) -> dict:
        """Wall seconds of every step, from the markers (also of steps run by an earlier call)."""
        out = {}
        for p in sorted((self.work / ".done").glob("*.json"), key=lambda p: p.stat().st_mtime):
            got = json.loads(p.read_text())
            if "seconds" in got:
                out[p.stem] = got["seconds"]
        return out

    def textebm(self, name: str, *args) -> None:
        argv = [str(a) for a in args]
        if self.done(name, argv):
            return
        t0 = time.perf_counter()
        print(f"[{name}] textebm {' '.join(argv)}", flush=True)
        with open(self.work / "logs" / f"{name}.log", "w") as log:
            rc = subprocess.run([sys.executable, "-m", "textebm", *argv], env=self.env, cwd=self.work,
                                stdout=log, stderr=subprocess.STDOUT, check=False).returncode
        if rc != 0:
            sys.exit(f"same_numbers: step {name} failed (exit {rc}); see {self.work / 'logs' / (name + '.log')}:\n"
                     + "".join((self.work / "logs" / f"{name}.log").read_text().splitlines(True)[-15:]))
        self.mark(name, argv, time.perf_counter() - t0)

    def python(self, name: str, fn, *args) -> None:
        """A step done here rather than by textebm (the data, the tiny encoder)."""
        argv = [fn.__name__, *map(str, args)]
        if self.done(name, argv):
            return
        print(f"[{name}] {fn.__name__}", flush=True)
        t0 = time.perf_counter()
        fn(*args)
        self.mark(name, argv, time.perf_counter() - t0)


def textebm_location(env: dict) -> tuple[str, str]:
    """(package folder, git commit [+dirty]) of the textebm the interpreter imports."""
    at = subprocess.run([sys.executable, "-c", "import textebm, os; print(os.path.dirname(textebm.__file__))"],
                        env=env, capture_output=True, text=True, check=True).stdout.strip()
    git = subprocess.run(["git", "-C", at, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    commit = git.stdout.strip() if git.returncode == 0 else "unknown"
    dirty = subprocess.run(["git", "-C", at, "status", "--porcelain", "--", "."], capture_output=True, text=True,
                           check=False)
    if dirty.returncode == 0 and dirty.stdout.strip():
        commit += "+dirty"
    return at, commit


# ---------------------------------------------------------------- the data


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_sources(src: Path) -> None:
    """The raw files the datasets are converted from, the n-best slice and the texts to score."""
    src.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)

    def sentence(label: str) -> str:
        words = rng.sample(FILL, rng.randint(3, 9)) + [rng.choice(POS if label == "positive" else NEG)]
        rng.shuffle(words)
        return " ".join(words)

    for split, n in (("train", 96), ("dev", 64), ("test", 32)):
        _write_jsonl(src / f"sent-{split}.jsonl",
                     [{"text": sentence(lab), "label": lab} for lab in ["positive", "negative"] * (n // 2)])
    dev, test = (json.loads((NBEST / f"{s}.json").read_text()) for s in ("dev", "test"))
    # the reranked slice: the first 12 utterances of each split, their 6 best hypotheses
    cut = {}
    for name, nb in (("dev", dev), ("test", test)):
        keys = list(nb)[:12]
        cut[name] = {k: {"ref": nb[k]["ref"], **{f"hyp_{i}": nb[k][f"hyp_{i}"] for i in range(1, 7)}} for k in keys}
        (src / f"nbest-{name}.json").write_text(json.dumps(cut[name], indent=1) + "\n")
    held = set(cut["dev"]) | set(cut["test"])
    refs = [nb[k]["ref"] for nb in (dev, test) for k in nb if k not in held]
    docs = [refs[i:i + 8] for i in range(0, len(refs), 8)]
    order = list(range(len(docs)))
    rng.shuffle(order)
    n_dev = n_test = max(1, len(docs) // 8)
    parts = {"dev": order[:n_dev], "test": order[n_dev:n_dev + n_test], "train": order[n_dev + n_test:]}
    for split, ids in parts.items():
        _write_jsonl(src / f"text-{split}.jsonl",
                     [{"text": t, "doc": f"doc{d:03d}"} for d in sorted(ids) for t in docs[d]])
    few = [json.loads(x)["text"] for x in (src / "text-test.jsonl").read_text().splitlines()[:10]]
    _write_jsonl(src / "few.jsonl", [{"text": t} for t in few])


def make_encoder(tokenizer: Path, out: Path) -> None:
    """A tiny from-scratch BERT encoder (1 layer, width 32) for the classifiers, built by transformers
    alone (no textebm code), saved as a Hugging Face folder with the WordPiece tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(tokenizer)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, max_position_embeddings=64, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1, pad_token_id=tok.pad_token_id)
    torch.manual_seed(SEED)
    model = BertModel(config)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


# ---------------------------------------------------------------- the pipeline


FP32 = ["--precision", "fp32"]
TRAIN = ["--threads", "1", "--no-progress", "--overwrite", *FP32]


def pipeline(r: Runner) -> None:
    w = r.work
    src = w / "src"
    r.python("sources", make_sources, src)
    r.textebm("data-sent", "data", "convert", "--input", src / "sent-train.jsonl", "--dev", src / "sent-dev.jsonl",
              "--test", src / "sent-test.jsonl", "--out", w / "data-sent", "--overwrite")
    r.textebm("data-text", "data", "convert", "--input", src / "text-train.jsonl", "--dev", src / "text-dev.jsonl",
              "--test", src / "text-test.jsonl", "--out", w / "data-text", "--overwrite")
    r.textebm("tok-wordpiece", "tokenizer", "train", "--data", w / "data-sent", w / "data-text", "--kind", "wordpiece",
              "--vocab-size", 400, "--lowercase", "--out", w / "tok-wordpiece", "--overwrite")
    r.textebm("tok-bpe", "tokenizer", "train", "--data", w / "data-text", "--kind", "bpe", "--vocab-size", 400,
              "--out", w / "tok-bpe", "--overwrite")

    # ---- paper a: calibrated classifiers by joint EBM training
    r.python("encoder", make_encoder, w / "tok-wordpiece", w / "encoder")
    r.textebm("a-noise-lm", "lm", "train", "--data", w / "data-sent", "--objective", "infill", "--vocab-size", 300,
              "--layers", 1, "--width", 32, "--heads", 2, "--context", 64, "--max-steps", 12, "--batch-size", 16,
              "--lr", "3e-3", "--seed", SEED, "--out", w / "a-noise-lm", *TRAIN)
    r.textebm("a-noise", "lm", "sample", "--model", w / "a-noise-lm", "--data", w / "data-sent", "--split", "train",
              "--mode", "infill", "--per-example", 2, "--batch-size", 32, "--seed", SEED, "--out",
              w / "a-noise.jsonl", "--no-progress", "--overwrite", *FP32)
    common = ["--data", w / "data-sent", "--encoder", w / "encoder", "--epochs", 2, "--batch-size", 16, "--lr", "1e-3",
              "--max-len", 32, "--seed", SEED, *TRAIN]
    r.textebm("a-baseline", "classify", "train", *common, "--out", w / "a-baseline")
    r.textebm("a-ebm-hidden", "classify", "train", *common, "--energy", "hidden", "--noise", w / "a-noise.jsonl",
              "--noise-ratio", 2, "--out", w / "a-ebm-hidden")
    r.textebm("a-ebm-sharp", "classify", "train", *common, "--energy", "sharp-hidden", "--noise", w / "a-noise.jsonl",
              "--nce-warmup", 0.3, "--out", w / "a-ebm-sharp")
    r.textebm("a-eval", "classify", "eval", "--model", w / "a-baseline", w / "a-ebm-hidden", w / "a-ebm-sharp",
              "--data", w / "data-sent", "--split", "dev", "--calibrators", "--bootstrap", 200, "--seed", SEED,
              "--out", w / "a-eval", "--overwrite", *FP32)
    r.textebm("a-quickstart", "quickstart", "--data", w / "data-sent", "--encoder", w / "encoder", "--out",
              w / "a-quickstart", "--train-limit", 64, "--epochs", 1, "--batch-size", 16, "--max-len", 32,
              "--lm-epochs", 1, "--lm-layers", 1, "--lm-width", 32, "--lm-vocab-size", 300, "--seed", SEED,
              "--bootstrap", 100, "--no-progress", *FP32)

    # ---- paper b: Electric and the masked LM as text scorers; reranking
    cloze = ["--data", w / "data-text", "--tokenizer", w / "tok-wordpiece", "--layers", 1, "--width", 32, "--heads", 2,
             "--max-len", 128, "--max-steps", 12, "--batch-size", 16, "--lr", "1e-3", "--seed", SEED, *TRAIN]
    for obj in ("electric", "mlm"):
        r.textebm(f"b-{obj}", "cloze", "train", *cloze, "--objective", obj, "--out", w / f"b-{obj}")
    r.textebm("b-texts", "rerank", "--dev", src / "nbest-dev.json", "--test", src / "nbest-test.json",
              "--write-texts", w / "b-hyps.txt", "--overwrite")
    scorers = {"electric": w / "b-electric", "mlm": w / "b-mlm", "causal": w / "c-gen-l2r"}
    # ---- paper c first trains the causal LM that also scores the hypotheses here
    gen = ["--data", w / "data-text", "--tokenizer", w / "tok-bpe", "--layers", 1, "--width", 32, "--heads", 2,
           "--context", 96, "--chunk", 32, "--max-steps", 20, "--batch-size", 8, "--lr", "3e-3", *TRAIN]
    for direction, seed in (("l2r", 0), ("r2l", 0), ("l2r", 1)):
        r.textebm(f"c-gen-{direction}-s{seed}" if seed else f"c-gen-{direction}", "lm", "train", *gen,
                  "--direction", direction, "--seed", seed,
                  "--out", w / (f"c-gen-{direction}-s{seed}" if seed else f"c-gen-{direction}"))
    for method, model in scorers.items():
        r.textebm(f"b-score-{method}", "score", "--model", model, "--input", w / "b-hyps.txt", "--method", method,
                  "--batch-size", 16, "--out", w / f"b-score-{method}.jsonl", "--no-progress", "--overwrite", *FP32)
    r.textebm("b-score-tokens", "score", "--model", w / "b-electric", "--input", src / "few.jsonl", "--per-token",
              "--per-word", "--out", w / "b-score-tokens.jsonl", "--no-progress", "--overwrite", *FP32)
    r.textebm("b-rerank", "rerank", "--dev", src / "nbest-dev.json", "--test", src / "nbest-test.json", "--scores",
              *[w / f"b-score-{m}.jsonl" for m in scorers], "--grid", "paper", "--versus", "mlm", "--bootstrap", 200,
              "--seed", SEED, "--out", w / "b-rerank", "--overwrite")

    # ---- paper c: real-vs-generated detectors
    neg = ["--data", w / "data-text", "--vocab", w / "tok-bpe", "--length", 24, "--contexts", 16, 20, "--stride", 8,
           "--k", 2, "--top-k", 10, "--seed", SEED, "--no-progress", "--overwrite", *FP32]
    for split, g in (("train", "c-gen-l2r"), ("dev", "c-gen-l2r"), ("test", "c-gen-l2r-s1"), ("test-r2l", "c-gen-r2l")):
        r.textebm(f"c-neg-{split}", "negatives", "generate", *neg, "--generator", w / g,
                  "--split", split.split("-")[0], "--max-windows", 60 if split == "train" else 24,
                  "--out", w / f"c-neg-{split}.jsonl")
    res = ["--train", w / "c-neg-train.jsonl", "--val", w / "c-neg-dev.jsonl", "--vocab", w / "tok-bpe",
           "--batch-size", 8, "--seed", SEED, *TRAIN]
    r.textebm("c-linear", "detect", "train", *res, "--energy", "linear", "--max-steps", 8, "--lr", "0.05",
              "--out", w / "c-linear")
    r.textebm("c-unitransf", "detect", "train", *res, "--energy", "unitransf", "--init", w / "c-gen-l2r",
              "--max-steps", 6, "--lr", "1e-3", "--loss", "ranking", "--negatives", "all", "--out", w / "c-unitransf")
    r.textebm("c-loglik", "detect", "fit", "--zeroshot", "loglik", "--model", w / "c-gen-l2r",
              "--val", w / "c-neg-dev.jsonl", "--vocab", w / "tok-bpe", "--out", w / "c-loglik", "--overwrite")
    for det in ("c-linear", "c-unitransf", "c-loglik"):
        r.textebm(f"{det}-eval", "detect", "eval", "--model", w / det, "--test", w / "c-neg-test.jsonl",
                  "--out", w / f"{det}-eval.json", "--overwrite")
    r.textebm("c-matrix", "detect", "matrix", "--config", write_matrix_config(w), "--out", w / "c-matrix",
              "--threads", 1, "--no-progress")

    # ---- LM perplexity and log-probabilities
    r.textebm("lm-eval", "lm", "eval", "--model", w / "c-gen-l2r", "--data", w / "data-text", "--split", "test",
              "--metrics", w / "lm-eval.json", "--overwrite", *FP32)
    r.textebm("lm-score", "lm", "score", "--model", w / "c-gen-l2r", "--input", src / "few.jsonl",
              "--out", w / "lm-score.jsonl", "--overwrite", *FP32)


def write_matrix_config(w: Path) -> Path:
    """The tiny matrix of tests/test_detection.py on the text corpus: two generators, a linear energy,
    the in-domain, zero-shot, cross-architecture, negatives and unseen-generator tables."""
    cfg = {"corpora": {"ptb": str(w / "data-text")}, "vocab_size": 300,
           "generators": {"tf": {"arch": "transformer", "layers": 1, "width": 32, "heads": 2, "steps": 4},
                          "gcnn": {"arch": "gcnn", "layers": 1, "width": 32, "kernel": 3, "steps": 4}},
           "lm": {"context": 48, "chunk": 32, "batch_size": 8, "lr": 0.003},
           "windows": {"length": 24, "contexts": [16, 20], "stride": 8, "k": 2, "top_k": 10,
                       "max_windows": {"train": 30, "dev": 16, "test": 16}},
           # 2 steps: one epoch of 30 windows in batches of 16, so whether the matrix's "steps" caps at one
           # epoch (aa392e4) or not (issue 21, item 9) trains the same
           "energies": {"linear": {"energy": "linear", "steps": 2, "lr": 0.05}},
           "tables": [{"kind": "in-domain", "energies": ["linear"], "corpora": ["ptb"], "generators": ["tf"],
                       "directions": ["l2r", "r2l"]},
                      {"kind": "zeroshot", "detectors": ["loglik"], "corpora": ["ptb"], "generators": ["tf"]},
                      {"kind": "cross-arch", "energy": "linear", "corpus": "ptb", "generators": ["tf", "gcnn"]},
                      {"kind": "negatives", "energy": "linear", "corpus": "ptb", "generator": "tf",
                       "negatives": ["random", "worst"]},
                      {"kind": "unseen", "energy": "linear", "train": "all", "generator": "tf",
                       "test_generator": "gcnn"}]}
    text = json.dumps(cfg, indent=1) + "\n"
    path = w / f"c-matrix-{hashlib.sha256(text.encode()).hexdigest()[:10]}.json"  # new settings, new step
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the figures


def flatten(obj, prefix: str, out: dict) -> None:
    """Every number under `obj` as out[prefix/key/...]; strings, nulls and timings are left out."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if VOLATILE.search(str(k).lower()):
                SKIPPED.add(f"{prefix}/{k}")
                continue
            flatten(v, f"{prefix}/{k}", out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            flatten(v, f"{prefix}/{i}", out)
    elif isinstance(obj, bool):
        out[prefix] = int(obj)
    elif isinstance(obj, (int, float)):
        out[prefix] = obj if not (isinstance(obj, float) and math.isnan(obj)) else "nan"


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _sha(texts) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(json.dumps(t, sort_keys=True).encode())
        h.update(b"\n")
    return h.hexdigest()


def weights_sha(folder: Path) -> dict:
    """SHA-256 of each safetensors file under a model folder (shown, never failed)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.safetensors")) if "checkpoint" not in p.parts}


def figures(w: Path) -> tuple[dict, dict]:
    fig: dict = {}
    for run in ("a-noise-lm", "a-baseline", "a-ebm-hidden", "a-ebm-sharp", "b-electric", "b-mlm", "c-gen-l2r",
                "c-gen-r2l", "c-gen-l2r-s1", "c-linear", "c-unitransf"):
        flatten(json.loads((w / run / "metrics.json").read_text()), f"{run}/metrics", fig)
    for det in ("c-linear", "c-unitransf", "c-loglik"):
        flatten(json.loads((w / det / "detector.json").read_text()), f"{det}/detector", fig)
        flatten(json.loads((w / f"{det}-eval.json").read_text()), f"{det}/eval", fig)
    flatten(json.loads((w / "a-eval" / "metrics.json").read_text()), "a-eval", fig)
    qs = w / "a-quickstart"
    for p in sorted(p for p in qs.glob("*.json") if p.name != "timings.json"):
        flatten(json.loads(p.read_text()), f"a-quickstart/{p.name}", fig)
    for p in sorted(qs.glob("seed-*/*/metrics.json")):
        flatten(json.loads(p.read_text()), f"a-quickstart/{p.relative_to(qs)}", fig)
    flatten(json.loads((w / "b-rerank" / "metrics.json").read_text()), "b-rerank", fig)
    matrix = json.loads((w / "c-matrix" / "results.json").read_text())
    # cells by what they are, not by their place in the list (a grid runner may order them otherwise)
    cells = {" ".join(f"{k}={c[k]}" for k in ("table", "detector", "train", "test", "negatives") if k in c): c
             for c in matrix.pop("cells")}
    flatten({**matrix, "cells": cells}, "c-matrix", fig)
    for p in sorted((w / "c-matrix").glob("*/*/metrics.json")):  # its generators and energies
        m = json.loads(p.read_text())
        name = f"c-matrix/{p.parent.parent.name}/{re.sub(r'-[0-9a-f]{8,}$', '', p.parent.name)}"  # no settings hash
        flatten(m, name, fig)
        fig[f"{name}/precision"] = m.get("precision_choice", {}).get("precision", "?")  # auto's choice
    flatten(json.loads((w / "lm-eval.json").read_text()), "lm-eval", fig)

    # generated texts: their count and a hash of their contents
    noise = _lines(w / "a-noise.jsonl")
    fig["a-noise/n"], fig["a-noise/sha256"] = len(noise), _sha([x["text"] for x in noise])
    for split in ("train", "dev", "test", "test-r2l"):
        rows = _lines(w / f"c-neg-{split}.jsonl")
        fig[f"c-neg-{split}/n"] = len(rows)
        fig[f"c-neg-{split}/sha256"] = _sha([[x.get(k) for k in ("positive", "negatives", "context_len")]
                                             for x in rows])
    mneg = sorted(_sha([[x.get(k) for k in ("positive", "negatives", "context_len")] for x in _lines(p)])
                  for p in (w / "c-matrix" / "neg").glob("*.jsonl"))
    fig["c-matrix/negatives/n_files"], fig["c-matrix/negatives/sha256"] = len(mneg), _sha(mneg)

    # scores the commands write, per text (and per token)
    for m in ("electric", "mlm", "causal"):
        for i, x in enumerate(_lines(w / f"b-score-{m}.jsonl")):
            fig[f"b-score-{m}/{i}"] = x["score"]
    for name in ("b-score-tokens", "lm-score"):  # per text, per token and per word
        for i, x in enumerate(_lines(w / f"{name}.jsonl")):
            flatten(x, f"{name}/{i}", fig)

    weights = {}
    for run in ("encoder", "a-noise-lm", "a-baseline", "a-ebm-hidden", "a-ebm-sharp", "b-electric", "b-mlm",
                "c-gen-l2r", "c-gen-r2l", "c-gen-l2r-s1", "c-linear", "c-unitransf"):
        for name, sha in weights_sha(w / run).items():
            weights[f"{run}/{name}"] = sha
    return fig, weights


# ---------------------------------------------------------------- comparing


def differs(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) > RTOL * max(abs(a), abs(b)) if a != b else False
    return a != b


def compare(before: dict, after: dict) -> int:
    fb, fa = before["figures"], after["figures"]
    rows, bad = [], 0
    for k in sorted(set(fb) | set(fa)):
        b, a = fb.get(k, "(missing)"), fa.get(k, "(missing)")
        if k not in fa:
            status = "MISSING"
        elif k not in fb:
            status = "new"
        else:
            status = "DIFF" if differs(b, a) else "same"
        bad += status in ("MISSING", "DIFF")
        rows.append((k, b, a, status))
    w = max(len(k) for k, *_ in rows)
    fmt = lambda v: f"{v:.9g}" if isinstance(v, float) else str(v)[:20]
    print(f"{'figure':<{w}}  {'before':>20}  {'after':>20}  status")
    for k, b, a, s in rows:
        print(f"{k:<{w}}  {fmt(b):>20}  {fmt(a):>20}  {s}")
    wb, wa = before.get("weights", {}), after.get("weights", {})
    wdiff = [k for k in sorted(set(wb) | set(wa)) if wb.get(k) != wa.get(k)]
    n_same = sum(s == "same" for *_, s in rows)
    print(f"\nbefore: textebm {before['textebm']['commit']}   after: textebm {after['textebm']['commit']}")
    print(f"{n_same} figures the same, {sum(s == 'DIFF' for *_, s in rows)} differ, "
          f"{sum(s == 'MISSING' for *_, s in rows)} missing after, {sum(s == 'new' for *_, s in rows)} new "
          f"(relative tolerance {RTOL:g})")
    print(f"weights: {len(wb) - len([k for k in wdiff if k in wb])} of {len(wb)} files identical"
          + (f"; differ or renamed (not failed): {', '.join(wdiff)}" if wdiff else ""))
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, help="folder of every step's output (cached: finished steps are skipped)")
    ap.add_argument("--out", type=Path, help="write the record (figures, weights, settings) to this JSON file")
    ap.add_argument("--compare", type=Path, help="a record to compare with; exit 1 if a figure differs")
    ap.add_argument("--against", type=Path, help="with --compare: the other record (nothing is run)")
    args = ap.parse_args(argv)
    if args.against:
        if not args.compare:
            ap.error("--against needs --compare")
        return compare(json.loads(args.compare.read_text()), json.loads(args.against.read_text()))
    if not args.work:
        ap.error("--work is needed (or --compare A --against B)")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    at, commit = textebm_location(env)
    work = args.work.resolve()
    r = Runner(work, at)
    t0 = time.perf_counter()
    pipeline(r)
    fig, weights = figures(work)
    import torch

    info = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), platform.processor())
    flags = set(next((ln.split(":", 1)[1].split() for ln in info if ln.startswith("flags")), []))
    record = {"textebm": {"path": at, "commit": commit},
              "machine": {"cpu": cpu, "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
                          "python": platform.python_version(), "torch": torch.__version__,
                          "threads": 1, "precision": "fp32 (the matrix: auto)"},
              "seconds": {"this_call": round(time.perf_counter() - t0, 1), "steps": r.step_seconds(),
                          "cpu_of_steps_this_call": round(sum(os.times()[2:4]), 1)},
              "figures": fig, "weights": weights, "left_out_as_timings": sorted(SKIPPED)}
    print(f"{len(fig)} figures, {len(weights)} weight files ({record['seconds']['this_call']} s wall, "
          f"{record['seconds']['cpu_of_steps_this_call']} s CPU of the steps run)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(args.out)
    if args.compare:
        return compare(json.loads(args.compare.read_text()), record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
