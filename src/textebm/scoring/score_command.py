"""`textebm score`: per-text (and per-token, per-word) log-scores by Electric, ELECTRA, a masked
LM's PLL, a two-tower model or a causal LM (the library: `textebm.scoring.pll`).

Output: one JSON line per input item, in input order:

    {"id", "text", "method", "score": sum of the token log-scores (nats), "n_tokens",
     "tokens", "token_scores", "offsets"          with --per-token (or --html)
     "words", "word_scores", "word_offsets"}      with --per-word (`textebm.scoring.words`)

With --normalize P (`textebm.data.normalize`), each text is scored in that form: "text" is the
scored text (the one offsets and words refer to), "input_text" the text as read, "normalize" P.
Before scoring, `textebm.scoring.textcheck` warns when the texts look unlike the model's training
text.

Texts are scored in chunks of --chunk items, each length-sorted into batches; every finished
chunk is appended to OUT.partial (`textebm.resumable`), so a killed run continues where it stopped
when run again with the same model (by content), input (by content) and options, and any other run
is refused; OUT appears, complete, only at the end. --html writes the token-colouring page as well.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from textebm.data.normalize import PRESETS as NORMALIZE
from textebm.data.normalize import normalizer
from textebm.data.readers import example_id, read_numbered_examples
from textebm.errors import InputError, TextebmError
from textebm.fingerprint import folder_sha256, json_sha256
from textebm.inference import inference_setup, set_threads
from textebm.io import read_json_object
from textebm.lm.eval_command import scorable_folder
from textebm.models import cloze
from textebm.models.load import (
    CAUSAL_LM,
    CLOZE,
    find_model,
    inspect_folder,
    refuse_unfinished,
    load_cloze,
    load_lm,
)
from textebm.options import check_config, id_field_option, text_field_option, threads_field
from textebm.outputs import check_output_files, output_file
from textebm.precision import CHOICES as PRECISIONS
from textebm.progress import progress_bar
from textebm.resumable import PartialFile
from textebm.scoring.html import render_html
from textebm.scoring.pll import (
    METHODS,
    TextScores,
    causal_scores,
    check_method,
    cloze_scores,
    max_text_tokens,
    text_ids,
)
from textebm.scoring.textcheck import check_texts
from textebm.scoring.words import word_scores

__all__ = ["ScoreTextsConfig", "score_model_kind", "ScoringModel", "load_scoring_model", "KIND", "score_command",
           "warn_mismatch", "write_html"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ScoreTextsConfig:
    model: str = field(metadata={"help": "a cloze model (RUN of `cloze train`, or RUN/model) or a causal LM "
                                         "(folder, RUN of `lm train`, or a models-fetch id)"})
    input: str = field(metadata={"help": "texts to score (.jsonl with text, .csv, .tsv or .txt: one per line)"})
    out: str = field(metadata={"help": "output JSONL, one line per input item (OUT.partial while running)"})
    method: str = field(default="auto", metadata={
        "help": "scoring method (auto: the model's own; a cloze model with a two-tower noise model also "
                "scores with twotower)", "choices": ["auto", *METHODS]})
    per_token: bool = field(default=False, metadata={"help": "write each token's score and character span"})
    per_word: bool = field(default=False, metadata={"help": "write each whitespace word's summed score"})
    html: str = field(default="", metadata={"help": "also write a page colouring every token by its score"})
    batch_size: int = field(default=16, metadata={"help": "texts per forward pass", "min": 1})
    token_budget: int = field(default=4096, metadata={
        "help": "mlm: tokens per forward pass (masked copies x length); bounds memory", "min": 1})
    chunk: int = field(default=256, metadata={"help": "texts per written chunk (the unit of resume)", "min": 1})
    precision: str = field(default="auto", metadata={
        "help": "weights and matmuls in this precision; auto: bf16 where the hardware multiplies it natively, "
                "else fp32 (scores always from fp32 values)", "choices": list(PRECISIONS)})
    overwrite: bool = field(default=False, metadata={"help": "replace an existing --out (and --html) file"})
    normalize: str = field(default="none", metadata={
        "help": "score each text in this form (textebm.data.normalize): none = as written; ptb = lower case, "
                "clitics split (\"did n't\"); asr = lower case, no punctuation. The rows' text is the scored "
                "text, input_text the text as read", "choices": list(NORMALIZE)})
    text_field: str | None = text_field_option()
    id_field: str | None = id_field_option()
    threads: int = threads_field()
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})


def score_model_kind(model_arg: str, option: str = "--model") -> tuple[str, Path]:
    """("cloze" | "causal", folder) of a model to score with, checked before any weights are read;
    messages name the argument as `option`."""

    p = Path(model_arg).expanduser()
    if p.is_dir():
        refuse_unfinished(p, option)
        info = inspect_folder(p)
        if info.kind == CLOZE:
            return "cloze", find_model(p, CLOZE, option).path
        if info.kind != CAUSAL_LM:
            raise TextebmError(f"{option} {info.path}: {info.describe()}; expected a cloze model (`textebm cloze "
                               "train`) or a causal LM (`textebm lm train`, `smollm2-135m`)")

    return "causal", scorable_folder(model_arg, option)


@dataclass(frozen=True)
class ScoringModel:
    """A model loaded to score texts as `textebm score` does (also the Python API's `Scorer`)."""

    method: str  # electric | electra | twotower | mlm | causal
    tokenizer: Any
    limit: int | None  # the most tokens of one text the model takes (None: no limit)
    scores: Callable[[list[str], int, int], list[TextScores]]  # (texts, batch_size, token_budget)
    lm: tuple | None = None  # a causal LM's (model, tokenizer, meta), to sample from; None for a cloze model


def scoring_objective(kind: str, folder: Path) -> str:
    """What the model of `score_model_kind`'s (kind, folder) was trained with, from its description
    (no weights read): a cloze objective, or "causal"."""
    if kind != "cloze":
        return "causal"
    spec_file = folder / cloze.SPEC_FILE
    return cloze.spec_from_dict(read_json_object(spec_file, "cloze model description"), spec_file).objective


def load_scoring_model(kind: str, folder: Path, method: str, dtype, device, option: str = "--model") -> ScoringModel:
    """The model of `score_model_kind`'s (kind, folder), placed, with `method` ("auto": the
    model's own) checked against it (TextebmError naming --method) before the weights are read;
    messages about the folder name it as `option`."""

    if method != "auto":
        check_method(scoring_objective(kind, folder), method)
    if kind == "cloze":
        model, tokenizer = load_cloze(folder, dtype=dtype, device=device, option=option)
        method = model.spec.objective if method == "auto" else method
        return ScoringModel(method, tokenizer, max_text_tokens(model), lambda texts, batch_size, budget: cloze_scores(
            model, tokenizer, texts, method, batch_size, budget))
    model, tokenizer, meta = load_lm(folder, dtype=dtype, device=device, option=option)
    positions = getattr(model.config, "max_position_embeddings", None)
    limit = positions - 2 if positions else None  # [bos] and [eos] take two
    return ScoringModel("causal", tokenizer, limit, lambda texts, batch_size, _budget: causal_scores(
        model, tokenizer, meta, texts, batch_size), (model, tokenizer, meta))


KIND = "score"


def score_command(cfg: ScoreTextsConfig) -> Path:
    """Score every text of a file; write JSONL (and, with --html, the page)."""

    check_config(cfg)
    set_threads(cfg.threads)
    out = Path(cfg.out)
    check_output_files([("--out", out), ("--html", cfg.html)], cfg.overwrite, kind=KIND,
                       inputs=[("--input", cfg.input)])
    partial = PartialFile(out, KIND, ensure_ascii=False)
    partial.check()
    kind, folder = score_model_kind(cfg.model)
    numbered = read_numbered_examples(cfg.input, cfg.text_field, id_field=cfg.id_field, labels=False)
    rows = [row for _, row in numbered]
    ids = [example_id(r, i) for i, r in enumerate(rows)]
    norm = normalizer(cfg.normalize)
    rows = [{**r, "input_text": r["text"], "text": norm(r["text"])} if cfg.normalize != "none" else r for r in rows]
    empty = next((i for i, r in enumerate(rows) if not r["text"].strip()), None)
    if empty is not None:
        raise TextebmError(f"--input {cfg.input}: text {ids[empty]!r} ({rows[empty]['input_text']!r}) is empty in "
                           f"the form of --normalize {cfg.normalize}; nothing is left to score")
    device, choice = inference_setup(cfg.precision)
    scoring = load_scoring_model(kind, folder, cfg.method, choice.dtype, device)
    method, tokenizer, limit = scoring.method, scoring.tokenizer, scoring.limit
    fn = lambda texts: scoring.scores(texts, cfg.batch_size, cfg.token_budget)  # noqa: E731
    _check_texts(cfg.input, [line for line, _ in numbered], [r["text"] for r in rows], tokenizer, limit, method,
                 cfg.normalize)  # before anything is written
    warn_mismatch([r["text"] for r in rows], tokenizer, folder, cfg.input, cfg.normalize)
    per_token = cfg.per_token or bool(cfg.html)
    # What every line depends on: the model and the texts by content, and the options that change a
    # line; a chunk (the unit of resume) is scored in the same batches whatever was interrupted.
    identity = {"command": KIND, "model_sha256": folder_sha256(folder), "input_sha256": json_sha256([ids, [
        r["text"] for r in rows]]), "method": method, "per_token": per_token, "per_word": cfg.per_word,
        "chunk": cfg.chunk, "precision": choice.precision, "normalize": cfg.normalize}
    done_rows = partial.start(identity)
    if any(row.get("id") != ids[i] for i, row in enumerate(done_rows[:len(ids)])) or len(done_rows) > len(ids):
        raise TextebmError(f"{partial.path}: its lines are not this input's, in order; delete {partial.path} to "
                           "start over")
    done = len(done_rows) - len(done_rows) % cfg.chunk  # a torn chunk is scored again, in the same batches
    partial.keep(done)
    if done:
        log.info("resuming %s: %d of %d texts already scored", partial.path, done, len(rows))
    with partial:
        _score_chunks(cfg, rows, ids, done, partial, fn, method, tokenizer, per_token, word_scores, choice.precision)
    if cfg.html:  # before OUT appears: a failure here leaves the partial, complete and resumable
        write_html(partial.rows(), Path(cfg.html), method, folder)
    partial.finish()
    log.info("wrote %s (%d texts, method %s, precision %s, normalize %s)", out, len(rows), method,
             choice.precision, cfg.normalize)
    return out


def _check_texts(path: str, lines: list[int], texts: list[str], tokenizer, limit: int | None, method: str,
                 normalize: str) -> None:
    """InputError naming the file and line of the first text, in the form it is scored in, with no
    token (zero-width characters only) or more tokens than the model takes."""

    form = f" in the form of --normalize {normalize}" if normalize != "none" else ""
    for line, text, ids in zip(lines, texts, text_ids(tokenizer, texts, method)):
        if not ids:
            raise InputError(path, f"this text{form} ({text!r}) has no token for the model's tokenizer; nothing is "
                                   "left to score", line)
        if limit is not None and len(ids) > limit:
            raise InputError(path, f"this text has {len(ids)} tokens{form}; the model takes at most {limit}", line)


def _score_chunks(cfg, rows, ids, done, partial, fn, method, tokenizer, per_token, word_scores,
                  precision: str) -> None:
    with progress_bar(len(rows), f"scoring ({method})", "text", cfg.progress, initial=done) as bar:
        for s in range(done, len(rows), cfg.chunk):
            part = rows[s:s + cfg.chunk]
            scored = fn([r["text"] for r in part])
            lines = []  # the chunk's records, appended together
            for i, (row, sc) in enumerate(zip(part, scored)):
                rec = {"id": ids[s + i], "text": row["text"], "method": method, "score": sc.total,
                       "n_tokens": len(sc.scores), "precision": precision}
                if cfg.normalize != "none":
                    rec.update(input_text=row["input_text"], normalize=cfg.normalize)
                if per_token:
                    rec.update(tokens=tokenizer.convert_ids_to_tokens(sc.token_ids), token_scores=sc.scores,
                               offsets=[list(o) for o in sc.offsets])
                if cfg.per_word:
                    words, wsc, wof = word_scores(row["text"], sc.offsets, sc.scores)
                    rec.update(words=words, word_scores=wsc, word_offsets=[list(o) for o in wof])
                lines.append(rec)
            partial.append(lines)
            bar.update(len(part))


def warn_mismatch(texts: list[str], tokenizer, folder: Path, source: str, normalize: str) -> None:
    """A log warning, with its figures, for each sign that the texts are unlike the model's
    training text (`textebm.scoring.textcheck`)."""

    for msg in check_texts(texts, tokenizer, folder):
        log.warning("%s (--normalize %s): %s", source, normalize, msg)


def write_html(records: list[dict], page: Path, method: str, folder: Path) -> None:
    value = "−E(x)_t (unnormalised log p̂)" if method == "electric" else f"log p ({method})"
    with output_file(page, KIND) as f:
        f.write(render_html(records, title=f"textebm score: {method}, {folder}", value_name=value))
