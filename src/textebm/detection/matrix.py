"""`textebm detect matrix --config FILE --out DIR`: the generalisation tables of Bakhtin et al.
(2019) as a config, every artifact cached so an interrupted matrix continues and a larger config
reuses a smaller one's work.

What the config names (see bench/detection/*.json and docs/detection.md):

- `corpora`: dataset names of `textebm data prepare` (or {"name": "folder"} for your own);
  `vocab_corpora` (default: the same) train the one shared BPE vocabulary (`vocab_size`).
- `generators`: name -> `lm train` settings (`arch`, `layers`, `width`, `heads`, `kernel`,
  `steps` or `epochs` [+ `max_steps`]), or {"pretrained": "smollm2-135m"} for an unseen foreign
  generator (suffix only); `lm` holds the settings they share (context, chunk, batch size,
  learning rate).
- `windows`: length, contexts, stride, k, top_k, max_windows per split.
- `energies`: name -> `detect train` settings (`energy`, `init`, `steps` or `epochs` [+
  `max_steps`], ...). `init: "generator"` starts a UniTransf from the transformer generator "tf"
  (seed 0, l2r) of its first training corpus.
- `steps` N means N optimiser steps (passes over the data repeat as needed); `epochs` E means E
  passes, cut at `max_steps` when given (`train_length`). Every setting is checked against the
  option it sets, and errors name the config file and key (`energies.linear.steps`).
- `tables`: a list of slices, each a `kind` with its own fields:
    in-domain     energies x corpora x generators x directions; train and test on one corpus,
                  test negatives from the generator's second seed (table 2)
    cross-arch    one energy, one corpus: train on each generator, test on each (table 3)
    cross-corpus  one energy, one generator: train on each corpus set ("a+b", "all"), test on
                  each corpus (table 4)
    unseen        one energy trained on `train` corpora, tested on a foreign generator (table 5)
    negatives     one energy trained with each negative choice (table 7)
    zeroshot      the zero-shot detectors on in-domain test sets (loglik: the training
                  generator's LM; binoculars: that LM observing, the other architecture performing)

Artifacts under DIR: data/, vocab/, gen/{corpus}-{gen}-{dir}-s{seed}-{key}, neg/*.jsonl,
energy/*, zeroshot/*, cells/*.json (one per evaluated cell, named with a hash of everything it
depends on), then results.json, tables.md and heatmaps (*.png). The cells run on the grid runner
(`textebm.grid`: cache, locks, --shard or a Slurm array, --plan, --backend dask) in the shell of a
grid command: the config's top level read and checked from its schema (`MatrixSpec`), each
section against the command whose options it sets; DIR follows the output rule for a cache
(`grid.check_out`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textebm import grid
from textebm.data.recipes import RECIPES, prepare
from textebm.detection import detect
from textebm.detection.commands import FitConfig, fit_zeroshot
from textebm.detection.detect import ZEROSHOT
from textebm.detection.negatives import NegativesConfig, generate_negatives
from textebm.detection.report import plan_report, write_report
from textebm.detection.steps import train_length
from textebm.detection.train import DetectTrainConfig, detect_train
from textebm.detection.windows import read_window_files
from textebm.errors import InputError, TextebmError
from textebm.fingerprint import folder_sha256
from textebm.io import read_json, write_json
from textebm.lm.train import LMTrainConfig, lm_train
from textebm.losses.residual import NEGATIVES
from textebm.models.seq_energy import KINDS as ENERGY_KINDS
from textebm.options import check_config, flag_of
from textebm.outputs import output_dir
from textebm.precision import CHOICES as PRECISIONS
from textebm.resumable import differences
from textebm.runfolder import run_completed
from textebm.tokenizer import train_jsonl

log = logging.getLogger(__name__)

# paper d's control (lmstats) needs a base LM (`detect train --base`): not a matrix energy
ENERGIES = tuple(k for k in ENERGY_KINDS if k != "lmstats")
KINDS = ("in-domain", "cross-arch", "cross-corpus", "unseen", "negatives", "zeroshot")
REQUIRED = {"in-domain": ("energies", "corpora", "generators"), "zeroshot": ("detectors", "corpora", "generators"),
            "cross-arch": ("energy", "corpus", "generators"), "cross-corpus": ("energy", "generator", "train", "test"),
            "unseen": ("energy", "generator", "test_generator"),
            "negatives": ("energy", "corpus", "generator", "negatives")}
DEFAULT_LM = {"context": 80, "chunk": 64, "batch_size": 32, "lr": 2e-3}
DEFAULT_WINDOWS = {"length": 64, "contexts": [48, 56], "stride": 16, "k": 3, "top_k": 10,
                   "max_windows": {"train": 2000, "dev": 500, "test": 500}}
DEFAULT_ENERGY = {"batch_size": 16, "lr": 1e-3}
# The settings each section of the config may hold: key -> the option of `lm train` (generators,
# lm), `negatives generate` (windows) or `detect train` (energies) it sets, whose type and bounds
# it takes (None: not an option).
GENERATOR_KEYS = {"arch": "arch", "pretrained": None, "layers": "layers", "width": "width", "heads": "heads",
                  "kernel": "kernel", "steps": "max_steps", "epochs": "epochs", "max_steps": "max_steps"}
LM_KEYS = {"context": "context", "chunk": "chunk", "batch_size": "batch_size", "lr": "lr"}
WINDOW_KEYS = {"length": "length", "contexts": "contexts", "stride": "stride", "k": "k", "top_k": "top_k",
               "batch_size": "batch_size", "max_windows": None}
ENERGY_KEYS = {"energy": "energy", "init": None, "loss": "loss", "margin": "margin", "layers": "layers",
               "width": "width", "heads": "heads", "max_tokens": "max_tokens", "steps": "max_steps",
               "epochs": "epochs", "max_steps": "max_steps", "batch_size": "batch_size", "lr": "lr"}
TEST_SEED = 1  # the test negatives' generator: another seed of the training one's architecture


KIND = "detect matrix"  # the kind in the marker of an --out folder the matrix wrote
# The entries of --out that the matrix writes (and `--overwrite` removes), besides its heatmaps.
ENTRIES = ("data", "vocab", "gen", "neg", "energy", "zeroshot", "cells", "results.json", "tables.md", "inputs.json")


@dataclass(kw_only=True)
class MatrixConfig(grid.GridOptions):
    config: str = field(metadata={"help": "matrix config JSON (see bench/detection/ and docs/detection.md)"})
    out: str = field(metadata={"help": "folder of every cached artifact and the results; a folder the matrix "
                                       "wrote continues where it stopped (it is a cache)"})
    overwrite: bool = field(default=False, metadata={
        "help": "discard the matrix's earlier work in --out (what its marker lists) and start again; "
                "without it, the matrix continues. Never touches files it did not write"})


# ---------------------------------------------------------------- config


@dataclass(kw_only=True)
class MatrixSpec:
    """The matrix config (JSON): its top-level keys with their types and defaults, which
    `read_config` checks (`grid.read_config`); `check` then the corpora, each section against the
    command whose options it sets, and the tables."""

    name: str = ""  # a title, for the reader
    corpora: list[str] | dict[str, str | None]  # named datasets, or {name: your own folder}
    vocab_corpora: list[str] | None = None  # the shared vocabulary's corpora (default: `corpora`)
    vocab_size: int = 8000
    generators: dict[str, dict[str, Any]]  # name -> `lm train` settings, or {"pretrained": id}
    lm: dict[str, Any] = field(default_factory=dict)  # the generators' shared settings (DEFAULT_LM)
    windows: dict[str, Any] = field(default_factory=dict)  # `negatives generate` settings (DEFAULT_WINDOWS)
    energies: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> `detect train` settings
    tables: list[dict[str, Any]]  # the slices (KINDS, REQUIRED)
    precision: str = field(default="fp32", metadata={"choices": PRECISIONS})  # of the negatives' generation
    rates: dict[str, Any] = field(default_factory=dict)  # the plan's seconds per unit (detection/report.py)
    buckets: list[str] = field(default_factory=list)  # the length axis: "LO-HI" text-token buckets (detect eval's)

    def check(self, path: str | Path) -> None:
        if isinstance(self.corpora, list):
            self.corpora = {c: None for c in self.corpora}
        if self.vocab_corpora is None:
            self.vocab_corpora = list(self.corpora)
        self.lm = {**DEFAULT_LM, **self.lm}
        self.windows = {**DEFAULT_WINDOWS, **self.windows}
        if self.buckets:
            detect.length_buckets(self.buckets, self.windows["length"], f"{path}: buckets")
        _check_matrix(path, dataclasses.asdict(self))


def read_config(path: str | Path) -> dict:
    """The checked config with its defaults (`MatrixSpec`), as a dict; a bad key or value is an
    InputError naming the file and the key."""
    return grid.read_config(path, MatrixSpec, "matrix config")


def _check_matrix(path, cfg: dict) -> None:
    """The corpora (before --out is made: a missing one leaves nothing behind), every section's
    settings, the generators and energies, and each table's fields and the names it uses."""
    for name, folder in cfg["corpora"].items():
        if folder is None:
            if name not in RECIPES:
                raise InputError(path, f"corpus {name!r} is no named dataset ({', '.join(sorted(RECIPES))}); give "
                                       "your own as {\"name\": \"folder\"}")
        elif not (Path(folder) / "train.jsonl").is_file():
            raise InputError(path, f"corpus {name!r}: {folder} is no dataset folder (no train.jsonl)")
    for name in cfg["vocab_corpora"]:
        if name not in cfg["corpora"] and name not in RECIPES:
            raise InputError(path, f"`vocab_corpora`: {name!r} is neither in `corpora` nor a named dataset "
                                   f"({', '.join(sorted(RECIPES))})")
    _check_settings(path, cfg)
    for name, g in cfg["generators"].items():
        if not isinstance(g, dict) or not ("pretrained" in g or g.get("arch") in ("transformer", "gcnn")):
            raise InputError(path, f"generator {name!r}: give `arch` (transformer / gcnn) or `pretrained`")

    for name, e in cfg["energies"].items():
        if not isinstance(e, dict) or e.get("energy") not in ENERGIES:
            raise InputError(path, f"energy {name!r}: `energy` must be one of {', '.join(ENERGIES)}")
        if e.get("init") == "generator" and cfg["generators"].get("tf", {}).get("arch") != "transformer":
            raise InputError(path, f"energy {name!r}: init \"generator\" starts from the transformer generator "
                                   "named \"tf\", which the config lacks")
    for i, t in enumerate(cfg["tables"]):
        if not isinstance(t, dict) or t.get("kind") not in KINDS:
            raise InputError(path, f"table {i + 1}: kind must be one of {', '.join(KINDS)}, got "
                                   f"{t.get('kind') if isinstance(t, dict) else t!r}")
        missing = [k for k in REQUIRED[t["kind"]] if k not in t]
        if missing:
            raise InputError(path, f"table {i + 1} ({t['kind']}): missing {', '.join(missing)}")
        bad = [d for d in t.get("detectors", []) if d not in ZEROSHOT] + [
            n for n in t.get("negatives", []) if n not in NEGATIVES] + [
            d for d in t.get("directions", [t.get("direction", "l2r")]) if d not in ("l2r", "r2l")]
        if bad:
            raise InputError(path, f"table {i + 1}: unknown {bad[0]!r} (detectors: {', '.join(ZEROSHOT)}; "
                                   f"negatives: {', '.join(NEGATIVES)}; directions: l2r, r2l)")
        train = t.get("train", [])
        for spec in [train] if isinstance(train, str) else train:
            try:
                corpus_set(spec, cfg)
            except TextebmError as e:
                raise InputError(path, f"table {i + 1}: {e}") from None
        for e in _table_energies(t):
            if e not in cfg["energies"]:
                raise InputError(path, f"table {i + 1}: energy {e!r} is not in `energies`")
        for g in [t.get("generator"), t.get("test_generator"), *t.get("generators", [])]:
            if g is not None and g not in cfg["generators"]:
                raise InputError(path, f"table {i + 1}: generator {g!r} is not in `generators`")
        for c in [*t.get("corpora", []), *t.get("test", []), t.get("corpus")]:
            if c is not None and c not in cfg["corpora"]:
                raise InputError(path, f"table {i + 1}: corpus {c!r} is not in `corpora`")


def generator_options(spec: dict, lm: dict) -> dict:
    """The `lm train` options of a generator's settings (everything but the files)."""
    arch = {"arch": spec["arch"], "layers": spec.get("layers", 2), "width": spec.get("width", 128)}
    if spec["arch"] == "gcnn":
        arch["kernel"] = spec.get("kernel", 4)
    else:
        arch["heads"] = spec.get("heads", 4)
    return {**arch, **train_length(spec), "context": lm["context"], "chunk": lm["chunk"],
            "batch_size": lm["batch_size"], "lr": lm["lr"]}


def energy_options(spec: dict) -> dict:
    """The `detect train` options of an energy's settings (everything but the files and `init`)."""
    spec = {**DEFAULT_ENERGY, **spec}
    opts = {k: spec[k] for k in ("layers", "width", "heads", "max_tokens", "margin", "loss") if k in spec}
    return {"energy": spec["energy"], **train_length(spec), "batch_size": spec["batch_size"], "lr": spec["lr"],
            **opts}


def _check_section(path, where: str, spec: dict, cls, allowed: dict, probe) -> None:
    """Each key of `spec` (config section `where`) is one of `allowed` and of its option's type
    (`grid.check_section`), with `steps` or `epochs` as `train_length` reads them; then, with
    `probe()` (the command's options built from `spec`), the command's own bounds and rules, their
    messages naming the config's keys instead of the command's flags (`grid.check_command`)."""
    grid.check_section(path, where, spec, cls, allowed, unknown=f"a setting here (known: {', '.join(allowed)})")
    if "steps" in spec and ("epochs" in spec or "max_steps" in spec):
        raise InputError(path, f"`{where}`: give `steps` (exactly this many optimiser steps) or `epochs` "
                               "(passes over the data, with an optional cap `max_steps`), not both")
    if "max_steps" in spec and "epochs" not in spec:
        raise InputError(path, f"`{where}.max_steps` caps `epochs`, which is missing (for an exact number of "
                               "steps give `steps`)")
    if "steps" in spec and spec["steps"] < 1:
        raise InputError(path, f"`{where}.steps` must be at least 1, got {spec['steps']}")
    if probe is None:
        return
    fields = {f.name: f for f in dataclasses.fields(cls)}
    used_first = sorted(allowed.items(), key=lambda kv: kv[0] not in spec)  # a flag names the key the config uses
    grid.check_command(path, lambda: cls(**probe()),
                       names=[(flag_of(fields[name]), f"`{where}.{k}`") for k, name in used_first if name])


def _check_settings(path, cfg: dict) -> None:
    """Types, bounds and rules of every generator's, energy's, window's and LM setting, named by
    their config keys (`energies.linear.steps`), before any work."""

    _check_section(path, "lm", cfg["lm"], LMTrainConfig, LM_KEYS, None)
    for name, g in cfg["generators"].items():
        if isinstance(g, dict) and g.get("arch") in ("transformer", "gcnn"):
            _check_section(path, f"generators.{name}", g, LMTrainConfig, GENERATOR_KEYS,
                           lambda g=g: {"data": "", "out": "", "tokenizer": "vocab",
                                        **generator_options(g, cfg["lm"])})
    w = cfg["windows"]
    _check_section(path, "windows", w, NegativesConfig, WINDOW_KEYS,
                   lambda: {"data": "", "generator": "", "vocab": "", "out": "",
                            **{k: v for k, v in w.items() if k != "max_windows"}})
    mw = w["max_windows"]
    if not isinstance(mw, dict) or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in mw.values()):
        raise InputError(path, f"`windows.max_windows` must map splits to counts (0: all), got {mw!r}")
    for name, e in cfg["energies"].items():
        if isinstance(e, dict) and "energy" in e:
            init = "generator" if e.get("init") else ""
            _check_section(path, f"energies.{name}", e, DetectTrainConfig, ENERGY_KEYS,
                           lambda e=e, init=init: {"train": [], "val": [], "vocab": "", "out": "",
                                                   "init": init, **energy_options(e)})


def _table_energies(t: dict) -> list[str]:
    return list(t.get("energies", [])) + ([t["energy"]] if "energy" in t else [])


def corpus_set(spec: str, cfg: dict) -> list[str]:
    """"sotu" -> [sotu]; "sotu+brown" -> both; "all" -> every corpus of the config."""
    names = list(cfg["corpora"]) if spec == "all" else spec.split("+")
    bad = [n for n in names if n not in cfg["corpora"]]
    if bad:
        raise TextebmError(f"corpus set {spec!r}: {bad[0]!r} is not in the config's corpora")
    return names


# ---------------------------------------------------------------- cells


@dataclass(frozen=True)
class Side:
    """Windows of some corpora with negatives of one generator and direction."""

    corpora: tuple[str, ...]
    generator: str
    direction: str

    @property
    def name(self) -> str:
        return f"{'+'.join(self.corpora)}/{self.generator}/{self.direction}"


@dataclass(frozen=True)
class Cell:
    table: str
    detector: str  # an energy name, or a zero-shot method
    train: Side
    test: Side
    negatives: str = "worst"


def plan_cells(cfg: dict) -> list[Cell]:
    cells: list[Cell] = []
    for t in cfg["tables"]:
        kind, name = t["kind"], t.get("name", t["kind"])
        dirs = t.get("directions", [t.get("direction", "l2r")])
        if kind in ("in-domain", "zeroshot"):
            dets = t.get("detectors", []) if kind == "zeroshot" else _table_energies(t)
            for c in t["corpora"]:
                for g in t["generators"]:
                    for d in dirs:
                        for e in dets:
                            side = Side((c,), g, d)
                            cells.append(Cell(name, e, side, side))
        elif kind == "cross-arch":
            for d in dirs:
                for g_tr in t["generators"]:
                    for g_te in t["generators"]:
                        cells.append(Cell(name, t["energy"], Side((t["corpus"],), g_tr, d), Side((t["corpus"],), g_te, d)))
        elif kind == "cross-corpus":
            for tr in t["train"]:
                for te in t["test"]:
                    cells.append(Cell(name, t["energy"], Side(tuple(corpus_set(tr, cfg)), t["generator"], dirs[0]),
                                      Side((te,), t["generator"], dirs[0])))
        elif kind == "unseen":
            train = Side(tuple(corpus_set(t.get("train", "all"), cfg)), t["generator"], "l2r")
            for te in t.get("test", list(cfg["corpora"])):
                for g in (t["generator"], t["test_generator"]):
                    cells.append(Cell(name, t["energy"], train, Side((te,), g, "l2r")))
        elif kind == "negatives":
            side = Side((t["corpus"],), t["generator"], dirs[0])
            for neg in t["negatives"]:
                cells.append(Cell(name, t["energy"], side, side, neg))
    return cells


# ---------------------------------------------------------------- the runner


class Matrix:
    def __init__(self, cfg: dict, out: Path, threads: int = 0, progress: bool = True):
        self.cfg, self.out, self.threads, self.progress = cfg, out, threads, progress

    # -- paths of the artifacts
    def data(self, corpus: str) -> Path:
        """A corpus's dataset folder: your own, or a named dataset's prepared in OUT/data (also a
        `vocab_corpora` one that is not a corpus of the tables)."""
        given = self.cfg["corpora"].get(corpus)
        return Path(given) if given else self.out / "data" / corpus

    def vocab(self) -> Path:
        return self.out / "vocab"

    def gen_settings(self, g: str) -> dict:
        """Everything a generator depends on: its `lm train` options as resolved (or its pretrained id)."""
        spec = self.cfg["generators"][g]
        return spec if "pretrained" in spec else generator_options(spec, self.cfg["lm"])

    def energy_settings(self, e: str) -> dict:
        spec = self.cfg["energies"][e]
        return {**energy_options(spec), "init": spec.get("init", "")}

    def gen(self, corpus: str, g: str, d: str, seed: int) -> Path:
        spec = self.cfg["generators"][g]
        if "pretrained" in spec:
            return Path(spec["pretrained"])
        return self.out / "gen" / f"{corpus}-{g}-{d}-s{seed}-{grid.key(self.gen_settings(g))}"

    def foreign(self, g: str) -> bool:
        return "pretrained" in self.cfg["generators"][g]

    def negatives(self, corpus: str, g: str, d: str, split: str) -> Path:
        seed = TEST_SEED if split == "test" else 0
        key = grid.key({"w": self.cfg["windows"], "g": self.gen_settings(g)})
        return self.out / "neg" / f"{corpus}-{g}-{d}-s{seed}-{split}-{key}.jsonl"

    def energy_dir(self, e: str, side: Side, neg: str) -> Path:
        key = grid.key({"e": self.energy_settings(e), "w": self.cfg["windows"], "g": self.gen_settings(side.generator)})
        return self.out / "energy" / f"{e}-{'+'.join(side.corpora)}-{side.generator}-{side.direction}-{neg}-{key}"

    def grid_cell(self, cell: Cell) -> grid.Cell:
        """The matrix cell as a cell of the grid runner: keyed by everything its result depends on."""
        settings = {"cell": [cell.detector, cell.train.name, cell.test.name, cell.negatives],
                    "e": self.energy_settings(cell.detector) if cell.detector in self.cfg["energies"] else None,
                    "w": self.cfg["windows"],
                    "g": [self.gen_settings(cell.train.generator), self.gen_settings(cell.test.generator)]}
        if self.cfg.get("buckets"):  # the length axis (absent: the keys of matrices before it)
            settings["b"] = self.cfg["buckets"]
        name = f"{cell.detector}__{cell.train.name}__{cell.test.name}__{cell.negatives}".replace("/", "-")
        return grid.Cell(name, settings, cell)

    def runner(self) -> grid.Grid:
        return grid.Grid(self.out / "cells", self.compute)

    # -- stages
    def ensure_data(self, corpus: str) -> Path:
        path = self.data(corpus)

        def build():
            if self.cfg["corpora"].get(corpus):
                raise TextebmError(f"corpus {corpus!r}: {path} has no train.jsonl")

            log.info("preparing %s", corpus)
            prepare(corpus, path)

        return grid.once(path, lambda: (path / "train.jsonl").is_file(), build)

    def ensure_vocab(self) -> Path:
        path = self.vocab()

        def build():
            files = [self.ensure_data(c) / "train.jsonl" for c in self.cfg["vocab_corpora"]]
            tok = train_jsonl(files, self.cfg["vocab_size"], "bpe")
            with output_dir(path, "tokenizer train", False) as tmp:
                tok.save_pretrained(tmp)

        return grid.once(path, lambda: (path / "tokenizer.json").is_file(), build)

    def ensure_generator(self, corpus: str, g: str, d: str, seed: int) -> Path:
        path = self.gen(corpus, g, d, seed)

        def build():
            log.info("training generator %s", path.name)
            lm_train(LMTrainConfig(data=str(self.ensure_data(corpus)), tokenizer=str(self.ensure_vocab()),
                                   **generator_options(self.cfg["generators"][g], self.cfg["lm"]), direction=d,
                                   seed=seed, out=str(path), progress=False, threads=self.threads,
                                   resume=(path / "config.json").is_file()))

        return grid.once(path, lambda: self.foreign(g) or run_completed(path), build)

    def ensure_negatives(self, corpus: str, g: str, d: str, split: str) -> Path:
        path = self.negatives(corpus, g, d, split)

        def build():
            gen = self.ensure_generator(corpus, g, d, TEST_SEED if split == "test" else 0)
            w = self.cfg["windows"]
            generate_negatives(NegativesConfig(
                data=str(self.ensure_data(corpus)), generator=str(gen), vocab=str(self.ensure_vocab()),
                out=str(path), split=split, corpus=corpus, length=w["length"], contexts=list(w["contexts"]),
                stride=w["stride"], max_windows=w["max_windows"].get(split, 0), k=w["k"], top_k=w["top_k"], seed=0,
                progress=self.progress, precision=self.cfg.get("precision", "fp32"),
                batch_size=w.get("batch_size", 64)))

        return grid.once(path, path.is_file, build)

    def ensure_energy(self, e: str, side: Side, neg: str) -> Path:
        path = self.energy_dir(e, side, neg)

        def build():
            spec = self.cfg["energies"][e]
            train = [str(self.ensure_negatives(c, side.generator, side.direction, "train")) for c in side.corpora]
            val = [str(self.ensure_negatives(c, side.generator, side.direction, "dev")) for c in side.corpora]
            init = spec.get("init", "")
            if init == "generator":  # the transformer LM of its first training corpus, in the shared vocabulary
                init = str(self.ensure_generator(side.corpora[0], "tf", "l2r", 0))
            log.info("training energy %s", path.name)
            detect_train(DetectTrainConfig(
                train=train, val=val, vocab=str(self.vocab()), init=init, negatives=neg, out=str(path), seed=0,
                progress=self.progress, threads=self.threads, resume=(path / "config.json").is_file(),
                **energy_options(spec)))

        return grid.once(path, lambda: run_completed(path) and (path / "detector.json").is_file(), build)

    def ensure_zeroshot(self, method: str, side: Side) -> Path:
        key = grid.key({"g": self.gen_settings(side.generator), "w": self.cfg["windows"]})
        path = self.out / "zeroshot" / f"{method}-{side.corpora[0]}-{side.generator}-{side.direction}-{key}"

        def build():
            corpus = side.corpora[0]
            lm = self.ensure_generator(corpus, side.generator, side.direction, 0)  # the TRAINING generator
            observer = ""
            if method == "binoculars":  # two LMs sharing the vocabulary: the other architecture performs
                other = next(g for g in self.cfg["generators"] if g != side.generator and not self.foreign(g))
                observer, lm = str(lm), self.ensure_generator(corpus, other, side.direction, 0)
            val = [str(self.ensure_negatives(corpus, side.generator, side.direction, "dev"))]
            fit_zeroshot(FitConfig(zeroshot=method, model=str(lm), val=val, vocab=str(self.vocab()), out=str(path),
                                   observer=observer))

        return grid.once(path, lambda: (path / "detector.json").is_file(), build)

    def compute(self, gcell: grid.Cell) -> dict:
        """Evaluate a cell (training its detector first, unless cached): the grid runner's compute."""

        cell = gcell.task
        t0 = time.perf_counter()
        det = (self.ensure_zeroshot(cell.detector, cell.train) if cell.detector in ZEROSHOT
               else self.ensure_energy(cell.detector, cell.train, cell.negatives))
        test = [self.ensure_negatives(c, cell.test.generator, cell.test.direction, "test") for c in cell.test.corpora]
        rows = read_window_files(test, "test negatives")
        scorer, rule, _ = detect.load_detector(det)
        real, fake = detect.window_scores(scorer.score_ids, rows, 64)
        out = {"table": cell.table, "detector": cell.detector, "train": cell.train.name, "test": cell.test.name,
               "negatives": cell.negatives, **detect.evaluate(rule, real, fake.ravel(), fake),
               "val_accuracy": rule.val.get("balanced_accuracy"), "detector_dir": str(det)}
        if self.cfg.get("buckets") and not detect.reads_prefix(scorer):  # the length axis, at the 1 % FPR threshold
            buckets = detect.length_buckets(self.cfg["buckets"], len(rows[0]["positive"]), "buckets")
            out["by_length"] = detect.by_length(scorer.score_ids, rule, rows, real, fake, buckets, rule.threshold_fpr)
        return {**out, "seconds": round(time.perf_counter() - t0, 1)}


def check_out(out: Path, overwrite: bool, plan: bool = False) -> None:
    """--out by the output rule for a grid (`grid.check_out`: a folder the matrix wrote continues,
    or with `overwrite` starts again; anything else is refused), marked as the matrix's."""
    grid.check_out(out, KIND, ENTRIES, plan=plan, overwrite=overwrite)


def matrix_inputs(cfg: dict) -> dict:
    """What every artifact of --out depends on besides its own settings: the shared vocabulary's
    settings and the corpora (a named dataset by name, your own folder by content)."""
    return {"vocab_size": cfg["vocab_size"], "vocab_corpora": list(cfg["vocab_corpora"]),
            "corpora": {name: ({"folder_sha256": folder_sha256(folder)} if folder else name)
                        for name, folder in cfg["corpora"].items()}}


def check_inputs(out: Path, inputs: dict, plan: bool, overwrite: bool) -> None:
    """--out continues only from work made of the same vocabulary and corpora (OUT/inputs.json);
    the first run records them (`overwrite`: the earlier work is, or is planned to be, removed)."""
    f = out / "inputs.json"
    if f.is_file() and not overwrite:
        diff = differences(read_json(f), json.loads(json.dumps(inputs)))
        if diff:
            raise TextebmError(f"--out {out}: was built from another vocabulary or other corpora ({'; '.join(diff)}); "
                               "its generators, negatives and cells would not fit this config: choose a new --out, "
                               "or pass --overwrite to start it again")
    if not plan and (overwrite or not f.is_file()):
        write_json(f, inputs)


def run_matrix(opts: MatrixConfig) -> dict:
    """Every cell of the config (cached), then results.json, tables.md and heatmaps; with --plan, the
    plan only (returns {}). The shell is the grid command's (`textebm.grid`: the config's schema,
    --out, the plan, the shard)."""
    check_config(opts)
    threads, shard = opts.start()
    cfg = read_config(opts.config)
    out = Path(opts.out)
    with grid.out_folder(out, KIND, ENTRIES, plan=opts.plan, overwrite=opts.overwrite):
        check_inputs(out, matrix_inputs(cfg), opts.plan, opts.overwrite)
        m = Matrix(cfg, out, threads, opts.progress and opts.backend == "local")
        cells = [m.grid_cell(c) for c in plan_cells(cfg)]
        runner = m.runner()
        plan = runner.plan(cells, shard, lambda left: plan_report(m, cells, [c.task for c in left]))
    done = {"n": 0}

    def on_result(cell: grid.Cell, r: dict) -> None:
        done["n"] += 1
        log.info("[%d] %s %s -> %s: accuracy %.3f, AUROC %.3f", done["n"], r["detector"], r["train"], r["test"],
                 r["accuracy"], r["auroc"])

    ran = grid.plan_or_run(opts, runner, cells, shard, plan, on_result=on_result)
    if ran is None:
        return {}
    # a cell shared by two tables is computed once
    results = [{**r, "table": c.task.table} for r, c in zip(ran[0], cells)]
    summary = {"config": cfg, "cells": results}
    write_json(out / "results.json", summary)
    grid.mark(out, KIND, write_report(summary, out))  # only the heatmaps it wrote: a user's own stay theirs
    return summary
