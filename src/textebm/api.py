"""textebm from Python: load a folder textebm wrote and call it (docs/api.md).

    import textebm

    scorer = textebm.load("runs/electric")        # by the folder's kind: Scorer, InfillLM, Classifier, Tagger, Detector
    scorer.score(["The cat sat on the mat."])[0].score

Each class calls the library functions its command calls, so it gives the command's numbers on
the same inputs: `Scorer` those of `textebm score` (`textebm.scoring`), `Classifier` those of
`classify eval` (`textebm.classify.predict`), `Tagger` those of `tag predict`
(`textebm.tagging.folder`), `Detector` those of `detect score` and `detect threshold`
(`textebm.detection.detect`), `JointModel` those of `residual generate` and `residual ppl`
(`textebm.residual`); `Scorer.rerank` chooses as `textebm rerank` (`textebm.scoring.rerank`),
`Scorer.sample` draws as `lm sample --mode free` and `InfillLM.sample` as `lm sample --mode
infill` (`textebm.lm.sample_command`, `textebm.lm.generate`). Texts are batched and
length-sorted inside; results come back in input order.

Every loader takes `device` (None: the GPU when there is one, else the CPU), `precision` (as the
commands' --precision: auto, fp32, bf16, fp16) and `threads` (torch's CPU threads, a setting of
the whole process; 0 leaves it). A bad argument raises `ArgumentError` naming it (and the index of
a bad item: `texts[3]`), a model folder of the wrong kind a `TextebmError` saying what it holds and
what was expected (the commands' messages, the argument named `path`), a text longer than the
model takes `TextTooLong`; all are `TextebmError`s. Nothing is printed: warnings go through
`logging`.
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from textebm.assets import MODELS
from textebm.calibration.calibrators import CALIBRATORS, ScalingBinning, TemperatureScaling, fit_logged
from textebm.classify.data import encode_examples, pairs_problem
from textebm.classify.predict import predict as classifier_predict
from textebm.data.normalize import normalizer
from textebm.data.streams import doc_streams
from textebm.detection.detect import (RULE_FILE, fit_threshold, load_detector, scorer_length, short_texts, split_sizes,
                                     text_scores, trained_min_length)
from textebm.detection.windows import make_windows
from textebm.energy import hidden_energy
from textebm.errors import ArgumentError, InputError, TextebmError, TextTooLong
from textebm.inference import inference_setup, set_threads
from textebm.options import usable_cores
from textebm.lm.generate import Sampling, banned_ids, generate_groups
from textebm.lm.sample_command import (
    JobSpec,
    encode_fields,
    group_texts,
    infill_mask_ratio,
    job_text_ids,
    make_job,
    sample_jobs,
    source_fields,
)
from textebm.models.lm import read_meta, special_ids
from textebm.models.load import (
    CAUSAL_LM,
    CLASSIFIER,
    CLOZE,
    ENERGY,
    TAGGER,
    find_model,
    inspect_folder,
    load_classifier,
    load_lm,
    refuse_unfinished,
)
from textebm.precision import CHOICES as PRECISIONS
from textebm.precision import PrecisionChoice, inference_device
from textebm.residual import bounds
from textebm.residual.generate import joint_sample
from textebm.residual.joint import Names, load_joint
from textebm.scoring.pll import METHODS, method_problem, text_ids
from textebm.scoring.rerank import rerank_index
from textebm.scoring.score_command import load_scoring_model, score_model_kind, scoring_objective, warn_mismatch
from textebm.scoring.words import word_scores
from textebm.seeds import derive_seed
from textebm.tagging.folder import load_tagging_model, tag_sentences
from textebm.tagging.metrics import is_bio, spans

__all__ = ["load", "Scorer", "ScoredText", "Reranked", "Sample", "InfillLM", "InfillSample", "Classifier", "Tagger",
           "TaggedSentence", "Detector", "JointModel", "JointGeneration", "JointPerplexity", "TextebmError",
           "InputError", "ArgumentError", "TextTooLong"]

log = logging.getLogger(__name__)

OPTION = "path"  # how messages about the model folder name it
EXPECTED = ("a folder textebm wrote: a cloze model (`cloze train`) or a causal LM (`lm train`, `smollm2-135m`) "
            "to score with, an infill LM (`lm train --objective infill`), a classifier (`classify train`), a "
            "tagger (`tag train`) or a detector (`detect train`, `detect fit`)")


# ---------------------------------------------------------------- arguments


def _device(device: str | torch.device | None) -> torch.device:
    """`device` checked to exist here; None: the GPU when there is one, else the CPU."""
    if device is None:
        return inference_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ArgumentError("device", f"{device!r} is not a device; use 'cpu', 'cuda' or 'cuda:N', or None "
                                      "(the GPU when there is one)") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ArgumentError("device", f"{device!r}: textebm runs on 'cpu' or 'cuda' ('cuda:N')")
    if not torch.cuda.is_available():
        raise ArgumentError("device", f"{device!r}: this machine has no CUDA GPU that torch can use; use 'cpu' "
                                      "or None")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ArgumentError("device", f"{device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s), "
                                      f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return dev


def _setup(device: str | torch.device | None, precision: str, threads: int) -> tuple[torch.device, PrecisionChoice]:
    """(device, precision resolved for it) as the commands' `inference_setup`, the arguments checked."""
    if not _integral(threads) or not 0 <= threads <= usable_cores():
        raise ArgumentError("threads", f"must be a whole number from 0 (torch's own setting) to {usable_cores()}, "
                                       f"the cores this process may use, got {threads!r}")
    threads = int(threads)
    if precision not in PRECISIONS:
        raise ArgumentError("precision", f"must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    dev = _device(device)
    if precision == "fp16" and dev.type != "cuda":
        raise ArgumentError("precision", f"fp16 needs a CUDA GPU (device {dev}); use auto, fp32 or bf16")
    set_threads(threads)
    return inference_setup(precision, dev)


def _integral(value) -> bool:
    """A whole number as a caller may give it: an int or a NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value) -> bool:
    """A finite real number as a caller may give it: int, float or a NumPy number, not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: int, name: str) -> int:
    """`value` as an int, checked to be a whole number >= 1."""
    return _whole(value, name, 1)


def _items(items: Iterable, name: str) -> list:
    """`items` as a non-empty list; a lone string is refused (a list of its characters is never meant)."""
    if isinstance(items, (str, bytes)):
        raise ArgumentError(name, f"must be a list, got one {type(items).__name__}; wrap a single item in a list")
    try:
        out = list(items)
    except TypeError:
        raise ArgumentError(name, f"must be a list, got {type(items).__name__}") from None
    if not out:
        raise ArgumentError(name, "an empty list; give at least one")
    return out


def _texts(texts: Iterable[str], name: str = "texts") -> list[str]:
    """`texts` checked: a non-empty list of strings, none of them blank."""
    out = _items(texts, name)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ArgumentError(name, f"not a string ({type(t).__name__})", i)
        if not t.strip():
            raise ArgumentError(name, "an empty text; there is nothing in it to score", i)
    return out


def _rows(texts: Iterable[str], text_pairs: Iterable[str] | None) -> list[dict]:
    """Data rows of `texts` ({"text": ...}), each with its `text_pairs` item as "text_pair" when given."""
    rows = [{"text": t} for t in _texts(texts)]
    if text_pairs is None:
        return rows
    pairs = _texts(text_pairs, "text_pairs")
    if len(pairs) != len(rows):
        raise ArgumentError("text_pairs", f"{len(pairs)} pairs for {len(rows)} texts; give each text its pair")
    return [{**r, "text_pair": p} for r, p in zip(rows, pairs)]


def _folder(path: str | Path, name: str = OPTION) -> Path:
    if not isinstance(path, (str, Path)):
        raise ArgumentError(name, f"must be a folder path (str or pathlib.Path), got {type(path).__name__}")
    return Path(path).expanduser()


def _whole(value: int, name: str, least: int = 0) -> int:
    """`value` as an int, checked to be a whole number >= `least`."""
    if not _integral(value) or value < least:
        raise ArgumentError(name, f"must be a whole number >= {least}, got {value!r}")
    return int(value)


def _number(value: float, name: str, low: float, high: float = math.inf, low_open: bool = False) -> float:
    """`value` as a float, checked to be a finite number in [low, high) ((low, high) with `low_open`)."""
    if not _real(value) or value < low or (low_open and value == low) or value >= high:
        where = (f"{'(' if low_open else '['}{low:g}, {high:g})" if math.isfinite(high)
                 else (f"> {low:g}" if low_open else f">= {low:g}"))
        raise ArgumentError(name, f"must be a finite number {'in ' if math.isfinite(high) else ''}{where}, "
                                  f"got {value!r}")
    return float(value)


# ---------------------------------------------------------------- scorers


@dataclass(frozen=True)
class ScoredText:
    """One text's scores: what a line of `textebm score --per-token` holds."""

    text: str  # the text scored (after `normalize`)
    score: float  # the sum of the token scores (nats): log P(x) of a causal LM, the PLL of a cloze model
    tokens: list[str]  # the scored tokens (a causal LM's last one is its [eos])
    token_scores: list[float]  # each token's log-score (nats)
    offsets: list[tuple[int, int]]  # each token's character span in `text` ([eos]: (len, len))

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def words(self) -> list[tuple[str, float, tuple[int, int]]]:
        """(word, summed score, character span) of each whitespace word (`--per-word`)."""
        return list(zip(*word_scores(self.text, self.offsets, self.token_scores)))


@dataclass(frozen=True)
class Reranked:
    """One n-best list reranked: what a row of `textebm rerank`'s chosen.jsonl holds."""

    index: int  # the chosen hypothesis's place in its list, from 0 (chosen.jsonl's rank - 1)
    text: str  # its text, as given
    asr_score: float  # its speech score f(x|s), as given
    text_score: float  # its text score: the scorer's total log-score of the text (nats)
    total: float  # asr_score + lam * text_score, the largest of the list


@dataclass(frozen=True)
class Sample:
    """One text sampled from a causal LM: what a row of `lm sample --mode free` holds."""

    text: str  # the sampled tokens decoded, in reading order, without [eos]
    logprob: float  # log q of the tokens drawn, q the top-k tempered distribution sampled from (gen_logprob)
    n_tokens: int  # tokens drawn, [eos] included where the model ended the text itself (gen_tokens)


class Scorer:
    """Per-token log-scores of texts by a cloze model (Electric, ELECTRA, masked-LM PLL, TwoTower)
    or a causal LM: `textebm score`. `method` "auto" scores by the model's own objective; a cloze
    model with a two-tower noise model also scores with "twotower"."""

    def __init__(self, path: str | Path, *, device: str | torch.device | None = None, precision: str = "auto",
                 threads: int = 0, method: str = "auto"):
        if method not in ("auto", *METHODS):
            raise ArgumentError("method", f"must be one of auto, {', '.join(METHODS)}, got {method!r}")
        self.device, self.precision_ = _setup(device, precision, threads)
        kind, self.path = score_model_kind(str(_folder(path)), OPTION)
        if method != "auto" and (why := method_problem(scoring_objective(kind, self.path), method)):
            raise ArgumentError("method", f"{method!r} for {self.path}: {why}")
        self._model = load_scoring_model(kind, self.path, method, self.precision_.dtype, self.device, OPTION)
        self.method = self._model.method

    def __repr__(self) -> str:
        return (f"Scorer({str(self.path)!r}, method={self.method!r}, device={str(self.device)!r}, "
                f"precision={self.precision_.precision!r})")

    def score(self, texts: Iterable[str], *, batch_size: int = 16, token_budget: int = 4096,
              normalize: str = "none") -> list[ScoredText]:
        """Each text's total and per-token scores, in input order. `normalize`: score each text in
        the form of a preset (none, ptb, asr: `--normalize`); `token_budget`: masked-LM tokens per
        forward pass (bounds memory)."""
        texts = _texts(texts)
        batch_size = _positive(batch_size, "batch_size")
        token_budget = _positive(token_budget, "token_budget")
        try:
            norm = normalizer(normalize)
        except ValueError as e:
            raise ArgumentError("normalize", str(e)) from None
        scored = _texts([norm(t) for t in texts], f"texts (in the form of normalize={normalize!r})")
        self._check_lengths(scored)
        tokenizer = self._model.tokenizer
        warn_mismatch(scored, tokenizer, self.path, "texts", normalize)
        results = self._model.scores(scored, batch_size, token_budget)
        return [ScoredText(t, r.total, tokenizer.convert_ids_to_tokens(r.token_ids), list(r.scores),
                           [tuple(o) for o in r.offsets]) for t, r in zip(scored, results)]

    def _check_lengths(self, texts: list[str]) -> None:
        """Before any forward pass, as `textebm score` checks a file: ArgumentError naming the first
        text with no token for the tokenizer (zero-width characters only: a cloze model would score
        it 0, the best a reranked hypothesis can get), TextTooLong the first longer than the model
        takes."""
        limit = self._model.limit
        for i, (text, ids) in enumerate(zip(texts, text_ids(self._model.tokenizer, texts, self._model.method))):
            if not ids:
                raise ArgumentError("texts", f"{text!r} has no token for the model's tokenizer; nothing to score", i)
            if limit is not None and len(ids) > limit:
                raise TextTooLong(i, len(ids), limit)

    def rerank(self, nbest: Iterable[Sequence[tuple[str, float]]], lam: float, *, batch_size: int = 16,
               token_budget: int = 4096, normalize: str = "none") -> list[Reranked]:
        """The hypothesis of each n-best list that `textebm rerank` chooses at weight `lam`: the
        argmax of asr_score + lam * text_score over the list, ties to the earlier hypothesis
        (`textebm.scoring.rerank.rerank_index`), the text score this scorer's total for the
        hypothesis's text (scored in the form `normalize` gives it, as `rerank --normalize` looks
        it up). `nbest`: one list a speech utterance of (text, asr_score) pairs, asr_score the
        recogniser's log score (higher is better). Each distinct text is scored once."""
        lam = _number(lam, "lam", 0.0)
        lists = [_hypotheses(hyps, i) for i, hyps in enumerate(_items(nbest, "nbest"))]
        texts = list(dict.fromkeys(t for hyps in lists for t, _ in hyps))
        totals = {t: s.score for t, s in zip(texts, self.score(texts, batch_size=batch_size,
                                                                token_budget=token_budget, normalize=normalize))}
        out = []
        for hyps in lists:
            asr = np.array([a for _, a in hyps], dtype=np.float64)  # (n,)
            text = np.array([totals[t] for t, _ in hyps], dtype=np.float64)  # (n,)
            i = rerank_index(asr, text, lam)
            out.append(Reranked(i, hyps[i][0], float(asr[i]), float(text[i]), float(asr[i] + lam * text[i])))
        return out

    def sample(self, n: int, *, max_new_tokens: int | None = None, top_k: int = 20, temperature: float = 1.0,
               seed: int = 0, batch_size: int = 32) -> list[Sample]:
        """`n` texts sampled from a causal LM, each from [bos] until [eos] or `max_new_tokens`
        (None: as many as the model's positions leave after [bos]) by textebm's one sampler (top-k
        at `temperature`; `top_k` 1: greedy): `lm sample --mode free --per-example n` on one
        example (sample j seeded by (seed, 0, j, 0), as the command seeds it), so the same seed
        gives the same texts whatever `batch_size`. An r2l LM's texts come back in reading order."""
        if self._model.lm is None:
            raise TextebmError(f"{OPTION} {self.path}: a cloze model scores texts but does not write them; sample "
                               "from a causal LM (`lm train`)")
        model, tokenizer, meta = self._model.lm
        positions = getattr(model.config, "max_position_embeddings", None)
        room = positions - 1 if positions else None  # [bos] takes one position
        if max_new_tokens is None:
            max_new_tokens = room or 256
        elif (max_new_tokens := _whole(max_new_tokens, "max_new_tokens", 1)) > (room or math.inf):
            raise ArgumentError("max_new_tokens", f"{max_new_tokens}: the model has {positions} positions, [bos] takes "
                                                  f"one; ask for at most {room}")
        temperature = _number(temperature, "temperature", 0.0, low_open=True)
        sp = special_ids(tokenizer, meta)
        spec = JobSpec(mode="free", seed=_whole(seed, "seed"), max_new_tokens=max_new_tokens)
        jobs = [make_job(spec, [], (0, j, 0), sp, meta, tokenizer) for j in range(_positive(n, "n"))]
        sampling = Sampling(_positive(top_k, "top_k"), float(temperature), sp.eos, sp.pad, tuple(banned_ids(sp)))
        out: dict[int, Sample] = {}
        for _, finished in generate_groups(model, jobs, _positive(batch_size, "batch_size"), sampling, lambda _: 1):
            for (_, j), parts in finished:
                job, gen = parts[0]
                text = tokenizer.decode(job_text_ids(job, gen, sp.eos), skip_special_tokens=False)
                out[j] = Sample(text, gen.logprob, len(gen.tokens))
        return [out[j] for j in range(n)]


def _hypotheses(hyps: Sequence[tuple[str, float]], index: int) -> list[tuple[str, float]]:
    """One n-best list checked: (text, asr_score) pairs, a non-blank text and a finite score each;
    ArgumentError naming `nbest[index]` otherwise."""
    if isinstance(hyps, (str, bytes)) or not isinstance(hyps, Iterable):
        raise ArgumentError("nbest", f"not a list of (text, asr_score) pairs ({type(hyps).__name__})", index)
    out = []
    for j, h in enumerate(hyps):
        ok = isinstance(h, Sequence) and not isinstance(h, (str, bytes)) and len(h) == 2
        text, score = h if ok else (None, None)
        if not (ok and isinstance(text, str) and text.strip()):
            raise ArgumentError("nbest", f"hypothesis {j} is not a (text, asr_score) pair with a non-blank text: "
                                         f"{h!r}", index)
        if not _real(score):
            raise ArgumentError("nbest", f"hypothesis {j}: the asr_score must be a finite number, got {score!r}",
                                index)
        out.append((text, float(score)))
    if not out:
        raise ArgumentError("nbest", "an empty n-best list; give each utterance at least one hypothesis", index)
    return out


# ---------------------------------------------------------------- infill LMs


@dataclass(frozen=True)
class InfillSample:
    """One text rewritten by an infill LM: what a row of `lm sample --mode infill` holds."""

    source: int  # the index of the text it was sampled from (the row's source_id)
    text: str  # the sentence the LM wrote after [sep], in reading order, without [eos]
    context: str  # what the LM was shown: the text with each run of masked tokens as one [mask]
    logprob: float  # log q of the tokens drawn (text and text_pair), q the top-k tempered distribution (gen_logprob)
    n_tokens: int  # tokens drawn (text and text_pair), [eos] included where the LM ended a text itself (gen_tokens)
    text_pair: str | None = None  # the text pair's sample, drawn independently; None without text_pairs
    context_pair: str | None = None  # what the LM was shown of the pair


class InfillLM:
    """An infill LM of `lm train --objective infill`, paper a's noise model (sec. 2.4: the
    negatives of `classify train`): `sample(texts)` masks each token of a text with probability
    `mask_ratio`, shows the LM `[bos] m(x) [sep]` and lets it write the whole sentence, as `lm
    sample --mode infill` does. Its probabilities are conditional on a masked copy of the text,
    so it gives no score of a text (`lm score` refuses it too); `InfillSample.logprob` is the
    proposal's log q of what it drew."""

    def __init__(self, path: str | Path, *, device: str | torch.device | None = None, precision: str = "auto",
                 threads: int = 0):
        self.device, self.precision_ = _setup(device, precision, threads)
        self.path = find_model(str(_folder(path)), CAUSAL_LM, OPTION).path.resolve()
        objective = read_meta(self.path).objective  # before the weights
        if objective != "infill":
            raise TextebmError(f"{OPTION} {self.path}: a causal LM trained with objective {objective!r}, which writes "
                               "texts from [bos] (`textebm.load` gives it as a Scorer); expected an infill LM (`lm "
                               "train --objective infill`)")
        self.model_, self.tokenizer_, self.meta_ = load_lm(self.path, dtype=self.precision_.dtype, device=self.device,
                                                           option=OPTION)
        self._sp = special_ids(self.tokenizer_, self.meta_)
        if self._sp.mask is None or self._sp.sep is None:
            raise TextebmError(f"{OPTION} {self.path}: the tokenizer has no {self.meta_.mask_token} / "
                               f"{self.meta_.sep_token} token; the folder is not the one `lm train` wrote")

    def __repr__(self) -> str:
        return (f"InfillLM({str(self.path)!r}, mask_ratio={infill_mask_ratio(self.meta_, None)}, "
                f"direction={self.meta_.direction!r}, device={str(self.device)!r}, "
                f"precision={self.precision_.precision!r})")

    def sample(self, texts: Iterable[str], per_text: int = 1, *, text_pairs: Iterable[str] | None = None,
               mask_ratio: float | None = None, top_k: int = 20, temperature: float = 1.0,
               max_new_tokens: int | None = None, seed: int = 0, batch_size: int = 32) -> list[InfillSample]:
        """`per_text` samples of each text, text 0's first: the rows of `lm sample --mode infill
        --per-example per_text` on a data file holding the texts (and `text_pairs`, each sampled
        as a second, independent sequence), in its order. Each masks every token with probability
        `mask_ratio` (None: the model's training ratio) and writes from the top-k at `temperature`
        until [eos] or `max_new_tokens` (None: 2 x the text's tokens + 8). Sample j of text i
        (mask and tokens) is seeded by (seed, i, j), as the command seeds it, so it depends
        neither on `batch_size` nor on `per_text`."""
        rows = _rows(texts, text_pairs)
        if mask_ratio is not None:
            if not _real(mask_ratio) or not 0 <= mask_ratio <= 1:
                raise ArgumentError("mask_ratio", f"must be a number in [0, 1] or None, got {mask_ratio!r}")
            mask_ratio = float(mask_ratio)
        if max_new_tokens is not None:
            max_new_tokens = _positive(max_new_tokens, "max_new_tokens")
        temperature = _number(temperature, "temperature", 0.0, low_open=True)
        sp, tokenizer = self._sp, self.tokenizer_
        spec = JobSpec(mode="infill", seed=_whole(seed, "seed"), mask_ratio=infill_mask_ratio(self.meta_, mask_ratio),
                       max_new_tokens=max_new_tokens)
        names = ("texts", "text_pairs")
        jobs = sample_jobs(spec, encode_fields(tokenizer, rows), _positive(per_text, "per_text"), sp, self.meta_,
                           tokenizer, getattr(self.model_.config, "max_position_embeddings", None),
                           lambda i, f, message: ArgumentError(names[f], message, i))
        sampling = Sampling(_positive(top_k, "top_k"), float(temperature), sp.eos, sp.pad, tuple(banned_ids(sp)))
        out: dict[tuple[int, int], InfillSample] = {}
        for _, finished in generate_groups(self.model_, jobs, _positive(batch_size, "batch_size"), sampling,
                                           lambda group: len(source_fields(rows[group[0]]))):
            for (i, j), parts in finished:
                written = group_texts(parts, tokenizer, sp.eos)  # text, then text_pair
                shown = [parts[f][0].context_text for f in sorted(parts)]
                out[i, j] = InfillSample(i, written[0], shown[0], sum(gen.logprob for _, gen in parts.values()),
                                         sum(len(gen.tokens) for _, gen in parts.values()), *written[1:], *shown[1:])
        return [out[i, j] for i in range(len(rows)) for j in range(per_text)]


# ---------------------------------------------------------------- classifiers


class Classifier:
    """A calibrated classifier of `classify train`: `predict`, `predict_proba`, `energy`, as
    `classify eval` computes them. Texts longer than the model's `max_len` are truncated, as in
    training; `classes_` are the label names in the order of `predict_proba`'s columns.
    `fit_calibrator` attaches a post-hoc calibrator (`calibrator_`, None until then), which
    `predict_proba` and `predict` then apply to the logits, as `classify eval`'s tscal / scalbin."""

    def __init__(self, path: str | Path, *, device: str | torch.device | None = None, precision: str = "auto",
                 threads: int = 0):
        self.device, self.precision_ = _setup(device, precision, threads)
        self.model_, self.tokenizer_ = load_classifier(_folder(path), dtype=self.precision_.dtype, device=self.device,
                                                       option=OPTION)
        self.path = inspect_folder(_folder(path)).path
        self.classes_: list[str] = list(self.model_.spec.labels)
        self.calibrator_: TemperatureScaling | ScalingBinning | None = None

    def __repr__(self) -> str:
        return (f"Classifier({str(self.path)!r}, classes={self.classes_!r}, energy={self.model_.spec.energy!r}, "
                f"device={str(self.device)!r}, precision={self.precision_.precision!r})")

    def _outputs(self, texts: Iterable[str], text_pairs: Iterable[str] | None, batch_size: int) -> dict:
        """`classifier_predict`'s logits, probabilities and energies (float64, input order)."""
        rows = _rows(texts, text_pairs)
        if why := pairs_problem(rows, self.model_.spec.pairs):
            raise ArgumentError("text_pairs", why)
        examples = encode_examples(self.tokenizer_, rows, self.classes_, self.model_.spec.max_len)
        return classifier_predict(self.model_, examples, self.tokenizer_.pad_token_id or 0,
                                  _positive(batch_size, "batch_size"))

    def fit_calibrator(self, texts: Iterable[str], labels: Iterable[str], method: str = "tscal", *,
                       text_pairs: Iterable[str] | None = None, batch_size: int = 64) -> Classifier:
        """Fit a post-hoc calibrator on labelled texts (held-out ones: a dev set) and keep it as
        `calibrator_`; returns self. `labels`: one of `classes_` a text. `method`: "tscal"
        (temperature scaling: `calibrator_.temperature_`) or "scalbin" (scaling-binning), fitted
        on the logits as `classify eval` fits them. A degenerate fit falls back as documented
        (docs/calibration.md) with a logged warning."""
        if method not in CALIBRATORS:
            raise ArgumentError("method", f"must be one of {', '.join(CALIBRATORS)}, got {method!r}")
        texts = _texts(texts)
        index = {c: k for k, c in enumerate(self.classes_)}
        y = np.array([_label(label, index, i) for i, label in enumerate(_items(labels, "labels"))])  # (N,)
        if len(y) != len(texts):
            raise ArgumentError("labels", f"{len(y)} labels for {len(texts)} texts; give each text its label")
        logits = self._outputs(texts, text_pairs, batch_size)["logits"]  # (N, |Y|)
        self.calibrator_ = fit_logged(method, logits, y, f"{method} on {len(y)} texts")
        return self

    def predict_proba(self, texts: Iterable[str], text_pairs: Iterable[str] | None = None, *,
                      batch_size: int = 64) -> np.ndarray:
        """P(label | text): (N, len(classes_)) float64; calibrated by `calibrator_` when one is fitted."""
        out = self._outputs(texts, text_pairs, batch_size)
        if self.calibrator_ is None:
            return out["probs"]
        return self.calibrator_.predict_proba(out["logits"])  # (N, |Y|)

    def predict(self, texts: Iterable[str], text_pairs: Iterable[str] | None = None, *,
                batch_size: int = 64) -> list[str]:
        """The most probable label of each text."""
        probs = self.predict_proba(texts, text_pairs, batch_size=batch_size)  # (N, |Y|)
        return [self.classes_[k] for k in probs.argmax(1)]

    def energy(self, texts: Iterable[str], text_pairs: Iterable[str] | None = None, *,
               batch_size: int = 64) -> np.ndarray:
        """E(x) (N,) float64: the trained energy head's, or, for a model trained without one
        (baseline, PosCal), the energy hidden in the classifier, -logsumexp of its logits (eq. 4),
        as `classify eval` plots them."""
        out = self._outputs(texts, text_pairs, batch_size)
        if np.isnan(out["energy"]).all():
            return hidden_energy(torch.from_numpy(out["logits"])).numpy()  # (N,)
        return out["energy"]


def _label(label: str | int, index: dict[str, int], i: int) -> int:
    """A label's column in `classes_`, or ArgumentError naming `labels[i]`. A whole number is its
    string, as the data readers read a JSON label 1 ("1")."""
    if isinstance(label, numbers.Integral) and not isinstance(label, bool):
        label = str(int(label))
    if not isinstance(label, str) or label not in index:
        raise ArgumentError("labels", f"{label!r} is not one of the classifier's classes_ ({', '.join(index)})", i)
    return index[label]


# ---------------------------------------------------------------- taggers


@dataclass(frozen=True)
class TaggedSentence:
    tokens: list[str]
    tags: list[str]  # one Viterbi tag a token
    spans: list[tuple[str, int, int]] | None  # BIO tag sets: (type, start, end) over tokens, end exclusive; else None


class Tagger:
    """A BiLSTM-CRF tagger of `tag train`: `tag(sentences)`, as `tag predict` tags them (fp32).
    A sentence is a list of tokens, or a string cut at whitespace."""

    def __init__(self, path: str | Path, *, device: str | torch.device | None = None, precision: str = "auto",
                 threads: int = 0):
        if precision not in ("auto", "fp32"):
            raise ArgumentError("precision", f"a tagger runs in fp32 (as `tag eval` and `tag predict`); pass auto "
                                             f"or fp32, got {precision!r}")
        self.device, self.precision_ = _setup(device, "fp32", threads)
        self.model_, self.vocab_, self.path = load_tagging_model(_folder(path), self.device, option=OPTION)
        self.tags_: list[str] = list(self.model_.spec.tags)
        self.bio = is_bio(self.tags_)

    def __repr__(self) -> str:
        return f"Tagger({str(self.path)!r}, tags={len(self.tags_)}, bio={self.bio}, device={str(self.device)!r})"

    def tag(self, sentences: Iterable[Sequence[str] | str], *, batch_size: int = 64) -> list[TaggedSentence]:
        """Each sentence's tokens and tags (and spans, for a BIO tag set), in input order."""
        rows = [{"tokens": _tokens(s, i)} for i, s in enumerate(_items(sentences, "sentences"))]
        tags = tag_sentences(self.model_, self.vocab_, rows, _positive(batch_size, "batch_size"))
        return [TaggedSentence(r["tokens"], t, sorted(spans(t), key=lambda s: s[1]) if self.bio else None)
                for r, t in zip(rows, tags)]


def _tokens(sentence: Sequence[str] | str, index: int) -> list[str]:
    """A sentence's tokens: a list of non-empty strings, or a string cut at whitespace."""
    tokens = sentence.split() if isinstance(sentence, str) else sentence
    if not isinstance(tokens, Sequence) or not all(isinstance(t, str) and t for t in tokens):
        raise ArgumentError("sentences", "not a list of non-empty token strings, nor a string", index)
    if not tokens:
        raise ArgumentError("sentences", "no tokens", index)
    return list(tokens)


# ---------------------------------------------------------------- detectors


class Detector:
    """A detector of generated text (`detect train` or `detect fit`): `predict_proba` is
    P(generated), `predict` its decision at the detector's threshold, as `detect score` gives
    them. Each text is cut into windows of the detector's length; its score is their mean."""

    def __init__(self, path: str | Path, *, device: str | torch.device | None = None, precision: str = "auto",
                 threads: int = 0):
        self.device, self.precision_ = _setup(device, precision, threads)
        self.path = _folder(path)
        self.scorer_, self.rule_, self.info_ = load_detector(self.path, self.device, self.precision_.dtype,
                                                             option=OPTION)
        self.length = scorer_length(self.scorer_, self.info_)  # tokens a window
        self.min_length_ = trained_min_length(self.info_, self.length)  # the shortest windows it was trained on
        self.threshold_ = self.rule_.threshold  # on sign * score: best class-balanced accuracy on validation
        self.threshold_report_: dict | None = None  # set by refit_threshold on the detector it returns

    def __repr__(self) -> str:
        return (f"Detector({self.info_.get('detector')!r}, threshold={self.threshold_:.4g}, length={self.length}, "
                f"device={str(self.device)!r}, precision={self.precision_.precision!r})")

    def scores(self, texts: Iterable[str], *, batch_size: int = 64, strict: bool = False) -> np.ndarray:
        """Each text's score (N,) float64: the energy E(x) of a trained detector, a zero-shot
        detector's statistic; the mean over the text's windows. A text shorter than the shortest
        windows the detector was trained on (`min_length_`) is scored with a logged warning, as
        `detect score` scores it: its score may be on another scale; `strict` refuses it
        (ArgumentError naming it), as `detect score --strict`."""
        texts = _texts(texts)
        if not isinstance(strict, bool):
            raise ArgumentError("strict", f"must be True or False, got {strict!r}")
        batch_size = _positive(batch_size, "batch_size")
        if strict:
            if short := short_texts(self.scorer_, texts, self.min_length_):
                first, n = short[0]
                raise ArgumentError("texts", f"{n} tokens, fewer than the {self.min_length_} of the "
                                             f"shortest windows the detector was trained on ({len(short)} of "
                                             f"{len(texts)} texts are); strict=False scores them with a warning",
                                    first)
        scores, tokens = text_scores(self.scorer_, texts, self.length, batch_size)  # (N,), (N,)
        short = int((tokens < self.min_length_).sum())
        if short:
            log.warning("%d of %d texts have fewer than %d tokens, the shortest windows the detector was trained on: "
                        "their scores and probabilities may be on another scale (refit_threshold on such texts, or "
                        "train with `detect train --min-length`)", short, len(texts), self.min_length_)
        return scores

    def predict_proba(self, texts: Iterable[str], *, batch_size: int = 64, strict: bool = False) -> np.ndarray:
        """P(generated | text) (N,) float64, calibrated on the validation windows (`strict`: as
        `scores`)."""
        return self.rule_.prob_generated(self.scores(texts, batch_size=batch_size, strict=strict))

    def predict(self, texts: Iterable[str], *, batch_size: int = 64, strict: bool = False) -> np.ndarray:
        """True where a text is called generated (N,) bool, at `threshold_` (`strict`: as
        `scores`)."""
        return self.rule_.oriented(self.scores(texts, batch_size=batch_size, strict=strict)) > self.threshold_

    def refit_threshold(self, human_texts: Iterable[str], fpr: float = 0.01, *, held_out: float = 0.5,
                        seed: int = 0, batch_size: int = 64) -> Detector:
        """A new Detector that decides at the threshold `detect threshold` fits on the same
        human-written texts (`textebm.detection.detect.fit_threshold`: the threshold for a
        false-positive rate `fpr` on part of them, the rate it reaches on the `held_out` rest,
        split by `seed`); its `predict_proba` is the logistic shifted to 1/2 there, the temperature
        kept, as `detect score --threshold` gives it. This detector is left as it was.
        `threshold_report_` of the new one: what the command writes to its threshold file (the
        paths aside), its `warnings` also logged."""
        texts = _texts(human_texts, "human_texts")
        fpr = _number(fpr, "fpr", 0.0, 1.0, low_open=True)
        held_out = _number(held_out, "held_out", 0.0, 1.0, low_open=True)
        try:
            split_sizes(len(set(texts)), held_out, "held_out")  # each distinct text counts once
        except TextebmError as e:
            raise ArgumentError("human_texts", str(e)) from None
        report = fit_threshold(self.scorer_, self.rule_, self.info_, texts, fpr, _whole(seed, "seed"), held_out,
                               _positive(batch_size, "batch_size"), f"{OPTION} {self.path}")
        for w in report["warnings"]:
            log.warning("%s", w)
        new = copy.copy(self)  # shares the loaded model; the rule is a new one
        new.rule_ = self.rule_.with_threshold(report["threshold"])
        new.threshold_ = new.rule_.threshold
        new.threshold_report_ = report
        return new


# ---------------------------------------------------------------- the joint model


NAMES = Names(base="base", energy="energy", prefix_len="prefix_len", length="length", precision="precision")  # messages name arguments
PPL_CORPUS, PPL_SPLIT = "texts", "test"  # `perplexity`'s window keys: texts/test/{i}/{start}


@dataclass(frozen=True)
class JointGeneration:
    """One prefix continued by the joint model: what a row of `residual generate` holds."""

    prefix: str  # the prefix's last prefix_len tokens (the ones continued), decoded
    joint: str  # the joint model's continuation: the candidate resampled in proportion to exp(-E)
    base: str  # candidate 0, a plain top-k sample of the base LM, for comparison
    ess: float  # the effective sample size of the resampling weights, in [1, n]
    energy_joint: float  # E(prefix + joint)
    energy_base: float  # E(prefix + base)


@dataclass(frozen=True)
class JointPerplexity:
    """The joint model's token perplexity on the continuations of test windows, bounded: what
    `residual ppl` writes to metrics.json for one energy."""

    windows: int
    tokens: int  # continuation tokens scored (windows x length)
    samples: int  # base-LM samples a window behind log Z
    base_ppl: float  # the base LM's perplexity on the same tokens
    joint_ppl_lower: float  # from T_n: below the true perplexity for large n
    joint_ppl_upper: float  # from U_n: above it
    gap_by_samples: list[dict]  # lower, upper and their gap at 2, 4, 8, ... samples
    vs_base: dict  # joint minus base perplexity, with upper and lower: each a paired bootstrap interval


class JointModel:
    """The joint model of Deng et al. (2020), P_LM(x) exp(-E(x)) / Z, of a residual energy
    (`energy`: a run of `detect train` trained on the base LM's negatives) over its base LM
    (`base`: a causal LM of `lm train` in the energy's vocabulary): `generate` as `residual
    generate` continues prefixes, `perplexity` as `residual ppl` bounds the perplexity. A window is
    `prefix_len` + `length` tokens (0: the energy's own). `precision` defaults to fp32, as the
    commands'."""

    def __init__(self, energy: str | Path, base: str | Path, *, prefix_len: int = 0, length: int = 0,
                 device: str | torch.device | None = None, precision: str = "fp32", threads: int = 0):
        self.device, self.precision_ = _setup(device, precision, threads)
        e_arg, b_arg = str(_folder(energy, "energy")), str(_folder(base, "base"))
        self.energy_path = find_model(e_arg, ENERGY, "energy", ids=False).path.resolve()
        self.base_path = find_model(b_arg, CAUSAL_LM, "base").path.resolve()
        self.base_, energies, self.prefix_len, self.length = load_joint(
            (b_arg, self.base_path), [(e_arg, self.energy_path)], _whole(prefix_len, "prefix_len"),
            _whole(length, "length"), self.precision_.dtype, self.device, NAMES, precision=self.precision_.precision)
        self.energy_ = energies[0]
        self.vocab = self.energy_.vocab

    def __repr__(self) -> str:
        return (f"JointModel({str(self.energy_path)!r}, base={str(self.base_path)!r}, prefix_len={self.prefix_len}, "
                f"length={self.length}, device={str(self.device)!r}, precision={self.precision_.precision!r})")

    def generate(self, prefixes: Iterable[str], n: int = 100, top_k: int = 10, *, seed: int = 0,
                 batch_size: int = 64) -> list[JointGeneration]:
        """Algorithm 1 for each prefix (its last `prefix_len` tokens): `n` candidates of `length`
        tokens from the base LM's top-k (`top_k` 0: untruncated), one resampled in proportion to
        exp(-E), as `residual generate --prefixes FILE` continues the texts of FILE (prefix i
        seeded by (seed, "i"), so its continuation depends neither on the batch nor on the others)."""
        texts = _texts(prefixes, "prefixes")
        n = _positive(n, "n")
        top_k = _whole(top_k, "top_k")
        seed = _whole(seed, "seed")
        batch_size = _positive(batch_size, "batch_size")
        ids = self.vocab(texts, add_special_tokens=False)["input_ids"]
        for i, t in enumerate(ids):
            if len(t) < self.prefix_len:
                raise ArgumentError("prefixes", f"{len(t)} tokens, where the joint model continues the last "
                                                f"prefix_len = {self.prefix_len}", i)
        out = []
        for i, t in enumerate(ids):
            prefix = t[len(t) - self.prefix_len:]
            try:
                js = joint_sample(self.base_, self.energy_, prefix, self.length, n, top_k, derive_seed(seed, str(i)),
                                  batch_size)
            except ValueError as e:  # resampling refuses NaN or infinite energies
                raise TextebmError(f"energy {self.energy_path}: {e} (prefixes[{i}])") from None
            out.append(JointGeneration(self.vocab.decode(prefix), self.vocab.decode(js.tokens),
                                       self.vocab.decode(js.candidates[0]), float(js.ess),
                                       float(js.energies[js.index]), float(js.energies[0])))
        return out

    def perplexity(self, texts: Iterable[str], samples: int = 1000, *, seed: int = 0, bootstrap: int = 1000,
                   chunk: int = 256, batch_size: int = 64) -> JointPerplexity:
        """Bounds of the joint model's perplexity on the continuation tokens of the texts' windows
        (eq. 4: log Z of each window's prefix estimated from `samples` untruncated base-LM samples,
        T_n and U_n), the base LM's on the same tokens, and the difference with its paired
        bootstrap intervals over the windows (`bootstrap` resamples; 0: none), as `residual ppl`
        computes them. Each text is a document cut into non-overlapping windows of prefix_len +
        length tokens; the windows' keys, which seed their samples, are `texts/test/{i}/{start}`,
        so the numbers are those of `residual ppl --data DIR --split test --windows 0` for a
        dataset folder DIR named `texts` whose test.jsonl holds the texts, one a line, without ids."""
        texts = _texts(texts)
        samples = _whole(samples, "samples", 2)
        seed = _whole(seed, "seed")
        bootstrap = _whole(bootstrap, "bootstrap")
        chunk = _positive(chunk, "chunk")
        batch_size = _positive(batch_size, "batch_size")
        size = self.prefix_len + self.length
        streams = doc_streams([{"text": t} for t in texts], self.vocab)  # (doc: "i", ids) in input order
        for i, (_, ids) in enumerate(streams):
            if len(ids) < size:
                raise ArgumentError("texts", f"{len(ids)} tokens, fewer than one window of prefix_len + length = "
                                             f"{size}", i)
        wins = make_windows(streams, PPL_CORPUS, PPL_SPLIT, size, size, [self.prefix_len], seed)
        banned = set(self.base_.banned)
        for w in wins:
            bad = [t for t in w.ids[self.prefix_len:] if t in banned]
            if bad:
                raise ArgumentError("texts", f"a window continues with {self.vocab.convert_ids_to_tokens(bad[0])!r}, "
                                             "a token the base LM never writes ([eos] or a layout symbol)", int(w.doc))
        try:
            rows = [bounds.window_bounds(self.base_, self.energy_, w.key, w.ids, self.prefix_len, samples, seed, chunk,
                                         batch_size) for w in wins]
        except FloatingPointError as e:
            raise TextebmError(f"energy {self.energy_path}: {e}") from None
        ppl = bounds.perplexities(rows)
        nll = bounds.window_nll(rows, ppl["samples"])
        diff, = bounds.perplexity_differences([("joint", nll)], [("base LM", nll["base"])], bootstrap,
                                              derive_seed(seed, "bootstrap"))
        return JointPerplexity(**ppl, gap_by_samples=bounds.gap_by_size(rows), vs_base=diff)


# ---------------------------------------------------------------- load


SYSTEMS: dict[str, type] = {CLOZE: Scorer, CAUSAL_LM: Scorer, CLASSIFIER: Classifier, TAGGER: Tagger,
                            ENERGY: Detector}


def load(path: str | Path, device: str | torch.device | None = None, precision: str = "auto",
         threads: int = 0) -> Scorer | InfillLM | Classifier | Tagger | Detector:
    """The object for a folder textebm wrote (a run or its `model/`), by what the folder holds: a
    `Scorer` (cloze model, causal LM, or a `models fetch` id such as `smollm2-135m`), an
    `InfillLM` (an LM of `lm train --objective infill`), a `Classifier`, a `Tagger` or a
    `Detector` (a folder with `detector.json`)."""
    folder = _folder(path)
    if not folder.is_dir():
        if str(path) in MODELS:
            return Scorer(str(path), device=device, precision=precision, threads=threads)
        raise TextebmError(f"{OPTION} {path}: no such folder; expected {EXPECTED}")
    refuse_unfinished(folder, OPTION)
    if (folder / RULE_FILE).is_file() or (folder.name == "model" and (folder.parent / RULE_FILE).is_file()):
        return Detector(folder, device=device, precision=precision, threads=threads)
    info = inspect_folder(folder)
    if info.kind not in SYSTEMS:
        raise TextebmError(f"{OPTION} {info.path}: {info.describe()}; expected {EXPECTED}")
    if info.kind == CAUSAL_LM and read_meta(info.path).objective == "infill":
        return InfillLM(folder, device=device, precision=precision, threads=threads)
    return SYSTEMS[info.kind](folder, device=device, precision=precision, threads=threads)
