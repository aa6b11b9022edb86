"""textebm from Python: load a folder textebm wrote and call it (docs/api.md).

    import textebm

    scorer = textebm.load("runs/electric")        # by the folder's kind: Scorer, Classifier, Tagger, Detector
    scorer.score(["The cat sat on the mat."])[0].score

Each class calls the library functions its command calls, so it gives the command's numbers on
the same inputs: `Scorer` those of `textebm score` (`textebm.scoring`), `Classifier` those of
`classify eval` (`textebm.classify.predict`), `Tagger` those of `tag predict`
(`textebm.tagging.folder`), `Detector` those of `detect score` (`textebm.detection.detect`).
Texts are batched and length-sorted inside; results come back in input order.

Every loader takes `device` (None: the GPU when there is one, else the CPU), `precision` (as the
commands' --precision: auto, fp32, bf16, fp16) and `threads` (torch's CPU threads, a setting of
the whole process; 0 leaves it). A bad argument raises `ArgumentError` naming it (and the index of
a bad item: `texts[3]`), a model folder of the wrong kind a `TextebmError` saying what it holds and
what was expected (the commands' messages, the argument named `path`), a text longer than the
model takes `TextTooLong`; all are `TextebmError`s. Nothing is printed: warnings go through
`logging`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from textebm.assets import MODELS
from textebm.calibration.calibrators import CALIBRATORS, ScalingBinning, TemperatureScaling, fit_logged
from textebm.classify.data import encode_examples
from textebm.classify.predict import predict as classifier_predict
from textebm.data.normalize import normalizer
from textebm.detection.detect import RULE_FILE, load_detector, scorer_length, text_scores
from textebm.energy import hidden_energy
from textebm.errors import ArgumentError, InputError, TextebmError, TextTooLong
from textebm.inference import inference_setup, set_threads
from textebm.models.load import (
    CAUSAL_LM,
    CLASSIFIER,
    CLOZE,
    ENERGY,
    TAGGER,
    inspect_folder,
    load_classifier,
    refuse_unfinished,
)
from textebm.precision import CHOICES as PRECISIONS
from textebm.precision import PrecisionChoice, inference_device
from textebm.scoring.pll import METHODS
from textebm.scoring.score_command import load_scoring_model, score_model_kind, warn_mismatch
from textebm.scoring.words import word_scores
from textebm.tagging.folder import load_tagging_model, tag_sentences
from textebm.tagging.metrics import is_bio, spans

__all__ = ["load", "Scorer", "ScoredText", "Classifier", "Tagger", "TaggedSentence", "Detector",
           "TextebmError", "InputError", "ArgumentError", "TextTooLong"]

OPTION = "path"  # how messages about the model folder name it
EXPECTED = ("a folder textebm wrote: a cloze model (`cloze train`) or a causal LM (`lm train`, `smollm2-135m`) "
            "to score with, a classifier (`classify train`), a tagger (`tag train`) or a detector "
            "(`detect train`, `detect fit`)")


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
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ArgumentError("threads", f"must be a whole number >= 0 (0: torch's own setting), got {threads!r}")
    if precision not in PRECISIONS:
        raise ArgumentError("precision", f"must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    dev = _device(device)
    if precision == "fp16" and dev.type != "cuda":
        raise ArgumentError("precision", f"fp16 needs a CUDA GPU (device {dev}); use auto, fp32 or bf16")
    set_threads(threads)
    return inference_setup(precision, dev)


def _positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(name, f"must be a whole number >= 1, got {value!r}")
    return value


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


def _folder(path: str | Path) -> Path:
    if not isinstance(path, (str, Path)):
        raise ArgumentError(OPTION, f"must be a folder path (str or pathlib.Path), got {type(path).__name__}")
    return Path(path).expanduser()


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
        self._model = load_scoring_model(kind, self.path, method, self.precision_.dtype, self.device)
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
        _positive(batch_size, "batch_size")
        _positive(token_budget, "token_budget")
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
        """TextTooLong naming the first text longer than the model takes, before any forward pass."""
        if self._model.limit is None:
            return
        encoded = self._model.tokenizer(texts, add_special_tokens=False)["input_ids"]
        for i, ids in enumerate(encoded):
            if len(ids) > self._model.limit:
                raise TextTooLong(i, len(ids), self._model.limit)


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
        rows = [{"text": t} for t in _texts(texts)]
        if text_pairs is not None:
            pairs = _texts(text_pairs, "text_pairs")
            if len(pairs) != len(rows):
                raise ArgumentError("text_pairs", f"{len(pairs)} pairs for {len(rows)} texts; give each text its pair")
            rows = [{**r, "text_pair": p} for r, p in zip(rows, pairs)]
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


def _label(label: str, index: dict[str, int], i: int) -> int:
    """A label's column in `classes_`, or ArgumentError naming `labels[i]`."""
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
        self.scorer_, self.rule_, self.info_ = load_detector(_folder(path), self.device, self.precision_.dtype,
                                                             option=OPTION)
        self.length = scorer_length(self.scorer_, self.info_)  # tokens a window
        self.threshold_ = self.rule_.threshold  # on sign * score: best class-balanced accuracy on validation

    def __repr__(self) -> str:
        return (f"Detector({self.info_.get('detector')!r}, threshold={self.threshold_:.4g}, length={self.length}, "
                f"device={str(self.device)!r}, precision={self.precision_.precision!r})")

    def scores(self, texts: Iterable[str], *, batch_size: int = 64) -> np.ndarray:
        """Each text's score (N,) float64: the energy E(x) of a trained detector, a zero-shot
        detector's statistic; the mean over the text's windows."""
        scores, _ = text_scores(self.scorer_, _texts(texts), self.length, _positive(batch_size, "batch_size"))
        return scores

    def predict_proba(self, texts: Iterable[str], *, batch_size: int = 64) -> np.ndarray:
        """P(generated | text) (N,) float64, calibrated on the validation windows."""
        return self.rule_.prob_generated(self.scores(texts, batch_size=batch_size))

    def predict(self, texts: Iterable[str], *, batch_size: int = 64) -> np.ndarray:
        """True where a text is called generated (N,) bool, at `threshold_`."""
        return self.rule_.oriented(self.scores(texts, batch_size=batch_size)) > self.threshold_


# ---------------------------------------------------------------- load


SYSTEMS: dict[str, type] = {CLOZE: Scorer, CAUSAL_LM: Scorer, CLASSIFIER: Classifier, TAGGER: Tagger,
                            ENERGY: Detector}


def load(path: str | Path, device: str | torch.device | None = None, precision: str = "auto",
         threads: int = 0) -> Scorer | Classifier | Tagger | Detector:
    """The object for a folder textebm wrote (a run or its `model/`), by what the folder holds: a
    `Scorer` (cloze model, causal LM, or a `models fetch` id such as `smollm2-135m`), a
    `Classifier`, a `Tagger` or a `Detector` (a folder with `detector.json`)."""
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
    return SYSTEMS[info.kind](folder, device=device, precision=precision, threads=threads)
