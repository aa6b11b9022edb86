"""Shared fixtures: a tiny labelled dataset with noise and a tiny encoder, for classifier tests."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch

POS = ["great", "wonderful", "moving", "funny", "brilliant", "charming", "smart"]
NEG = ["dull", "awful", "boring", "clumsy", "tedious", "bland", "messy"]


def same(tight: float) -> float:
    """The tolerance for two code paths computing one number: `tight` on a CPU, where they agree
    to it; at least 1e-6 on a CUDA GPU, whose fp32 kernels, chosen by the tensors' shapes (batch
    size, chunking), differ in the last bits (measured on an H200: up to 3e-7)."""
    return max(tight, 1e-6) if torch.cuda.is_available() else tight


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skip is a failure: the reference tests must run there, not vanish."""
    outcome = yield
    rep = outcome.get_result()
    if os.environ.get("CI", "").lower() == "true" and rep.skipped and not hasattr(rep, "wasxfail"):
        rep.outcome = "failed"
        rep.longrepr = f"skipped under CI=true (a skip fails CI): {rep.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under CI=true a module skipped at collection (a module-level importorskip) fails too. Made a
    failure where the report is made, before any hook reads it: the terminal and the exit status
    then count it as one (a pytest_collectreport hook came too late: under xdist the module counted
    as a plain skip, and in one process the terminal's summary of skips crashed on it)."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI", "").lower() == "true" and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"module skipped under CI=true (a skip fails CI): {report.longrepr}"


FILL = ["the", "film", "story", "cast", "is", "a", "truly", "and", "plot", "really", "with", "ending"]


def _sentence(rng: random.Random, label: str) -> str:
    words = rng.sample(FILL, rng.randint(2, 8)) + [rng.choice(POS if label == "positive" else NEG)]
    rng.shuffle(words)
    return " ".join(words)


@pytest.fixture(scope="module")
def classify_fixture(tmp_path_factory) -> Path:
    """A labelled dataset, a word-shuffle noise file for its training split, and a tiny encoder."""
    from textebm.data.layout import write_dataset
    from textebm.models.build import SmallLMConfig, build_encoder
    from textebm.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("classify")
    rng = random.Random(0)
    splits = {s: [{"text": _sentence(rng, lab), "label": lab}
                  for lab in ["positive", "negative"] * (n // 2)]
              for s, n in (("train", 96), ("dev", 64), ("test", 16))}
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
    return root


def patch_everywhere(monkeypatch, module, name: str, value) -> None:
    """Set `module.name` to `value` in `module` and in every textebm module that imported it by name
    (modules import what they use at the top, so a patch of the source alone would not be seen)."""
    import sys

    real = getattr(module, name)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("textebm") and getattr(mod, name, None) is real:
            monkeypatch.setattr(mod, name, value)


WALK_WORDS = ("the nation shall build roads and schools for every citizen while congress votes on the "
              "budget of war and peace in our time").split()


def walking_doc(rng, n: int) -> list[str]:
    """n sentences that walk WALK_WORDS in order from a random start: strongly predictable text
    (the tiny corpora of the detection and generation tests)."""
    out = []
    for _ in range(n):
        s = rng.randrange(len(WALK_WORDS))
        out.append(" ".join(WALK_WORDS[(s + i) % len(WALK_WORDS)] for i in range(rng.randint(6, 12))) + ".")
    return out


def toy_corpus(root, doc) -> None:
    """ROOT/data, a dataset of 12 / 4 / 4 documents of 12 sentences `doc(rng, 12)` each (seed 0),
    split by document, and ROOT/vocab, a 300-entry BPE vocabulary over all of it."""
    import random

    from textebm.data.layout import write_dataset
    from textebm.tokenizer import train_tokenizer

    rng = random.Random(0)
    splits = {split: [{"text": t, "doc": f"{split}-doc{d}"} for d in range(n) for t in doc(rng, 12)]
              for split, n in (("train", 12), ("dev", 4), ("test", 4))}
    write_dataset(root / "data", splits, {"name": "toy"})
    tok = train_tokenizer([r["text"] for rows in splits.values() for r in rows], vocab_size=300)
    tok.save_pretrained(root / "vocab")


def walking_world(root, *negatives_extra: str) -> dict:
    """The tiny world of the generation tests in `root`: a walking-words corpus split by document,
    a shared BPE vocabulary, a 1 x 32 base LM trained 20 steps, and its untruncated negatives of
    the train and dev splits (windows of 20 = 14 + 6 tokens, k = 2; `negatives_extra` adds
    `negatives generate` options, e.g. another temperature)."""
    from textebm.cli import main

    toy_corpus(root, walking_doc)
    base = root / "base"
    assert main(["lm", "train", "--data", str(root / "data"), "--tokenizer", str(root / "vocab"), "--layers", "1",
                 "--width", "32", "--heads", "2", "--context", "48", "--chunk", "32", "--max-steps", "20",
                 "--batch-size", "8", "--lr", "3e-3", "--out", str(base), "--no-progress", "--eval-split", ""]) == 0
    for split in ("train", "dev"):
        assert main(["negatives", "generate", "--data", str(root / "data"), "--generator", str(base), "--vocab",
                     str(root / "vocab"), "--split", split, "--length", "20", "--contexts", "14", "--stride", "10",
                     "--k", "2", "--top-k", "0", *negatives_extra, "--max-windows", "48",
                     "--out", str(root / f"{split}.jsonl"), "--no-progress"]) == 0
    return {"root": root, "data": root / "data", "vocab": root / "vocab", "base": base}


def word_tokenizer(words: list[str]):
    """A word-level tokenizer: <pad> 0, <s> 1, </s> 2, then `words` (the enumerable toy worlds)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{w: 3 + i for i, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
