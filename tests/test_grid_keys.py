"""Cell keys and run folder names are the identity of a grid's cached work (OUT/cells/NAME-KEY.json,
OUT/runs/NAME-KEY, the matrix's gen/, neg/ and energy/ entries): a grid that runs for days
continues from them, so a change of code must not change them. These are pinned for small
configs of `tag grid` (both joint starts, the frozen ablation) and `detect matrix`; a new
setting that changes what a cell computes must give new keys, and then these pins change on
purpose, with a note in the commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textebm.data.layout import write_dataset
from textebm.detection import matrix
from textebm.tagging import grid as tag_grid

NOUNS = ["dog", "cat", "bird", "fish", "cow", "fox"]
VERBS = ["sees", "eats", "likes", "hears"]


def _row(i: int) -> dict:
    """The i-th of 144 distinct sentences (DET NOUN VERB DET NOUN)."""
    tokens = ["the", NOUNS[i % 6], VERBS[i // 6 % 4], "a", NOUNS[i // 24 % 6]]
    return {"text": " ".join(tokens), "tokens": tokens, "tags": ["DET", "NOUN", "VERB", "DET", "NOUN"]}


def write_toy(out: Path) -> Path:
    """A tagged dataset written from a formula (no random draw): 80 train, 10 dev, 10 test rows."""
    write_dataset(out, {"train": [_row(i) for i in range(80)], "dev": [_row(i) for i in range(80, 90)],
                        "test": [_row(i) for i in range(90, 100)]}, {"name": "toy-keys"})
    return out


def tag_config(data: Path, **over) -> dict:
    cfg = {"data": str(data), "labelled": 20, "proportions": [0.5, 1.0], "ratios": [1, 2], "seeds": [0, 1],
           "options": {"all": {"embed": 8, "hidden": 8, "noise_embed": 8, "noise_hidden": 8, "batch_size": 8,
                               "min_count": 1, "max_steps": 2, "lr": 0.02},
                       "pretrain": {"pretrain_steps": 2}, "joint": {"ramp_steps": 2}}}
    return {**cfg, **over}


TAG_CONFIGS = {"from-supervised": {},
               "from-pretrained": {"methods": ["supervised", "pretrain", "frozen", "joint"],
                                   "joint_start": "pretrained", "joint_min_steps": 5}}

MATRIX = {"corpora": ["sotu"], "vocab_size": 300,
          "generators": {"tf": {"arch": "transformer", "layers": 1, "width": 32, "heads": 2, "steps": 2},
                         "gcnn": {"arch": "gcnn", "layers": 1, "width": 32, "kernel": 3, "epochs": 1,
                                  "max_steps": 3}},
          "lm": {"context": 48, "chunk": 32, "batch_size": 8},
          "windows": {"length": 24, "contexts": [16, 20], "stride": 8, "k": 2,
                      "max_windows": {"train": 30, "dev": 16, "test": 16}},
          "energies": {"linear": {"energy": "linear", "steps": 3, "lr": 0.05}},
          "tables": [{"kind": "in-domain", "energies": ["linear"], "corpora": ["sotu"], "generators": ["tf"],
                      "directions": ["l2r", "r2l"]},
                     {"kind": "zeroshot", "detectors": ["loglik"], "corpora": ["sotu"], "generators": ["tf"]},
                     {"kind": "cross-arch", "energy": "linear", "corpus": "sotu", "generators": ["tf", "gcnn"]}]}

# name -> [cell key, run folder], computed by the code before the grid shell was shared (issue 36)
TAG_PINS = {
    "from-supervised": {
        "supervised-p1-r0-s0": ["1d4e47b973", "supervised-p1-r0-s0-fd6c099e85"],
        "pretrain-p0.5-r2-s1": ["5e8f1be0a3", "pretrain-p0.5-r2-s1-d8e7b07de8"],
        "joint-p0.5-r1-s0": ["896e6de740", "joint-p0.5-r1-s0-193e7870db"],
        "joint-p1-r2-s1": ["15fffffa7b", "joint-p1-r2-s1-12aa4494c2"],
    },
    "from-pretrained": {
        "supervised-p0.5-r0-s1": ["6cedb37f3d", "supervised-p0.5-r0-s1-097ac77e9b"],
        "pretrain-p1-r2-s0": ["1a0ca2e655", "pretrain-p1-r2-s0-1e7c1ad1ca"],
        "frozen-p0.5-r1-s1": ["f1e279dd89", "frozen-p0.5-r1-s1-10cc1a44db"],
        "joint-p0.5-r1-s0": ["bfaa314580", "joint-p0.5-r1-s0-417571cd8b"],
        "joint-p1-r2-s1": ["d406438cdb", "joint-p1-r2-s1-cb70dfd831"],
    },
}
TAG_CELLS = {"from-supervised": 20, "from-pretrained": 28}
MATRIX_PINS = {
    "linear__sotu-gcnn-l2r__sotu-gcnn-l2r__worst": "088f07f646",
    "linear__sotu-gcnn-l2r__sotu-tf-l2r__worst": "e17e0fd620",
    "linear__sotu-tf-l2r__sotu-gcnn-l2r__worst": "7d65448066",
    "linear__sotu-tf-l2r__sotu-tf-l2r__worst": "cc94ae7889",
    "linear__sotu-tf-r2l__sotu-tf-r2l__worst": "94fb942a77",
    "loglik__sotu-tf-l2r__sotu-tf-l2r__worst": "a5214ba6fa",
}
MATRIX_ARTIFACTS = ["sotu-tf-l2r-s0-10473e6fb0", "sotu-tf-l2r-s1-test-97d6579566.jsonl",
                    "linear-sotu-tf-l2r-worst-5577f21a2e"]


@pytest.mark.parametrize("name", sorted(TAG_CONFIGS))
def test_tag_grid_cell_keys_and_run_folders_stay(tmp_path, name):
    data = write_toy(tmp_path / "data")
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(tag_config(data, **TAG_CONFIGS[name])))
    g = tag_grid.TagGrid(tag_grid.read_config(path), tmp_path / "out")
    got = {s.name: [g.cell(s).key, g.run_dir(s).name] for s in g.settings()}
    assert len(got) == TAG_CELLS[name]
    assert {n: got[n] for n in TAG_PINS[name]} == TAG_PINS[name]


def test_matrix_cell_keys_and_artifact_names_stay(tmp_path):
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(MATRIX))
    m = matrix.Matrix(matrix.read_config(path), tmp_path / "mx")
    cells = matrix.plan_cells(m.cfg)
    assert {c.name: c.key for c in map(m.grid_cell, cells)} == MATRIX_PINS
    assert [m.gen("sotu", "tf", "l2r", 0).name, m.negatives("sotu", "tf", "l2r", "test").name,
            m.energy_dir("linear", cells[0].train, "worst").name] == MATRIX_ARTIFACTS
