"""n-best reranking with text scores (Clark et al. 2020, sec. 3.2; Salazar et al. 2020):

    x* = argmax_{x in n-best(s)}  f(x | s) + lambda * PLL(x)

f is the speech model's log score of hypothesis x (the n-best file's `score`), PLL(x) the text's
log-score from `textebm score` (Electric's one-pass PLL, a masked LM's n-pass PLL, a causal LM's
log-probability, ...). lambda is chosen per subset on dev only, by corpus WER over `grid`, ties
broken toward the smaller lambda, and applied unchanged to the test utterances of that subset;
ties between hypotheses go to the earlier one in n-best order.

Word error rate is corpus-level: the word edits (substitutions + deletions + insertions, by
`jiwer`'s Levenshtein alignment of whitespace-split words, no other normalisation) summed over
utterances, over the reference words summed over utterances. Each hypothesis's edits are counted
once, so every choice (1-best, reranked at any lambda, oracle) is a sum of precomputed counts.

With `--top N` each list keeps its N best hypotheses by the speech score (`keep_top`); the oracle
of the whole lists is reported beside that of the kept ones. With `--normalize`, a hypothesis
finds its text score under its normalised text (`textebm.data.normalize`: the model saw that
form), while its word edits stay those of the texts as written against the reference as given.

The pieces are plain functions of arrays (`rerank_index`, `wer_curve`, `choose_lambda`) so they
are testable without any file; `evaluate` puts them together for the `textebm rerank` command.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from textebm.bootstrap import percentile_interval, resample_indices
from textebm.data.nbest import Utterance, top_indices
from textebm.data.normalize import PRESETS, normalizer
from textebm.errors import InputError, TextebmError
from textebm.figures import new_figure, save_png
from textebm.io import iter_jsonl
from textebm.markdown import table

log = logging.getLogger(__name__)

PAPER_GRID = tuple(round(0.05 * i, 2) for i in range(1, 21))  # 0.05, 0.10, ..., 1.00 (the paper's)
WIDE_GRID = (0.0, *PAPER_GRID, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)  # 0 = the 1-best itself
GRIDS = {"paper": PAPER_GRID, "wide": WIDE_GRID}


# ---------------------------------------------------------------- word error rate


def ref_words(ref: str) -> int:
    return len(ref.split())


def word_edits(refs: Sequence[str], hyps: Sequence[str]) -> list[int]:
    """Word edits (S + D + I) of each (reference, hypothesis) pair, by jiwer's alignment."""
    import jiwer

    if len(refs) != len(hyps):
        raise ValueError(f"word_edits: {len(refs)} references but {len(hyps)} hypotheses")
    if not refs:
        return []
    out = jiwer.process_words(list(refs), list(hyps))
    edits = []
    for chunks in out.alignments:
        n = 0
        for c in chunks:
            if c.type in ("substitute", "delete"):
                n += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                n += c.hyp_end_idx - c.hyp_start_idx
        edits.append(n)
    return edits


def corpus_wer(edits: int, words: int) -> float:
    """Total edits over total reference words (a fraction: 0.0717 is 7.17 %)."""
    if words <= 0:
        raise ValueError("corpus_wer: the references hold no words")
    return edits / words


# ---------------------------------------------------------------- reranking


@dataclass
class NBest:
    """One utterance ready for reranking: its hypotheses' speech scores and word edits."""

    id: str
    subset: str
    ref: str
    words: int
    keys: list[str]
    texts: list[str]
    asr: np.ndarray  # (n,) the speech model's log scores
    edits: np.ndarray  # (n,) word edits of each hypothesis against ref
    read: int = 0  # hypotheses in the file, before `keep_top` (0: n)
    oracle_read: int = -1  # the fewest word edits among all of those (-1: min(edits))


def prepare(utterances: Sequence[Utterance]) -> list[NBest]:
    """NBest items with every hypothesis's word edits (one jiwer call for the whole file)."""
    refs = [u.ref for u in utterances for _ in u.hyps]
    hyps = [h.text for u in utterances for h in u.hyps]
    edits = word_edits(refs, hyps)
    items, at = [], 0
    for u in utterances:
        n = len(u.hyps)
        items.append(NBest(u.id, u.subset, u.ref, ref_words(u.ref), [h.key for h in u.hyps],
                           [h.text for h in u.hyps], np.array([h.score for h in u.hyps], dtype=np.float64),
                           np.array(edits[at:at + n], dtype=np.int64)))
        at += n
    return items


def keep_top(item: NBest, n: int) -> NBest:
    """`item` with its `n` best hypotheses by the speech score only, in n-best order (all for
    n = 0); it remembers how many it read and the oracle edits over all of them."""
    keep = top_indices(item.asr.tolist(), n)
    return dataclasses.replace(item, keys=[item.keys[i] for i in keep], texts=[item.texts[i] for i in keep],
                               asr=item.asr[keep], edits=item.edits[keep], read=item.read or len(item.keys),
                               oracle_read=int(item.edits.min()) if item.oracle_read < 0 else item.oracle_read)


def truncated(items: Sequence[NBest]) -> bool:
    return any(it.read > len(it.keys) for it in items)


def rerank_index(asr: np.ndarray, text: np.ndarray, lam: float) -> int:
    """argmax_i asr_i + lam * text_i; the earliest hypothesis on ties."""
    return int(np.argmax(asr + lam * text))


def one_best_index(item: NBest) -> int:
    """The speech model's own choice: the highest score (the earliest on ties)."""
    return int(np.argmax(item.asr))


def oracle_index(item: NBest) -> int:
    """The hypothesis with the fewest word edits (the earliest on ties)."""
    return int(np.argmin(item.edits))


def total_edits(items: Sequence[NBest], indices: Sequence[int]) -> int:
    return int(sum(it.edits[i] for it, i in zip(items, indices)))


def wer_curve(items: Sequence[NBest], text_scores: Sequence[np.ndarray], grid: Sequence[float]) -> list[float]:
    """Corpus WER of the reranked choice at each lambda of `grid`."""
    lams = np.asarray(grid, dtype=np.float64)
    edits = np.zeros(len(lams), dtype=np.int64)
    for it, ts in zip(items, text_scores):
        choice = np.argmax(it.asr[None, :] + lams[:, None] * ts[None, :], axis=1)  # (G,)
        edits += it.edits[choice]
    words = sum(it.words for it in items)
    return [corpus_wer(int(e), words) for e in edits]


def paired_wer_diff(edits_a: np.ndarray, edits_b: np.ndarray, words: np.ndarray, n_boot: int = 1000,
                    level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Corpus WER of choice a minus that of choice b, with its paired percentile-bootstrap interval
    over utterances: each resample draws utterances with replacement and recomputes both corpus
    WERs (edits and reference words summed over the drawn utterances) on the same draw.

    edits_a, edits_b, words: (U,) per utterance. Returns {"diff", "lo", "hi", "p_below_zero"}
    (fractions, like corpus_wer)."""

    a, b, w = (np.asarray(x, dtype=np.float64) for x in (edits_a, edits_b, words))
    if not (a.shape == b.shape == w.shape) or a.ndim != 1 or not len(a):
        raise ValueError("paired_wer_diff: give per-utterance edits and words of one non-empty length")
    if w.sum() <= 0:
        raise ValueError("paired_wer_diff: the references hold no words")
    idx = resample_indices(len(a), n_boot, seed)  # (n_boot, U)
    w_boot = w[idx].sum(1)  # (n_boot,) reference words of each resample
    keep = w_boot > 0  # a resample of only empty references has no WER: left out
    d = (a[idx].sum(1) - b[idx].sum(1))[keep] / w_boot[keep]  # (kept,)
    lo, hi = percentile_interval(d, level)
    return {"diff": float((a.sum() - b.sum()) / w.sum()), "lo": lo, "hi": hi, "p_below_zero": float((d < 0).mean())}


def choose_lambda(grid: Sequence[float], curve: Sequence[float]) -> float:
    """The lambda of the lowest WER, the smallest lambda among equal WERs."""
    if not grid or len(grid) != len(curve):
        raise ValueError("choose_lambda: the grid and the curve must be non-empty and of one length")
    return min(zip(curve, grid))[1]


# ---------------------------------------------------------------- score files


@dataclass
class ScoreFile:
    """The text scores of one `textebm score` output file: {text: score}."""

    method: str
    path: Path
    scores: dict[str, float]
    normalize: str = "none"  # the form `textebm score --normalize` gave the texts


def read_score_file(path: str | Path) -> tuple[str | None, str, dict[str, float]]:
    """(the file's method, or None when its lines name none, its normalisation ("none" when its
    lines name none), {text: score}) from a JSONL file of `textebm score`. A text scored twice
    keeps its first score (a warning says when they differ)."""

    path = Path(path)
    scores: dict[str, float] = {}
    method: str | None = None
    method_line = 0
    norm, norm_line = None, 0
    differ = 0
    for line, row in iter_jsonl(path):
        text, score = row.get("text"), row.get("score")
        if not isinstance(text, str):
            raise InputError(path, "no \"text\" string (expected the output of `textebm score`)", line)
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise InputError(path, "no numeric \"score\" (expected the output of `textebm score`)", line)
        if not math.isfinite(score):
            raise InputError(path, f"\"score\" must be a finite number, got {score}", line)
        m = row.get("method")
        if m is not None:
            if not isinstance(m, str) or not m:
                raise InputError(path, "\"method\" must be a non-empty string", line)
            if method is None:
                method, method_line = m, line
            elif m != method:
                raise InputError(path, f"method {m!r}, but line {method_line} has {method!r}; one score file "
                                       "holds one method", line)
        nm = row.get("normalize", "none")
        if nm not in PRESETS:
            raise InputError(path, f"\"normalize\" must be one of {', '.join(map(repr, PRESETS))} (the presets of "
                                   f"`textebm score --normalize`), got {nm!r}", line)
        if norm is None:
            norm, norm_line = nm, line
        elif nm != norm:
            raise InputError(path, f"normalize {nm!r}, but line {norm_line} has {norm!r}; one score file holds "
                                   "texts of one form", line)
        if text in scores:
            differ += abs(scores[text] - score) > 1e-3 * max(1.0, abs(score))
            continue
        scores[text] = float(score)
    if not scores:
        raise InputError(path, "no score lines (an empty file)")
    if differ:
        log.warning("%s: %d texts appear more than once with different scores; the first of each is used",
                    path, differ)
    return method, norm or "none", scores


def read_score_files(paths: Sequence[str | Path]) -> list[ScoreFile]:
    """One ScoreFile per path, named by its method, or by the file stem when methods clash."""
    paths = [Path(p) for p in paths]
    seen: set[Path] = set()
    for p in paths:
        if p.resolve() in seen:
            raise TextebmError(f"--scores {p}: given twice")
        seen.add(p.resolve())
    read = [(p, *read_score_file(p)) for p in paths]
    names = [m or p.stem for p, m, _, _ in read]
    clash = {n for n in names if names.count(n) > 1}
    names = [p.stem if n in clash else n for n, (p, _, _, _) in zip(names, read)]
    for n in set(names):
        if names.count(n) > 1:
            same = [str(p) for p, _ in zip(paths, names) if _ == n]
            raise TextebmError(f"--scores {', '.join(same)}: these files would all be called {n!r} (the same "
                               "method and the same file name); rename one")
    return [ScoreFile(n, p, s, nm) for n, (p, _, nm, s) in zip(names, read)]


def method_normalization(rerank: str, sf: ScoreFile) -> str:
    """The form a method's hypotheses are looked up in: `rerank`'s --normalize, or the one its
    score file records; TextebmError when both name one and they differ."""
    if rerank != "none" and sf.normalize not in ("none", rerank):
        raise TextebmError(f"--normalize {rerank}: {sf.path} holds texts scored with --normalize {sf.normalize}; "
                           f"give --normalize {sf.normalize} (or none), or score the texts again")
    return rerank if rerank != "none" else sf.normalize


def attach(items: Sequence[NBest], sf: ScoreFile, how: str, normalize: str = "none") -> list[np.ndarray]:
    """Each item's hypotheses' text scores from `sf`, each looked up under its text in the form
    `normalize` (a `textebm.data.normalize` preset); InputError naming the score file when a
    hypothesis text has none (`how` says how to make them)."""
    norm = normalizer(normalize)
    missing = [norm(t) for it in items for t in it.texts if norm(t) not in sf.scores]
    if missing:
        unique = list(dict.fromkeys(missing))
        texts = [t for it in items for t in it.texts]
        # texts written with `rerank --normalize P --write-texts` and scored by a plain `score` hold the
        # P form without recording it: name the form that finds every hypothesis, the actual fix
        fits = [p for p in PRESETS if p != normalize and all(normalizer(p)(t) in sf.scores for t in texts)]
        fix = (f"its texts are in the --normalize {fits[0]} form (written so, scored without recording it): pass "
               f"--normalize {fits[0]}" if fits else f"scores are matched by exact text: {how}")
        raise InputError(sf.path, f"no score for {len(unique)} hypothesis text{'s' if len(unique) > 1 else ''}, "
                                  f"e.g. {unique[0]!r}" + (f" (--normalize {normalize})" if normalize != "none" else "")
                                  + f"; {fix}")
    return [np.array([sf.scores[norm(t)] for t in it.texts], dtype=np.float64) for it in items]


# ---------------------------------------------------------------- the whole evaluation


def _split_by_subset(items: Sequence[NBest]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        out.setdefault(it.subset, []).append(i)
    return out


def evaluate(dev: Sequence[NBest], test: Sequence[NBest], methods: dict[str, tuple[list, list]],
             grid: Sequence[float], versus: str = "", n_boot: int = 1000, seed: int = 0
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Choose lambda per subset on dev, apply it to test; return (metrics, chosen rows).

    methods: {name: (text scores of each dev item, text scores of each test item)}. Every test
    subset must have dev utterances; a dev-only subset is reported for dev alone. WERs are
    fractions. metrics["subsets"][s] holds utterance and word counts, the 1-best and oracle
    WERs, and per method the chosen lambda, its dev and test WER and the whole curve;
    metrics["pooled"] (with several subsets) sums edits and words over subsets, each at its own
    lambda. When lists were cut (`keep_top`), "oracle_read" is the oracle of the lists as read
    (and each split's "hypotheses_read" their size). With n_boot > 0 every method's test WER also
    gets its change against the 1-best ("test_vs_one_best") and, when `versus` names a method,
    against that method ("test_vs_versus"),
    each with a paired bootstrap interval over test utterances (`paired_wer_diff`)."""
    dev_at, test_at = _split_by_subset(dev), _split_by_subset(test)
    missing = sorted(set(test_at) - set(dev_at))
    if missing:
        raise TextebmError(f"test subset{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
                           f"{'have' if len(missing) > 1 else 'has'} no dev utterances to choose lambda on "
                           f"(dev subsets: {', '.join(map(repr, sorted(dev_at)))})")
    subsets: dict[str, Any] = {}
    cut = truncated(dev) or truncated(test)
    chosen: list[dict[str, Any]] = []
    pooled = {"dev": {"utterances": 0, "words": 0}, "test": {"utterances": 0, "words": 0}}
    pooled_edits: dict[tuple[str, str], dict[str, int]] = {}
    per_utt: list[dict[str, Any]] = []  # per subset: test words and edits per utterance of each choice
    for s in sorted(dev_at):
        d_idx, t_idx = dev_at[s], test_at.get(s, [])
        parts = {"dev": [dev[i] for i in d_idx], "test": [test[i] for i in t_idx]}
        entry: dict[str, Any] = {}
        for split, its in parts.items():
            entry[split] = {"utterances": len(its), "words": sum(it.words for it in its),
                            "hypotheses": sum(len(it.keys) for it in its)}
            pooled[split]["utterances"] += entry[split]["utterances"]
            pooled[split]["words"] += entry[split]["words"]
        fixed = {"one_best": one_best_index, "oracle": oracle_index}
        utt = {"words": np.array([it.words for it in parts["test"]], dtype=np.int64),
               "one_best": np.array([it.edits[one_best_index(it)] for it in parts["test"]], dtype=np.int64),
               "methods": {}}  # per test utterance; methods apart, so no method name can clash
        for name, pick in fixed.items():
            entry[name] = {}
            for split, its in parts.items():
                e = total_edits(its, [pick(it) for it in its])
                entry[name].update(_wer_fields(split, e, entry[split]["words"]))
                _add(pooled_edits, ("fixed", name), split, e)
        if cut:  # the oracle of the lists as read, before --top
            entry["oracle_read"] = {}
            for split, its in parts.items():
                entry[split]["hypotheses_read"] = sum(it.read or len(it.keys) for it in its)
                e = sum(int(it.edits.min()) if it.oracle_read < 0 else it.oracle_read for it in its)
                entry["oracle_read"].update(_wer_fields(split, e, entry[split]["words"]))
                _add(pooled_edits, ("fixed", "oracle_read"), split, e)
        entry["methods"] = {}
        for name, (dev_scores, test_scores) in methods.items():
            sc = {"dev": [dev_scores[i] for i in d_idx], "test": [test_scores[i] for i in t_idx]}
            dev_curve = wer_curve(parts["dev"], sc["dev"], grid)
            lam = choose_lambda(grid, dev_curve)
            m: dict[str, Any] = {"lambda": lam}
            for split, its in parts.items():
                idx = [rerank_index(it.asr, ts, lam) for it, ts in zip(its, sc[split])]
                e = total_edits(its, idx)
                m.update(_wer_fields(split, e, entry[split]["words"]))
                _add(pooled_edits, ("method", name), split, e)
                if split == "test":
                    chosen += [_chosen_row(it, name, lam, i, ts) for it, i, ts in zip(its, idx, sc[split])]
                    utt["methods"][name] = np.array([it.edits[i] for it, i in zip(its, idx)], dtype=np.int64)
            # a subset of test lists whose references hold no words has no test WER, as one with none
            test_curve = (wer_curve(parts["test"], sc["test"], grid) if entry["test"]["words"]
                          else [None] * len(grid))
            m["curve"] = {"lambda": list(grid), "dev_wer": dev_curve, "test_wer": test_curve}
            entry["methods"][name] = m
        _add_intervals(entry["methods"], utt, versus, n_boot, seed)
        per_utt.append(utt)
        subsets[s] = entry
    metrics: dict[str, Any] = {"grid": list(grid), "subsets": subsets}
    if len(subsets) > 1:
        pool: dict[str, Any] = {**pooled, "methods": {}}
        for (kind, name), per_split in pooled_edits.items():  # kind: 1-best / oracle, or a method
            into = pool if kind == "fixed" else pool["methods"]
            into[name] = {}
            for split in ("dev", "test"):
                into[name].update(_wer_fields(split, per_split.get(split, 0), pooled[split]["words"]))
        pooled_utt = {k: np.concatenate([u[k] for u in per_utt]) for k in ("words", "one_best")}
        pooled_utt["methods"] = {n: np.concatenate([u["methods"][n] for u in per_utt]) for n in methods}
        _add_intervals(pool["methods"], pooled_utt, versus, n_boot, seed)
        metrics["pooled"] = pool
    if versus:
        metrics["versus"] = versus
    metrics["bootstrap"] = {"resamples": n_boot, "seed": seed, "level": 0.95}
    return metrics, chosen


def _add_intervals(methods: dict[str, Any], utt: dict[str, Any], versus: str, n_boot: int, seed: int) -> None:
    """Each method's test WER change against the 1-best and against `versus`, with paired bootstrap
    intervals over the test utterances in `utt` ("words", "one_best" and each of "methods": (U,)
    per test utterance)."""
    if n_boot <= 0 or not len(utt["words"]) or utt["words"].sum() == 0:
        return
    edits = utt["methods"]
    for name, m in methods.items():
        m["test_vs_one_best"] = paired_wer_diff(edits[name], utt["one_best"], utt["words"], n_boot, seed=seed)
        if versus and name != versus:
            m["test_vs_versus"] = paired_wer_diff(edits[name], edits[versus], utt["words"], n_boot, seed=seed)


def _wer_fields(split: str, edits: int, words: int) -> dict[str, Any]:
    return {f"{split}_edits": edits, f"{split}_wer": corpus_wer(edits, words) if words else None}


def _add(acc: dict[tuple[str, str], dict[str, int]], name: tuple[str, str], split: str, edits: int) -> None:
    acc.setdefault(name, {}).setdefault(split, 0)
    acc[name][split] += edits


def _chosen_row(it: NBest, method: str, lam: float, i: int, ts: np.ndarray) -> dict[str, Any]:
    b = one_best_index(it)
    return {"id": it.id, "subset": it.subset, "method": method, "lambda": lam, "hyp": it.keys[i], "rank": i + 1,
            "text": it.texts[i], "asr_score": float(it.asr[i]), "text_score": float(ts[i]),
            "total": float(it.asr[i] + lam * ts[i]), "edits": int(it.edits[i]), "ref_words": it.words,
            "one_best": it.keys[b], "one_best_edits": int(it.edits[b]), "ref": it.ref}


# ---------------------------------------------------------------- report and plot


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f}"


def _count(c: dict[str, int]) -> str:
    u, w = c["utterances"], c["words"]
    return f"{u} utterance{'s' * (u != 1)}, {w} word{'s' * (w != 1)}"


def _interval(d: dict[str, float] | None) -> str:
    if not d:
        return ""
    return f"{100 * d['diff']:+.2f} [{100 * d['lo']:+.2f}, {100 * d['hi']:+.2f}]"


def _lam(x: float) -> str:
    return f"{x:g}"


def render_report(metrics: dict[str, Any], plot_name: str, sources: dict[str, Any]) -> str:
    """report.md: one table per subset (and one pooled): none (1-best), each method, oracle."""
    grid = metrics["grid"]
    lines = ["# n-best reranking", "",
             f"x* = argmax f(x|s) + λ·score(x), λ chosen on dev per subset from {len(grid)} values "
             f"({_lam(grid[0])} … {_lam(grid[-1])}; grid `{sources['grid']}`), ties to the smaller λ. "
             "WER = word edits / reference words, each summed over utterances (corpus level).", "",
             f"- dev: `{sources['dev']}`", f"- test: `{sources['test']}`"]
    norms = sources.get("normalize", {})
    lines += [f"- {name}: `{path}`" + (f" (texts scored in form `{norms[name]}`)" if norms.get(name, "none") != "none"
                                       else "") for name, path in sources["scores"].items()]
    if any(v != "none" for v in norms.values()):
        lines += ["", "Normalised forms (`--normalize`, textebm.data.normalize) are what the text scorers saw; "
                  "WER compares the hypotheses as written with the references as given."]
    if sources.get("top"):
        lines += ["", f"Each list keeps its {sources['top']} best hypotheses by the speech score (`--top "
                  f"{sources['top']}`); \"oracle (top {sources['top']})\" is the best any reranker of the kept "
                  "lists can reach, \"oracle (whole lists)\" that of the lists as read."]
    present = {k for e in metrics["subsets"].values() for m in e["methods"].values() for k in m}
    keys = [k for k in ("test_vs_one_best", "test_vs_versus") if k in present]
    extra = [{"test_vs_one_best": "Δ test WER vs 1-best [95% CI]",
              "test_vs_versus": f"Δ test WER vs {metrics.get('versus')} [95% CI]"}[k] for k in keys]
    if keys:
        lines += ["", "Δ: change in test WER in points, with a 95% paired bootstrap interval over test utterances "
                  f"({sources.get('bootstrap', 1000)} resamples); an interval that holds 0 cannot tell the two apart."]
    blocks = [(s, e) for s, e in metrics["subsets"].items()]
    if "pooled" in metrics:
        blocks.append(("all subsets, pooled (each at its own λ)", metrics["pooled"]))
    for title, e in blocks:
        lines += ["", f"## {title}" if title.startswith("all subsets") else f"## subset `{title}`", "",
                  f"dev: {_count(e['dev'])}; test: {_count(e['test'])}", ""]
        blank = [""] * len(extra)
        rows = [["none (1-best)", _pct(e["one_best"]["dev_wer"]), _pct(e["one_best"]["test_wer"]), "–", *blank]]
        for name, m in e["methods"].items():
            lam = _lam(m["lambda"]) if "lambda" in m else "per subset"
            rows.append([name, _pct(m["dev_wer"]), _pct(m["test_wer"]), lam, *(_interval(m.get(k)) for k in keys)])
        oracles = [("oracle", e["oracle"])]
        if "oracle_read" in e:
            oracles = [(f"oracle (top {sources.get('top')})", e["oracle"]), ("oracle (whole lists)", e["oracle_read"])]
        rows += [[label, _pct(o["dev_wer"]), _pct(o["test_wer"]), "–", *blank] for label, o in oracles]
        lines.append(table(["rescoring", "dev WER (%)", "test WER (%)", "λ", *extra], rows,
                           ["left"] + ["right"] * (3 + len(extra))))
    lines += ["", "## WER against λ", "", f"![dev and test WER against λ]({plot_name})", "",
              "Solid: dev, dashed: test; the star marks the λ chosen on dev; grey: the 1-best.", ""]
    return "\n".join(lines)


def plot_curves(metrics: dict[str, Any], path: str | Path) -> Path:
    """One panel per subset: dev (solid) and test (dashed) WER in % against λ for each method."""
    subsets = metrics["subsets"]
    fig = new_figure(figsize=(4.6 * len(subsets) + 1.8, 3.8))  # + the legend, beside the panels
    axes = fig.subplots(1, len(subsets), squeeze=False)[0]
    grid = np.asarray(metrics["grid"], dtype=float)
    for ax, (s, e) in zip(axes, subsets.items()):
        for k, (name, m) in enumerate(e["methods"].items()):
            colour = f"C{k}"
            ax.plot(grid, 100 * np.asarray(m["curve"]["dev_wer"], dtype=float), "-o", color=colour, markersize=3,
                    label=f"{name} dev")
            test = [np.nan if v is None else 100 * v for v in m["curve"]["test_wer"]]
            ax.plot(grid, test, "--", color=colour, label=f"{name} test")
            ax.plot([m["lambda"]], [100 * m["dev_wer"]], "*", color=colour, markersize=12)
        ax.axhline(100 * e["one_best"]["dev_wer"], color="gray", linewidth=1, label="1-best dev")
        if e["one_best"]["test_wer"] is not None:
            ax.axhline(100 * e["one_best"]["test_wer"], color="gray", linestyle="--", linewidth=1, label="1-best test")
        if grid.max() > 1.0:  # the wide grid: linear up to 1, logarithmic above
            ax.set_xscale("symlog", linthresh=1.0)
            ticks = [t for t in (0, 0.25, 0.5, 1, 2, 5, 10) if t <= grid.max()]
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_xlabel("λ")
        ax.set_ylabel("WER (%)")
        ax.set_title(f"subset {s}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    return save_png(fig, path, 110)
