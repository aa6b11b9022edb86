"""Detectors of generated text: scores of windows and texts, and the fitted decision rule.

A score is "higher = more likely machine-generated" (`textebm.detection.metrics`):

- a trained energy (`detect train`): the score is E(x) itself;
- a zero-shot detector from causal LM folders (`textebm.detection.zeroshot`): `loglik` (the
  log-likelihood baseline; its sign is fitted on validation), `fastdetectgpt`, `binoculars`
  (observer and performer must share a tokenizer).

Windows arrive as token ids of the shared vocabulary; a scorer whose model reads another
vocabulary (MiniLM's WordPiece, SmolLM2's BPE) decodes them and re-tokenises the text.

`fit_rule` turns validation scores into the stored decision rule: the sign, the threshold of best
class-balanced accuracy, the threshold of a 1 % false-positive rate, and a temperature T so that
P(generated | s) = σ(sign·(s − threshold) / T) is calibrated at even odds (temperature scaling of
`textebm.calibration` on the real windows and as many generated ones, its ECE reported). Never
fitted on test windows.

One decision rule per detector: `Rule.threshold` (best class-balanced accuracy on validation, where
the calibrated P(generated) is 1/2 at even odds) is the threshold that `detect score`, the
`Detector` of `textebm.api` and the judge of `residual generate` decide with, and the one a
threshold file of `detect threshold` reports as `previous_threshold`. `threshold_fpr` is an
operating point of the paper's metric (the TPR at 1 % FPR of `evaluate`), never a decision. A
threshold re-fitted on a user's texts replaces `threshold` (`Rule.with_threshold`): the logistic is
shifted so that P = 1/2 at the new threshold, its temperature kept, so `p_generated > 0.5` exactly
when a text is called generated.

`by_length` evaluates a detector on test windows cut to the lengths of a user's texts (buckets of
text tokens, `length_buckets`): the end of the window that holds the generated continuation is
kept (the last n tokens of an l2r window, the first n of an r2l one), the real window and its
negatives cut alike.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Sequence

import numpy as np
import torch

from textebm.calibration.calibrators import TemperatureScaling, fit_logged
from textebm.calibration.metrics import ece_toplabel
from textebm.data.batching import right_pad
from textebm.detection import metrics, zeroshot
from textebm.detection.windows import read_window_files, window_seqs
from textebm.errors import InputError, TextebmError
from textebm.inference import batched
from textebm.io import read_json_object, write_json
from textebm.lm.scoring import next_token_targets
from textebm.models.lm import special_ids
from textebm.models.load import inspect_folder, load_energy, load_lm, load_tokenizer, refuse_unfinished
from textebm.models.seq_energy import encode_windows
from textebm.tokenizer import same_vocab

__all__ = ["ZEROSHOT", "RULE_FILE", "EnergyScorer", "energies", "ZeroShotScorer", "window_scores", "text_lengths",
           "text_windows", "text_scores", "Rule", "fit_rule", "evaluate", "split_sizes", "detector_id",
           "refit_threshold", "threshold_cost", "validation_cost", "fit_threshold", "length_buckets", "cut",
           "cut_lengths", "bucket_metrics", "by_length", "reads_prefix", "write_rule", "read_rule", "load_detector",
           "trained_min_length", "scorer_length"]

ZEROSHOT = ("loglik", "fastdetectgpt", "binoculars")
RULE_FILE = "detector.json"


# ---------------------------------------------------------------- scorers


class EnergyScorer:
    """E(x) of windows (shared-vocabulary ids) or texts, from a `detect train` model folder."""

    def __init__(self, path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.model, self.spec, self.tokenizer, self.vocab = load_energy(path, dtype=dtype, device=device)
        self.device = device

    def score_ids(self, seqs: Sequence[Sequence[int]], batch_size: int = 64) -> np.ndarray:
        return energies(self.model, self.spec, self.tokenizer, self.vocab, seqs, batch_size)


@torch.no_grad()
def energies(model, spec, tokenizer, vocab, seqs: Sequence[Sequence[int]], batch_size: int = 64) -> np.ndarray:
    """E(x) (N,) float64 of windows given as shared-vocabulary ids, in length-sorted batches, in the
    model's own precision even inside a training loop's autocast (metrics are computed in fp32)."""

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()

    def fn(batch):
        b = {k: v.to(device) for k, v in encode_windows(batch, spec, tokenizer, vocab).items()}
        with torch.autocast(device.type, enabled=False):
            return model(b["input_ids"], b["attention_mask"]).double().cpu().tolist()

    out = np.asarray(batched(list(seqs), [len(s) for s in seqs], batch_size, fn), dtype=np.float64)
    model.train(was_training)
    return out


class ZeroShotScorer:
    """A zero-shot detector's score of windows from causal LMs (see the module doc)."""

    def __init__(self, method: str, model_path, vocab, observer_path=None, device="cpu",
                 dtype: torch.dtype = torch.float32, option: str = "--model", observer_option: str = "--observer"):
        if method not in ZEROSHOT:
            raise TextebmError(f"unknown zero-shot detector {method!r}; choose one of {', '.join(ZEROSHOT)}")
        if (method == "binoculars") != bool(observer_path):
            raise TextebmError("binoculars needs --observer (a second LM with the same tokenizer); "
                               "loglik and fastdetectgpt take none")
        self.method, self.vocab, self.device = method, vocab, device
        self.model, self.tokenizer, self.meta = load_lm(model_path, dtype=dtype, device=device, option=option)
        self.sp = special_ids(self.tokenizer, self.meta)
        self.observer = None
        if observer_path:
            self.observer, otok, ometa = load_lm(observer_path, dtype=dtype, device=device, option=observer_option)
            if not same_vocab(otok, self.tokenizer) or ometa.direction != self.meta.direction:
                raise TextebmError(f"{observer_option} {observer_path}: binoculars needs an observer with the "
                                   "performer's tokenizer and direction")
        self.native = same_vocab(self.tokenizer, vocab)

    def _ids(self, seqs: Sequence[Sequence[int]]) -> list[list[int]]:
        if self.native:
            ids = [list(s) for s in seqs]
        else:
            ids = self.tokenizer(self.vocab.batch_decode([list(s) for s in seqs]), add_special_tokens=False)["input_ids"]
        return [[self.sp.bos, *(s[::-1] if self.meta.direction == "r2l" else s)] for s in ids]

    @torch.no_grad()
    def score_ids(self, seqs: Sequence[Sequence[int]], batch_size: int = 32) -> np.ndarray:
        def fn(batch):
            ids, mask = right_pad(batch, self.sp.pad)  # (B, T)
            ids, mask = ids.to(self.device), mask.to(self.device)
            logits, targets = next_token_targets(self.model(input_ids=ids, attention_mask=mask).logits, ids, mask)
            tmask, targets = targets != -100, targets.clamp(min=0)  # (B, T-1): -100 marks padding
            if self.method == "loglik":
                s = zeroshot.loglik(logits, targets, tmask)
            elif self.method == "fastdetectgpt":
                s = zeroshot.fast_detectgpt(logits, targets, tmask)
            else:
                obs, _ = next_token_targets(self.observer(input_ids=ids, attention_mask=mask).logits, ids, mask)
                s = zeroshot.binoculars(logits, obs, targets, tmask)
            return s.cpu().tolist()

        items = self._ids(seqs)
        return np.asarray(batched(items, [len(s) for s in items], batch_size, fn), dtype=np.float64)


def window_scores(score_ids, rows: list[dict], batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores of the real windows (N,), of their negatives (N, k)) of negatives-file rows, by
    `score_ids(seqs, batch_size)`."""

    k = len(rows[0]["negatives"])
    s = np.asarray(score_ids(window_seqs(rows), batch_size)).reshape(len(rows), 1 + k)
    return s[:, 0], s[:, 1:]


def text_lengths(scorer, texts: Sequence[str]) -> list[int]:
    """Each text's number of tokens in the detector's shared vocabulary."""
    return [len(s) for s in scorer.vocab(list(texts), add_special_tokens=False)["input_ids"]] if texts else []


def short_texts(scorer, texts: Sequence[str], min_length: int) -> list[tuple[int, int]]:
    """(index, tokens) of the texts with fewer tokens than `min_length` (`trained_min_length`):
    what `detect score --strict` and the API's `strict` refuse."""
    return [(i, n) for i, n in enumerate(text_lengths(scorer, texts)) if n < min_length]


def text_windows(ids: Sequence[int], length: int) -> list[list[int]]:
    """The windows a text of token `ids` is scored by: itself when it has at most `length` tokens;
    else consecutive windows of `length` tokens from its start, the last one ending at its end
    (overlapping the one before it), so that every window is as long as the detector's."""
    if len(ids) <= length:
        return [list(ids)]
    starts = list(range(0, len(ids) - length + 1, length))
    if starts[-1] != len(ids) - length:
        starts.append(len(ids) - length)
    return [list(ids[s:s + length]) for s in starts]


def text_scores(scorer, texts: Sequence[str], length: int, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(the score of each text (N,), its number of shared-vocabulary tokens (N,)): the mean score of
    its windows (`text_windows`: full windows of `length` tokens, the last one ending at the text's
    end; a text no longer than a window is one window), all scored by `scorer` in one batched pass.
    An empty text is an error."""
    ids = scorer.vocab(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    wins, owner = [], []
    for i, s in enumerate(ids):
        if not s:
            raise TextebmError(f"text {i + 1} is empty")
        pieces = text_windows(s, length)
        wins += pieces
        owner += [i] * len(pieces)
    scores = np.asarray(scorer.score_ids(wins, batch_size), dtype=np.float64) if wins else np.zeros(0)
    total = np.bincount(owner, weights=scores, minlength=len(ids))
    count = np.bincount(owner, minlength=len(ids))
    return total / np.maximum(count, 1), np.array([len(s) for s in ids], dtype=int)


# ---------------------------------------------------------------- the decision rule


@dataclass
class Rule:
    """How scores become decisions and probabilities (stored in detector.json)."""

    sign: int = 1  # +1: the score already means "generated"; -1: it is flipped (e.g. loglik)
    threshold: float = 0.0  # THE decision threshold, on sign * score: best class-balanced accuracy on
    #                         validation (or a re-fitted one, `with_threshold`)
    temperature: float = 1.0
    threshold_fpr: float = 0.0  # the 1 % false-positive threshold on validation (sign * score): the
    #                             operating point of `evaluate`'s TPR at 1 % FPR, not a decision
    fpr: float = 0.01
    val: dict = field(default_factory=dict)  # validation metrics of the fit

    def oriented(self, scores) -> np.ndarray:
        return self.sign * np.asarray(scores, dtype=np.float64)

    def generated(self, scores) -> np.ndarray:
        """The decision (N,) bool: sign·s > threshold."""
        return self.oriented(scores) > self.threshold

    def prob_generated(self, scores) -> np.ndarray:
        """σ((sign·s − threshold) / T), in float64; strictly above 1/2 exactly where `generated` is
        true (where σ rounds to 1/2 at a score a few ulps from the threshold, the neighbouring float
        on the decision's side is returned)."""
        z = (self.oriented(scores) - self.threshold) / self.temperature  # (N,)
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700)))  # (N,)
        return np.where((z > 0) & (p <= 0.5), np.nextafter(0.5, 1.0), p)  # (N,); σ(z <= 0) <= 1/2 already

    def with_threshold(self, threshold: float) -> "Rule":
        """The rule deciding at `threshold` (on sign * score): P(generated) is its logistic shifted so
        that P = 1/2 there, the temperature kept."""
        return replace(self, threshold=float(threshold))

    def as_dict(self) -> dict:
        return asdict(self)


def _two_class(z: np.ndarray) -> np.ndarray:
    """Logits (N, 2) whose softmax gives σ(z) to class 1 ("generated")."""
    return np.stack([-z / 2, z / 2], axis=1)


def fit_rule(real_val, fake_val, fit_sign: bool = False, fpr: float = 0.01) -> Rule:
    """The decision rule from validation scores of real and generated windows (module doc)."""

    real, fake = np.asarray(real_val, dtype=np.float64), np.asarray(fake_val, dtype=np.float64)
    sign = metrics.fit_sign(real, fake) if fit_sign else 1
    r, f = sign * real, sign * fake
    thr = metrics.best_threshold(r, f)
    # The temperature is fitted (and ECE measured) on as many generated windows as real ones, so
    # that P(generated) means a prior of 1/2, not the k/(k+1) of k negatives per window: with the
    # negatives flattened window by window, every k-th is each window's first.
    keep = np.unique(np.linspace(0, f.size - 1, min(r.size, f.size)).round().astype(int))
    z = np.concatenate([r, f[keep]]) - thr
    labels = np.concatenate([np.zeros(r.size, int), np.ones(keep.size, int)])
    ts = fit_logged(TemperatureScaling(t_min=1e-3, t_max=1e4), _two_class(z), labels,
                    "the detector's temperature on validation")
    rule = Rule(sign=sign, threshold=thr, temperature=float(ts.temperature_), fpr=fpr,
                threshold_fpr=metrics.threshold_at_fpr(r, fpr))
    both = np.concatenate([real, fake[keep]])
    probs = rule.prob_generated(both)
    raw = Rule(sign=sign, threshold=thr).prob_generated(both)  # T = 1
    rule.val = {"balanced_accuracy": metrics.balanced_accuracy(r, f, thr), "auroc": metrics.auroc(r, f),
                "ece": ece_toplabel(np.stack([1 - probs, probs], 1), labels),
                "ece_before_scaling": ece_toplabel(np.stack([1 - raw, raw], 1), labels),
                "n_real": int(r.size), "n_generated": int(f.size), "n_generated_calibration": int(keep.size)}
    return rule


def evaluate(rule: Rule, real, fake, fake_by_window: np.ndarray | None = None) -> dict:
    """Test metrics at the stored rule: class-balanced accuracy at its threshold, AUROC, the
    true- and false-positive rates at its 1 % threshold, and P@1 when each real window's
    negatives are given as rows of `fake_by_window` (N, k)."""

    r, f = rule.oriented(real), rule.oriented(fake)
    out = {"accuracy": metrics.balanced_accuracy(r, f, rule.threshold), "auroc": metrics.auroc(r, f),
           f"tpr_at_{rule.fpr:g}_fpr": float((f > rule.threshold_fpr).mean()),
           "fpr_reached": float((r > rule.threshold_fpr).mean()), "n_real": int(r.size), "n_generated": int(f.size)}
    if fake_by_window is not None:
        fw = rule.oriented(fake_by_window)
        out["p_at_1"] = float((r < fw.min(1)).mean())
    return out


def split_sizes(n: int, held_out: float, option: str = "--held-out") -> tuple[int, int]:
    """(texts to fit a threshold on, texts held out to check it) of `n` human texts, a fraction
    `held_out` held out; a TextebmError when either part would be empty (`option`: how it names
    `held_out`)."""
    if n < 4:
        raise TextebmError(f"need at least 4 human texts to fit and check a threshold, got {n} distinct ones")
    n_hold = max(1, int(round(held_out * n)))
    if n_hold >= n:
        raise TextebmError(f"{option} {held_out:g} of {n} human texts holds out all {n}, leaving none to fit "
                           f"the threshold on; lower {option} or add texts")
    return n - n_hold, n_hold


def detector_id(info: dict) -> str:
    """The identity of a detector by content: the SHA-256 of its detector.json (the rule fitted on
    its validation windows, and what it scores with)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()


def refit_threshold(human_scores, rule: Rule, fpr: float, seed: int = 0, held_out: float = 0.5) -> dict:
    """A threshold for `fpr` fitted on part of a user's human-written texts, and the false-positive
    rate it reaches on the held-out rest (seeded split). `previous_threshold` is the rule's decision
    threshold (the one `detect score` applies without a threshold file); `smallest_reachable_fpr`
    is 1 / n_fit, the smallest rate the fitted texts can show (below it the threshold is their
    highest score), `smallest_held_out_fpr` 1 / n_held_out, the resolution of the held-out check.
    `warnings` says when `fpr` is below 1 / n_fit."""

    s = rule.oriented(human_scores)  # (N,)
    _, n_hold = split_sizes(s.size, held_out)
    perm = np.random.default_rng(seed).permutation(s.size)  # (N,)
    hold, fit = s[perm[:n_hold]], s[perm[n_hold:]]  # (n_hold,), (N - n_hold,)
    thr = metrics.threshold_at_fpr(fit, fpr)
    warnings = []
    if fpr < 1.0 / fit.size:
        warnings.append(f"a false-positive rate of {fpr:g} is below 1/{fit.size} = {1 / fit.size:.4g}, the smallest "
                        f"that the {fit.size} texts fitted on can show: the threshold is the highest of their scores "
                        f"and its rate on new texts is unknown below {1 / fit.size:.4g}; give at least "
                        f"{math.ceil(1 / fpr)} texts to fit on, about {math.ceil(math.ceil(1 / fpr) / (1 - held_out))} "
                        f"in all with --held-out {held_out:g}")
    return {"threshold": thr, "target_fpr": fpr, "fpr_fit": float((fit > thr).mean()),
            "fpr_held_out": float((hold > thr).mean()), "n_fit": int(fit.size), "n_held_out": int(hold.size),
            "smallest_reachable_fpr": 1.0 / fit.size, "smallest_held_out_fpr": 1.0 / hold.size,
            "previous_threshold": rule.threshold, "warnings": warnings}


def threshold_cost(rule: Rule, real_val, fake_val, threshold: float) -> dict:
    """What deciding at `threshold` instead of the rule's own costs on the detector's validation
    windows (real (N,), generated (M,)): the true-positive rate before (at `rule.threshold`) and after,
    the false-positive rate before and after, and `tpr_lost_over_half` when the new TPR is below
    half the old one."""

    r, f = rule.oriented(real_val), rule.oriented(fake_val)  # (N,), (M,)
    before, after = float((f > rule.threshold).mean()), float((f > threshold).mean())
    return {"val_tpr_before": before, "val_tpr_after": after,
            "val_fpr_before": float((r > rule.threshold).mean()), "val_fpr_after": float((r > threshold).mean()),
            "val_windows": int(r.size), "val_negatives": int(f.size), "tpr_lost_over_half": bool(after < before / 2)}


def validation_cost(scorer, rule: Rule, info: dict, name: str, threshold: float,
                    batch_size: int = 64) -> tuple[dict, str]:
    """(`threshold_cost` on the validation windows detector.json records (`val`), ''); where they
    cannot be read, (its fields None and `tpr_lost_over_half` False, why). `name`: how messages
    call the detector (`--model RUN`)."""

    fields = ("val_tpr_before", "val_tpr_after", "val_fpr_before", "val_fpr_after", "val_windows", "val_negatives")
    try:
        if not info.get("val"):
            raise TextebmError(f"{name}: detector.json records no validation windows (`val`)")
        rows = read_window_files(info["val"], "detector.json `val`", scorer_length(scorer, info), len(scorer.vocab),
                                 length_of=f"the detector {name} was fitted on windows that long",
                                 vocab_of=f"the vocabulary of the detector {name}")
    except TextebmError as e:
        return {**dict.fromkeys(fields), "tpr_lost_over_half": False}, f"its validation windows cannot be read ({e})"
    real, fake = window_scores(scorer.score_ids, rows, batch_size)  # (N,), (N, k)
    return threshold_cost(rule, real, fake.ravel(), threshold), ""


def fit_threshold(scorer, rule: Rule, info: dict, texts: Sequence[str], fpr: float, seed: int = 0,
                  held_out: float = 0.5, batch_size: int = 64, name: str = "the detector") -> dict:
    """What `detect threshold` reports for a user's human-written `texts` and the detector
    (`load_detector`'s scorer, rule and detector.json): `refit_threshold` on the texts' scores
    (`text_scores`, windows of the detector's length), what the new threshold costs on the
    detector's validation windows (`validation_cost`), and `warnings` (a rate below what the texts
    can show, an unknown cost, more than half the detection lost). `name`: how messages call the
    detector. The command writes it to a file; `textebm.api.Detector.refit_threshold` keeps it.
    A text that repeats an earlier one counts once (`n_duplicates`, with a warning): copies of one
    text on both sides of the split would make the held-out rate repeat the fitted one."""

    unique = list(dict.fromkeys(texts))
    try:  # the distinct texts must fill both parts
        split_sizes(len(unique), held_out, "--held-out")
    except TextebmError as e:
        raise TextebmError(f"{e} (each distinct text counted once: {len(unique)} of the {len(texts)} given)") from None
    scores, _ = text_scores(scorer, unique, scorer_length(scorer, info), batch_size)  # (N,)
    out = refit_threshold(scores, rule, fpr, seed, held_out)
    out["n_duplicates"] = len(texts) - len(unique)
    if out["n_duplicates"]:
        out["warnings"].append(f"{out['n_duplicates']} of the {len(texts)} texts repeat an earlier one: each distinct "
                               "text counts once, so that no text is both fitted on and held out")
    cost, problem = validation_cost(scorer, rule, info, name, out["threshold"], batch_size)
    out.update(cost)
    if problem:
        out["warnings"].append(f"the new threshold's cost in detection is unknown: {problem}")
    if out["tpr_lost_over_half"]:
        out["warnings"].append(
            f"the new threshold {out['threshold']:.4g} (was {rule.threshold:.4g}) flags {out['val_tpr_after']:.1%} of "
            f"the detector's generated validation windows, down from {out['val_tpr_before']:.1%}: it loses more than "
            "half of the detection; the detector does not separate your texts from generated ones well (texts "
            "much shorter than its windows, or another domain)")
    return out


# ---------------------------------------------------------------- evaluation by length


def length_buckets(values: Sequence[str], length: int, option: str = "--buckets") -> list[tuple[int, int]]:
    """Buckets [lo, hi) of text tokens from "LO-HI" strings, each 1 <= LO < HI <= `length` (the
    detector's window length); TextebmError naming `option` otherwise. Without values: 8-16,
    16-32, 32-64, ... doubling while LO < length, the last HI capped at `length`. The whole
    windows (`length` tokens) are evaluated besides, not as a bucket."""

    if not values:
        out, lo = [], 8
        while lo < length:
            out.append((lo, min(2 * lo, length)))
            lo *= 2
        return out
    out = []
    for v in values:
        lo_s, sep, hi_s = str(v).partition("-")
        if not (sep and lo_s.strip().isdigit() and hi_s.strip().isdigit()):
            raise TextebmError(f"{option} {v!r}: a bucket is LO-HI, two whole numbers of tokens (e.g. 8-16)")
        lo, hi = int(lo_s), int(hi_s)
        if not 1 <= lo < hi:
            raise TextebmError(f"{option} {v!r}: a bucket needs 1 <= LO < HI (LO tokens up to HI - 1)")
        if hi > length:
            raise TextebmError(f"{option} {v!r}: the detector's windows have {length} tokens, so a bucket must end "
                               f"at HI <= {length} (the whole windows are evaluated besides)")
        out.append((lo, hi))
    return out


def cut(ids: Sequence[int], n: int, direction: str) -> list[int]:
    """The n tokens of a window that end (l2r) or start (r2l) with its generated continuation."""
    return list(ids[len(ids) - n:]) if direction == "l2r" else list(ids[:n])


def cut_lengths(n_rows: int, lo: int, hi: int) -> np.ndarray:
    """The length each of `n_rows` windows is cut to in bucket [lo, hi): lo, lo + 1, ..., hi - 1,
    lo, ... in row order (an even spread over the bucket, no seed)."""
    return lo + np.arange(n_rows) % (hi - lo)  # (n_rows,)


def bucket_metrics(rule: Rule, real, fake, threshold: float) -> dict:
    """AUROC, class-balanced accuracy at the rule's decision threshold, the true- and
    false-positive rates at `threshold` (the operating point) and at the decision threshold (what
    `detect score` decides with: `tpr_decision`, `fpr_decision`), of real (N,) and generated (M,)
    scores."""
    r, f = rule.oriented(real), rule.oriented(fake)  # (N,), (M,)
    return {"auroc": metrics.auroc(r, f), "accuracy": metrics.balanced_accuracy(r, f, rule.threshold),
            "tpr": float((f > threshold).mean()), "fpr": float((r > threshold).mean()),
            "tpr_decision": float((f > rule.threshold).mean()), "fpr_decision": float((r > rule.threshold).mean()),
            "n_real": int(r.size), "n_generated": int(f.size)}


def by_length(score_ids, rule: Rule, rows: list[dict], real, fake, buckets: Sequence[tuple[int, int]],
              threshold: float, batch_size: int = 64) -> list[dict]:
    """`bucket_metrics` of test windows per bucket of text tokens (module doc), then of the whole
    windows (`real` (N,), `fake` (N, k): their scores). Window i of a bucket [lo, hi) is cut to
    `cut_lengths(N, lo, hi)[i]` tokens; all buckets' windows are scored by `score_ids(seqs,
    batch_size)` in one batched pass. `generated_tokens_mean`: the mean number of the cut windows'
    tokens that a generator wrote (min(n, L − context_len))."""

    length = len(rows[0]["positive"])
    cut_rows, gen_tokens = [], []
    for lo, hi in buckets:
        ns = cut_lengths(len(rows), lo, hi)  # (N,)
        for r, n in zip(rows, ns.tolist()):
            cut_rows.append({"positive": cut(r["positive"], n, r["direction"]),
                             "negatives": [cut(x, n, r["direction"]) for x in r["negatives"]]})
        gen_tokens.append(np.minimum(ns, length - np.array([r["context_len"] for r in rows])).mean())
    out = []
    if cut_rows:
        cr, cf = window_scores(score_ids, cut_rows, batch_size)  # (B·N,), (B·N, k)
        for b, (lo, hi) in enumerate(buckets):
            sl = slice(b * len(rows), (b + 1) * len(rows))
            out.append({"bucket": f"{lo}-{hi}", "min_tokens": lo, "max_tokens": hi - 1,
                        "generated_tokens_mean": float(gen_tokens[b]),
                        **bucket_metrics(rule, cr[sl], cf[sl].ravel(), threshold)})
    whole = np.mean([length - r["context_len"] for r in rows])
    out.append({"bucket": "whole", "min_tokens": length, "max_tokens": length, "generated_tokens_mean": float(whole),
                **bucket_metrics(rule, real, np.asarray(fake).ravel(), threshold)})
    return out


def reads_prefix(scorer) -> bool:
    """True when a detector's energy reads a fixed prefix of its windows (`--pool continuation`,
    lmstats), so that windows cut shorter than it are not what it scores."""
    spec = getattr(scorer, "spec", None)
    return spec is not None and (spec.kind == "lmstats" or spec.pool == "continuation")


def write_rule(path, detector: dict, rule: Rule) -> None:
    write_json(path, {**detector, "rule": rule.as_dict()})


def read_rule(path) -> tuple[dict, Rule]:
    raw = read_json_object(path, "detector description")
    try:
        rule = Rule(**raw["rule"])
    except (KeyError, TypeError) as e:
        raise InputError(path, f"no valid `rule`: {e}") from None
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if rule.sign not in (1, -1) or isinstance(rule.sign, bool):
        raise InputError(path, f"rule.sign must be 1 or -1, got {rule.sign!r}")
    for name in ("threshold", "temperature", "threshold_fpr", "fpr"):
        if not number(getattr(rule, name)):
            raise InputError(path, f"rule.{name} must be a finite number, got {getattr(rule, name)!r}")
    if not rule.temperature > 0:
        raise InputError(path, f"rule.temperature must be positive, got {rule.temperature!r}")
    if not isinstance(rule.val, dict):
        raise InputError(path, f"rule.val must be an object, got {rule.val!r}")
    return raw, rule


def load_detector(path, device="cpu", dtype: torch.dtype = torch.float32, option: str = "--model"):
    """(scorer, Rule, detector.json contents) of a detector folder: a `detect train` run or a
    `detect fit` folder of a zero-shot detector."""
    from pathlib import Path

    folder = Path(path)
    if not (folder / RULE_FILE).is_file() and folder.name == "model" and (folder.parent / RULE_FILE).is_file():
        folder = folder.parent  # RUN/model of a `detect train` run: its rule lives in RUN
    rule_file = folder / RULE_FILE
    if not rule_file.is_file():
        expected = "expected a detector (a run of `detect train`, or a folder written by `detect fit`)"
        if not folder.is_dir():
            raise TextebmError(f"{option} {folder}: {'a file, not a folder' if folder.exists() else 'no such folder'}; "
                               f"{expected}")
        refuse_unfinished(folder, option)
        raise TextebmError(f"{option} {folder}: {inspect_folder(folder).describe()}, with no {RULE_FILE}; {expected}")
    info, rule = read_rule(rule_file)
    if info.get("detector") == "energy":
        return EnergyScorer(folder / info.get("model", "model"), device, dtype), rule, info
    if info.get("detector") in ZEROSHOT:
        vocab = load_tokenizer(info["vocab"], f"{rule_file}: vocab")
        return ZeroShotScorer(info["detector"], info["model"], vocab, info.get("observer") or None, device, dtype,
                              option=f"{rule_file}: model", observer_option=f"{rule_file}: observer"), rule, info

    raise InputError(rule_file, f"unknown detector {info.get('detector')!r}")


def trained_min_length(info: dict, length: int) -> int:
    """The fewest tokens of the windows a detector was trained on (or, zero-shot, its rule fitted
    on): `detect train --min-length`'s MIN, else its whole windows' `length`."""
    return int(info.get("min_length") or length)


def scorer_length(scorer, info: dict) -> int:
    """The window length a detector's texts are cut into (its training windows' length)."""
    return int(info.get("length") or getattr(getattr(scorer, "spec", None), "length", 0) or 64)
