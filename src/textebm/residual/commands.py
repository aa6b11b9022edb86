"""`residual generate`, `residual ppl` and `residual repetitions`: the joint model of Deng et al.
(2020) from the command line (files, options, resume); the library is `joint`, `generate`,
`bounds`, `partition`.

They read test windows of a dataset split in the shared vocabulary (`textebm.detection
.negative_sampling.windows_of`: split by document, non-overlapping windows of p + m tokens,
a seeded subset), or for `generate` a file of prefixes. Each writes a folder (`--out`) whose rows
are kept, while the run lasts, in OUT.partial beside it: an interrupted run continues from the
rows there when the models (by content), the windows and every option that changes a row are the
same, and stops with exit status 2 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from textebm.data.readers import example_id, read_numbered_examples
from textebm.detection import detect
from textebm.detection.negative_sampling import corpus_name, windows_of
from textebm.errors import InputError, TextebmError
from textebm.fingerprint import folder_sha256, json_sha256
from textebm.inference import inference_setup, set_threads
from textebm.io import atomic_write, iter_jsonl, read_json_object, write_json
from textebm.models.load import CAUSAL_LM, ENERGY, find_model, load_lm
from textebm.options import check_config, id_field_option, refuse_unused, text_field_option, threads_field
from textebm.outputs import changed_entries, check_output_dir, output_dir, read_marker
from textebm.precision import resolve_precision
from textebm.progress import progress_bar
from textebm.residual import bounds, report
from textebm.residual.diversity import ngram_ratios
from textebm.residual.generate import joint_sample
from textebm.residual.joint import BaseLM, JointEnergy, load_joint
from textebm.resumable import PartialFile, differences
from textebm.seeds import derive_seed
from textebm.tokenizer import same_vocab

__all__ = ["GENERATE_KIND", "PPL_KIND", "REPETITIONS_KIND", "ResidualGenerateConfig", "ResidualPPLConfig",
           "ResidualRepetitionsConfig", "residual_ppl", "residual_generate", "residual_repetitions"]

log = logging.getLogger(__name__)

GENERATE_KIND = "residual generate"
PPL_KIND = "residual ppl"
REPETITIONS_KIND = "residual repetitions"


@dataclass(kw_only=True)
class _JointOptions:
    """What `generate`, `ppl` and `repetitions` share: the models, the windows and how they run."""

    base: str = field(metadata={"help": "the base LM P_LM: a causal LM in the energy's vocabulary (RUN of "
                                        "`lm train`; frozen)"})
    out: str = field(metadata={"help": "output folder (its rows wait in OUT.partial while it runs; resumable)"})
    data: str = field(default="", metadata={"help": "dataset folder whose --split gives the test windows "
                                                    "(prefix and real continuation)"})
    split: str = field(default="test", metadata={"help": "split of --data"})
    windows: int = field(default=200, metadata={"help": "test windows (a seeded subset; 0: all)", "min": 0})
    prefix_len: int = field(default=0, metadata={"help": "prefix p in tokens (0: the one the energy was "
                                                         "trained on; paper: 120)", "min": 0})
    length: int = field(default=0, metadata={"help": "generated tokens T - p (0: the energy's window length "
                                                     "minus p; paper: 40)", "min": 0})
    seed: int = field(default=0, metadata={"help": "seed of the windows' subset and of every sample", "min": 0})
    batch_size: int = field(default=64, metadata={"help": "sequences per forward pass (changes no number)",
                                                  "min": 1})
    precision: str = field(default="fp32", metadata={"help": "precision of both models (auto: bf16 where the "
                                                             "CPU multiplies it natively)",
                                                     "choices": ["auto", "fp32", "bf16", "fp16"]})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier output of the same command in --out"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar with the time left"})


@dataclass(kw_only=True)
class ResidualGenerateConfig(_JointOptions):
    COMMAND: ClassVar[str] = GENERATE_KIND
    energy: str = field(metadata={"help": "the residual energy E (RUN of `detect train`)"})
    prefixes: str = field(default="", metadata={"help": "instead of --data: prefixes to continue (JSONL `text`, "
                                                        "CSV/TSV or one per line); each keeps its last p tokens"})
    n: int = field(default=100, metadata={"help": "candidates per prefix drawn from the base LM (paper: 10,000)",
                                          "min": 1})
    top_k: int = field(default=10, metadata={"help": "the base LM samples its candidates from the k most likely "
                                                     "tokens (paper: 10; 0: untruncated)", "min": 0})
    judge: str = field(default="", metadata={"help": "a detector (RUN of `detect train`, trained on negatives "
                                                     "of ANOTHER base LM) that scores the joint and the base "
                                                     "continuations: less detectable is better"})
    text_field: str | None = text_field_option()
    id_field: str | None = id_field_option()

    def check(self) -> None:
        if bool(self.data) == bool(self.prefixes):
            raise TextebmError("give the prefixes either as --data DIR (test windows) or as --prefixes FILE")
        if self.prefixes:
            refuse_unused(self, ["windows", "split"], "with --prefixes (every prefix of the file is continued)")
        else:
            refuse_unused(self, ["text_field", "id_field"], "with --data (they name columns of --prefixes)")


@dataclass(kw_only=True)
class ResidualPPLConfig(_JointOptions):
    COMMAND: ClassVar[str] = PPL_KIND
    energy: list[str] = field(metadata={"help": "residual energies E (RUNs of `detect train`); the base LM's "
                                                "samples are drawn once and scored by each"})
    samples: int = field(default=1000, metadata={"help": "base-LM samples per prefix behind log Z (n >= 2; "
                                                         "paper: 100,000)", "min": 2})
    compare: list[str] = field(default_factory=list, metadata={
        "help": "other causal LMs scored on the same tokens (RALM, BALM: RUNs of `lm train`)"})
    positions: int = field(default=0, metadata={"help": "windows (the first of the test windows) whose "
                                                        "per-position perplexity (eq. 5) is estimated; 0: none",
                                                "min": 0})
    position_samples: int = field(default=0, metadata={"help": "samples per position and prefix length "
                                                               "(0: --samples)", "min": 0})
    exact_last: bool = field(default=True, metadata={"help": "score every token of the vocabulary at the last "
                                                             "position: its exact value"})
    chunk: int = field(default=256, metadata={"help": "samples drawn and scored at a time (memory; changes no "
                                                      "number)", "min": 1})
    bootstrap: int = field(default=1000, metadata={
        "help": "paired bootstrap resamples of the test windows for the 95% interval of every perplexity "
                "difference (seeded by --seed; 0: none)", "min": 0})
    reuse: list[str] = field(default_factory=list, metadata={
        "help": "finished `residual ppl` outputs whose rows of the same energies (by content) are taken rather "
                "than scored again: they must have the same base LM, test windows, samples, seed, precision and device"})

    def check(self) -> None:
        if not self.data:
            raise TextebmError("--data is required: the test windows whose continuations are scored")
        if not self.positions:
            refuse_unused(self, ["position_samples"], "without --positions")
        if self.windows and self.positions > self.windows:
            raise TextebmError(f"--positions {self.positions}: the per-position estimate runs on the first of the "
                               f"test windows, and --windows {self.windows} gives only {self.windows}; ask for at "
                               f"most {self.windows}")


@dataclass(kw_only=True)
class ResidualRepetitionsConfig(_JointOptions):
    COMMAND: ClassVar[str] = REPETITIONS_KIND
    energy: str = field(metadata={"help": "the residual energy E (RUN of `detect train`)"})
    source: str = field(default="sample", metadata={
        "help": "whose repetitions: the base LM's own continuation of each window's prefix (sample: the paper's) "
                "or the window's real one (real)", "choices": ["sample", "real"]})
    top_k: int = field(default=10, metadata={"help": "with --source sample: the base LM samples from its k most "
                                                     "likely tokens (as `residual generate`; 0: untruncated)",
                                             "min": 0})
    examples: int = field(default=10, metadata={"help": "repetitions to estimate: the first repeated token of each "
                                                        "window's continuation, windows in order", "min": 1})
    candidates: int = field(default=10, metadata={"help": "K: the base LM's most likely next tokens whose joint "
                                                          "probability is estimated, then renormalised among them "
                                                          "(paper: 128)", "min": 1})
    completions: int = field(default=100, metadata={"help": "completions per candidate from the untruncated base LM "
                                                            "behind each E[exp(-E)] (paper: 10,000)", "min": 2})
    chunk: int = field(default=256, metadata={"help": "completions drawn and scored at a time (memory; changes no "
                                                      "number)", "min": 1})
    bootstrap: int = field(default=1000, metadata={
        "help": "bootstrap resamples of the examples for the 95% interval of the mean log-ratio (seeded by --seed; "
                "0: none)", "min": 0})

    def check(self) -> None:
        if not self.data:
            raise TextebmError("--data is required: the windows whose continuations are searched for repetitions")
        if self.source == "real":
            refuse_unused(self, ["top_k"], "with --source real (nothing is sampled)")


# ---------------------------------------------------------------- shared set-up


@dataclass
class _Setup:
    base: BaseLM
    energies: list[JointEnergy]
    energy_paths: list[Path]
    base_path: Path
    prefix_len: int
    length: int
    precision: str
    tolerance: dict  # a token score's stated largest difference from fp32's (textebm.precision)


def _setup(cfg, energy_opts: list[str]) -> _Setup:
    set_threads(cfg.threads)
    base_path = find_model(cfg.base, CAUSAL_LM, "--base").path.resolve()
    energy_paths = [find_model(e, ENERGY, "--energy", ids=False).path.resolve() for e in energy_opts]
    device, choice = inference_setup(cfg.precision)
    base, energies, prefix_len, length = load_joint((cfg.base, base_path), list(zip(energy_opts, energy_paths)),
                                                    cfg.prefix_len, cfg.length, choice.dtype, device,
                                                    precision=choice.precision)
    return _Setup(base, energies, energy_paths, base_path, prefix_len, length, choice.precision, choice.tolerance)


def _test_windows(cfg, vocab, length: int, prefix_len: int) -> list:
    """Non-overlapping windows of p + m tokens of --data's --split, a seeded subset of --windows."""
    return windows_of(cfg.data, cfg.split, vocab, length + prefix_len, [prefix_len], stride=length + prefix_len,
                      seed=cfg.seed, max_windows=cfg.windows)


def _check_continuations(cfg, st: _Setup, wins) -> None:
    """Before any work: no window continues with a token the base LM never writes (P_LM = 0)."""
    banned = set(st.base.banned)
    for w in wins:
        bad = [t for t in w.ids[st.prefix_len:] if t in banned]
        if bad:
            raise TextebmError(f"--data {cfg.data}: window {w.key} of split {cfg.split!r} continues with "
                               f"{st.base.tokenizer.convert_ids_to_tokens(bad[0])!r}, a token {st.base.name} never "
                               "writes ([eos] or a layout symbol); windows of running text have none")


def _progress(total: int, enabled: bool, unit: str):
    return progress_bar(total, "samples", unit, enabled, smoothing=0.1)


def _log_progress(done: int, total: int, t0: float, what: str, every: int = 10) -> None:
    """A log line every `every` items with the time left (for runs without the progress bar)."""
    if done and done % every == 0:
        left = (time.perf_counter() - t0) / done * (total - done)
        log.info("%d of %d %s done, about %.1f min left", done, total, what, left / 60)


def _finish(out: Path, kind: str, overwrite: bool, partial: PartialFile, write) -> None:
    """Write the folder (`write(tmp)`) and only then remove OUT.partial."""
    with output_dir(out, kind, overwrite) as tmp:
        write(tmp)
    partial.path.unlink(missing_ok=True)


# ---------------------------------------------------------------- residual ppl


def residual_ppl(cfg: ResidualPPLConfig) -> dict:
    """Perplexity bounds of the joint model(s) on the continuation tokens of test windows, the base
    LM's and the --compare LMs' on the same tokens, the bound gap against n, eq. 5 per position, and
    every perplexity difference with its paired bootstrap interval over the test windows."""
    check_config(cfg)
    out = Path(cfg.out)
    check_output_dir(out, PPL_KIND, cfg.overwrite)
    partial = PartialFile(out, PPL_KIND)
    partial.check()
    compare_paths = [find_model(c, CAUSAL_LM, "--compare").path.resolve() for c in cfg.compare]
    reuse = _reuse_identities(cfg.reuse)  # a bad --reuse: stopped before any model is loaded
    st = _setup(cfg, cfg.energy)
    wins = _test_windows(cfg, st.energies[0].vocab, st.length, st.prefix_len)
    _check_continuations(cfg, st, wins)
    compare, compare_nll = _compare(cfg, compare_paths, st, wins)  # a bad --compare: stopped before any row
    n_pos = min(cfg.positions, len(wins))
    pos_n = cfg.position_samples or cfg.samples
    energy_sha = [folder_sha256(p) for p in st.energy_paths]
    identity = {"command": PPL_KIND, "base_sha256": folder_sha256(st.base_path), "energy_sha256": energy_sha,
                "windows_sha256": json_sha256([[w.key, w.ids] for w in wins]), "prefix_len": st.prefix_len,
                "length": st.length, "samples": cfg.samples, "positions": n_pos, "position_samples": pos_n,
                "exact_last": cfg.exact_last, "seed": cfg.seed, "precision": st.precision,
                "device": st.base.device.type}
    needed = [("window", w.key) for w in wins] + [("position", w.key) for w in wins[:n_pos]]
    reused = _reused_rows(reuse, identity, needed)  # {energy sha256: (run, {(part, key): its terms})}
    scored = [k for k, h in enumerate(energy_sha) if h not in reused]  # the energies this run scores
    # OUT.partial holds the scored energies' terms only (none: no partial); another --reuse is refused by it
    done = ({(r["part"], r["key"]) for r in partial.start({**identity, "energy_sha256": [energy_sha[k] for k in scored]})}
            if scored else set())
    todo = [w for w in wins if scored and ("window", w.key) not in done]
    todo_pos = [w for w in wins[:n_pos] if scored and ("position", w.key) not in done]
    if done:
        log.info("resuming %s: %d rows already written", partial.path, len(done))
    for h, (run, _) in reused.items():
        log.info("--reuse %s: the rows of %s", run, st.energy_paths[energy_sha.index(h)])
    total = len(todo) * cfg.samples + len(todo_pos) * st.length * pos_n
    to_score = [st.energies[k] for k in scored]
    t0 = time.perf_counter()
    with partial if scored else contextlib.nullcontext(), _progress(total, cfg.progress, "sample") as bar:
        for i, w in enumerate(todo):
            _log_progress(i, len(todo), t0, "windows")
            try:
                per = bounds.window_bounds_many(st.base, to_score, w.key, w.ids, st.prefix_len, cfg.samples,
                                                cfg.seed, cfg.chunk, cfg.batch_size, bar.update)
            except FloatingPointError as e:
                raise TextebmError(f"--energy: {e} (window {w.key}); nothing was written for it") from None
            partial.append([{"part": "window", "key": w.key, "terms": [b.as_row() for b in per]}])
        t_pos = time.perf_counter()
        for i, w in enumerate(todo_pos):
            _log_progress(i, len(todo_pos), t_pos, "per-position windows")
            try:
                per = bounds.position_bounds_many(st.base, to_score, w.key, w.ids, st.prefix_len, pos_n, cfg.seed,
                                                  cfg.chunk, cfg.batch_size, cfg.exact_last, bar.update)
            except FloatingPointError as e:
                raise TextebmError(f"--energy: {e} (window {w.key}); nothing was written for it") from None
            partial.append([{"part": "position", "key": w.key, "per_energy": per}])
    elapsed = time.perf_counter() - t0
    mine = {(r["part"], r["key"]): r["terms" if r["part"] == "window" else "per_energy"]
            for r in (partial.rows() if scored else [])}

    slot = {k: i for i, k in enumerate(scored)}  # energy -> its place in this run's rows

    def terms(part: str, key: str) -> list:  # every energy's, in --energy's order
        return [mine[part, key][slot[k]] if k in slot else reused[h][1][part, key] for k, h in enumerate(energy_sha)]

    win_rows = [{"part": "window", "key": w.key, "terms": terms("window", w.key)} for w in wins]
    pos_rows = [{"part": "position", "key": w.key, "per_energy": terms("position", w.key)} for w in wins[:n_pos]]
    metrics = {"corpus": corpus_name(cfg.data), "split": cfg.split, "prefix_len": st.prefix_len,
               "length": st.length, "precision": st.precision, "precision_tolerance": st.tolerance,
               "seconds": round(elapsed, 1),
               "samples_per_second": round(total / elapsed, 1) if elapsed > 0 and total else None,
               "base": str(st.base_path), "models": [], "identity": identity,
               "reused": [{"energy": str(st.energy_paths[k]), "from": str(reused[h][0])}
                          for k, h in enumerate(energy_sha) if h in reused]}
    joint_nll = []
    for k, path in enumerate(st.energy_paths):
        wb = [bounds.WindowBounds.from_row(r["terms"][k]) for r in win_rows]
        p = bounds.perplexities(wb)
        metrics["models"].append({"energy": str(path), "kind": st.energies[k].spec.kind,
                                  "init": st.energies[k].spec.init, **p, "gap_by_samples": bounds.gap_by_size(wb)})
        joint_nll.append((report.joint_label(metrics["models"][-1]), bounds.window_nll(wb, p["samples"])))
        metrics["base_ppl"] = p["base_ppl"]
        metrics["tokens"] = p["tokens"]
        metrics["windows"] = p["windows"]
    metrics["compare"] = compare
    others = [("base LM", joint_nll[0][1]["base"])]
    others += [(report.run_name(c["model"]), nll) for c, nll in zip(compare, compare_nll)]
    resamples = cfg.bootstrap if metrics["windows"] > 1 else 0  # one window: no spread to resample
    if cfg.bootstrap and not resamples:
        log.warning("one test window: no interval (a bootstrap of one window has no spread); give --windows 2 or more")
    metrics["bootstrap"] = {"resamples": resamples, "level": 0.95, "seed": cfg.seed, "over": "test windows",
                            "held_fixed": "each window's log Z estimate (T_n, U_n)"}
    metrics["differences"] = bounds.perplexity_differences(joint_nll, others, cfg.bootstrap,
                                                           derive_seed(cfg.seed, "bootstrap"))
    if pos_rows:
        metrics["positions"] = [report.position_summary([r["per_energy"][k] for r in pos_rows])
                                for k in range(len(st.energies))]

    def write(tmp: Path) -> None:
        with atomic_write(tmp / "windows.jsonl") as f:
            for r in win_rows + pos_rows:
                f.write(json.dumps(r) + "\n")
        write_json(tmp / "metrics.json", metrics)
        report.write_ppl_report(tmp, metrics)

    _finish(out, PPL_KIND, cfg.overwrite, partial, write)
    return metrics


def _reuse_identities(runs: list[str]) -> list[tuple[Path, dict]]:
    """(run, identity) of each --reuse folder, checked before any model is loaded: a finished
    `residual ppl` output, unedited since (its sealed marker), whose metrics.json records the
    hashes of its inputs."""
    out = []
    for run in map(Path, runs):
        marker = read_marker(run)
        if not (run / "metrics.json").is_file() or (marker or {}).get("kind") != PPL_KIND:
            raise TextebmError(f"--reuse {run}: not a finished `{PPL_KIND}` output (no metrics.json of one)")
        changed = changed_entries(run, marker)
        if changed:
            raise TextebmError(f"--reuse {run}: {', '.join(changed)} changed since `{PPL_KIND}` wrote it")
        was = read_json_object(run / "metrics.json", f"`{PPL_KIND}` metrics file").get("identity")
        if not isinstance(was, dict):
            raise TextebmError(f"--reuse {run}: its metrics.json does not record the hashes of its inputs (written "
                               "by an earlier textebm); score those energies again")
        hashes = was.get("energy_sha256")
        if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
            raise InputError(run / "metrics.json", "identity.energy_sha256 is not a list of hashes")
        out.append((run, was))
    return out


_TERM_KEYS = {"window": ("key", "lp_lm", "energy", "estimates"), "position": ("key", "positions")}


def _reused_rows(runs: list[tuple[Path, dict]], identity: dict,
                 needed: list[tuple[str, str]]) -> dict[str, tuple[Path, dict]]:
    """{energy sha256: (run, {(part, key): terms})} of the energies of `identity` that finished
    `residual ppl` outputs (`_reuse_identities`) scored with the same base LM, windows, samples, seed,
    precision and device (their samples are then the same: each is seeded by (seed, window, i),
    whatever else is scored); `needed`: the (part, key) rows this run takes from them."""
    found: dict[str, tuple[Path, dict]] = {}
    for run, was in runs:
        diff = differences({k: v for k, v in was.items() if k != "energy_sha256"},
                           {k: v for k, v in identity.items() if k != "energy_sha256"})
        if diff:
            raise TextebmError(f"--reuse {run}: scored with other inputs than this run's: {'; '.join(diff)}")
        hashes = was["energy_sha256"]
        want = [(j, h) for j, h in enumerate(hashes) if h in identity["energy_sha256"] and h not in found]
        if not want:
            continue
        rows: dict[tuple[str, str], list] = {}
        f = run / "windows.jsonl"
        for lineno, r in iter_jsonl(f):
            part = r.get("part")
            terms = r.get("terms" if part == "window" else "per_energy")
            if (part not in _TERM_KEYS or not isinstance(r.get("key"), str) or not isinstance(terms, list)
                    or len(terms) != len(hashes)
                    or not all(isinstance(t, dict) and all(k in t for k in _TERM_KEYS[part]) and t["key"] == r["key"]
                               for t in terms)):
                raise InputError(f, f"not a row of `{PPL_KIND}` with the terms of {len(hashes)} energies",
                                 line=lineno)
            rows[part, r["key"]] = terms
        missing = [k for k in needed if k not in rows]
        if missing:
            raise InputError(f, f"has no row for {missing[0][0]} {missing[0][1]} "
                             f"({len(missing)} of the {len(needed)} rows this run needs are missing)")
        for j, h in want:
            found[h] = (run, {k: rows[k][j] for k in needed})
    return found


def _compare(cfg, paths: list[Path], st: _Setup, wins) -> tuple[list[dict], list[np.ndarray]]:
    """Perplexity of each --compare LM on the continuation tokens of the windows, under the same
    rule as the base LM (fixed length: [eos] and layout symbols banned, renormalised), and its
    summed negative log-likelihood of each window ((W,) each, for the intervals)."""
    out, nll = [], []
    device = st.base.device
    for opt, path in zip(cfg.compare, paths):
        dtype = resolve_precision(st.precision, device.type, inference=True).dtype
        lm, tok, meta = load_lm(path, dtype=dtype, device=device, option="--compare")
        other = BaseLM(lm, tok, meta, st.energies[0].vocab, name=f"--compare {opt}")
        other.check_length(st.prefix_len, st.length, "--prefix-len")
        lp = other.continuation_logprobs([list(w.ids[:st.prefix_len]) for w in wins],
                                         [list(w.ids[st.prefix_len:]) for w in wins], cfg.batch_size)
        n_params = sum(p.numel() for p in lm.parameters())
        out.append({"model": str(path), "parameters": n_params, "ppl": math.exp(-float(lp.sum()) / lp.size),
                    "tokens": int(lp.size)})
        nll.append(-lp.sum(1))  # (W,)
        del lm
    return out, nll


# ---------------------------------------------------------------- residual generate


def _prefixes_from_file(path: str, vocab, prefix_len: int, text_field: str | None = None,
                        id_field: str | None = None) -> list[tuple[str, list[int], list[int]]]:
    """(key, last p tokens, no real continuation) of each text of --prefixes; a prefix too short or
    an id given twice (the key of its row, its seed and its place on resume) names its line."""
    out, seen = [], {}
    for i, (line, row) in enumerate(read_numbered_examples(path, text_field, id_field=id_field, labels=False)):
        ids = vocab(str(row.get("text", "")), add_special_tokens=False)["input_ids"]
        if len(ids) < prefix_len:
            raise InputError(path, f"a prefix of {len(ids)} tokens where the energy needs {prefix_len} "
                                   "(--prefix-len)", line)
        key = example_id(row, i)
        if key in seen:
            raise InputError(path, f"the id {key!r} again (first on line {seen[key]}); each prefix needs an id of "
                                   "its own: it keys the prefix's row and seed", line)
        seen[key] = line
        out.append((key, ids[-prefix_len:], []))
    return out


def residual_generate(cfg: ResidualGenerateConfig) -> dict:
    """Algorithm 1 for every prefix; rows with the joint and the base continuation, the
    candidates' energies and the weights' ESS; diversity, log-probability densities and the judge."""
    check_config(cfg)
    out = Path(cfg.out)
    check_output_dir(out, GENERATE_KIND, cfg.overwrite)
    partial = PartialFile(out, GENERATE_KIND)
    partial.check()
    judge = detect.load_detector(cfg.judge, option="--judge") if cfg.judge else None  # bad input before work
    st = _setup(cfg, [cfg.energy])
    if judge is not None:
        _check_judge(judge, cfg.judge, st)
    energy, vocab = st.energies[0], st.energies[0].vocab
    if cfg.data:
        wins = _test_windows(cfg, vocab, st.length, st.prefix_len)
        _check_continuations(cfg, st, wins)
        items = [(w.key, list(w.ids[:st.prefix_len]), list(w.ids[st.prefix_len:])) for w in wins]
    else:
        items = _prefixes_from_file(cfg.prefixes, vocab, st.prefix_len, cfg.text_field, cfg.id_field)
    identity = {"command": GENERATE_KIND, "base_sha256": folder_sha256(st.base_path),
                "energy_sha256": folder_sha256(st.energy_paths[0]), "prefixes_sha256": json_sha256(items),
                "prefix_len": st.prefix_len, "length": st.length, "n": cfg.n, "top_k": cfg.top_k,
                "seed": cfg.seed, "precision": st.precision}
    done = {r["key"] for r in partial.start(identity)}
    todo = [it for it in items if it[0] not in done]
    t0 = time.perf_counter()
    with partial, _progress(len(todo) * cfg.n, cfg.progress, "candidate") as bar:
        for i, (key, prefix, real) in enumerate(todo):
            _log_progress(i, len(todo), t0, "prefixes")
            try:
                js = joint_sample(st.base, energy, prefix, st.length, cfg.n, cfg.top_k, derive_seed(cfg.seed, key),
                                  cfg.batch_size)
            except ValueError as e:  # resampling refuses NaN or infinite energies
                raise TextebmError(f"--energy {cfg.energy}: {e} (prefix {key}); nothing was written for it") from None
            partial.append([{"key": key, "prefix": prefix, "real": real, "joint": js.tokens, "base": js.candidates[0],
                             "index": js.index, "ess": js.ess, "energies": js.energies.tolist(),
                             "logq": js.logq.tolist()}])
            bar.update(cfg.n)
    elapsed = time.perf_counter() - t0
    order = {it[0]: i for i, it in enumerate(items)}
    rows = sorted(partial.rows(), key=lambda r: order[r["key"]])
    metrics = _generation_metrics(rows, st, cfg, elapsed)
    if judge is not None:
        metrics["judge"] = _judge(judge, cfg.judge, rows, st)

    def write(tmp: Path) -> None:
        with atomic_write(tmp / "generations.jsonl") as f:
            for r in rows:
                f.write(json.dumps({"key": r["key"], "prefix": vocab.decode(r["prefix"]),
                                    "joint": vocab.decode(r["joint"]), "base": vocab.decode(r["base"]),
                                    **({"real": vocab.decode(r["real"])} if r["real"] else {}),
                                    "ess": r["ess"], "energy_joint": r["energies"][r["index"]],
                                    "energy_base": r["energies"][0], "ids": {k: r[k] for k in
                                                                            ("prefix", "joint", "base", "real")}},
                                   ensure_ascii=False) + "\n")
        write_json(tmp / "metrics.json", metrics)
        report.write_generate_report(tmp, metrics, rows, st.base, vocab)

    _finish(out, GENERATE_KIND, cfg.overwrite, partial, write)
    return metrics


def _generation_metrics(rows: list[dict], st: _Setup, cfg, elapsed: float) -> dict:
    """Diversity, the base LM's untruncated log-probability and the energy of the joint, the base
    and (with --data) the real continuations; the weights' effective sample size."""
    groups = {"joint": [r["joint"] for r in rows], "base": [r["base"] for r in rows]}
    if rows and rows[0]["real"]:
        groups["real"] = [r["real"] for r in rows]
    out = {"prefixes": len(rows), "n": cfg.n, "top_k": cfg.top_k, "prefix_len": st.prefix_len,
           "length": st.length, "precision": st.precision, "precision_tolerance": st.tolerance,
               "seconds": round(elapsed, 1),
           "ess_mean": float(np.mean([r["ess"] for r in rows])), "ess_median": float(np.median([r["ess"] for r in rows])),
           "groups": {}}
    prefixes = [r["prefix"] for r in rows]
    # The joint and the base continuations were scored while sampling (their candidates' energies
    # are in the rows); only the real ones are scored here.
    known = {"joint": [r["energies"][r["index"]] for r in rows], "base": [r["energies"][0] for r in rows]}
    for name, seqs in groups.items():
        lp = st.base.continuation_logprobs(prefixes, seqs, cfg.batch_size).sum(1)  # (N,)
        e = (np.asarray(known[name]) if name in known
             else st.energies[0].energies([p + s for p, s in zip(prefixes, seqs)], cfg.batch_size))
        out["groups"][name] = {**ngram_ratios(seqs), "lm_logprob_mean": float(lp.mean()),
                               "energy_mean": float(e.mean()), "lm_logprob": lp.tolist(), "energy": e.tolist()}
    return out


def _check_judge(judge, path: str, st: _Setup) -> None:
    """The --judge detector must score windows of p + m tokens in the energy's vocabulary (checked
    before any work)."""
    scorer, _, info = judge
    if not same_vocab(scorer.vocab, st.energies[0].vocab):
        raise TextebmError(f"--judge {path}: its windows are in another vocabulary than the energy's")
    length = detect.scorer_length(scorer, info)
    if length != st.prefix_len + st.length:
        raise TextebmError(f"--judge {path}: scores windows of {length} tokens, these are "
                           f"{st.prefix_len + st.length}")


def _judge(judge, path: str, rows: list[dict], st: _Setup) -> dict:
    """A paper-c detector's view of the base and the joint continuations (and the real ones)."""
    scorer, rule, _ = judge
    out = {"detector": str(path)}
    scores = {name: scorer.score_ids([r["prefix"] + r[name] for r in rows])
              for name in ("base", "joint", "real") if rows and rows[0][name]}
    for name in ("base", "joint"):
        s = scores[name]
        out[name] = {"p_generated_mean": float(rule.prob_generated(s).mean()),
                     "flagged": float((rule.oriented(s) > rule.threshold).mean())}
        if "real" in scores:
            out[name].update(detect.evaluate(rule, scores["real"], s))
    return out


# ---------------------------------------------------------------- residual repetitions (table 3)


def _find_repetitions(cfg, st: _Setup, wins) -> tuple[list[dict], int]:
    """The first position of each window's continuation (the base LM's own with --source sample,
    drawn per window from seed (--seed, window); the real one otherwise) whose token already occurs
    in x_<t (prefix and continuation so far), windows in order until --examples are found; with
    the number of windows searched."""
    p, found, searched = st.prefix_len, [], 0
    for s in range(0, len(wins), cfg.batch_size):
        batch = wins[s:s + cfg.batch_size]
        if cfg.source == "sample":
            gens = st.base.sample([st.base.context(w.ids[:p]) for w in batch], st.length,
                                  [derive_seed(cfg.seed, w.key, "sample") for w in batch], cfg.top_k, cfg.batch_size)
            conts = [g.tokens for g in gens]
        else:
            conts = [list(w.ids[p:]) for w in batch]
        for w, cont in zip(batch, conts):
            searched += 1
            seq = [*w.ids[:p], *cont]
            i = next((i for i in range(p, len(seq)) if seq[i] in seq[:i]), None)
            if i is not None:
                found.append({"key": w.key, "position": i - p + 1, "context": seq[:i], "token": seq[i],
                              "continuation": list(cont)})
                if len(found) == cfg.examples:
                    return found, searched
    return found, searched


def _token_text(vocab, i: int) -> str:
    """A token as a reader sees it: its text, or quoted where it is only white space."""
    text = vocab.decode([i])
    return text.strip() or repr(text)


def residual_repetitions(cfg: ResidualRepetitionsConfig) -> dict:
    """Table 3 of Deng et al. (2020): at positions where a continuation repeats a token of x_<t,
    the base LM's and the joint model's P(x_t | x_<t) over the base LM's top K candidates
    (`bounds.next_token_joint`), per example and summed up (`bounds.repetition_summary`)."""
    check_config(cfg)
    out = Path(cfg.out)
    check_output_dir(out, REPETITIONS_KIND, cfg.overwrite)
    partial = PartialFile(out, REPETITIONS_KIND)
    partial.check()
    st = _setup(cfg, [cfg.energy])
    energy, vocab = st.energies[0], st.energies[0].vocab
    writable = st.base.vocab_size - len(set(st.base.banned))
    if cfg.candidates > writable:
        raise TextebmError(f"--candidates {cfg.candidates}: {st.base.name} writes {writable} tokens; ask for at most "
                           f"{writable}")
    wins = _test_windows(cfg, vocab, st.length, st.prefix_len)
    if cfg.source == "real":
        _check_continuations(cfg, st, wins)
    items, searched = _find_repetitions(cfg, st, wins)
    if not items:
        what = "the base LM's continuations" if cfg.source == "sample" else "the real continuations"
        raise TextebmError(f"--data {cfg.data}: no token of {what} of the {searched} windows of split {cfg.split!r} "
                           f"repeats one before it (--source {cfg.source}); give more --windows, or another "
                           "--source or --split")
    if len(items) < cfg.examples:
        log.warning("--examples %d: only %d of the %d windows searched hold a repetition", cfg.examples, len(items),
                    searched)
    window_len = st.prefix_len + st.length
    identity = {"command": REPETITIONS_KIND, "base_sha256": folder_sha256(st.base_path),
                "energy_sha256": folder_sha256(st.energy_paths[0]), "examples_sha256": json_sha256(items),
                "prefix_len": st.prefix_len, "length": st.length, "candidates": cfg.candidates,
                "completions": cfg.completions, "source": cfg.source, "seed": cfg.seed, "precision": st.precision}
    done = {r["key"] for r in partial.start(identity)}
    todo = [it for it in items if it["key"] not in done]
    t0 = time.perf_counter()
    with partial, progress_bar(len(todo), "repetitions", "example", cfg.progress) as bar:
        for i, it in enumerate(todo):
            _log_progress(i, len(todo), t0, "examples")
            try:
                nt = bounds.next_token_joint(st.base, energy, it["context"], window_len - len(it["context"]) - 1,
                                             cfg.candidates, cfg.completions, derive_seed(cfg.seed, it["key"], "joint"),
                                             include=[it["token"]], chunk=cfg.chunk, batch_size=cfg.batch_size)
            except FloatingPointError as e:
                raise TextebmError(
                    f"--energy {cfg.energy}: {e} (window {it['key']}); nothing was written for it") from None
            partial.append([{**it, "terms": nt.as_row()}])
            bar.update(1)
    elapsed = time.perf_counter() - t0
    order = {it["key"]: i for i, it in enumerate(items)}
    rows = sorted(partial.rows(), key=lambda r: order[r["key"]])
    examples = []
    for r in rows:
        ex = bounds.repetition_example(bounds.NextToken.from_row(r["terms"]), r["token"])
        for model in ("base", "joint"):
            ex[model] = [{"token": _token_text(vocab, c["id"]), **c} for c in ex[model]]
        examples.append({"key": r["key"], "position": r["position"], "context": vocab.decode(r["context"]),
                         "context_tail": vocab.decode(r["context"][-32:]), "token": _token_text(vocab, r["token"]),
                         **ex})
    metrics = {"corpus": corpus_name(cfg.data), "split": cfg.split, "source": cfg.source,
               "top_k": cfg.top_k if cfg.source == "sample" else None, "prefix_len": st.prefix_len,
               "length": st.length, "candidates": cfg.candidates, "completions": cfg.completions,
               "precision": st.precision, "precision_tolerance": st.tolerance, "seconds": round(elapsed, 1),
               "base": str(st.base_path), "energy": str(st.energy_paths[0]), "kind": energy.spec.kind,
               "init": energy.spec.init,
               "windows_searched": searched, "windows_with_repetition": len(items),
               "summary": bounds.repetition_summary(examples, cfg.bootstrap, derive_seed(cfg.seed, "bootstrap")),
               "examples": examples}

    def write(tmp: Path) -> None:
        with atomic_write(tmp / "examples.jsonl") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        write_json(tmp / "metrics.json", metrics)
        report.write_repetitions_report(tmp, metrics)

    _finish(out, REPETITIONS_KIND, cfg.overwrite, partial, write)
    return metrics
