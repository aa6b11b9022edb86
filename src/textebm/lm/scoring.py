"""`textebm lm score` and `textebm lm eval`: log-likelihoods and perplexity under a causal LM.

A text x is scored in the model's own layout (`textebm.lm.format.causal_example`):
log P(x) = sum over the predicted tokens of `x [eos]` (reversed x for an r2l model) of
log p(token | everything before it), [bos] excluded since it is given. `score_texts` is the
library function that other code (residual EBMs, `lm eval`) reuses; it sorts texts by length,
batches neighbours together (little padding) and returns results in the input order.

Perplexity (`lm eval`) is token-level: exp(total NLL / total predicted tokens incl. [eos]).
Because token counts depend on the tokenizer, the word-level perplexity of the PTB convention is
reported too: the same total NLL over whitespace words plus one [eos] per text.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from textebm.data.batching import right_pad
from textebm.errors import TextebmError
from textebm.lm.format import causal_example

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def model_folder(name_or_path: str) -> Path:
    """The HF folder of a model argument: a folder, a run directory holding `model/`, or a
    `models fetch` id."""
    from textebm.assets import resolve_model

    path = Path(name_or_path).expanduser()
    if (path / "model" / "config.json").is_file():
        return path / "model"
    return resolve_model(name_or_path)


def load_for_inference(name_or_path: str, precision: str = "fp32"):
    """(model, tokenizer, meta, folder) in eval mode. bf16 loads the weights as bfloat16 (every
    matmul runs in bf16); logits are upcast to fp32 before any softmax."""
    from textebm.lm.model import load_lm

    if precision not in PRECISIONS:
        raise TextebmError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    folder = model_folder(name_or_path)
    model, tokenizer, meta = load_lm(folder, dtype=PRECISIONS[precision])
    if precision == "bf16" and next(model.parameters()).device.type == "cpu" and cpu_has_bf16() is False:
        log.warning("this CPU has no bfloat16 matrix instructions (avx512_bf16 / amx_bf16): bf16 matmuls "
                    "are emulated and several times slower than fp32 here; use --precision fp32")
    return model, tokenizer, meta, folder.resolve()


def cpu_has_bf16() -> bool | None:
    """Whether the CPU multiplies bfloat16 natively (Linux /proc/cpuinfo flags); None if unknown."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), None)
    return None if flags is None else bool({"avx512_bf16", "amx_bf16"} & set(flags))


def check_scorable(meta) -> None:
    if meta.objective != "causal":
        raise TextebmError(f"lm score / eval need a causal LM; this one was trained with objective "
                           f"{meta.objective!r}, whose probabilities are conditional on a masked copy "
                           "of the text")


@dataclass
class ScoreResult:
    logprob: float  # log P(x), natural log, [eos] included
    token_ids: list[int]  # the predicted tokens in model order: x (or reversed x), then [eos]
    token_logprobs: list[float]  # log p of each of them

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def next_token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """log p(input_ids[:, t+1] | input_ids[:, :t+1]) for a right-padded batch: (B, T-1), fp32."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # (B, T, V)
    logits = logits[:, :-1].float()  # (B, T-1, V): position t predicts token t+1
    target = input_ids[:, 1:].unsqueeze(-1)  # (B, T-1, 1)
    return logits.gather(-1, target).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (B, T-1)


@torch.inference_mode()
def score_sequences(model, seqs: list[list[int]], pad: int, batch_size: int = 16, bucket: bool = True,
                    progress: bool = False) -> list[list[float]]:
    """log p of every token after the first of each sequence, in input order.

    With `bucket`, sequences are sorted by length (longest first) so each batch holds neighbours,
    which cuts padding; results are put back in input order.
    """
    from tqdm import tqdm

    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i])) if bucket else list(range(len(seqs)))
    out: list[list[float]] = [[] for _ in seqs]
    device = next(model.parameters()).device
    with tqdm(total=len(seqs), unit="text", desc="scoring", disable=not progress) as bar:
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            ids, mask = right_pad([seqs[i] for i in idx], pad)  # (B, T)
            lp = next_token_logprobs(model, ids.to(device), mask.to(device)).cpu()  # (B, T-1)
            for b, i in enumerate(idx):
                out[i] = lp[b, :len(seqs[i]) - 1].tolist()
            bar.update(len(idx))
    return out


def score_texts(model, tokenizer, meta, texts: list[str], batch_size: int = 16, bucket: bool = True,
                progress: bool = False) -> list[ScoreResult]:
    """log P(x) of each text under the model's layout, per token and in total (input order)."""
    from textebm.lm.model import special_ids

    check_scorable(meta)
    sp = special_ids(tokenizer, meta)
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    seqs = [causal_example(ids, sp, meta.direction)[0] for ids in encoded]  # [bos] x [eos]
    limit = getattr(model.config, "max_position_embeddings", None)
    too_long = [i for i, s in enumerate(seqs) if limit and len(s) > limit]
    if too_long:
        raise TextebmError(f"text {too_long[0]} has {len(seqs[too_long[0]])} tokens with [bos]/[eos]; "
                           f"the model takes at most {limit}")
    per_token = score_sequences(model, seqs, sp.pad, batch_size, bucket, progress)
    return [ScoreResult(logprob=math.fsum(lp), token_ids=seq[1:], token_logprobs=lp)
            for seq, lp in zip(seqs, per_token)]


# ---------------------------------------------------------------- lm score


@dataclass(kw_only=True)
class ScoreConfig:
    model: str = field(metadata={"help": "LM folder, a run directory holding model/, or a models-fetch id"})
    input: str = field(metadata={"help": "texts to score (.jsonl, .csv, .tsv or .txt)"})
    out: str = field(metadata={"help": "output JSONL, one line per input item"})
    batch_size: int = field(default=16, metadata={"help": "texts per forward pass"})
    precision: str = field(default="fp32", metadata={"help": "bf16 casts the weights to bfloat16",
                                                     "choices": list(PRECISIONS)})


def _check_batch_size(n: int) -> None:
    if n < 1:
        raise TextebmError(f"--batch-size must be at least 1, got {n}")


def item_texts(rows: list[dict]) -> tuple[list[str], list[int | None]]:
    """All texts to score (text, then text_pair where present) and, per row, the index of its pair."""
    texts = [r["text"] for r in rows]
    pair_at: list[int | None] = []
    for r in rows:
        if r.get("text_pair") is not None:
            pair_at.append(len(texts))
            texts.append(r["text_pair"])
        else:
            pair_at.append(None)
    return texts, pair_at


def score_file(cfg: ScoreConfig) -> Path:
    """Score every item of a file: log P(x) in nats, per token and in total ([eos] included)."""
    from textebm.data.readers import read_examples
    from textebm.io import atomic_write

    _check_batch_size(cfg.batch_size)
    torch.set_flush_denormal(True)
    model, tokenizer, meta, folder = load_for_inference(cfg.model, cfg.precision)
    check_scorable(meta)
    rows = read_examples(cfg.input)
    texts, pair_at = item_texts(rows)
    results = score_texts(model, tokenizer, meta, texts, cfg.batch_size, progress=True)
    with atomic_write(cfg.out) as f:
        for i, row in enumerate(rows):
            f.write(json.dumps(_score_row(row, i, results[i], results[pair_at[i]] if pair_at[i] is not None
                                          else None, tokenizer), ensure_ascii=False) + "\n")
    log.info("scored %d items with %s into %s", len(rows), folder, cfg.out)
    return Path(cfg.out)


def _score_row(row: dict, index: int, res: ScoreResult, pair: ScoreResult | None, tokenizer) -> dict:
    out: dict = {"id": row.get("id", str(index)), "text": row["text"]}
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
    return out


# ---------------------------------------------------------------- lm eval


@dataclass(kw_only=True)
class EvalConfig:
    model: str = field(metadata={"help": "LM folder, a run directory holding model/, or a models-fetch id"})
    data: str = field(metadata={"help": "dataset directory (SPLIT.jsonl) or a data file"})
    split: str = field(default="test", metadata={"help": "split of --data to evaluate on"})
    out: str = field(default="", metadata={"help": "run directory whose metrics.json gets eval_SPLIT "
                                                   "(default: --model when it is a run directory)"})
    metrics: str = field(default="", metadata={"help": "merge the result into this JSON file instead"})
    batch_size: int = field(default=16, metadata={"help": "texts per forward pass"})
    precision: str = field(default="fp32", metadata={"help": "bf16 casts the weights to bfloat16",
                                                     "choices": list(PRECISIONS)})


def perplexity_metrics(results: list[ScoreResult], texts: list[str]) -> dict:
    """Token- and word-level perplexity from per-text scores (words: whitespace split + [eos])."""
    nll = -math.fsum(r.logprob for r in results)
    tokens = sum(r.num_tokens for r in results)
    words = sum(len(t.split()) + 1 for t in texts)
    return {"texts": len(texts), "tokens": tokens, "words": words,
            "nll_per_token": nll / max(tokens, 1), "perplexity": math.exp(nll / max(tokens, 1)),
            "nll_per_word": nll / max(words, 1), "word_perplexity": math.exp(nll / max(words, 1))}


def metrics_target(cfg: EvalConfig) -> Path | None:
    if cfg.metrics:
        return Path(cfg.metrics)
    if cfg.out:
        return Path(cfg.out) / "metrics.json"
    run = Path(cfg.model).expanduser()
    return run / "metrics.json" if (run / "model" / "config.json").is_file() else None


def merge_metrics(path: Path, key: str, value: dict) -> None:
    """Set `key` in the JSON object at `path` (created if absent), rewriting it atomically."""
    from textebm.io import read_json, write_json

    current = read_json(path) if path.is_file() else {}
    if not isinstance(current, dict):
        raise TextebmError(f"{path}: expected a JSON object to merge metrics into")
    current[key] = value
    write_json(path, current)


def eval_split(cfg: EvalConfig) -> dict:
    """Perplexity of an LM on a split (token level; also per whitespace word, the PTB convention)."""
    from textebm.data.readers import load_split

    _check_batch_size(cfg.batch_size)
    torch.set_flush_denormal(True)
    model, tokenizer, meta, folder = load_for_inference(cfg.model, cfg.precision)
    check_scorable(meta)
    texts, _ = item_texts(load_split(cfg.data, cfg.split))
    results = score_texts(model, tokenizer, meta, texts, cfg.batch_size, progress=True)
    metrics = {"split": cfg.split, **perplexity_metrics(results, texts), "model": str(folder),
               "precision": cfg.precision}
    target = metrics_target(cfg)
    if target is not None:
        merge_metrics(target, f"eval_{cfg.split}", metrics)
        log.info("wrote eval_%s into %s", cfg.split, target)
    print(json.dumps({f"eval_{cfg.split}": metrics}, indent=2))
    return metrics
