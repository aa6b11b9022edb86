"""`textebm tag grid --config FILE --out DIR`: paper e's semi-supervised tagging grid (tables 3
and 4 of Song & Ou 2021) as a config, on the grid runner (`textebm.grid`).

    textebm tag grid --config bench/tagging/cpu.json --out runs/tag-grid --plan
    textebm tag grid --config bench/tagging/cpu.json --out runs/tag-grid [--shard 1/2]

The config (JSON, see bench/tagging/cpu.json and docs/tag-grid.md):

- `data`: a `data prepare brown-pos` folder (train, dev, test splits); `labelled`: the 100 % set's
  size; `proportions` of it (nested: 2 % inside 10 % inside 100 %); `ratios` U/L; `methods` (of
  supervised, pretrain, joint); `seeds` (each seeds the labelled draw, `--split-seed`, and the
  training, `--seed`).
- `unlabelled` (optional): text dataset folders (`data prepare sotu`, news, shakespeare) whose
  sentences join the unlabelled pool (`tag train --unlabelled`), keyed by their content.
- `ood` (optional): a tagged folder (a `wsj-pos` one) on whose `ood_split` (test) every cell at
  labelled proportion `ood_proportion` (0.1) is evaluated too.
- `options`: `tag train` options by method (`supervised`, `pretrain`, `joint`) and for all
  (`all`), fixed for every cell as the paper fixed its hyper-parameters: keys are the option names
  with underscores (`epochs`, `lr`, `pretrain_epochs`, ...); what the grid sets itself (data, out,
  method, labelled, proportion, ratio, seed, split_seed, init, threads) is refused.

Cells: supervised once per (proportion, seed), U/L = 0; pretrain and joint per (proportion, U/L,
seed). A U/L larger than the unlabelled pool allows at a proportion is replaced by the largest the
pool allows (once), stated in results.json and tables.md. Each cell trains `tag train` into
DIR/runs/NAME-KEY (KEY: a hash of the data, the settings and the options; an interrupted run
resumes) and evaluates it with `tag eval`; a joint cell starts from the supervised run of its
(proportion, seed) (`--init`), built once under its lock (`grid.once`) whichever cell needs it
first. DIR/cells/*.json are the finished cells; then DIR/results.json, DIR/tables.md (tables 3
and 4 with mean ± sd over seeds, and the out-of-domain accuracy) and DIR/accuracy.png.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from textebm import grid
from textebm.data.ssl_split import nested_split
from textebm.data.tagging import load_tagged, load_unlabelled_text
from textebm.errors import InputError, TextebmError
from textebm.figures import new_figure, save_png
from textebm.fingerprint import folder_sha256
from textebm.io import atomic_write, read_json, read_json_object, write_json
from textebm.markdown import table
from textebm.options import check_config, type_problem
from textebm.outputs import check_output_dir, own_entries, read_marker, write_marker
from textebm.runfolder import LAST_DIR, run_completed
from textebm.tagging.commands import TagEvalConfig, tag_eval
from textebm.tagging.recipes import STAGE1
from textebm.tagging.train import (
    INIT_KEEPS,
    STAGE1_SHAPING,
    JOINT_OPTIONS,
    PRETRAIN_OPTIONS,
    SSL_OPTIONS,
    TagTrainConfig,
    tag_train,
)

log = logging.getLogger(__name__)

KIND = "tag grid"  # the kind in the marker of an --out folder the grid wrote
ENTRIES = ("runs", "cells", "results.json", "tables.md", "accuracy.png")
METHODS = ("supervised", "pretrain", "frozen", "joint")  # frozen: pretrain --freeze, the ablation
# `tag train` options the grid sets itself, per cell
GRID_SET = ("data", "out", "method", "labelled", "proportion", "ratio", "seed", "split_seed", "init", "threads",
            "progress", "resume", "overwrite", "tag_column", "unlabelled", "from_pretrained", "stage1_cache")

DEFAULTS = {"proportions": [0.02, 0.1, 1.0], "ratios": [50, 250, 500], "methods": ["supervised", "pretrain", "joint"],
            "seeds": [0, 1, 2], "unlabelled": [], "ood": "", "ood_split": "test", "ood_proportion": 0.1,
            "test_split": "test", "joint_start": "supervised", "joint_min_steps": 0, "options": {}}
JOINT_STARTS = ("supervised", "pretrained")  # joint's --init (the cell's supervised run) or --from-pretrained

# CPU seconds (user + sys) on one thread, AMD EPYC with avx512_bf16, `--precision auto` (bf16) for
# training and fp32 for evaluation, at the default config's sizes (embed 64, hidden 100, noise LM
# 64/100, batch 32): per sentence and pass, from `time`d `tag train` / `tag eval` runs on brown-pos
# (docs/tag-grid.md, bench/results/tagging/README.md: the runs, and how to recalibrate). A DNCE sentence costs a fixed part and
# a part per word of the vocabulary (the noise LM's softmax while it draws and scores, the embeddings'
# gradients and AdamW): 13.1 ms at 12.6k words and 37.5 ms at 45.6k (pools of 12,500 and 125,000
# sentences, at most 60 tokens each, quiet), so 3.8 ms + 0.74 us a word; 11.2 ms measured at 10k.
SECONDS = {"labelled": 0.0016,      # one labelled sentence through the CRF's forward + backward
           "unlabelled": 0.0038,    # one unlabelled sentence of DNCE (with its noise sentences and noise LM) ...
           "per_word": 0.74e-6,     # ... plus this per word of the vocabulary
           "frozen": 0.001,         # pretrain stage 2: a labelled sentence, the BiLSTM frozen
           "eval": 0.00025,         # one sentence tagged (Viterbi) by `tag eval` or a dev evaluation
           "start": 4.0,            # reading the data, drawing the split, building the vocabulary: per run
           "pool": 13.0}            # reading and cutting the `unlabelled` corpora (184k rows): per run that has them
# --char-cnn's cost as a factor of the word-only network's, from `tag train` runs side by side
# (docs/tag-grid.md): 40 DNCE steps of 32 sentences at 2 % / U/L 50 of a 45,000-sentence labelled set, 0.52 s a step
# against 0.24 (bf16, one thread); a labelled or tagged sentence about twice.
CHAR_COST = {"unlabelled": 2.2, "labelled": 2.0, "eval": 2.0}
# The vocabulary of labelled + n pool sentences (min_count 2) grows as about 41 n^0.594 words: through
# the 4.3k and 59.7k counted at 2,500 and 214k (brown-pos with sotu, news, shakespeare), 10 % below the
# 12.6k and 31.6k counted at 12,500 and 62,500.
VOCAB_GROWTH = (41.0, 0.594)


@dataclass(kw_only=True)
class TagGridConfig(grid.GridOptions):
    config: str = field(metadata={"help": "grid config JSON (see bench/tagging/cpu.json and docs/ssl.md)"})
    out: str = field(metadata={"help": "folder of every run and cell and the results; a folder the grid wrote "
                                       "continues where it stopped (it is a cache)"})
    report: bool = field(default=False, metadata={
        "help": "train nothing: write results.json, tables.md and accuracy.png from the cells finished so far "
                "(a grid that spans several sessions or shards), stating how many are missing"})

    def check(self) -> None:
        super().check()
        if self.report and self.plan:
            raise TextebmError("--report and --plan: give one (--plan lists what is left, --report tables what "
                               "is done)")


# ---------------------------------------------------------------- config


def _train_fields() -> dict[str, dataclasses.Field]:

    return {f.name: f for f in dataclasses.fields(TagTrainConfig)}


def read_config(path: str | Path) -> dict:
    """The checked config with its defaults; a bad key or value is an InputError naming the file and
    the key."""
    raw = read_json_object(path, "tag grid config")
    known = {"data", "labelled", *DEFAULTS}
    for k in raw:
        if k not in known:
            raise InputError(path, f"`{k}` is not a setting of the grid (known: {', '.join(sorted(known))})")
    for k in ("data", "labelled"):
        if k not in raw:
            raise InputError(path, f"missing `{k}`")
    cfg = {**DEFAULTS, **raw}
    integer = lambda v: isinstance(v, int) and not isinstance(v, bool)
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if not isinstance(cfg["data"], str) or not Path(cfg["data"], "train.jsonl").is_file():
        raise InputError(path, f"`data`: {cfg['data']!r} is not a dataset folder with train.jsonl "
                               "(run `textebm data prepare brown-pos`)")
    if not integer(cfg["labelled"]) or cfg["labelled"] < 1:
        raise InputError(path, f"`labelled` must be a whole number >= 1, got {cfg['labelled']!r}")
    if cfg["labelled"] > (n := TagGrid.count(cfg["data"], "train")):
        raise InputError(path, f"`labelled`: {cfg['labelled']:,} is more than the {n:,} training sentences of "
                               f"{cfg['data']}")
    checks = {"proportions": (lambda v: number(v) and 0 < v <= 1, "fractions in (0, 1]"),
              "ratios": (lambda v: integer(v) and v >= 1, "whole numbers >= 1"),
              "methods": (lambda v: v in METHODS, "of " + ", ".join(METHODS)),
              "seeds": (lambda v: integer(v) and v >= 0, "whole numbers >= 0")}
    for k, (ok, what) in checks.items():
        v = cfg[k]
        if not isinstance(v, list) or not v or not all(ok(x) for x in v) or len(set(v)) != len(v):
            raise InputError(path, f"`{k}` must be a non-empty list of distinct {what}, got {v!r}")
        if k != "methods":
            cfg[k] = sorted(v)
    for p in cfg["proportions"]:
        if round(p * cfg["labelled"]) < 1:
            raise InputError(path, f"`proportions`: {p:g} of labelled={cfg['labelled']:,} leaves no sentence")
    if not integer(cfg["joint_min_steps"]) or cfg["joint_min_steps"] < 0:
        raise InputError(path, f"`joint_min_steps` must be a whole number >= 0, got {cfg['joint_min_steps']!r}")
    if cfg["joint_start"] not in JOINT_STARTS:
        raise InputError(path, f"`joint_start` must be one of {', '.join(JOINT_STARTS)}, got {cfg['joint_start']!r}")
    if "joint" in cfg["methods"] and cfg["joint_start"] == "supervised" and "supervised" not in cfg["methods"]:
        raise InputError(path, "`methods`: joint starts from the supervised tagger of its cell (`joint_start`: "
                               "supervised), so it needs supervised too")
    if not isinstance(cfg["unlabelled"], list) or not all(isinstance(f, str) and Path(f, "train.jsonl").is_file()
                                                           for f in cfg["unlabelled"]):
        raise InputError(path, f"`unlabelled` must be a list of text dataset folders (run `textebm data prepare "
                               f"sotu`, news, shakespeare), got {cfg['unlabelled']!r}")
    if not isinstance(cfg["ood"], str) or (cfg["ood"] and not Path(cfg["ood"]).is_dir()):
        raise InputError(path, f"`ood`: {cfg['ood']!r} is not a dataset folder (run `textebm data prepare wsj-pos`)")
    if cfg["ood"] and not Path(cfg["ood"], f"{cfg['ood_split']}.jsonl").is_file():
        raise InputError(path, f"`ood_split`: {cfg['ood']} has no {cfg['ood_split']}.jsonl")
    if not Path(cfg["data"], f"{cfg['test_split']}.jsonl").is_file():
        raise InputError(path, f"`test_split`: {cfg['data']} has no {cfg['test_split']}.jsonl")
    if cfg["ood"] and cfg["ood_proportion"] not in cfg["proportions"]:
        raise InputError(path, f"`ood_proportion` must be one of `proportions`, got {cfg['ood_proportion']!r}")
    _check_options(path, cfg)
    _check_shared_stage1(path, cfg)
    return cfg


def _check_shared_stage1(path, cfg: dict) -> None:
    """The cells that share pretrain's stage 1 (frozen; joint from pre-training) may not set, in
    their own section, an option that shapes stage 1 otherwise than pretrain has it: they would
    train a stage 1 of their own, and the comparison would not start from one TRF (`method_options`
    gives them pretrain's values of everything else)."""
    pre = method_options(cfg, "pretrain")
    sharing = [m for m in ("frozen", "joint") if m in cfg["methods"]
               and (m == "frozen" or cfg["joint_start"] == "pretrained")]
    for m in sharing:
        own = cfg["options"].get(m, {})
        for k in STAGE1_SHAPING:
            if k in own and own[k] != pre.get(k):
                raise InputError(path, f"`options.{m}.{k}`: {own[k]!r} where pretrain has {pre.get(k)!r}; {m} starts "
                                       "from pretrain's stage 1, so options that shape it are pretrain's (set them "
                                       "in `options.pretrain` or `options.all`)")


def _check_options(path, cfg: dict) -> None:
    """`options.{all,supervised,pretrain,joint}`: each key an option of `tag train` that the grid does
    not set, of its type; then each method's options as `tag train` checks them (bounds, options
    that do nothing with the method), the message naming the config section."""

    opts = cfg["options"]
    if not isinstance(opts, dict):
        raise InputError(path, f"`options` must be an object of method -> options, got {opts!r}")
    fields = _train_fields()
    for section, spec in opts.items():
        if section not in ("all", *METHODS):
            raise InputError(path, f"`options.{section}`: not a method (known: all, {', '.join(METHODS)})")
        if not isinstance(spec, dict):
            raise InputError(path, f"`options.{section}` must be an object of `tag train` options, got {spec!r}")
        for k, v in spec.items():
            if k in GRID_SET:
                raise InputError(path, f"`options.{section}.{k}`: the grid sets it for each cell; leave it out")
            if k not in fields or k == "COMMAND":
                raise InputError(path, f"`options.{section}.{k}` is not an option of `tag train`")
            if want := type_problem(fields[k], v):
                raise InputError(path, f"`options.{section}.{k}` must be {want}, got {v!r}")
    for method in cfg["methods"]:
        try:
            check_config(TagTrainConfig(data=cfg["data"], out="-", method=tag_method(method), labelled=cfg["labelled"],
                                        **_ratio_init(method, 1, "" if cfg["joint_start"] == "pretrained"
                                                      else "supervised-run"), **method_options(cfg, method)))
        except TextebmError as e:
            raise InputError(path, f"`options` of {method}: {e}") from None


def tag_method(method: str) -> str:
    """The `tag train --method` of a grid method (frozen is pretrain --freeze)."""
    return "pretrain" if method == "frozen" else method


def _ratio_init(method: str, ratio: int, init: str = "") -> dict:
    if method == "supervised":
        return {}
    return {"ratio": ratio, **({"init": init} if method == "joint" and init else {})}


def method_options(cfg: dict, method: str) -> dict:
    """The `tag train` options of `method`'s cells: `options.all` with `options.{method}` on top
    (keys of `all` that the method has no use for are left out, e.g. `ramp_steps` for supervised,
    and for joint from a supervised start the sizes, which it takes from that tagger). frozen is
    pretrain's options with `freeze` (and `options.frozen` on top); joint from pre-training takes
    pretrain's stage-1 options, so that the three share one stage 1 (`--stage1-cache`)."""

    if method == "frozen":
        return {**method_options(cfg, "pretrain"), "freeze": True, **cfg["options"].get("frozen", {})}
    pretrained = method == "joint" and cfg.get("joint_start") == "pretrained"
    unused = {"supervised": SSL_OPTIONS + PRETRAIN_OPTIONS + JOINT_OPTIONS, "pretrain": JOINT_OPTIONS,
              "joint": PRETRAIN_OPTIONS + ([] if pretrained else list(INIT_KEEPS))}[method]
    shared = {k: v for k, v in cfg["options"].get("all", {}).items() if k not in unused}
    if pretrained:  # the stage 1 of pretrain's cells: every option it depends on, as pretrain has it
        pre = method_options(cfg, "pretrain")
        shared.update({k: pre[k] for k in STAGE1_SHAPING if k in pre})
        shared["from_pretrained"] = True
    return {**shared, **cfg["options"].get(method, {})}


# ---------------------------------------------------------------- cells


@dataclass(frozen=True)
class Setting:
    """One trained tagger: a method at a labelled proportion, U/L (0 for supervised) and seed."""

    method: str
    proportion: float
    ratio: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.method}-p{self.proportion:g}-r{self.ratio}-s{self.seed}"


def relative_error_reduction(accuracy: float, reference: float) -> float:
    """Table 4's relative improvement, in %: the share of the reference's errors removed,
    100 (e_ref - e) / e_ref with e = 1 - accuracy (negative when `accuracy` is below the reference)."""
    if reference >= 1.0:
        return 0.0 if accuracy >= 1.0 else -math.inf
    return 100.0 * (accuracy - reference) / (1.0 - reference)


class TagGrid:
    """The grid's runs and cells in `out` (see the module doc)."""

    def __init__(self, cfg: dict, out: Path, threads: int = 0, progress: bool = False):

        self.cfg, self.out, self.threads, self.progress = cfg, out, threads, progress
        self.data_sha = folder_sha256(cfg["data"])
        # the other corpora of the unlabelled pool, by content (a pretrain or joint cell's input)
        self.unlabelled_sha = [folder_sha256(f) for f in cfg["unlabelled"]]
        self.ood_sha = folder_sha256(cfg["ood"]) if cfg["ood"] else ""
        self.ratios, self.deviations = self.ratios_by_proportion()

    def ratios_by_proportion(self) -> tuple[dict[float, list[int]], list[str]]:
        """The U/L run at each proportion: the config's ratios that the pool allows, and in place
        of those it does not, the largest it allows (smallest over seeds and methods), once."""

        cfg = self.cfg
        ssl = [m for m in cfg["methods"] if m != "supervised"]
        if not ssl:
            return {p: [] for p in cfg["proportions"]}, []
        train = [r["tokens"] for r in load_tagged(cfg["data"], "train", tags=False)]
        extra = load_unlabelled_text(cfg["unlabelled"], "`unlabelled`") if cfg["unlabelled"] else []
        largest = {p: math.inf for p in cfg["proportions"]}
        for method in ssl:
            excluded = self._excluded(method)
            for seed in cfg["seeds"]:
                split = nested_split(train, cfg["labelled"], seed, proportions=cfg["proportions"], extra=extra,
                                     exclude=excluded,
                                     max_pool_tokens=method_options(cfg, method).get("unlabelled_max_tokens", 0))
                for p in cfg["proportions"]:
                    largest[p] = min(largest[p], split.max_ratio(p))
        ratios, deviations = {}, []
        for p in cfg["proportions"]:
            fit = [r for r in cfg["ratios"] if r <= largest[p]]
            over = [r for r in cfg["ratios"] if r > largest[p]]
            if over and largest[p] >= 1 and largest[p] not in fit:
                fit.append(int(largest[p]))
            if over:
                deviations.append(f"labelled {p:g}: U/L {', '.join(map(str, over))} need more unlabelled sentences "
                                  f"than the pool has (largest U/L it allows: {int(largest[p])}); "
                                  + (f"run U/L {', '.join(map(str, fit))}" if fit else "no semi-supervised cell"))
            ratios[p] = fit
        return ratios, deviations

    def _excluded(self, method: str) -> list[list[str]]:
        """The sentences `tag train` keeps out of the pool (its dev split, and test): the same rule as
        `tagging/train.py`, so that the ratios planned here are the ones it accepts."""

        data = self.cfg["data"]
        eval_split = method_options(self.cfg, method).get("eval_split", None)
        eval_split = "dev" if eval_split is None and Path(data, "dev.jsonl").is_file() else eval_split
        out = [r["tokens"] for r in load_tagged(data, eval_split, tags=False)] if eval_split else []
        if eval_split != "test" and Path(data, "test.jsonl").is_file():
            out += [r["tokens"] for r in load_tagged(data, "test", tags=False)]
        return out

    def settings(self) -> list[Setting]:
        cfg, out = self.cfg, []
        for p in cfg["proportions"]:
            for method in cfg["methods"]:
                for r in ([0] if method == "supervised" else self.ratios[p]):
                    out += [Setting(method, p, r, s) for s in cfg["seeds"]]
        return out

    def cell_options(self, s: Setting) -> dict:
        """`method_options`, and for a joint cell at least `joint_min_steps` optimizer steps: its
        epochs (passes over the unlabelled sentences, the main stream) raised where one pass of a
        small pool would give the CRF fewer labelled batches than the supervised run has."""
        opts = method_options(self.cfg, s.method)
        need = self.cfg["joint_min_steps"]
        if s.method == "joint" and need:
            n_unl = s.ratio * round(s.proportion * self.cfg["labelled"])
            steps_per_pass = math.ceil(n_unl / opts.get("batch_size", 32))
            if opts.get("epochs", 1.0) * steps_per_pass < need:
                opts["epochs"] = need / steps_per_pass
        return opts

    def train_settings(self, s: Setting) -> dict:
        """Everything a run's weights depend on (by content: the data folder's hash)."""
        opts = self.cell_options(s)
        d = {"method": s.method, "data": self.data_sha, "labelled": self.cfg["labelled"], "proportion": s.proportion,
             "ratio": s.ratio, "seed": s.seed, "options": {k: v for k, v in opts.items() if k != "freeze"}}
        if s.method == "pretrain" and not opts.get("freeze"):
            # stage 2 fine-tunes every weight since issue 34; a frozen cell keeps the key it had before
            d["stage2"] = "every weight"
        if s.method == "joint" and self.cfg["joint_start"] == "supervised":
            d["init"] = self.train_settings(Setting("supervised", s.proportion, 0, s.seed))
        if s.method != "supervised" and self.unlabelled_sha:
            d["unlabelled"] = self.unlabelled_sha
        return d

    def run_dir(self, s: Setting) -> Path:
        return self.out / "runs" / f"{s.name}-{grid.key(self.train_settings(s))}"

    def ood_here(self, s: Setting) -> bool:
        return bool(self.cfg["ood"]) and s.proportion == self.cfg["ood_proportion"]

    def cell(self, s: Setting) -> grid.Cell:
        settings = {"train": self.train_settings(s), "test_split": self.cfg["test_split"],
                    "ood": {"data": self.ood_sha, "split": self.cfg["ood_split"]} if self.ood_here(s) else None}
        return grid.Cell(s.name, settings, s, self.seconds(s))

    def seconds(self, s: Setting) -> float:
        """Estimated CPU seconds of a cell on one thread (a joint cell's supervised start is the
        supervised cell's)."""
        opts = self.cell_options(s)
        n_lab = round(s.proportion * self.cfg["labelled"])
        batch = opts.get("batch_size", 32)
        epochs = opts.get("epochs", 1.0)

        def passes(n: int, epochs: float, max_steps: int) -> float:  # sentences processed
            return min(epochs * n, max_steps * batch) if max_steps else epochs * n

        def evaluations(n: int) -> float:  # dev sentences tagged: after each full epoch run, and at the end
            run = passes(n, epochs, opts.get("max_steps", 0)) / n
            return self._eval_sentences(opts) * (math.floor(run) + 1)

        chars = CHAR_COST if opts.get("char_cnn") else {"labelled": 1.0, "unlabelled": 1.0, "eval": 1.0}
        t = SECONDS["start"] + self._test_sentences(s) * SECONDS["eval"] * chars["eval"]
        n_unl = s.ratio * n_lab
        dnce = self._dnce_seconds(n_unl, opts) * chars["unlabelled"]
        labelled = SECONDS["labelled"] * chars["labelled"]
        evals = evaluations(n_unl if s.method == "joint" else n_lab) * SECONDS["eval"] * chars["eval"]
        if s.method == "supervised":
            return t + passes(n_lab, epochs, opts.get("max_steps", 0)) * labelled + evals
        # stage 1, counted once per pool: in the pretrain cell, or where there is none, in frozen's or joint's
        shares = [m for m in ("pretrain", "frozen", "joint") if m in self.cfg["methods"]
                  and (m != "joint" or opts.get("from_pretrained"))]
        if s.method in ("pretrain", "frozen") or opts.get("from_pretrained"):
            if shares and shares[0] == s.method:
                t += SECONDS["start"] + passes(n_unl, opts.get("pretrain_epochs", 1.0), opts.get("pretrain_steps", 0)) * dnce
            t += SECONDS["pool"] * bool(self.cfg["unlabelled"])
        if s.method in ("pretrain", "frozen"):
            stage2 = SECONDS["frozen"] * chars["labelled"] if opts.get("freeze") else labelled
            return t + passes(n_lab, epochs, opts.get("max_steps", 0)) * stage2 + evals
        # joint: each step an unlabelled batch by DNCE and a labelled batch of the same size by the CRF
        t += passes(n_unl, epochs, opts.get("max_steps", 0)) * (dnce + labelled)
        return t + evals + SECONDS["pool"] * bool(self.cfg["unlabelled"]) * (not opts.get("from_pretrained"))

    @staticmethod
    def _dnce_seconds(n_unlabelled: int, opts: dict) -> float:
        """One unlabelled sentence's DNCE pass, for a vocabulary grown from `n_unlabelled` sentences
        (VOCAB_GROWTH), or `max_words` when that is smaller."""
        words = VOCAB_GROWTH[0] * n_unlabelled ** VOCAB_GROWTH[1]
        if opts.get("max_words", 0):
            words = min(words, opts["max_words"])
        return SECONDS["unlabelled"] + SECONDS["per_word"] * words

    def _eval_sentences(self, opts: dict) -> int:
        split = opts.get("eval_split", "dev")
        n = self.count(self.cfg["data"], split) if split else 0
        return min(n, opts["eval_limit"]) if opts.get("eval_limit") else n

    def _test_sentences(self, s: Setting) -> int:
        n = self.count(self.cfg["data"], self.cfg["test_split"])
        return n + (self.count(self.cfg["ood"], self.cfg["ood_split"]) if self.ood_here(s) else 0)

    @staticmethod
    def count(folder: str, split: str) -> int:
        """The sentences (non-blank lines) of FOLDER/SPLIT.jsonl; 0 when it is missing."""
        f = Path(folder, f"{split}.jsonl")
        if not f.is_file():
            return 0
        with open(f, "rb") as fh:
            return sum(1 for line in fh if line.strip())

    # ------------------------------------------------------------ computing

    def ensure_run(self, s: Setting) -> Path:
        """The trained tagger of setting `s` (trained once, under its lock; an interrupted run resumes)."""

        path = self.run_dir(s)

        def build():
            init = ""
            if s.method == "joint" and self.cfg["joint_start"] == "supervised":
                init = str(self.ensure_run(Setting("supervised", s.proportion, 0, s.seed)))
            opts = self.cell_options(s)
            if opts.get("from_pretrained") or tag_method(s.method) == "pretrain":
                opts["stage1_cache"] = str(self.out / "stage1")  # shared by the cells of one pool, by content
            log.info("training %s", path.name)
            tag_train(TagTrainConfig(
                data=self.cfg["data"], out=str(path), method=tag_method(s.method), labelled=self.cfg["labelled"],
                proportion=s.proportion, seed=s.seed, split_seed=s.seed, threads=self.threads,
                progress=self.progress, resume=(path / "config.json").is_file(), **_ratio_init(s.method, s.ratio, init),
                **({"unlabelled": list(self.cfg["unlabelled"])} if s.method != "supervised" else {}), **opts))

        return grid.once(path, lambda: run_completed(path), build)

    def compute(self, gcell: grid.Cell) -> dict:
        """Train (unless trained) and evaluate one cell: the grid runner's compute."""

        s: Setting = gcell.task
        run = self.ensure_run(s)
        split = self.cfg["test_split"]
        test = tag_eval(TagEvalConfig(model=str(run), data=self.cfg["data"], split=split, threads=self.threads))
        metrics = read_json(run / "metrics.json")
        out = {"method": s.method, "proportion": s.proportion, "ratio": s.ratio, "seed": s.seed,
               "labelled_sentences": round(s.proportion * self.cfg["labelled"]),
               "accuracy": test[f"{split}_accuracy"], "test_sentences": test[f"{split}_sentences"],
               "run": str(run.relative_to(self.out)), **training_steps(run, s.method, metrics)}
        if f"{split}_span_f1" in test:  # a BIO tag set (chunking, NER): span F1, the paper's figure there
            out["f1"] = test[f"{split}_span_f1"]
        # with --keep-best, the test accuracy of the last step's weights beside the kept ones'
        last, train = run / LAST_DIR, metrics["train"]
        kept_last = not train.get("validation") or train.get("kept") == train["validation"][-1]
        if last.is_dir():
            out["accuracy_last"] = tag_eval(TagEvalConfig(model=str(last), data=self.cfg["data"], split=split,
                                                          threads=self.threads))[f"{split}_accuracy"]
        else:  # the kept weights are the last ones, or a run from before RUN/last kept no copy of them
            out["accuracy_last"] = out["accuracy"] if kept_last else None
        if self.ood_here(s):
            ood_split = self.cfg["ood_split"]
            ood = tag_eval(TagEvalConfig(model=str(run), data=self.cfg["ood"], split=ood_split, threads=self.threads))
            out["ood_accuracy"] = ood[f"{ood_split}_accuracy"]
        return out


def training_steps(run: Path, method: str, metrics: dict | None = None) -> dict:
    """What a cell's run trained: its CRF steps (labelled batches), its DNCE steps (pretrain:
    stage 1's; joint: one unlabelled batch a step, and its stage 1's when it started from one), and
    with --keep-best the dev accuracy of the weights it kept beside the last epoch's (`1 -
    validation loss`). `metrics`: RUN/metrics.json when the caller has read it."""
    metrics = metrics if metrics is not None else read_json(run / "metrics.json")
    train = metrics["train"]
    out = {"crf_steps": train["steps"]}
    stage1 = metrics.get("eval", {}).get("stage1")  # where stage 1 was (the cache, or RUN/pretrain)
    if method in ("pretrain", "frozen"):
        out["dnce_steps"] = read_json(Path(stage1 or run / STAGE1) / "metrics.json")["train"]["steps"]
    elif method == "joint":
        out["dnce_steps"] = train["steps"]
        if stage1 and (Path(stage1) / "metrics.json").is_file():
            out["stage1_dnce_steps"] = read_json(Path(stage1) / "metrics.json")["train"]["steps"]
    if train.get("kept") and train.get("validation"):
        out["dev_accuracy_kept"] = 1.0 - train["kept"]["loss"]
        out["dev_accuracy_last"] = 1.0 - train["validation"][-1]["loss"]
        out["kept_epoch"] = train["kept"]["epoch"] + 1
    return out


# ---------------------------------------------------------------- report


def _mean_sd(xs: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not xs:
        return "-"
    m = statistics.fmean(xs) * scale
    if len(xs) == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {statistics.stdev(xs) * scale:.{digits}f}"


def summarise(results: list[dict], ratios: dict[float, list[int]]) -> dict:
    """Per (method, proportion, U/L): the seeds' accuracies and out-of-domain accuracies; per
    (proportion, U/L, seed), the relative error reductions (table 4), paired by seed."""
    acc: dict[tuple, dict[int, dict]] = {}
    for r in results:
        acc.setdefault((r["method"], r["proportion"], r["ratio"]), {})[r["seed"]] = r
    reductions: dict[tuple, dict[str, list[float]]] = {}
    for p, rs in ratios.items():
        sup = acc.get(("supervised", p, 0), {})
        for ratio in rs:
            pre, joint = acc.get(("pretrain", p, ratio), {}), acc.get(("joint", p, ratio), {})
            frozen = acc.get(("frozen", p, ratio), {})
            pairs = {"pretrain over sup.": (pre, sup), "joint over sup.": (joint, sup), "joint over pre.": (joint, pre),
                     "frozen over sup.": (frozen, sup)}
            red = {name: [relative_error_reduction(x[s]["accuracy"], ref[s]["accuracy"]) for s in sorted(x) if s in ref]
                   for name, (x, ref) in pairs.items()}
            red["seeds"] = {name: [s for s in sorted(x) if s in ref] for name, (x, ref) in pairs.items()}
            reductions[(p, ratio)] = red
    return {"accuracy": acc, "reductions": reductions}


def tables(summary: dict, cfg: dict, ratios: dict[float, list[int]], deviations: list[str], missing: int = 0) -> str:

    acc, red = summary["accuracy"], summary["reductions"]
    get = lambda m, p, r, k="accuracy": [c[k] for c in acc.get((m, p, r), {}).values() if k in c]
    rows3 = []
    ssl = [m for m in ("pretrain", "frozen", "joint") if m in cfg["methods"]]
    for p in cfg["proportions"]:
        rows3.append([f"{p * 100:g}% ({round(p * cfg['labelled']):,})", "0", _mean_sd(get("supervised", p, 0), 100),
                      *[""] * len(ssl)])
        for r in ratios[p]:
            rows3.append(["", str(r), "", *(_mean_sd(get(m, p, r), 100) for m in ssl)])
    heads = {"pretrain": "pre.", "frozen": "pre. (frozen)", "joint": "joint"}
    seeds = ", ".join(map(str, cfg["seeds"]))
    text = [f"# Semi-supervised tagging grid ({cfg['data']}, labelled set {cfg['labelled']:,})", ""]
    if missing:
        text += [f"**Partial (`--report`): {missing} cells not finished yet.** A mean is over the seeds finished; "
                 "'-' where none is.", ""]
    text += [f"## Table 3: test accuracy (%), mean ± sd over seeds {seeds}", "",
            "labelled: proportion (sentences). U/L = 0 is the supervised baseline; pre.: pre-training + fine-tuning "
            "every weight; pre. (frozen): the ablation, only the output layer and A trained in stage 2; joint: joint "
            f"training (from {'the pre-trained TRF' if cfg.get('joint_start') == 'pretrained' else 'the supervised tagger'}).",
            "",
            table(["labelled", "U/L", "supervised", *(heads[m] for m in ssl)], rows3,
                  ["left", "right", "right", *["right"] * len(ssl)]), "",
            "## Table 4: relative error reduction (%), mean ± sd over seeds (paired by seed)", "",
            "100 (e_ref − e) / e_ref, e = 1 − accuracy: the share of the reference's errors removed.", ""]
    cols = ["pretrain over sup.", "joint over sup.", "joint over pre."] + (["frozen over sup."]
                                                                            if "frozen" in cfg["methods"] else [])
    rows4 = [[f"{p * 100:g}%", str(r), *(_mean_sd(red[(p, r)][c], 1, 1) for c in cols)]
             for p in cfg["proportions"] for r in ratios[p]]
    text += [table(["labelled", "U/L", *cols], rows4, ["left", "right", *["right"] * len(cols)]), ""]
    if any("f1" in c for cells in acc.values() for c in cells.values()):
        rows_f1 = []
        for p in cfg["proportions"]:
            rows_f1.append([f"{p * 100:g}% ({round(p * cfg['labelled']):,})", "0",
                            _mean_sd(get("supervised", p, 0, "f1"), 100), *[""] * len(ssl)])
            rows_f1 += [["", str(r), "", *(_mean_sd(get(m, p, r, "f1"), 100) for m in ssl)] for r in ratios[p]]
        text += [f"## Span F1 (%), mean ± sd over seeds {seeds} (a BIO tag set: the paper's figure for chunking and "
                 "NER)", "", table(["labelled", "U/L", "supervised", *(heads[m] for m in ssl)], rows_f1,
                                    ["left", "right", "right", *["right"] * len(ssl)]), ""]
    if cfg["ood"]:
        p = cfg["ood_proportion"]
        rows = [["supervised", "0", _mean_sd(get("supervised", p, 0, "ood_accuracy"), 100)]]
        rows += [[m, str(r), _mean_sd(get(m, p, r, "ood_accuracy"), 100)] for m in ("pretrain", "frozen", "joint")
                 if m in cfg["methods"] for r in ratios[p]]
        text += [f"## Out of domain: {cfg['ood']} ({cfg['ood_split']}) accuracy (%) at {p * 100:g}% labelled", "",
                 table(["method", "U/L", "accuracy"], rows, ["left", "right", "right"]), ""]
    if "joint" in cfg["methods"]:
        text += ["## The paper's claims on this grid (sec. 4; tables 3 and 4)", "",
                 *[f"- {line}" for line in claims(summary, cfg, ratios)], ""]
    if deviations:
        text += ["## Deviations from the config", "", *[f"- {d}" for d in deviations], ""]
    return "\n".join(text)


def claims(summary: dict, cfg: dict, ratios: dict[float, list[int]]) -> list[str]:
    """The paper's claims counted on the finished cells, by the mean over seeds of each cell (and,
    for joint against supervised, by seed pairs): joint beats supervised; joint beats pre-training;
    at a fixed labelled size joint's accuracy rises with U/L; where joint's gain over supervised
    (relative error reduction) is largest."""
    acc, red = summary["accuracy"], summary["reductions"]
    mean = lambda m, p, r: (statistics.fmean(c["accuracy"] for c in acc[(m, p, r)].values())
                            if acc.get((m, p, r)) else None)
    cells = [(p, r) for p in cfg["proportions"] for r in ratios[p]]

    def beats(m, ref_of):
        pairs = [(mean(m, p, r), mean(*ref_of(p, r))) for p, r in cells]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        return sum(a > b for a, b in pairs), len(pairs)

    out = []
    won, n = beats("joint", lambda p, r: ("supervised", p, 0))
    by_seed = [x for p, r in cells for x in red[(p, r)]["joint over sup."]]
    out.append(f"joint beats supervised in {won} of {n} cells by the mean over seeds, and in "
               f"{sum(x > 0 for x in by_seed)} of {len(by_seed)} (cell, seed) pairs (paper: 9 of 9 for POS)")
    pair_count = lambda name: (lambda xs: f"{sum(x > 0 for x in xs)} of {len(xs)}")(
        [x for p, r in cells for x in red[(p, r)][name]])
    if "pretrain" in cfg["methods"]:
        won, n = beats("joint", lambda p, r: ("pretrain", p, r))
        out.append(f"joint beats pre-training in {won} of {n} cells by the mean over seeds, and in "
                   f"{pair_count('joint over pre.')} (cell, seed) pairs (paper: 9 of 9 for POS, \"marginally\")")
        won, n = beats("pretrain", lambda p, r: ("supervised", p, 0))
        out.append(f"pre-training beats supervised in {won} of {n} cells by the mean over seeds, and in "
                   f"{pair_count('pretrain over sup.')} (cell, seed) pairs (paper: 8 of 9 for POS)")
    if "frozen" in cfg["methods"]:
        won, n = beats("frozen", lambda p, r: ("supervised", p, 0))
        out.append(f"the frozen ablation beats supervised in {won} of {n} cells, and in "
                   f"{pair_count('frozen over sup.')} (cell, seed) pairs")
    for p in cfg["proportions"]:
        seq = [(r, mean("joint", p, r)) for r in ratios[p] if mean("joint", p, r) is not None]
        if len(seq) > 1:
            rising = all(b[1] > a[1] for a, b in zip(seq, seq[1:]))
            out.append(f"labelled {p * 100:g}%: joint's accuracy by U/L "
                       + ", ".join(f"{r}: {a * 100:.2f}" for r, a in seq)
                       + (" (rises with U/L)" if rising else " (does not rise throughout)"))
    gains = {p: statistics.fmean(x for r in ratios[p] for x in red[(p, r)]["joint over sup."])
             for p in cfg["proportions"] if any(red[(p, r)]["joint over sup."] for r in ratios[p])}
    if gains:
        best = max(gains, key=gains.get)
        out.append("joint's mean relative error reduction over supervised by labelled size: "
                   + ", ".join(f"{p * 100:g}%: {g:.1f}" for p, g in gains.items())
                   + (f"; largest at {best * 100:g}% (paper, POS: at 2 %)" if len(gains) > 1 else
                      " (one labelled size so far: where the gain is largest cannot be told yet)"))
    return out or ["no finished cell to count yet"]


def plot_lines(cfg: dict, ratios: dict[float, list[int]]) -> list[tuple[str, str, dict[float, int]]]:
    """The lines of accuracy.png: (method, label, {proportion: U/L run there}). One line per
    method and configured U/L; where the pool replaced the largest configured U/L by a smaller
    one (`ratios_by_proportion`), that line takes the replacement's point and its label says so."""

    lines = [("supervised", "supervised", {p: 0 for p in cfg["proportions"]})]
    top = max(cfg["ratios"])
    for m in ("pretrain", "joint"):
        if m not in cfg["methods"]:
            continue
        for r in sorted(cfg["ratios"]):
            points, notes = {}, []
            for p in cfg["proportions"]:
                if r in ratios.get(p, []):
                    points[p] = r
                elif r == top and ratios.get(p):
                    points[p] = max(ratios[p])
                    notes.append(f"{points[p]} at {p * 100:g}%")
            label = f"{m}, U/L={r}" + (f" ({', '.join(notes)})" if notes else "")
            lines.append((m, label, points))
    return lines


def plot(summary: dict, cfg: dict, ratios: dict[float, list[int]], path: Path) -> Path:
    """Accuracy against labelled proportion (log scale), one panel per semi-supervised method, each
    with the supervised baseline: each U/L a line (`plot_lines`), the mean over seeds with the sd
    as error bars."""

    lines = plot_lines(cfg, ratios)
    methods = [m for m in ("pretrain", "joint") if m in cfg["methods"]] or ["supervised"]
    fig = new_figure(figsize=(4.2 * len(methods), 4))
    axes = fig.subplots(1, len(methods), sharey=True, squeeze=False)[0]
    titles = {"pretrain": "pre-training + fine-tuning", "joint": "joint training", "supervised": "supervised"}
    for ax, method in zip(axes, methods):
        for m, label, points in lines:
            if m not in ("supervised", method):
                continue
            xs, ys, es = [], [], []
            for p, r in points.items():
                vals = [c["accuracy"] * 100 for c in summary["accuracy"].get((m, p, r), {}).values()]
                if vals:
                    xs.append(p * 100)
                    ys.append(statistics.fmean(vals))
                    es.append(statistics.stdev(vals) if len(vals) > 1 else 0.0)
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=label,
                            linestyle="--" if m == "supervised" else "-", color="black" if m == "supervised" else None)
        ax.set_xscale("log")
        ax.set_xticks([p * 100 for p in cfg["proportions"]], [f"{p * 100:g}" for p in cfg["proportions"]])
        ax.minorticks_off()
        ax.set_xlabel("labelled proportion (%)")
        ax.set_title(titles[method], fontsize=10)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a panel with no cell finished yet has none
            ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("test accuracy (%)")
    fig.tight_layout()
    return save_png(fig, path)


# ---------------------------------------------------------------- the command


def check_out(out: Path, plan: bool) -> None:
    """A new or empty --out is written; one the grid wrote (its marker) continues; anything else is
    refused. Then --out is created and marked, so an interrupted grid is recognised."""
    marker = read_marker(out) if out.is_dir() else None
    if marker is None or marker["kind"] != KIND:
        check_output_dir(out, KIND, False)
        marker = None
    if plan:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        if marker is None or not set(ENTRIES) <= set(own_entries(marker)):
            write_marker(out, KIND, [*own_entries(marker), *ENTRIES])
    except OSError as e:
        raise TextebmError(f"--out {out}: cannot write there ({e.strerror or e})") from None


def run_grid(cfg_: TagGridConfig) -> dict:
    """Every cell of the config (cached), then results.json, tables.md and accuracy.png; with
    --plan, the plan only (returns {})."""
    check_config(cfg_)
    threads, shard = cfg_.start()
    cfg = read_config(cfg_.config)
    out = Path(cfg_.out)
    if cfg_.report and not (out / "cells").is_dir():
        raise TextebmError(f"--report: {out} holds no cell of a grid yet (run the grid first; --plan lists the "
                           "cells)")
    check_out(out, cfg_.plan)
    g = TagGrid(cfg, out, threads, cfg_.progress and cfg_.backend == "local")
    cells = [g.cell(s) for s in g.settings()]
    runner = grid.Grid(out / "cells", g.compute)
    plan = runner.plan(cells, shard)
    if g.deviations:
        plan += "\n" + "\n".join(f"note: {d}" for d in g.deviations)
    if cfg_.plan:
        print(plan)
        return {}
    if cfg_.report:
        results = [runner.result(c) for c in cells if runner.done(c)]
        missing = len(runner.left(cells))  # distinct cells not finished
        log.info("report of %d finished cells, %d not finished", len(results), missing)
    else:
        log.info("before it starts:\n%s", plan)

        def on_result(cell: grid.Cell, r: dict) -> None:
            log.info("%s: accuracy %.4f", cell.name, r["accuracy"])

        results, missing = runner.run(cells, shard, cfg_.backend, cfg_.workers, cfg_.address, on_result), 0
    ratios = {p: rs for p, rs in g.ratios.items()}
    summary = summarise(results, ratios)
    report = {"config": cfg, "ratios": {f"{p:g}": rs for p, rs in ratios.items()}, "deviations": g.deviations,
              "cells_missing": missing, "cells": results,
              "table3": [{"method": m, "proportion": p, "ratio": r, "seeds": sorted(v),
                          "accuracy": [v[s]["accuracy"] for s in sorted(v)],
                          **({"ood_accuracy": [v[s]["ood_accuracy"] for s in sorted(v)]}
                             if all("ood_accuracy" in c for c in v.values()) else {})}
                         for (m, p, r), v in summary["accuracy"].items()],
              "table4": [{"proportion": p, "ratio": r, **red} for (p, r), red in summary["reductions"].items()]}
    write_json(out / "results.json", report)
    with atomic_write(out / "tables.md") as f:
        f.write(tables(summary, cfg, ratios, g.deviations, missing))
    plot(summary, cfg, ratios, out / "accuracy.png")
    return report
