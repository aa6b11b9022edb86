"""`textebm negatives generate`: real windows and k generated negatives each (Bakhtin et al. 2019,
sec. 4.1-4.2), pre-generated once, cached and resumable.

Windows come from `textebm.detection.windows` (split by document, `--length` tokens every
`--stride`, a context of one of `--contexts` tokens). The generator writes the rest of the
window with textebm's KV-cache sampler (`textebm.lm.generate`), top-k (`--top-k 10`, the paper's;
`--top-k 0` samples the full distribution, as residual EBM generation needs), exactly L − c
tokens ([eos] is banned, so a negative is as long as its positive):

- a left-to-right generator completes the suffix (context = the first c tokens);
- a right-to-left one completes the prefix (context = the last c tokens, read backwards).

Every generator must share the vocabulary of `--vocab` (the shared BPE), except a foreign one
such as the pretrained SmolLM2 (suffix completion only): the context is decoded to text, the
foreign model continues it in its own tokens, and the continuation is re-tokenised into the shared
vocabulary and cut to exactly L − c tokens. The context token ids stay as they were.

One JSON line per window, with its provenance (corpus, split, document, start, context length,
generator, direction, seed, top-k), the positive's ids and the negatives' ids, and each negative's
log q under the sampling distribution (q = the top-k truncated generator; null for a foreign one).
Each negative draws from its own generator seeded by (seed, window, j): the file does not depend
on the batch size or on being resumed.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from textebm.errors import TextebmError
from textebm.precision import CHOICES as PRECISIONS
from textebm.options import threads_field

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class NegativesConfig:
    data: str = field(metadata={"help": "dataset folder of one corpus (SPLIT.jsonl with `doc` per row)"})
    generator: str = field(metadata={"help": "causal LM that writes the negatives (run folder, HF folder, "
                                             "or a models-fetch id such as smollm2-135m)"})
    vocab: str = field(metadata={"help": "tokenizer folder of the shared vocabulary the windows are cut in"})
    out: str = field(metadata={"help": "output JSONL (FILE.partial while running; resumable)"})
    split: str = field(default="train", metadata={"help": "split of --data to window"})
    corpus: str = field(default="", metadata={"help": "corpus name in the provenance (default: the folder name)"})
    length: int = field(default=64, metadata={"help": "window length L in tokens (paper: 160)", "min": 4})
    contexts: list[int] = field(default_factory=lambda: [48, 56], metadata={
        "help": "context lengths c, one drawn per window with equal probability (paper: 120 140)", "min": 1})
    stride: int = field(default=0, metadata={"help": "tokens between window starts (0: L/4, the paper's "
                                                     "choice for small corpora; L for large ones)", "min": 0})
    max_windows: int = field(default=0, metadata={"help": "keep a seeded subset of this many windows (0: all)",
                                                  "min": 0})
    k: int = field(default=3, metadata={"help": "negatives per window", "min": 1})
    top_k: int = field(default=10, metadata={"help": "sample from the k most likely tokens (paper: 10; "
                                                     "0: the full distribution)", "min": 0})
    temperature: float = field(default=1.0, metadata={"help": "softmax temperature", "gt": 0})
    batch_size: int = field(default=64, metadata={"help": "sequences generated together", "min": 1})
    seed: int = field(default=0, metadata={"help": "seed of the windows' subset and contexts and of the "
                                                   "samples", "min": 0})
    precision: str = field(default="fp32", metadata={
        "help": "generator precision (auto: bf16 where the hardware multiplies it natively)",
        "choices": list(PRECISIONS)})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an existing --out file"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})

    def check(self) -> None:
        bad = [c for c in self.contexts if c >= self.length]
        if bad:
            raise TextebmError(f"--contexts {bad[0]} leaves nothing to generate in a window of --length {self.length}")


def corpus_name(cfg: NegativesConfig) -> str:
    return cfg.corpus or Path(cfg.data).resolve().name


def windows_of(cfg: NegativesConfig, vocab) -> list:
    """The windows of `cfg.split` of `cfg.data` in the vocabulary `vocab`."""
    from textebm.data.readers import load_split
    from textebm.data.streams import doc_streams
    from textebm.detection.windows import make_windows

    rows = load_split(cfg.data, cfg.split)
    stride = cfg.stride or max(cfg.length // 4, 1)
    wins = make_windows(doc_streams(rows, vocab), corpus_name(cfg), cfg.split, cfg.length, stride,
                        cfg.contexts, cfg.seed, cfg.max_windows)
    if not wins:
        raise TextebmError(f"--data {cfg.data}: split {cfg.split!r} has no document of {cfg.length} tokens")
    return wins


class _Writer:
    """Generates the negatives of windows, in the shared vocabulary or through a foreign one."""

    def __init__(self, cfg: NegativesConfig, model, tokenizer, meta, vocab):
        from textebm.lm.sample_command import banned_ids
        from textebm.models.lm import special_ids
        from textebm.tokenizer import same_vocab

        self.cfg, self.model, self.tokenizer, self.vocab = cfg, model, tokenizer, vocab
        self.sp = special_ids(tokenizer, meta)
        self.direction = meta.direction
        self.foreign = not same_vocab(tokenizer, vocab)
        if self.foreign and self.direction != "l2r":
            raise TextebmError(f"--generator {cfg.generator}: a generator with its own vocabulary completes "
                               "suffixes only (left to right); this one is r2l")
        if meta.objective != "causal":
            raise TextebmError(f"--generator {cfg.generator}: needs a causal LM, not an {meta.objective} one")
        self.banned = sorted(set(banned_ids(self.sp)) | {self.sp.eos})  # exactly L - c tokens
        self.top_k = cfg.top_k or model.config.vocab_size

    def jobs(self, window) -> tuple[list[int], int]:
        """(model input, tokens to generate) of a window's negatives."""
        from textebm.detection.windows import context_ids

        ctx = context_ids(window, self.direction)
        n = len(window.ids) - window.context_len
        if self.foreign:
            text = self.vocab.decode(ctx)
            foreign = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return [self.sp.bos, *foreign], 3 * n + 8  # enough foreign tokens for n shared ones
        return [self.sp.bos, *(ctx if self.direction == "l2r" else ctx[::-1])], n

    def finish(self, window, tokens: list[int]) -> list[int] | None:
        """The generated part in shared ids, reading order, exactly L − c long (None: too short)."""
        n = len(window.ids) - window.context_len
        if self.foreign:
            ids = self.vocab(self.tokenizer.decode(tokens), add_special_tokens=False)["input_ids"]
            return ids[:n] if len(ids) >= n else None
        return tokens[::-1] if self.direction == "r2l" else list(tokens)


def generate_negatives(cfg: NegativesConfig) -> Path:
    """Write the windows of a split with `cfg.k` negatives each into `cfg.out` (resumable)."""
    from tqdm import tqdm

    from textebm.inference import inference_setup, set_threads
    from textebm.io import atomic_write, read_partial
    from textebm.lm.generate import generate
    from textebm.seeds import derive_seed
    from textebm.models.load import CAUSAL_LM, find_model, load_lm, load_tokenizer
    from textebm.options import check_config
    from textebm.outputs import check_output_file
    from textebm.detection.windows import assemble

    check_config(cfg)
    set_threads(cfg.threads)
    out = Path(cfg.out)
    partial = out.with_name(out.name + ".partial")
    check_output_file(out, cfg.overwrite)
    if partial.is_dir():
        raise TextebmError(f"--out {out}: {partial} is a folder; textebm writes its unfinished rows there")
    gen_path = find_model(cfg.generator, CAUSAL_LM, "--generator").path.resolve()  # what it holds: cheap
    vocab = load_tokenizer(cfg.vocab, "--vocab")
    wins = windows_of(cfg, vocab)  # bad data fails before the model loads
    device, choice = inference_setup(cfg.precision)
    model, tokenizer, meta = load_lm(gen_path, dtype=choice.dtype, device=device, option="--generator")
    writer = _Writer(cfg, model, tokenizer, meta, vocab)
    common = {"corpus": corpus_name(cfg), "split": cfg.split, "generator": str(gen_path),
              "direction": meta.direction, "foreign_vocab": writer.foreign, "seed": cfg.seed,
              "top_k": cfg.top_k, "temperature": cfg.temperature, "length": cfg.length, "k": cfg.k,
              "precision": choice.precision}

    done_rows = read_partial(partial) if partial.is_file() else []
    keys = {w.key for w in wins}
    for row in done_rows:
        diff = [k for k, v in common.items() if row.get(k) != v]
        if diff or row.get("key") not in keys:
            raise TextebmError(f"{partial} was written with other settings ({', '.join(diff) or 'windows'} "
                               "differ); delete it to start over or rerun with the same settings")
    done = {row["key"] for row in done_rows}
    todo = [w for w in wins if w.key not in done]
    if done:
        log.info("resuming %s: %d of %d windows already written", partial, len(done), len(wins))
    per_batch = max(1, cfg.batch_size // cfg.k)
    t0, n_seq, short = time.perf_counter(), 0, 0
    partial.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "a", encoding="utf-8") as sink, tqdm(total=len(todo), unit="win", desc="negatives",
                                                         disable=not cfg.progress) as bar:
        for s in range(0, len(todo), per_batch):
            chunk = todo[s:s + per_batch]
            jobs = [(w, j, *writer.jobs(w)) for w in chunk for j in range(cfg.k)]
            gens = generate(model, [jb[2] for jb in jobs], [jb[3] for jb in jobs],
                            [torch.Generator().manual_seed(derive_seed(cfg.seed, w.key, j, "negative")) for w, j, _, _ in jobs],
                            writer.sp.eos, writer.sp.pad, writer.top_k, cfg.temperature, writer.banned)
            n_seq += len(jobs)
            for i, w in enumerate(chunk):
                parts = [(writer.finish(w, g.tokens), g.logprob) for g in gens[i * cfg.k:(i + 1) * cfg.k]]
                if any(p is None for p, _ in parts):
                    short += 1
                    continue
                row = {"key": w.key, **common, "doc": w.doc, "start": w.start, "context_len": w.context_len,
                       "positive": list(w.ids), "negatives": [assemble(w, meta.direction, p) for p, _ in parts],
                       "neg_logq": [None if writer.foreign else lq for _, lq in parts]}
                sink.write(json.dumps(row) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
            bar.update(len(chunk))
    elapsed = time.perf_counter() - t0
    log.info("generated %d negatives in %.1f s (%.1f sequences/s)", n_seq, elapsed, n_seq / max(elapsed, 1e-9))
    if short:
        log.warning("%d windows dropped: the foreign generator's continuation re-tokenised into fewer "
                    "than L - c shared tokens", short)
    order = {w.key: i for i, w in enumerate(wins)}
    rows = sorted(read_partial(partial), key=lambda r: order[r["key"]])
    with atomic_write(out) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    partial.unlink()
    log.info("wrote %d windows with %d negatives each to %s", len(rows), cfg.k, out)
    return out
