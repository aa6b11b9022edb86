"""The `residual` commands besides training: fit a zero-shot detector's rule, evaluate a detector
on test windows, score texts, and re-fit the threshold on a user's own human-written texts."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from textebm.data.readers import example_id, read_numbered_examples
from textebm.detection import analysis, detect
from textebm.detection.detect import ZEROSHOT
from textebm.detection.windows import read_window_files
from textebm.errors import TextebmError
from textebm.inference import set_threads
from textebm.io import read_json_object, write_json
from textebm.models.load import CAUSAL_LM, find_model, load_tokenizer
from textebm.options import check_config, id_field_option, refuse_unused, text_field_option, threads_field
from textebm.outputs import (
    check_output_dir,
    check_output_file,
    mark_file,
    output_dir,
    output_file,
)

__all__ = ["FitConfig", "DetectEvalConfig", "DetectScoreConfig", "ThresholdConfig", "AnalyzeConfig", "fit_zeroshot",
           "evaluate_detector", "read_detector_windows", "score_texts", "read_threshold_file", "refit_threshold",
           "analyze"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class FitConfig:
    zeroshot: str = field(metadata={"help": "zero-shot detector", "choices": list(ZEROSHOT)})
    model: str = field(metadata={"help": "causal LM folder (loglik: the TRAINING generator's LM; binoculars: "
                                         "the performer)"})
    val: list[str] = field(metadata={"help": "negatives files of validation windows"})
    vocab: str = field(metadata={"help": "tokenizer folder of the shared vocabulary of the windows"})
    out: str = field(metadata={"help": "detector folder to write (detector.json)"})
    observer: str = field(default="", metadata={"help": "binoculars: the observer LM (same tokenizer)"})
    batch_size: int = field(default=32, metadata={"help": "windows per batch", "min": 1})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier detector in --out"})


@dataclass(kw_only=True)
class DetectEvalConfig:
    model: str = field(metadata={"help": "detector folder (RUN of `detect train`, or of `detect fit`)"})
    test: list[str] = field(metadata={"help": "negatives files of test windows (another generator's)"})
    out: str = field(default="", metadata={"help": "write the metrics to this JSON file (default: print only)"})
    threshold: str = field(default="", metadata={"help": "a threshold file of `detect threshold` for this detector: "
                                                         "the length buckets' decisions, TPR and FPR at it (default: "
                                                         "the detector's 1 % FPR threshold on validation)"})
    buckets: list[str] = field(default_factory=list, metadata={
        "help": "length buckets LO-HI of text tokens (LO to HI - 1), test windows cut to them, the end holding "
                "the generated continuation kept (default: 8-16 16-32 32-64 ..., doubling below the window "
                "length); the whole windows besides"})
    batch_size: int = field(default=64, metadata={"help": "windows per batch", "min": 1})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an existing --out file"})


@dataclass(kw_only=True)
class DetectScoreConfig:
    model: str = field(metadata={"help": "detector folder (RUN of `detect train`, or of `detect fit`)"})
    input: str = field(metadata={"help": "texts: JSONL (`text`), CSV/TSV or plain text (one per line)"})
    out: str = field(metadata={"help": "output JSONL: energy / score, P(machine-generated), decision"})
    threshold: str = field(default="", metadata={"help": "a threshold file of `detect threshold` for this "
                                                         "detector to decide with, p_generated shifted to 1/2 at it "
                                                         "(default: the detector's own)"})
    force_threshold: bool = field(default=False, metadata={"help": "decide with --threshold even though it was "
                                                                   "fitted for another detector (or names none)"})
    strict: bool = field(default=False, metadata={
        "help": "refuse (exit 2, nothing written) texts shorter than the shortest windows the detector was trained "
                "on, instead of scoring them with a warning"})
    text_field: str | None = text_field_option()
    id_field: str | None = id_field_option()
    batch_size: int = field(default=64, metadata={"help": "windows per batch", "min": 1})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an existing --out file"})

    def check(self) -> None:
        if not self.threshold:
            refuse_unused(self, ["force_threshold"], "without --threshold")


@dataclass(kw_only=True)
class ThresholdConfig:
    model: str = field(metadata={"help": "detector folder"})
    human: str = field(metadata={"help": "your human-written texts (JSONL / CSV / text, one per line)"})
    out: str = field(metadata={"help": "threshold JSON to write (use with `detect score --threshold`)"})
    fpr: float = field(default=0.01, metadata={"help": "false-positive rate to aim for", "gt": 0, "lt": 1})
    held_out: float = field(default=0.5, metadata={"help": "fraction of the human texts kept to check the "
                                                           "rate reached", "gt": 0, "lt": 1})
    seed: int = field(default=0, metadata={"help": "seed of the fit / held-out split", "min": 0})
    text_field: str | None = text_field_option()
    batch_size: int = field(default=64, metadata={"help": "windows per batch", "min": 1})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an existing --out file"})


@dataclass(kw_only=True)
class AnalyzeConfig:
    model: str = field(metadata={"help": "detector folder (a `detect train` run for the perturbations)"})
    test: list[str] = field(metadata={"help": "negatives files of test windows (for the context analysis, "
                                              "generated with several --contexts)"})
    out: str = field(metadata={"help": "folder for analysis.json, context.png and (with --lm) perturbations.png"})
    lm: str = field(default="", metadata={"help": "the generator LM: its NLL beside the energy in the "
                                                  "perturbation analysis (figure 2); without it, none is run"})
    windows: int = field(default=100, metadata={"help": "perturbation analysis: real windows used", "min": 1})
    positions: int = field(default=12, metadata={"help": "perturbation analysis: word positions per window "
                                                         "(a seeded sample; 0: all)", "min": 0})
    bins: int = field(default=8, metadata={"help": "relative-position bins", "min": 1})
    batch_size: int = field(default=64, metadata={"help": "windows per batch", "min": 1})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier analysis in --out"})


def fit_zeroshot(cfg: FitConfig) -> dict:
    """Fit a zero-shot detector's rule (sign for loglik, threshold, temperature) on validation."""

    check_config(cfg)
    set_threads(cfg.threads)
    check_output_dir(cfg.out, "detect fit", cfg.overwrite)
    vocab = load_tokenizer(cfg.vocab, "--vocab")
    rows = read_window_files(cfg.val, "--val", vocab_size=len(vocab), vocab_of=f"--vocab {cfg.vocab}")
    model = str(find_model(cfg.model, CAUSAL_LM).path.resolve())
    observer = str(find_model(cfg.observer, CAUSAL_LM, "--observer").path.resolve()) if cfg.observer else ""
    scorer = detect.ZeroShotScorer(cfg.zeroshot, model, vocab, observer or None)
    real, fake = detect.window_scores(scorer.score_ids, rows, cfg.batch_size)
    rule = detect.fit_rule(real, fake.ravel(), fit_sign=cfg.zeroshot == "loglik")
    with output_dir(cfg.out, "detect fit", cfg.overwrite) as tmp:
        detect.write_rule(tmp / detect.RULE_FILE, {
            "detector": cfg.zeroshot, "model": model, "observer": observer, "vocab": str(Path(cfg.vocab).resolve()),
            "length": len(rows[0]["positive"]), "val": [str(Path(v).resolve()) for v in cfg.val]}, rule)
    log.info("%s: validation balanced accuracy %.3f, AUROC %.3f", cfg.zeroshot, rule.val["balanced_accuracy"],
             rule.val["auroc"])
    if rule.val["auroc"] < 0.5 and cfg.zeroshot != "loglik":  # loglik fits its sign; the others' is fixed
        log.warning("%s with --model %s scores the generated windows of --val LOWER than the real ones (AUROC %.3f "
                    "< 0.5): it tells them apart worse than chance, and its decisions are near 1/2 for every text; "
                    "another scoring model (or --observer) may suit these negatives", cfg.zeroshot, cfg.model,
                    rule.val["auroc"])
    return rule.as_dict()


def evaluate_detector(cfg: DetectEvalConfig) -> dict:
    """Test metrics of a detector at its stored rule (accuracy, AUROC, TPR at 1 % FPR, P@1), and per
    length bucket of the test windows cut short (`detect.by_length`) at the operating threshold: a
    threshold file's (--threshold), else the rule's 1 % FPR one."""

    check_config(cfg)
    set_threads(cfg.threads)
    if cfg.out:
        check_output_file(cfg.out, cfg.overwrite, kind="detect eval",
                          inputs=[*(("--test", t) for t in cfg.test), ("--threshold", cfg.threshold)])
    scorer, rule, info = detect.load_detector(cfg.model)
    length = detect.scorer_length(scorer, info)
    buckets = detect.length_buckets(cfg.buckets, length)
    if detect.reads_prefix(scorer):
        if cfg.buckets:
            raise TextebmError(f"--buckets with --model {cfg.model}: its energy reads a fixed prefix of its windows "
                               "(--pool continuation or lmstats), so windows cut shorter are not what it scores; "
                               "leave --buckets out")
        buckets = []
    op = {"threshold": rule.threshold_fpr, "fpr_target": rule.fpr, "from": "the detector's (validation)"}
    bucket_rule = rule
    if cfg.threshold:
        t, raw = read_threshold_file(cfg.threshold, info, cfg.model, forceable=False)
        bucket_rule = rule.with_threshold(t)
        op = {"threshold": t, "fpr_target": raw.get("target_fpr"), "from": str(Path(cfg.threshold).resolve())}
    rows = read_detector_windows(cfg.test, cfg.model, scorer, info)
    real, fake = detect.window_scores(scorer.score_ids, rows, cfg.batch_size)
    out = detect.evaluate(rule, real, fake.ravel(), fake)
    if not buckets:
        log.info("no length buckets: %s", "the energy reads a fixed prefix" if detect.reads_prefix(scorer)
                 else f"the windows have {length} tokens, fewer than the shortest default bucket's 8")
    out["by_length"] = {**op, "buckets": detect.by_length(scorer.score_ids, bucket_rule, rows, real, fake, buckets,
                                                          op["threshold"], cfg.batch_size)}
    if cfg.out:
        write_json(cfg.out, out)
        mark_file(cfg.out, "detect eval")
    return out


def read_detector_windows(paths: list[str], model: str, scorer, info: dict) -> list[dict]:
    """--test windows a detector can score: in its vocabulary and as long as the windows it was
    fitted on (an error naming the file and line otherwise)."""

    return read_window_files(paths, "--test", detect.scorer_length(scorer, info), len(scorer.vocab),
                             length_of=f"the detector --model {model} was fitted on windows that long",
                             vocab_of=f"the vocabulary of the detector --model {model}")


def _texts(path: str, text_field: str | None = None, id_field: str | None = None) -> tuple[list[str], list[str],
                                                                                          list[int]]:
    """(ids, texts, the line each starts on) of a user's file of texts (labels, if any, unread)."""
    numbered = read_numbered_examples(path, text_field, id_field=id_field, labels=False)
    rows = [r for _, r in numbered]
    return [example_id(r, i) for i, r in enumerate(rows)], [r["text"] for r in rows], [line for line, _ in numbered]


def score_texts(cfg: DetectScoreConfig) -> Path:
    """Energy (or zero-shot score), P(machine-generated) and the decision for each text."""

    check_config(cfg)
    set_threads(cfg.threads)
    check_output_file(cfg.out, cfg.overwrite, kind="detect score",
                      inputs=[("--input", cfg.input), ("--threshold", cfg.threshold)])
    scorer, rule, info = detect.load_detector(cfg.model)
    ids, texts, lines = _texts(cfg.input, cfg.text_field, cfg.id_field)
    source = "the detector's (best balanced accuracy on validation)"
    if cfg.threshold:
        t, _ = read_threshold_file(cfg.threshold, info, cfg.model, cfg.force_threshold)
        rule, source = rule.with_threshold(t), f"{cfg.threshold}"  # p_generated and the decision both from it
    length = detect.scorer_length(scorer, info)
    trained_min = detect.trained_min_length(info, length)
    if cfg.strict:
        short = detect.short_texts(scorer, texts, trained_min)
        if short:
            raise TextebmError(f"--input {cfg.input}: {len(short)} of {len(texts)} texts have fewer than "
                               f"{trained_min} tokens, the shortest windows --model {cfg.model} was trained on "
                               f"(the first: line {lines[short[0][0]]}); --strict refuses them (drop --strict to score "
                               "them with a warning, or train a detector with `detect train --min-length`)")
    scores, tokens = detect.text_scores(scorer, texts, length, cfg.batch_size)
    probs, decisions = rule.prob_generated(scores), rule.generated(scores)  # (N,), (N,)
    name = "energy" if info.get("detector") == "energy" else "score"
    with output_file(cfg.out, "detect score") as f:
        for i, line, s, p, g, n in zip(ids, lines, scores, probs, decisions, tokens):
            f.write(json.dumps({"id": i, "line": line, name: float(s), "p_generated": float(p), "generated": bool(g),
                                "tokens": int(n), "windows": -(-int(n) // length)}) + "\n")
    short = int((tokens < trained_min).sum())
    if short:
        log.warning("%d of %d texts have fewer than %d tokens, the shortest windows the detector was trained on: "
                    "their energies and probabilities may be on another scale (%s)", short, len(texts), trained_min,
                    "`detect train --min-length` trains on shorter ones" if cfg.threshold else
                    "re-fit the threshold on such texts with `detect threshold`, or train with `--min-length`")
    ece = rule.val.get("ece", math.nan)
    how = (f"P(generated) the detector's logistic shifted to 1/2 at it (temperature {rule.temperature:.4g} kept)"
           if cfg.threshold else f"P(generated) calibrated on validation windows (ECE {ece:.4f})")
    log.info("scored %d texts; decisions at threshold %.4g from %s; %s", len(texts), rule.threshold, source, how)
    return Path(cfg.out)


def read_threshold_file(path: str, info: dict, model: str, force: bool = False,
                        forceable: bool = True) -> tuple[float, dict]:
    """(the threshold, the file's contents) of a `detect threshold` file for the detector `info`
    (its detector.json): a file fitted for another detector, or naming none, is a TextebmError unless
    `force` (then a warning; `forceable`: the command has --force-threshold), as is one without a
    finite numeric `threshold`."""

    raw = read_json_object(path, "threshold file")
    t = raw.get("threshold")
    if raw.get("detector_sha256") != detect.detector_id(info):
        if not force:
            why = (f"was fitted for another detector ({raw.get('model', 'unnamed')}), not for --model {model}"
                   if raw.get("detector_sha256") else "does not name the detector it was fitted for (a file of "
                   "`detect threshold` does)")
            hint = ", or pass --force-threshold to decide with it anyway" if forceable else ""
            raise TextebmError(f"--threshold {path}: {why}; refit it with `detect threshold --model {model}`{hint}")
        log.warning("--threshold %s was fitted for another detector than %s; deciding with it "
                    "(--force-threshold)", path, model)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise TextebmError(f"--threshold {path}: no finite numeric `threshold`; write one with `detect threshold`")
    return float(t), raw


def refit_threshold(cfg: ThresholdConfig) -> dict:
    """Re-fit the decision threshold on your own human-written texts for a target false-positive
    rate, and report the rate it reaches on a held-out part of them."""

    check_config(cfg)
    set_threads(cfg.threads)
    check_output_file(cfg.out, cfg.overwrite, kind="detect threshold", inputs=[("--human", cfg.human)])
    _, texts, _ = _texts(cfg.human, cfg.text_field)
    detect.split_sizes(len(set(texts)), cfg.held_out)  # fails before any work; each distinct text counts once
    scorer, rule, info = detect.load_detector(cfg.model)
    out = detect.fit_threshold(scorer, rule, info, texts, cfg.fpr, cfg.seed, cfg.held_out, cfg.batch_size,
                               f"--model {cfg.model}")
    for w in out["warnings"]:
        log.warning("%s", w)
    out.update(model=str(Path(cfg.model).resolve()), detector_sha256=detect.detector_id(info),
               human=str(Path(cfg.human).resolve()))
    write_json(cfg.out, out)
    mark_file(cfg.out, "detect threshold")
    return out


def analyze(cfg: AnalyzeConfig) -> dict:
    """Accuracy per context length (figure 1) and, with --lm, the energy and generator NLL against
    the position of a single perturbation (figure 2)."""

    check_config(cfg)
    set_threads(cfg.threads)
    check_output_dir(cfg.out, "detect analyze", cfg.overwrite)
    scorer, rule, info = detect.load_detector(cfg.model)
    if cfg.lm and info.get("detector") != "energy":
        raise TextebmError(f"--lm with --model {cfg.model}: the perturbation analysis needs a trained energy "
                           "(a run of `detect train`), not a zero-shot detector")
    lm_path = find_model(cfg.lm, CAUSAL_LM, "--lm").path if cfg.lm else None  # before any window is scored
    rows = read_detector_windows(cfg.test, cfg.model, scorer, info)
    real, fake = detect.window_scores(scorer.score_ids, rows, cfg.batch_size)
    result = {"context": analysis.by_context(rule, rows, real, fake)}
    if cfg.lm:
        lm = detect.ZeroShotScorer("loglik", lm_path, scorer.vocab, option="--lm")
        result["perturbations"] = analysis.perturbations(
            [r["positive"] for r in rows[:cfg.windows]], scorer.vocab, lambda s: scorer.score_ids(s, cfg.batch_size),
            lambda s: -lm.score_ids(s, cfg.batch_size), cfg.bins, cfg.positions)
    with output_dir(cfg.out, "detect analyze", cfg.overwrite) as tmp:
        write_json(tmp / "analysis.json", result)
        analysis.plot_context(result["context"], tmp / "context.png")
        if "perturbations" in result:
            analysis.plot_perturbations(result["perturbations"], tmp / "perturbations.png")
    return result
