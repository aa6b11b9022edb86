"""`textebm negatives generate`: real windows and k generated negatives each (Bakhtin et al. 2019,
sec. 4.1-4.2), pre-generated once, cached and resumable. The command (options, the file, resume);
the sampling itself, in memory, is `textebm.detection.negative_sampling`.

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

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from textebm.detection.negative_sampling import (
    NegativeSampler,
    NegativesSpec,
    corpus_name,
    windows_of,
)
from textebm.errors import TextebmError
from textebm.fingerprint import folder_sha256, json_sha256
from textebm.inference import inference_setup, set_threads
from textebm.io import read_json
from textebm.models.load import CAUSAL_LM, FolderInfo, find_model, load_lm, load_tokenizer
from textebm.options import check_config, threads_field
from textebm.outputs import check_output_file
from textebm.precision import CHOICES as PRECISIONS
from textebm.progress import progress_bar
from textebm.resumable import PartialFile

log = logging.getLogger(__name__)

KIND = "negatives generate"


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
        if Path(self.data).exists() and not Path(self.data).is_dir():
            raise TextebmError(f"--data {self.data}: is a file; negatives are cut from a dataset folder of one corpus "
                               "(train.jsonl, dev.jsonl, test.jsonl with `doc` per row): make one with `textebm data "
                               f"convert --input {self.data} --out DIR`")
        bad = [c for c in self.contexts if c >= self.length]
        if bad:
            raise TextebmError(f"--contexts {bad[0]} leaves nothing to generate in a window of --length {self.length}")


def trained_on(generator: FolderInfo, data: Path, split: str) -> bool:
    """Whether `split` of the dataset folder `data` is the text the generator's `lm train` run
    trained on: its train split, the run's --data being this folder (read from this working
    directory). False where it cannot tell (a model folder without its run, another corpus)."""
    if split != "train" or generator.run is None or not (generator.run / "config.json").is_file():
        return False
    trained = read_json(generator.run / "config.json").get("data")
    return isinstance(trained, str) and Path(trained).resolve() == data.resolve()


def generate_negatives(cfg: NegativesConfig) -> Path:
    """Write the windows of a split with `cfg.k` negatives each into `cfg.out` (resumable)."""

    check_config(cfg)
    set_threads(cfg.threads)
    out = Path(cfg.out)
    data = Path(cfg.data)
    check_output_file(out, cfg.overwrite, kind=KIND, inputs=[("--data", data / f"{cfg.split}.jsonl" if data.is_dir() else data)])
    partial = PartialFile(out, KIND)
    partial.check()
    gen_info = find_model(cfg.generator, CAUSAL_LM, "--generator")  # what it holds: cheap
    gen_path = gen_info.path.resolve()
    if trained_on(gen_info, data, cfg.split):
        log.warning("--split %s of --data %s is the text --generator %s was trained on: it scores that text better "
                    "than new text (its training loss is below its dev loss), so an energy trained on these windows "
                    "learns a gap that new text does not have (an energy that weighs the generator's likelihood, "
                    "lmstats, most of all). For an energy meant for new text, cut the windows from text the "
                    "generator did not train on: --split dev, or a part of the corpus held out from `lm train`",
                    cfg.split, cfg.data, cfg.generator)
    vocab = load_tokenizer(cfg.vocab, "--vocab")
    wins = windows_of(cfg.data, cfg.split, vocab, cfg.length, cfg.contexts, stride=cfg.stride, seed=cfg.seed,
                      max_windows=cfg.max_windows, corpus=cfg.corpus)  # bad data fails before the model loads
    device, choice = inference_setup(cfg.precision)
    model, tokenizer, meta = load_lm(gen_path, dtype=choice.dtype, device=device, option="--generator")
    sampler = NegativeSampler(model, tokenizer, meta, vocab, f"--generator {cfg.generator}")
    spec = NegativesSpec(k=cfg.k, top_k=cfg.top_k, temperature=cfg.temperature, seed=cfg.seed,
                         batch_size=cfg.batch_size)
    common = {"corpus": corpus_name(cfg.data, cfg.corpus), "split": cfg.split, "generator": str(gen_path),
              "direction": meta.direction, "foreign_vocab": sampler.foreign, "seed": cfg.seed,
              "top_k": cfg.top_k, "temperature": cfg.temperature, "length": cfg.length, "k": cfg.k,
              "precision": choice.precision}
    # What every row depends on: the generator by content (not its path), the windows (data,
    # vocabulary, length, stride, contexts, subset) by content, and the sampling options.
    identity = {"command": KIND, "generator_sha256": folder_sha256(gen_path),
                "windows_sha256": json_sha256([[w.key, w.ids, w.context_len] for w in wins]), **common}
    # the generator's path is recorded, not compared: the same model moved or copied elsewhere resumes
    done_rows = partial.start(identity, informative=("generator",))
    keys = {w.key for w in wins}
    stray = next((row.get("key") for row in done_rows if row.get("key") not in keys), None)
    if stray is not None:
        raise TextebmError(f"{partial.path}: window {stray!r} is not one of this run's; delete {partial.path} "
                           "to start over")
    done = {row["key"] for row in done_rows}
    todo = [w for w in wins if w.key not in done]
    if done:
        log.info("resuming %s: %d of %d windows already written", partial.path, len(done), len(wins))
    t0, short = time.perf_counter(), 0
    with partial, progress_bar(len(todo), "negatives", "win", cfg.progress) as bar:
        for n_done, rows in sampler.iter_negatives(todo, spec):
            short += n_done - len(rows)
            partial.append({"key": r["key"], **common, **{k: v for k, v in r.items() if k != "key"}} for r in rows)
            bar.update(n_done)
    elapsed = time.perf_counter() - t0
    n_seq = len(todo) * cfg.k
    log.info("generated %d negatives in %.1f s (%.1f sequences/s)", n_seq, elapsed, n_seq / max(elapsed, 1e-9))
    if short:
        log.warning("%d windows dropped: the foreign generator's continuation re-tokenised into fewer "
                    "than L - c shared tokens", short)
    order = {w.key: i for i, w in enumerate(wins)}
    n = partial.finish(order=lambda r: order[r["key"]])
    log.info("wrote %d windows with %d negatives each to %s", n, cfg.k, out)
    return out
