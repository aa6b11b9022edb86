"""`textebm lm sample`: noise samples and generations from a causal LM (the command: jobs, the
output file, resume). The sampler itself is the library `textebm.lm.generate`; the jobs and their
texts (`sample_jobs`, `group_texts`) are shared with the Python API (`textebm.api.InfillLM`).

Four modes, each built on the sequence layouts of `textebm.models.lm_format`:

- infill (paper a, sec. 2.4 and appendix B): mask each token of x with probability M (default
  the model's training ratio, else 0.4), feed `[bos] m(x) [sep]` and let an infill LM write the
  full sentence until [eos]. Every sample draws a fresh mask.
- prefix (paper c, sec. 3.2): keep the first tokens of x as context and let a left-to-right LM
  write the rest (by default as many tokens as were removed; it may stop earlier at [eos]).
- suffix (paper c, sec. 3.2): keep the last tokens of x and let a right-to-left LM write the
  prefix, which is then put back in reading order.
- free: unconditional samples from `[bos]`.

Texts written by an r2l model are un-reversed. A `text_pair` is sampled as a second, independent
sequence so both fields are present in the output.

The sampler is our own (`textebm.lm.generate.generate`): batched top-k sampling with a key-value
cache over left-padded contexts. Each sequence draws its uniforms from its own `torch.Generator`,
seeded from (seed, example index, sample index, field), so its tokens depend neither on the batch
it was put in nor on whether the run was interrupted and resumed (exactly in fp32; in bf16 the
rounding of a padded batch can flip a token now and then).

The model runs on the accelerator when there is one, in `--precision` (auto: see
`textebm.precision`); the resolved precision is logged at start and written into every row
(`precision`), so a resumed run must run in the same one.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from textebm.data.readers import example_id, load_split
from textebm.errors import TextebmError
from textebm.fingerprint import folder_sha256, json_sha256
from textebm.inference import inference_setup, set_threads
from textebm.lm.generate import Generation, Sampling, banned_ids, generate_groups
from textebm.models.lm import special_ids
from textebm.models.lm_format import SpecialIds, infill_context, mask_tokens
from textebm.models.load import CAUSAL_LM, find_model, load_lm
from textebm.options import check_config, refuse_unused, threads_field
from textebm.outputs import check_output_file
from textebm.precision import CHOICES as PRECISIONS
from textebm.progress import progress_bar
from textebm.resumable import PartialFile
from textebm.seeds import derive_seed

log = logging.getLogger(__name__)

KIND = "lm sample"
MODES = ("infill", "prefix", "suffix", "free")
DEFAULT_MASK_RATIO = 0.4  # paper a, sec. 2.4


@dataclass(kw_only=True)
class SampleConfig:
    model: str = field(metadata={"help": "LM folder, a run directory holding model/, or a models-fetch id"})
    data: str = field(metadata={"help": "dataset directory (SPLIT.jsonl) or a data file"})
    out: str = field(metadata={"help": "output JSONL (FILE.partial while running; resumable)"})
    split: str = field(default="train", metadata={"help": "split of --data to sample from"})
    mode: str = field(default="infill", metadata={"help": "what the LM writes given what context",
                                                  "choices": list(MODES)})
    top_k: int = field(default=20, metadata={"help": "sample from the k most likely tokens (paper a: 20)",
                                             "min": 1})
    per_example: int = field(default=1, metadata={"help": "samples per source example", "min": 1})
    mask_ratio: float | None = field(default=None, metadata={
        "help": "infill: masking probability M (default: the model's training ratio, else 0.4)",
        "min": 0, "max": 1})
    context_ratio: float = field(default=0.5, metadata={
        "help": "prefix/suffix: fraction of each text's tokens kept as context", "min": 0, "max": 1})
    context_tokens: int | None = field(default=None, metadata={
        "help": "prefix/suffix: keep this many tokens instead of --context-ratio", "min": 0})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": "cap on generated tokens (default: prefix/suffix as many as were removed; "
                "infill/free 2 x source length + 8)", "min": 1})
    temperature: float = field(default=1.0, metadata={
        "help": "softmax temperature before the top-k cut (greedy: --top-k 1)", "gt": 0})
    batch_size: int = field(default=32, metadata={"help": "sequences generated together", "min": 1})
    seed: int = field(default=0, metadata={"help": "same seed, same samples, whatever the batch size", "min": 0})
    precision: str = field(default="auto", metadata={
        "help": "weights and matmuls in this precision; auto: bf16 where the hardware multiplies it "
                "natively, else fp32 (logits are upcast to fp32 before the softmax)", "choices": list(PRECISIONS)})
    limit: int = field(default=0, metadata={"help": "use only the first N examples (0: all)", "min": 0})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an existing --out file"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})

    def check(self) -> None:
        if self.mode != "infill":
            refuse_unused(self, ["mask_ratio"], f"with --mode {self.mode} (it masks nothing)")
        if self.mode in ("infill", "free"):
            refuse_unused(self, ["context_ratio", "context_tokens"],
                          f"with --mode {self.mode} (only prefix and suffix keep a context)")
        elif self.context_tokens is not None:
            refuse_unused(self, ["context_ratio"], "with --context-tokens (which sets the context length)")


# ---------------------------------------------------------------- jobs: what to generate from what


@dataclass
class Job:
    """One sequence to generate: field `field` of sample `sample` of source example `example`."""

    example: int
    sample: int
    field: int  # 0: text, 1: text_pair
    context: list[int]  # model input, starting with [bos]
    max_new: int
    seed: int  # of this sequence's sampling generator
    context_text: str
    before: list[int]  # kept tokens placed before the generation (prefix mode), reading order
    after: list[int]  # kept tokens placed after it (suffix mode), reading order
    reverse: bool  # the model writes right to left: un-reverse the generation

    @property
    def group(self) -> tuple[int, int]:  # the output row: (example, sample)
        return self.example, self.sample

    @property
    def part(self) -> int:
        return self.field


@dataclass(frozen=True)
class JobSpec:
    """What a sequence is given and may write (see the module doc): `mode`, the infill masking
    probability, the prefix/suffix context (`context_tokens`, else `context_ratio` of the text),
    the cap on new tokens (None: the mode's default) and the seed of masks and samples."""

    mode: str
    seed: int = 0
    mask_ratio: float = DEFAULT_MASK_RATIO
    context_ratio: float = 0.5
    context_tokens: int | None = None
    max_new_tokens: int | None = None


def infill_mask_ratio(meta, given: float | None) -> float:
    """The masking probability M of infill samples: `given`, else the model's training ratio, else 0.4."""
    return given if given is not None else meta.mask_ratio or DEFAULT_MASK_RATIO


def check_mode(mode: str, meta, sp: SpecialIds) -> None:
    """Raise a TextebmError when the model cannot do `mode` (wrong objective or direction)."""
    if mode not in MODES:
        raise TextebmError(f"unknown --mode {mode!r}; expected one of {', '.join(MODES)}")
    if mode == "infill":
        if meta.objective != "infill" or sp.mask is None or sp.sep is None:
            raise TextebmError("--mode infill needs an LM trained with `lm train --objective infill` "
                               f"(this one has objective {meta.objective!r})")
        return
    if meta.objective != "causal":
        raise TextebmError(f"--mode {mode} needs a causal LM; this one was trained with objective "
                           f"{meta.objective!r} (use --mode infill)")
    if mode == "prefix" and meta.direction != "l2r":
        raise TextebmError("--mode prefix writes suffixes and needs a left-to-right LM; this one is r2l "
                           "(use --mode suffix)")
    if mode == "suffix" and meta.direction != "r2l":
        raise TextebmError("--mode suffix writes prefixes given a suffix and needs a right-to-left LM "
                           "(train one with `lm train --direction r2l`); this one is "
                           f"{meta.direction}")


def context_length(n: int, ratio: float, tokens: int | None) -> int:
    """Tokens of an n-token text kept as prefix/suffix context; at least one is left to generate."""
    c = tokens if tokens is not None else round(ratio * n)
    return max(0, min(c, n - 1))


def make_job(spec: JobSpec, ids: list[int], key: tuple[int, int, int], sp: SpecialIds, meta, tokenizer) -> Job:
    """The context, generation cap and decoding recipe of one sequence (see the module doc);
    `key` is (example, sample, field)."""
    n, r2l = len(ids), meta.direction == "r2l"
    seed = derive_seed(spec.seed, *key, "sample")
    cap = spec.max_new_tokens
    if spec.mode == "infill":
        g = torch.Generator().manual_seed(derive_seed(spec.seed, *key, "mask"))
        _, masked = mask_tokens(ids, spec.mask_ratio, g)
        shown = [sp.mask if t == -1 else t for t in masked]
        return Job(*key, infill_context(masked, sp), cap if cap is not None else 2 * n + 8, seed,
                   tokenizer.decode(shown, skip_special_tokens=False), [], [], r2l)
    if spec.mode == "free":
        return Job(*key, [sp.bos], cap if cap is not None else 2 * n + 8, seed, "", [], [], r2l)
    c = context_length(n, spec.context_ratio, spec.context_tokens)
    if spec.mode == "prefix":
        kept = ids[:c]
        return Job(*key, [sp.bos, *kept], cap if cap is not None else n - c, seed,
                   tokenizer.decode(kept, skip_special_tokens=False), kept, [], False)
    kept = ids[n - c:]  # suffix mode: an r2l model reads the suffix backwards, then writes on
    return Job(*key, [sp.bos, *reversed(kept)], cap if cap is not None else n - c, seed,
               tokenizer.decode(kept, skip_special_tokens=False), [], kept, True)


def job_text_ids(job: Job, gen: Generation, eos: int) -> list[int]:
    """Token ids of the sampled text in reading order: kept context plus the generation."""
    body = gen.tokens[:-1] if gen.tokens and gen.tokens[-1] == eos else gen.tokens
    if job.reverse:
        body = body[::-1]
    return [*job.before, *body, *job.after]


# ---------------------------------------------------------------- the command


def source_fields(row: dict) -> list[str]:
    return ["text", "text_pair"] if row.get("text_pair") is not None else ["text"]


def source_id(row: dict, index: int) -> str:
    return example_id(row, index)


def encode_fields(tokenizer, examples: list[dict]) -> list[list[list[int]]]:
    """Token ids of each example's fields (text, then text_pair where present), one batched call."""
    texts = [row[f] for row in examples for f in source_fields(row)]
    flat = iter(tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
    return [[next(flat) for _ in source_fields(row)] for row in examples]


def sample_jobs(spec: JobSpec, encoded: list[list[list[int]]], per_example: int, sp: SpecialIds, meta, tokenizer,
                positions: int | None, refuse: Callable[[int, int, str], Exception],
                skip: Callable[[int, int], bool] = lambda i, j: False) -> list[Job]:
    """The jobs of samples 0 .. per_example-1 of every example (`encoded[i]`: its fields' ids,
    `encode_fields`) but those `skip(i, j)`, in batching order (by context length, so a batch
    holds neighbours). A job writes at most what the model's `positions` leave after its
    context; a context that leaves none raises `refuse(i, field, message)` (the command's
    message names the example, the API's the text)."""
    limit = positions or 10**9
    jobs = []
    for i, field_ids in enumerate(encoded):
        for j in range(per_example):
            if skip(i, j):
                continue
            for f, ids in enumerate(field_ids):
                job = make_job(spec, ids, (i, j, f), sp, meta, tokenizer)
                if len(job.context) >= limit:
                    raise refuse(i, f, f"a context of {len(job.context)} tokens leaves no room to generate "
                                       f"within the model's {limit} positions")
                job.max_new = min(job.max_new, limit - len(job.context))
                jobs.append(job)
    jobs.sort(key=lambda jb: (len(jb.context), jb.max_new, jb.example, jb.sample, jb.field))
    return jobs


def group_texts(parts: dict[int, tuple[Job, Generation]], tokenizer, eos: int) -> list[str]:
    """The sampled texts of one output row, in field order (text, then text_pair), in reading order."""
    return [tokenizer.decode(job_text_ids(*parts[f], eos), skip_special_tokens=False) for f in sorted(parts)]


def sample_file(cfg: SampleConfig) -> Path:
    """Sample noise / generations for each example of a split into a JSONL file (resumable)."""

    check_config(cfg)
    set_threads(cfg.threads)
    out = Path(cfg.out)
    data = Path(cfg.data)
    split_file = data / f"{cfg.split}.jsonl" if data.is_dir() else data
    check_output_file(out, cfg.overwrite, kind=KIND, inputs=[("--data", split_file)])  # before any work
    partial = PartialFile(out, KIND, ensure_ascii=False)
    partial.check()  # the .partial is ours: no --overwrite needed
    model_path = find_model(cfg.model, CAUSAL_LM).path.resolve()
    device, choice = inference_setup(cfg.precision)
    model, tokenizer, meta = load_lm(model_path, dtype=choice.dtype, device=device)
    sp = special_ids(tokenizer, meta)
    check_mode(cfg.mode, meta, sp)
    mask_ratio = infill_mask_ratio(meta, cfg.mask_ratio)
    spec = JobSpec(mode=cfg.mode, seed=cfg.seed, mask_ratio=mask_ratio, context_ratio=cfg.context_ratio,
                   context_tokens=cfg.context_tokens, max_new_tokens=cfg.max_new_tokens)

    all_examples = load_split(cfg.data, cfg.split)
    examples = all_examples[:cfg.limit] if cfg.limit else all_examples
    sids = [source_id(row, i) for i, row in enumerate(examples)]
    if len(set(sids)) != len(sids):
        dup = Counter(sids).most_common(1)[0][0]
        raise TextebmError(f"{cfg.data}: id {dup!r} occurs more than once; sample ids are built from "
                           "source ids, which must be unique")
    order = {f"{sid}-n{j}": (i, j) for i, sid in enumerate(sids) for j in range(cfg.per_example)}

    common = {"mode": cfg.mode, "top_k": cfg.top_k, "temperature": cfg.temperature}
    if cfg.mode == "infill":
        common["mask_ratio"] = mask_ratio
    common.update(seed=cfg.seed, model=str(model_path), precision=choice.precision)
    # What every row depends on: the model and the source texts by content, and the options (the
    # batch size changes no token in fp32; --limit and --per-example only which rows there are).
    identity = {"command": KIND, "model_sha256": folder_sha256(model_path), "data_sha256": json_sha256(all_examples),
                **common, "context_ratio": cfg.context_ratio, "context_tokens": cfg.context_tokens,
                "max_new_tokens": cfg.max_new_tokens}
    done_rows = partial.start(identity, informative=("model",))  # the model by content: moved, it resumes
    # the same data and options (the identity): a row outside `order` was asked for by a larger
    # --limit or --per-example, and is left out of OUT
    done = {row["id"] for row in done_rows if row.get("id") in order}
    if extra := len(done_rows) - len(done):
        log.info("%s: %d samples beyond this run's --limit / --per-example (an earlier run's) are left out of %s",
                 partial.path, extra, out)
    if done:
        log.info("resuming %s: %d of %d samples already written", partial.path, len(done), len(order))

    jobs = sample_jobs(spec, encode_fields(tokenizer, examples), cfg.per_example, sp, meta, tokenizer,
                       getattr(model.config, "max_position_embeddings", None),
                       lambda i, _f, message: TextebmError(f"example {sids[i]}: {message}"),
                       lambda i, j: f"{sids[i]}-n{j}" in done)

    sampling = Sampling(cfg.top_k, cfg.temperature, sp.eos, sp.pad, tuple(banned_ids(sp)))
    t0, n_tokens = time.perf_counter(), 0
    with partial, progress_bar(len(jobs), "sampling", "seq", cfg.progress) as bar:
        for batch, finished in generate_groups(model, jobs, cfg.batch_size, sampling,
                                               lambda key: len(source_fields(examples[key[0]]))):
            n_tokens += sum(len(gen.tokens) for _, parts in finished for _, gen in parts.values())
            partial.append(_output_row(examples[i], sids[i], j, parts, common, tokenizer, sp.eos)
                           for (i, j), parts in finished)
            bar.update(len(batch))
    elapsed = time.perf_counter() - t0
    log.info("sampled %d sequences, %d tokens in %.1f s (%.1f tokens/s)", len(jobs), n_tokens, elapsed,
             n_tokens / max(elapsed, 1e-9))
    n = partial.finish(order=lambda r: order[r["id"]], keep=lambda r: r.get("id") in order)
    log.info("wrote %d samples to %s", n, out)
    return out


def _output_row(src: dict, sid: str, j: int, parts: dict[int, tuple[Job, Generation]], common: dict,
                tokenizer, eos: int) -> dict:
    row: dict = {"id": f"{sid}-n{j}", "source_id": sid}
    row.update(zip(source_fields(src), group_texts(parts, tokenizer, eos)))
    if src.get("label") is not None:
        row["source_label"] = src["label"]
    row.update(common)
    row["context"] = parts[0][0].context_text
    if 1 in parts:
        row["context_pair"] = parts[1][0].context_text
    row["gen_logprob"] = sum(gen.logprob for _, gen in parts.values())
    row["gen_tokens"] = sum(len(gen.tokens) for _, gen in parts.values())
    return row
