"""`textebm lm score` and `textebm lm eval`: the commands around the scoring library
(`textebm.lm.scoring`): read the data, check and write the outputs.

Both check their output target before any work (`textebm.outputs`), then the model folder
(`textebm.models.load.find_model`: a causal LM, not an encoder or classifier), and run on the
accelerator when there is one, in `--precision` (auto by default: `textebm.precision`). The
resolved precision and its reason are logged at start; `lm eval` also records them in its
metrics (`precision`, `precision_choice`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from textebm.data.readers import (
    example_id,
    load_split,
    read_numbered_examples,
)
from textebm.data.streams import chunks, doc_streams
from textebm.errors import InputError, TextebmError, TextTooLong
from textebm.inference import inference_setup, set_threads
from textebm.io import read_json, write_json
from textebm.lm.scoring import (
    ScoreResult,
    check_scorable,
    item_texts,
    perplexity_metrics,
    score_ids,
    score_texts,
)
from textebm.models.lm import read_meta
from textebm.models.load import CAUSAL_LM, find_model, load_lm
from textebm.options import check_config, id_field_option, refuse_unused, text_field_option, threads_field
from textebm.outputs import check_file_target, check_output_file, output_file, seal_marker
from textebm.precision import CHOICES as PRECISIONS

log = logging.getLogger(__name__)

PRECISION_HELP = ("weights and matmuls in this precision; auto: bf16 where the hardware multiplies it "
                  "natively, else fp32 (log-probabilities always from fp32 logits)")


def scorable_folder(model_arg: str, option: str = "--model") -> Path:
    """The folder of `--model` (named `option` in messages), checked (before any weights are read)
    to be a causal LM trained with the causal objective."""

    folder = find_model(model_arg, CAUSAL_LM, option).path
    check_scorable(read_meta(folder), f"{option} {folder}: ")
    return folder


def _load(folder: Path, precision: str):
    """(model, tokenizer, meta, PrecisionChoice) placed for inference."""

    device, choice = inference_setup(precision)
    model, tokenizer, meta = load_lm(folder, dtype=choice.dtype, device=device)
    return model, tokenizer, meta, choice


# ---------------------------------------------------------------- lm score


@dataclass(kw_only=True)
class LMScoreConfig:
    model: str = field(metadata={"help": "LM folder, a run directory holding model/, or a models-fetch id"})
    input: str = field(metadata={"help": "texts to score (.jsonl, .csv, .tsv or .txt)"})
    out: str = field(metadata={"help": "output JSONL, one line per input item"})
    batch_size: int = field(default=16, metadata={"help": "texts per forward pass", "min": 1})
    precision: str = field(default="auto", metadata={"help": PRECISION_HELP, "choices": list(PRECISIONS)})
    text_field: str | None = text_field_option()
    id_field: str | None = id_field_option()
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an existing --out file"})


def score_file(cfg: LMScoreConfig) -> Path:
    """Score every item of a file: log P(x) in nats, per token and in total ([eos] included)."""

    check_config(cfg)
    set_threads(cfg.threads)
    check_output_file(cfg.out, cfg.overwrite, kind="lm score", inputs=[("--input", cfg.input)])
    folder = scorable_folder(cfg.model)
    numbered = read_numbered_examples(cfg.input, cfg.text_field, id_field=cfg.id_field)  # a label is echoed
    rows = [row for _, row in numbered]
    model, tokenizer, meta, choice = _load(folder, cfg.precision)
    texts, pair_at = item_texts(rows)
    try:
        results = score_texts(model, tokenizer, meta, texts, cfg.batch_size, progress=True)
    except TextTooLong as e:
        raise _too_long(e, Path(cfg.input), [line for line, _ in numbered], pair_at) from None
    with output_file(cfg.out, "lm score") as f:
        for i, row in enumerate(rows):
            f.write(json.dumps(_score_row(row, i, results[i], results[pair_at[i]] if pair_at[i] is not None
                                          else None, tokenizer, choice.precision), ensure_ascii=False) + "\n")
    log.info("scored %d items with %s into %s", len(rows), folder.resolve(), cfg.out)
    return Path(cfg.out)


def _too_long(e: TextTooLong, path: Path, lines: list[int], pair_at: list[int | None], hint: str = "") -> InputError:
    """The too-long text of `path` named by its file and line (`lines`: each example's; its index in
    `item_texts` order: every text first, then the text_pairs)."""
    pair = e.index >= len(lines)
    i = pair_at.index(e.index) if pair else e.index
    return InputError(path, f"{'its text_pair' if pair else 'this text'} has {e.tokens} tokens; the model takes "
                            f"at most {e.limit}{hint}", lines[i])


def _score_row(row: dict, index: int, res: ScoreResult, pair: ScoreResult | None, tokenizer,
               precision: str) -> dict:
    out: dict = {"id": example_id(row, index), "text": row["text"]}
    if pair is not None:
        out["text_pair"] = row["text_pair"]
    if row.get("label") is not None:
        out["label"] = row["label"]
    out["logprob"] = res.logprob + (pair.logprob if pair else 0.0)
    out["num_tokens"] = res.num_tokens + (pair.num_tokens if pair else 0)
    out["token_logprobs"] = res.token_logprobs
    out["tokens"] = tokenizer.convert_ids_to_tokens(res.token_ids)
    if pair is not None:
        out["pair_logprob"] = pair.logprob
        out["pair_token_logprobs"] = pair.token_logprobs
        out["pair_tokens"] = tokenizer.convert_ids_to_tokens(pair.token_ids)
    out["precision"] = precision  # docs/performance.md, "Precision": its tolerance against fp32
    return out


# ---------------------------------------------------------------- lm eval


@dataclass(kw_only=True)
class LMEvalConfig:
    model: str = field(metadata={"help": "LM folder, a run directory holding model/, or a models-fetch id"})
    data: str = field(metadata={"help": "dataset directory (SPLIT.jsonl) or a data file"})
    split: str = field(default="test", metadata={"help": "split of --data to evaluate on"})
    out: str = field(default="", metadata={"help": "run directory whose metrics.json gets eval_SPLIT "
                                                   "(default: --model when it is a run directory)"})
    metrics: str = field(default="", metadata={"help": "merge the result into this JSON file instead"})
    batch_size: int = field(default=16, metadata={"help": "texts per forward pass", "min": 1})
    chunk: int = field(default=0, metadata={
        "help": "score running text: each document's texts (rows sharing `doc`) joined and cut into pieces of "
                "this many tokens, as `lm train --chunk` trains and evaluates (0: each text whole; one longer "
                "than the model takes is refused)", "min": 0})
    precision: str = field(default="auto", metadata={"help": PRECISION_HELP, "choices": list(PRECISIONS)})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={
        "help": "replace an eval_SPLIT result the metrics file already holds"})

    def check(self) -> None:
        if self.metrics:
            refuse_unused(self, ["out"], "with --metrics (the result goes into that file)")
        if not self.metrics and not self.out and not (Path(self.model).expanduser() / "model").is_dir():
            refuse_unused(self, ["overwrite"], "when the result is only printed (no --metrics, --out or run folder)")


def metrics_target(cfg: LMEvalConfig) -> tuple[Path, str] | None:
    """(metrics file, the option that named it), or None when the result is only printed."""
    if cfg.metrics:
        return Path(cfg.metrics), "--metrics"
    if cfg.out:
        out = Path(cfg.out)
        if out.exists() and not out.is_dir():
            raise TextebmError(f"--out {out}: is a file; --out names a run folder (use --metrics FILE for a file)")
        return out / "metrics.json", "--out"
    run = Path(cfg.model).expanduser()
    return (run / "metrics.json", "--model") if (run / "model" / "config.json").is_file() else None


def check_metrics_target(path: Path, key: str, overwrite: bool, option: str) -> None:
    """Before any work: `path` must be a file (or absent) holding a JSON object, and without
    --overwrite must not hold `key` yet (other keys are kept: the result is merged in)."""

    check_file_target(path, option)  # a folder, or a parent that is a file
    if not path.is_file():
        return
    current = read_json(path)
    if not isinstance(current, dict):
        raise InputError(path, "expected a JSON object to merge metrics into")
    if key in current and not overwrite:
        raise TextebmError(f"{option}: {path} already holds {key}; pass --overwrite to replace it, or "
                           "choose another file with --metrics")


def merge_metrics(path: Path, key: str, value: dict) -> None:
    """Set `key` in the JSON object at `path` (created if absent), rewriting it atomically."""

    current = read_json(path) if path.is_file() else {}
    if not isinstance(current, dict):
        raise InputError(path, "expected a JSON object to merge metrics into")
    current[key] = value
    write_json(path, current)
    seal_marker(path.parent, [path.name])  # textebm's own change: a later --overwrite still replaces it


def eval_split(cfg: LMEvalConfig) -> dict:
    """Perplexity of an LM on a split (token level; also per whitespace word, the PTB convention)."""

    check_config(cfg)
    set_threads(cfg.threads)
    key = f"eval_{cfg.split}"
    target = metrics_target(cfg)
    if target is not None:
        check_metrics_target(target[0], key, cfg.overwrite, target[1])
    folder = scorable_folder(cfg.model)
    rows = load_split(cfg.data, cfg.split)
    texts, pair_at = item_texts(rows)
    model, tokenizer, meta, choice = _load(folder, cfg.precision)
    if cfg.chunk:
        room = model.config.max_position_embeddings - 2  # [bos] and [eos] take two positions
        if cfg.chunk > room:
            raise TextebmError(f"--chunk {cfg.chunk}: {folder} takes at most {room} tokens a piece")
        pieces = [p for p in chunks(doc_streams(rows, tokenizer), cfg.chunk) if p]
        results = score_ids(model, tokenizer, meta, pieces, cfg.batch_size, progress=True)
        # each piece's [eos] counted, as lm train's; no word figures (a piece is no sentence)
        scores = {"pieces": len(pieces), "chunk": cfg.chunk, **perplexity_metrics(results)}
    else:
        try:
            results = score_texts(model, tokenizer, meta, texts, cfg.batch_size, progress=True)
        except TextTooLong as e:
            data = Path(cfg.data)
            path = data / f"{cfg.split}.jsonl" if data.is_dir() else data
            raise _too_long(e, path, [line for line, _ in read_numbered_examples(path)], pair_at,
                            f" (--chunk {e.limit} scores the split as running text, in pieces)") from None
        scores = perplexity_metrics(results, texts)
    metrics = {"split": cfg.split, **scores, "model": str(folder.resolve()),
               "precision": choice.precision, "precision_choice": choice.as_dict()}
    if target is not None:
        merge_metrics(target[0], key, metrics)
        log.info("wrote %s into %s", key, target[0])
    print(json.dumps({key: metrics}, indent=2))
    return metrics
