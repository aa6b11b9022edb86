"""`textebm residual matrix --config FILE --out DIR`: the generalisation tables of Bakhtin et al.
(2019) as a config, every artifact cached so an interrupted matrix continues and a larger config
reuses a smaller one's work.

What the config names (see bench/residual/*.json and docs/residual.md):

- `corpora`: dataset names of `textebm data prepare` (or {"name": "folder"} for your own);
  `vocab_corpora` (default: the same) train the one shared BPE vocabulary (`vocab_size`).
- `generators`: name -> `lm train` settings (`arch`, `layers`, `width`, `heads`, `kernel`,
  `steps`), or {"pretrained": "smollm2-135m"} for an unseen foreign generator (suffix only);
  `lm` holds the settings they share (context, chunk, batch size, learning rate).
- `windows`: length, contexts, stride, k, top_k, max_windows per split.
- `energies`: name -> `residual train` settings (`energy`, `init`, `steps`, ...). `init:
  "generator"` starts a UniTransf from the transformer generator "tf" (seed 0, l2r) of its first
  training corpus.
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

Artifacts under DIR: data/, vocab/, gen/{corpus}-{gen}-{dir}-s{seed}, neg/*.jsonl,
energy/*, zeroshot/*, cells/*.json (one per evaluated cell, named with a hash of everything it
depends on), then results.json, tables.md and heatmaps (*.png).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from textebm.errors import InputError, TextebmError
from textebm.options import threads_field

log = logging.getLogger(__name__)

KINDS = ("in-domain", "cross-arch", "cross-corpus", "unseen", "negatives", "zeroshot")
REQUIRED = {"in-domain": ("energies", "corpora", "generators"), "zeroshot": ("detectors", "corpora", "generators"),
            "cross-arch": ("energy", "corpus", "generators"), "cross-corpus": ("energy", "generator", "train", "test"),
            "unseen": ("energy", "generator", "test_generator"),
            "negatives": ("energy", "corpus", "generator", "negatives")}
DEFAULT_LM = {"context": 80, "chunk": 64, "batch_size": 32, "lr": 2e-3}
DEFAULT_WINDOWS = {"length": 64, "contexts": [48, 56], "stride": 16, "k": 3, "top_k": 10,
                   "max_windows": {"train": 2000, "dev": 500, "test": 500}}
DEFAULT_ENERGY = {"steps": 300, "batch_size": 16, "lr": 1e-3}
TEST_SEED = 1  # the test negatives' generator: another seed of the training one's architecture


@dataclass(kw_only=True)
class MatrixConfig:
    config: str = field(metadata={"help": "matrix config JSON (see bench/residual/ and docs/residual.md)"})
    out: str = field(metadata={"help": "folder of every cached artifact and the results"})
    plan: bool = field(default=False, metadata={"help": "print the work left and its estimated CPU time, "
                                                        "then stop"})
    threads: int = threads_field()
    shard: str = field(default="", metadata={"help": "I/N: run every N-th cell from the I-th (1-based), for "
                                                      "N processes sharing --out; shared artifacts are built once"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on PATH.lock, so that matrix processes sharing an --out (`--shard`)
    build each artifact once: a second one waits, then finds it finished."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _once(path: Path, done, build) -> Path:
    """PATH, built by `build()` unless `done()`; under its lock (`_locked`)."""
    if not done():
        with _locked(path):
            if not done():
                build()
    return path


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


# ---------------------------------------------------------------- config


def read_config(path: str | Path) -> dict:
    from textebm.io import read_json_object

    cfg = read_json_object(path, "matrix config")
    for key in ("corpora", "generators", "tables"):
        if key not in cfg:
            raise InputError(path, f"missing {key!r}")
    corpora = cfg["corpora"]
    if isinstance(corpora, list):
        cfg["corpora"] = {c: None for c in corpora}
    elif not isinstance(corpora, dict):
        raise InputError(path, "`corpora` must be a list of dataset names or {name: folder}")
    cfg.setdefault("vocab_corpora", list(cfg["corpora"]))
    cfg.setdefault("vocab_size", 8000)
    cfg["lm"] = {**DEFAULT_LM, **cfg.get("lm", {})}
    cfg["windows"] = {**DEFAULT_WINDOWS, **cfg.get("windows", {})}
    cfg.setdefault("energies", {})
    for name, g in cfg["generators"].items():
        if not isinstance(g, dict) or not ("pretrained" in g or g.get("arch") in ("transformer", "gcnn")):
            raise InputError(path, f"generator {name!r}: give `arch` (transformer / gcnn) or `pretrained`")
    from textebm.losses.residual import NEGATIVES
    from textebm.models.seq_energy import KINDS as ENERGIES
    from textebm.detection.detect import ZEROSHOT

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
    return cfg


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
        given = self.cfg["corpora"][corpus]
        return Path(given) if given else self.out / "data" / corpus

    def vocab(self) -> Path:
        return self.out / "vocab"

    def gen(self, corpus: str, g: str, d: str, seed: int) -> Path:
        spec = self.cfg["generators"][g]
        if "pretrained" in spec:
            return Path(spec["pretrained"])
        return self.out / "gen" / f"{corpus}-{g}-{d}-s{seed}"

    def foreign(self, g: str) -> bool:
        return "pretrained" in self.cfg["generators"][g]

    def negatives(self, corpus: str, g: str, d: str, split: str) -> Path:
        seed = TEST_SEED if split == "test" else 0
        w = self.cfg["windows"]
        key = _hash({"w": w, "g": self.cfg["generators"][g], "lm": self.cfg["lm"]})
        return self.out / "neg" / f"{corpus}-{g}-{d}-s{seed}-{split}-{key}.jsonl"

    def energy_dir(self, e: str, side: Side, neg: str) -> Path:
        key = _hash({"e": self.cfg["energies"][e], "w": self.cfg["windows"], "g": self.cfg["generators"][side.generator]})
        return self.out / "energy" / f"{e}-{'+'.join(side.corpora)}-{side.generator}-{side.direction}-{neg}-{key}"

    def cell_file(self, cell: Cell) -> Path:
        key = _hash({"cell": [cell.detector, cell.train.name, cell.test.name, cell.negatives],
                     "e": self.cfg["energies"].get(cell.detector), "w": self.cfg["windows"],
                     "g": [self.cfg["generators"][cell.train.generator], self.cfg["generators"][cell.test.generator]]})
        readable = f"{cell.detector}__{cell.train.name}__{cell.test.name}__{cell.negatives}".replace("/", "-")
        return self.out / "cells" / f"{readable}-{key}.json"

    # -- stages
    def ensure_data(self, corpus: str) -> Path:
        path = self.data(corpus)

        def build():
            if self.cfg["corpora"][corpus]:
                raise TextebmError(f"corpus {corpus!r}: {path} has no train.jsonl")
            from textebm.data.recipes import prepare

            log.info("preparing %s", corpus)
            prepare(corpus, path)

        return _once(path, lambda: (path / "train.jsonl").is_file(), build)

    def ensure_vocab(self) -> Path:
        path = self.vocab()

        def build():
            from textebm.outputs import output_dir
            from textebm.tokenizer import train_jsonl

            files = [self.ensure_data(c) / "train.jsonl" for c in self.cfg["vocab_corpora"]]
            tok = train_jsonl(files, self.cfg["vocab_size"], "bpe")
            with output_dir(path, "tokenizer train", False) as tmp:
                tok.save_pretrained(tmp)

        return _once(path, lambda: (path / "tokenizer.json").is_file(), build)

    def ensure_generator(self, corpus: str, g: str, d: str, seed: int) -> Path:
        from textebm.train import run_completed

        path = self.gen(corpus, g, d, seed)

        def build():
            from textebm.lm.train import LMTrainConfig, lm_train

            spec, lm = self.cfg["generators"][g], self.cfg["lm"]
            arch = {"arch": spec["arch"], "layers": spec.get("layers", 2), "width": spec.get("width", 128)}
            if spec["arch"] == "gcnn":
                arch["kernel"] = spec.get("kernel", 4)
            else:
                arch["heads"] = spec.get("heads", 4)
            log.info("training generator %s", path.name)
            lm_train(LMTrainConfig(data=str(self.ensure_data(corpus)), tokenizer=str(self.ensure_vocab()), **arch,
                                   context=lm["context"], chunk=lm["chunk"], max_steps=spec.get("steps", 300),
                                   batch_size=lm["batch_size"], lr=lm["lr"], direction=d, seed=seed, out=str(path),
                                   progress=False, threads=self.threads, resume=(path / "config.json").is_file()))

        return _once(path, lambda: self.foreign(g) or run_completed(path), build)

    def ensure_negatives(self, corpus: str, g: str, d: str, split: str) -> Path:
        path = self.negatives(corpus, g, d, split)

        def build():
            from textebm.detection.negatives import NegativesConfig, generate_negatives

            gen = self.ensure_generator(corpus, g, d, TEST_SEED if split == "test" else 0)
            w = self.cfg["windows"]
            generate_negatives(NegativesConfig(
                data=str(self.ensure_data(corpus)), generator=str(gen), vocab=str(self.ensure_vocab()),
                out=str(path), split=split, corpus=corpus, length=w["length"], contexts=list(w["contexts"]),
                stride=w["stride"], max_windows=w["max_windows"].get(split, 0), k=w["k"], top_k=w["top_k"], seed=0,
                progress=self.progress, precision=self.cfg.get("precision", "fp32"),
                batch_size=w.get("batch_size", 64)))

        return _once(path, path.is_file, build)

    def ensure_energy(self, e: str, side: Side, neg: str) -> Path:
        from textebm.train import run_completed

        path = self.energy_dir(e, side, neg)

        def build():
            from textebm.detection.train import ResidualTrainConfig, residual_train

            spec = {**DEFAULT_ENERGY, **self.cfg["energies"][e]}
            train = [str(self.ensure_negatives(c, side.generator, side.direction, "train")) for c in side.corpora]
            val = [str(self.ensure_negatives(c, side.generator, side.direction, "dev")) for c in side.corpora]
            opts = {k: spec[k] for k in ("layers", "width", "heads", "max_tokens", "margin", "loss") if k in spec}
            init = spec.get("init", "")
            if init == "generator":  # the transformer LM of its first training corpus, in the shared vocabulary
                init = str(self.ensure_generator(side.corpora[0], "tf", "l2r", 0))
            log.info("training energy %s", path.name)
            residual_train(ResidualTrainConfig(
                train=train, val=val, vocab=str(self.vocab()), energy=spec["energy"], init=init, negatives=neg,
                max_steps=spec["steps"], batch_size=spec["batch_size"], lr=spec["lr"], out=str(path), seed=0,
                progress=self.progress, threads=self.threads, resume=(path / "config.json").is_file(), **opts))

        return _once(path, lambda: run_completed(path) and (path / "detector.json").is_file(), build)

    def ensure_zeroshot(self, method: str, side: Side) -> Path:
        key = _hash({"g": self.cfg["generators"][side.generator], "w": self.cfg["windows"]})
        path = self.out / "zeroshot" / f"{method}-{side.corpora[0]}-{side.generator}-{side.direction}-{key}"

        def build():
            from textebm.detection.commands import FitConfig, fit_zeroshot

            corpus = side.corpora[0]
            lm = self.ensure_generator(corpus, side.generator, side.direction, 0)  # the TRAINING generator
            observer = ""
            if method == "binoculars":  # two LMs sharing the vocabulary: the other architecture performs
                other = next(g for g in self.cfg["generators"] if g != side.generator and not self.foreign(g))
                observer, lm = str(lm), self.ensure_generator(corpus, other, side.direction, 0)
            val = [str(self.ensure_negatives(corpus, side.generator, side.direction, "dev"))]
            fit_zeroshot(FitConfig(zeroshot=method, model=str(lm), val=val, vocab=str(self.vocab()), out=str(path),
                                   observer=observer))

        return _once(path, lambda: (path / "detector.json").is_file(), build)

    def run_cell(self, cell: Cell) -> dict:
        from textebm.io import read_json

        path = self.cell_file(cell)
        if not path.is_file():
            with _locked(path):
                if not path.is_file():
                    self._evaluate(cell, path)
        return read_json(path)

    def _evaluate(self, cell: Cell, path: Path) -> None:
        from textebm.io import write_json
        from textebm.detection import detect
        from textebm.detection.detect import ZEROSHOT

        t0 = time.perf_counter()
        det = (self.ensure_zeroshot(cell.detector, cell.train) if cell.detector in ZEROSHOT
               else self.ensure_energy(cell.detector, cell.train, cell.negatives))
        from textebm.detection.windows import read_window_files

        test = [self.ensure_negatives(c, cell.test.generator, cell.test.direction, "test") for c in cell.test.corpora]
        rows = read_window_files(test, "test negatives")
        scorer, rule, _ = detect.load_detector(det)
        real, fake = detect.window_scores(scorer.score_ids, rows, 64)
        result = {"table": cell.table, "detector": cell.detector, "train": cell.train.name, "test": cell.test.name,
                  "negatives": cell.negatives, **detect.evaluate(rule, real, fake.ravel(), fake),
                  "val_accuracy": rule.val.get("balanced_accuracy"), "detector_dir": str(det),
                  "seconds": round(time.perf_counter() - t0, 1)}
        write_json(path, result)


def _shard(value: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise TextebmError(f"--shard must be I/N with 1 <= I <= N, got {value!r}")
    return i, n


def run_matrix(cfg_: MatrixConfig) -> dict:
    """Every cell of the config (cached), then results.json, tables.md and heatmaps."""
    from textebm.io import write_json
    from textebm.options import check_config

    from textebm.inference import set_threads

    check_config(cfg_)
    set_threads(cfg_.threads)
    shard = _shard(cfg_.shard) if cfg_.shard else (1, 1)
    cfg = read_config(cfg_.config)
    out = Path(cfg_.out)
    m = Matrix(cfg, out, cfg_.threads, cfg_.progress)
    cells = plan_cells(cfg)
    left = [c for c in cells if not m.cell_file(c).is_file()]
    log.info("%d cells, %d cached, %d to run", len(cells), len(cells) - len(left), len(left))
    from textebm.detection.report import plan_report

    plan = plan_report(m, cells, left)
    if cfg_.plan:
        print(plan)
        return {}
    log.info("before it starts:\n%s", plan)
    out.mkdir(parents=True, exist_ok=True)
    mine = set(range(shard[0] - 1, len(cells), shard[1]))
    for i, cell in enumerate(cells):
        if i in mine:
            r = m.run_cell(cell)
            log.info("[%d/%d] %s %s -> %s: accuracy %.3f, AUROC %.3f", i + 1, len(cells), cell.detector,
                     cell.train.name, cell.test.name, r["accuracy"], r["auroc"])
    results = []
    for cell in cells:
        r = m.run_cell(cell)  # cached; with --shard, waits for (or does) the other shards' cells
        results.append({**r, "table": cell.table})  # a cell shared by two tables is computed once
    from textebm.detection.report import write_report

    summary = {"config": cfg, "cells": results}
    write_json(out / "results.json", summary)
    write_report(summary, out)
    return summary


