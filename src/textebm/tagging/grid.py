"""`textebm tag grid --config FILE --out DIR`: paper e's semi-supervised tagging grid (tables 3
and 4 of Song & Ou 2021) as a config, on the grid runner (`textebm.grid`).

    textebm tag grid --config bench/tagging/cpu.json --out runs/tag-grid --plan
    textebm tag grid --config bench/tagging/cpu.json --out runs/tag-grid [--shard 1/2]

The config (JSON, see bench/tagging/cpu.json and docs/tag-grid.md; its schema `TagGridSpec`,
read and checked by the grid shell, `grid.read_config`):

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
and 4 with mean ± sd over seeds, and the out-of-domain accuracy) and DIR/accuracy.png
(`tagging/grid_report.py`). The plan prices each cell by `tagging/grid_cost.py`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textebm import grid
from textebm.data.readers import eval_split_of
from textebm.data.ssl_split import nested_split
from textebm.data.tagging import load_tagged, load_unlabelled_text, tag_set
from textebm.errors import InputError, TextebmError
from textebm.fingerprint import folder_sha256
from textebm.io import read_json
from textebm.options import check_config
from textebm.runfolder import LAST_DIR, run_completed
from textebm.tagging.commands import TagEvalConfig, tag_eval
from textebm.tagging.grid_cost import cell_seconds
from textebm.tagging.grid_report import write_report
from textebm.tagging.metrics import SCORE_NAMES, selected_score
from textebm.tagging.recipes import STAGE1
from textebm.tagging.train import (
    METHODS as TRAIN_METHODS,
    STAGE1_SHAPING,
    TagTrainConfig,
    held_out,
    tag_train,
    unused_options,
)

log = logging.getLogger(__name__)

KIND = "tag grid"  # the kind in the marker of an --out folder the grid wrote
ENTRIES = ("runs", "cells", "results.json", "tables.md", "accuracy.png")
# `tag train`'s methods, and frozen (pretrain --freeze, the ablation) beside pretrain
METHODS = tuple(m for method in TRAIN_METHODS for m in ((method, "frozen") if method == "pretrain" else (method,)))
# `tag train` options the grid sets itself, per cell
GRID_SET = ("data", "out", "method", "labelled", "proportion", "ratio", "seed", "split_seed", "init", "threads",
            "progress", "resume", "overwrite", "tag_column", "unlabelled", "from_pretrained", "stage1_cache")
JOINT_STARTS = ("supervised", "pretrained")  # joint's --init (the cell's supervised run) or --from-pretrained


@dataclass(kw_only=True)
class TagGridConfig(grid.GridOptions):
    config: str = field(metadata={"help": "grid config JSON (see bench/tagging/cpu.json and docs/tag-grid.md)"})
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


@dataclass(kw_only=True)
class TagGridSpec:
    """The grid config (JSON): its keys with their types, bounds and defaults, which `read_config`
    checks (`grid.read_config`); `check` then what they name and the rules between them."""

    data: str  # a `data prepare brown-pos` folder (train, dev, test splits)
    labelled: int = field(metadata={"min": 1})  # the 100 % set's size
    proportions: list[float] = field(default_factory=lambda: [0.02, 0.1, 1.0],
                                     metadata={"gt": 0, "max": 1, "distinct": True})
    ratios: list[int] = field(default_factory=lambda: [50, 250, 500], metadata={"min": 1, "distinct": True})
    methods: list[str] = field(default_factory=lambda: ["supervised", "pretrain", "joint"],
                               metadata={"choices": METHODS, "distinct": True})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"min": 0, "distinct": True})
    unlabelled: list[str] = field(default_factory=list)  # text dataset folders joining the pool
    ood: str = ""  # a tagged folder every cell at `ood_proportion` is evaluated on too
    ood_split: str = "test"
    ood_proportion: float = 0.1
    test_split: str = "test"
    joint_start: str = field(default="supervised", metadata={"choices": JOINT_STARTS})
    joint_min_steps: int = field(default=0, metadata={"min": 0})
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # `tag train` options: all, and by method

    def check(self, path: str | Path) -> None:
        """The folders and files the config names, the rules between its keys, and the `tag train`
        options of each method as `tag train` checks them; an InputError naming the file and the key."""
        if not Path(self.data, "train.jsonl").is_file():
            raise InputError(path, f"`data`: {self.data!r} is not a dataset folder with train.jsonl "
                                   "(run `textebm data prepare brown-pos`)")
        if self.labelled > (n := count_sentences(self.data, "train")):
            raise InputError(path, f"`labelled`: {self.labelled:,} is more than the {n:,} training sentences of "
                                   f"{self.data}")
        self.proportions, self.ratios, self.seeds = sorted(self.proportions), sorted(self.ratios), sorted(self.seeds)
        for p in self.proportions:
            if round(p * self.labelled) < 1:
                raise InputError(path, f"`proportions`: {p:g} of labelled={self.labelled:,} leaves no sentence")
        if "joint" in self.methods and self.joint_start == "supervised" and "supervised" not in self.methods:
            raise InputError(path, "`methods`: joint starts from the supervised tagger of its cell (`joint_start`: "
                                   "supervised), so it needs supervised too")
        if not all(Path(f, "train.jsonl").is_file() for f in self.unlabelled):
            raise InputError(path, f"`unlabelled` must be a list of text dataset folders (run `textebm data prepare "
                                   f"sotu`, news, shakespeare), got {self.unlabelled!r}")
        if self.ood and not Path(self.ood).is_dir():
            raise InputError(path, f"`ood`: {self.ood!r} is not a dataset folder (run `textebm data prepare wsj-pos`)")
        if self.ood and not Path(self.ood, f"{self.ood_split}.jsonl").is_file():
            raise InputError(path, f"`ood_split`: {self.ood} has no {self.ood_split}.jsonl")
        if not Path(self.data, f"{self.test_split}.jsonl").is_file():
            raise InputError(path, f"`test_split`: {self.data} has no {self.test_split}.jsonl")
        if self.ood and self.ood_proportion not in self.proportions:
            raise InputError(path, f"`ood_proportion` must be one of `proportions`, got {self.ood_proportion!r}")
        cfg = dataclasses.asdict(self)
        _check_options(path, cfg)
        _check_shared_stage1(path, cfg)


def read_config(path: str | Path) -> dict:
    """The checked config with its defaults (`TagGridSpec`), as a dict; a bad key or value is an
    InputError naming the file and the key."""
    return grid.read_config(path, TagGridSpec, "tag grid config")


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
    """`options.{all,supervised,pretrain,frozen,joint}`: each key an option of `tag train` that the
    grid does not set, of its type; then each method's options as `tag train` checks them (bounds,
    options that do nothing with the method), the message naming the config section; and the split
    each method's runs evaluate on exists."""
    train_keys = {f.name: f.name for f in dataclasses.fields(TagTrainConfig) if f.name not in GRID_SET}
    for section, spec in cfg["options"].items():
        if section not in ("all", *METHODS):
            raise InputError(path, f"`options.{section}`: not a method (known: all, {', '.join(METHODS)})")
        for k in spec:
            if k in GRID_SET:
                raise InputError(path, f"`options.{section}.{k}`: the grid sets it for each cell; leave it out")
        grid.check_section(path, f"options.{section}", spec, TagTrainConfig, train_keys,
                           unknown="an option of `tag train`")
    for method in cfg["methods"]:
        grid.check_command(path, lambda m=method: train_config(cfg, m), head=f"`options` of {method}: ")
        tc = train_config(cfg, method)
        split = eval_split_of(tc.data, tc.eval_split)
        if split and not Path(cfg["data"], f"{split}.jsonl").is_file():
            raise InputError(path, f"`options` of {method}: `tag train` evaluates on the {split} split "
                                   f"(`eval_split`, by default dev), which {cfg['data']} lacks; set `eval_split` "
                                   "(\"\": none)")


def tag_method(method: str) -> str:
    """The `tag train --method` of a grid method (frozen is pretrain --freeze)."""
    return "pretrain" if method == "frozen" else method


def _ratio_init(method: str, ratio: int, init: str = "") -> dict:
    if method == "supervised":
        return {}
    return {"ratio": ratio, **({"init": init} if method == "joint" and init else {})}


def train_config(cfg: dict, method: str) -> TagTrainConfig:
    """The `tag train` config of `method`'s cells, as far as the grid config fixes it (one U/L, the
    supervised start a stand-in): what `tag train` checks, and where its rules are read from (the
    evaluation split, hence the sentences held out of the pool)."""
    init = "" if cfg["joint_start"] == "pretrained" else "supervised-run"
    return TagTrainConfig(data=cfg["data"], out="-", method=tag_method(method), labelled=cfg["labelled"],
                          **_ratio_init(method, 1, init), **method_options(cfg, method))


def method_options(cfg: dict, method: str) -> dict:
    """The `tag train` options of `method`'s cells: `options.all` with `options.{method}` on top
    (keys of `all` that the method has no use for, `tagging.train.unused_options`, are left out,
    e.g. `ramp_steps` for supervised, and for joint from a supervised start the sizes, which it
    takes from that tagger). frozen is pretrain's options with `freeze` (and `options.frozen` on
    top); joint from pre-training takes pretrain's stage-1 options, so that the three share one
    stage 1 (`--stage1-cache`)."""

    if method == "frozen":
        return {**method_options(cfg, "pretrain"), "freeze": True, **cfg["options"].get("frozen", {})}
    pretrained = method == "joint" and cfg.get("joint_start") == "pretrained"
    unused = {k for names, _ in unused_options(method, from_pretrained=pretrained, init=not pretrained)
              for k in names}
    shared = {k: v for k, v in cfg["options"].get("all", {}).items() if k not in unused}
    if pretrained:  # the stage 1 of pretrain's cells: every option it depends on, as pretrain has it
        pre = method_options(cfg, "pretrain")
        shared.update({k: pre[k] for k in STAGE1_SHAPING if k in pre})
        shared["from_pretrained"] = True
    return {**shared, **cfg["options"].get(method, {})}


def count_sentences(folder: str, split: str) -> int:
    """The sentences (non-blank lines) of FOLDER/SPLIT.jsonl; 0 when it is missing."""
    f = Path(folder, f"{split}.jsonl")
    if not f.is_file():
        return 0
    with open(f, "rb") as fh:
        return sum(1 for line in fh if line.strip())


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


class TagGrid:
    """The grid's runs and cells in `out` (see the module doc)."""

    def __init__(self, cfg: dict, out: Path, threads: int = 0, progress: bool = False):

        self.cfg, self.out, self.threads, self.progress = cfg, out, threads, progress
        self.data_sha = folder_sha256(cfg["data"])
        # the other corpora of the unlabelled pool, by content (a pretrain or joint cell's input)
        self.unlabelled_sha = [folder_sha256(f) for f in cfg["unlabelled"]]
        self.ood_sha = folder_sha256(cfg["ood"]) if cfg["ood"] else ""
        train = load_tagged(cfg["data"], "train")
        # a BIO tag set: --keep-best selects by dev span F1 (since issue 34's second task), not accuracy
        self.bio = selected_score(tag_set(train)) == "span_f1"
        self.ratios, self.deviations = self.ratios_by_proportion([r["tokens"] for r in train])

    def ratios_by_proportion(self, train: list[list[str]]) -> tuple[dict[float, list[int]], list[str]]:
        """The U/L run at each proportion: the config's ratios that the pool allows, and in place
        of those it does not, the largest it allows (smallest over seeds and methods), once.
        `train`: the training split's sentences (tokens)."""

        cfg = self.cfg
        ssl = [m for m in cfg["methods"] if m != "supervised"]
        if not ssl:
            return {p: [] for p in cfg["proportions"]}, []
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
        """The sentences `tag train` keeps out of the pool of `method`'s cells (`held_out`: its
        evaluation split and test), so that the ratios planned here are the ones it accepts."""
        probe = train_config(self.cfg, method)
        return held_out(probe.data, eval_split_of(probe.data, probe.eval_split))

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
        if self.bio and opts.get("keep_best"):  # runs kept by dev accuracy before had keys without this
            d["select"] = f"dev {SCORE_NAMES['span_f1']}"
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
        """Estimated CPU seconds of a cell on one thread (`grid_cost.cell_seconds`)."""
        opts = self.cell_options(s)
        split = opts.get("eval_split", "dev")
        n_eval = count_sentences(self.cfg["data"], split) if split else 0
        n_eval = min(n_eval, opts["eval_limit"]) if opts.get("eval_limit") else n_eval
        n_test = count_sentences(self.cfg["data"], self.cfg["test_split"])
        n_test += count_sentences(self.cfg["ood"], self.cfg["ood_split"]) if self.ood_here(s) else 0
        return cell_seconds(self.cfg, s.method, s.proportion, s.ratio, opts, n_eval, n_test)

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
    with --keep-best the dev score it selected by (accuracy; span F1 for a BIO tag set: `1 -
    validation loss`) of the weights it kept beside the last epoch's. `metrics`: RUN/metrics.json
    when the caller has read it."""
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
        score = "span_f1" if "span" in metrics.get("eval", {}).get("selected_by", "") else "accuracy"
        out[f"dev_{score}_kept"] = 1.0 - train["kept"]["loss"]
        out[f"dev_{score}_last"] = 1.0 - train["validation"][-1]["loss"]
        out["kept_epoch"] = train["kept"]["epoch"] + 1
    return out


# ---------------------------------------------------------------- the command


def run_grid(opts: TagGridConfig) -> dict:
    """Every cell of the config (cached), then results.json, tables.md and accuracy.png
    (`grid_report.write_report`); with --plan, the plan only (returns {}); with --report, the
    report of the cells finished so far (trains nothing). The shell is the grid command's
    (`textebm.grid`: the config's schema, --out, the plan, the shard, the report)."""
    check_config(opts)
    threads, shard = opts.start()
    cfg = read_config(opts.config)
    out = Path(opts.out)
    with grid.out_folder(out, KIND, ENTRIES, plan=opts.plan, report=opts.report):
        g = TagGrid(cfg, out, threads, opts.progress and opts.backend == "local")
        cells = [g.cell(s) for s in g.settings()]
        runner = grid.Grid(out / "cells", g.compute)
        plan = "\n".join([runner.plan(cells, shard), *(f"note: {d}" for d in g.deviations)])
    ran = grid.plan_or_run(opts, runner, cells, shard, plan, report=opts.report,
                           on_result=lambda cell, r: log.info("%s: accuracy %.4f", cell.name, r["accuracy"]))
    if ran is None:
        return {}
    results, missing = ran
    return write_report(out, cfg, dict(g.ratios), g.deviations, results, missing)
