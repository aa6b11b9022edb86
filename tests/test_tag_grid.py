"""`textebm tag grid` (paper e's tables 3 and 4 as a config): a tiny grid end to end on the tiny
tagged corpus of test_tagging.py, cached (a second run trains nothing), --plan and --shard, bad
config values exiting 2 naming the key, and table 4's relative error reduction by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tagging import tagged  # noqa: F401  (the module fixture: a tiny tagged dataset)

from textebm.cli import main
from textebm.tagging import grid as tag_grid
from textebm.tagging import grid_cost, grid_report
from textebm.tagging.grid_report import relative_error_reduction, summarise


def _config(tmp: Path, data: Path, **over) -> Path:
    """2 proportions (20 and 40 of a 40-sentence labelled set) x U/L 2 x 1 seed, 2 steps a run."""
    cfg = {"data": str(data), "labelled": 40, "proportions": [0.5, 1.0], "ratios": [2], "seeds": [0],
           "ood": str(data), "ood_proportion": 0.5,
           "options": {"all": {"embed": 8, "hidden": 8, "noise_embed": 8, "noise_hidden": 8, "batch_size": 8,
                               "min_count": 1, "precision": "fp32", "max_steps": 2, "eval_split": "",
                               "lr": 0.02},
                       "pretrain": {"pretrain_steps": 2}, "joint": {"ramp_steps": 2}}}
    cfg.update(over)
    path = tmp / "grid.json"
    path.write_text(json.dumps(cfg))
    return path


NAMES = {f"{m}-p{p}-r{r}-s0" for p in ("0.5", "1") for m, r in (("supervised", 0), ("pretrain", 2), ("joint", 2))}


def _grid(cfg: Path, out: Path, *extra) -> int:
    return main(["tag", "grid", "--config", str(cfg), "--out", str(out), "--no-progress", "--threads", "1",
                 *map(str, extra)])


def test_a_tiny_grid_end_to_end_then_cached(tagged, tmp_path, monkeypatch, capsys):  # noqa: F811
    cfg, out = _config(tmp_path, tagged), tmp_path / "grid"
    assert _grid(cfg, out, "--plan") == 0
    plan = capsys.readouterr().out
    assert "6 cells, 0 cached, 6 to run here" in plan and "estimated CPU time" in plan
    assert {line.split()[0] for line in plan.splitlines()[1:-1]} == NAMES
    assert not out.exists()  # --plan writes nothing

    assert _grid(cfg, out) == 0
    res = json.loads((out / "results.json").read_text())
    assert {f"{c['method']}-p{c['proportion']:g}-r{c['ratio']}-s{c['seed']}" for c in res["cells"]} == NAMES
    assert all(0 <= c["accuracy"] <= 1 for c in res["cells"])
    # each cell records what its run trained: CRF steps, and DNCE steps (pretrain: stage 1's)
    for c in res["cells"]:
        run = json.loads((out / c["run"] / "metrics.json").read_text())["train"]
        assert c["crf_steps"] == run["steps"] > 0
        if c["method"] == "pretrain":
            assert c["dnce_steps"] == 2  # pretrain_steps 2
        assert ("dnce_steps" in c) == (c["method"] != "supervised")
    # the out-of-domain set at 50 % only; joint started from the supervised run of its cell
    assert {c["method"] for c in res["cells"] if "ood_accuracy" in c} == {"supervised", "pretrain", "joint"}
    assert all(("ood_accuracy" in c) == (c["proportion"] == 0.5) for c in res["cells"])
    joint = next(c for c in res["cells"] if c["method"] == "joint" and c["proportion"] == 0.5)
    sup = next(c for c in res["cells"] if c["method"] == "supervised" and c["proportion"] == 0.5)
    init = json.loads((out / joint["run"] / "config.json").read_text())["init"]
    assert Path(init).resolve() == (out / sup["run"]).resolve()
    tables = (out / "tables.md").read_text()
    assert "Table 3" in tables and "Table 4" in tables and "Out of domain" in tables
    assert f"{sup['accuracy'] * 100:.2f}" in tables
    assert (out / "accuracy.png").stat().st_size > 0
    assert len(list((out / "cells").glob("*.json"))) == 6

    # a second run trains and evaluates nothing: every cell is read from its file
    stamps = {f: f.stat().st_mtime_ns for f in (out / "cells").glob("*.json")}
    boom = lambda *a, **k: pytest.fail("a cached cell was computed again")
    monkeypatch.setattr("textebm.tagging.train.tag_train", boom)
    monkeypatch.setattr("textebm.tagging.commands.tag_eval", boom)
    assert _grid(cfg, out) == 0
    assert {f: f.stat().st_mtime_ns for f in (out / "cells").glob("*.json")} == stamps
    assert json.loads((out / "results.json").read_text())["cells"] == res["cells"]
    capsys.readouterr()
    assert _grid(cfg, out, "--plan") == 0
    assert "6 cells, 6 cached, 0 to run here" in capsys.readouterr().out

    # cells are keyed by their settings: another supervised learning rate makes new supervised cells
    # and new joint ones (they start from the supervised run); the pre-training cells stay cached
    cfg2 = json.loads(cfg.read_text())
    cfg2["options"]["supervised"] = {"lr": 0.03}
    cfg.write_text(json.dumps(cfg2))
    assert _grid(cfg, out, "--plan") == 0
    plan = capsys.readouterr().out
    assert "6 cells, 2 cached, 4 to run here" in plan
    assert {line.split()[0] for line in plan.splitlines()[1:-1]} == {n for n in NAMES if "pretrain" not in n}

    # --report tables the finished cells (the two pre-training ones) and trains nothing (still patched)
    assert _grid(cfg, out, "--report") == 0
    part = json.loads((out / "results.json").read_text())
    assert part["cells_missing"] == 4 and {c["method"] for c in part["cells"]} == {"pretrain"}
    assert [c["accuracy"] for c in part["cells"]] == [c["accuracy"] for c in res["cells"] if c["method"] == "pretrain"]
    text = (out / "tables.md").read_text()
    assert "Partial (`--report`): 4 cells not finished yet" in text
    assert f"{part['cells'][0]['accuracy'] * 100:.2f}" in text and f"{sup['accuracy'] * 100:.2f}" not in text
    assert _grid(cfg, out, "--report", "--plan") == 2
    assert "--report and --plan" in capsys.readouterr().err


def test_an_interrupted_grid_says_to_run_it_again_and_a_rerun_continues(tagged, tmp_path, monkeypatch,  # noqa: F811
                                                                        capsys):
    """Ctrl-C in a cell: the grid has no --resume; the message says to run the same command again,
    which resumes the cell and finishes the grid."""
    from kill_at_step import stop_after

    from textebm.tagging.recipes import TaggerRecipe

    cfg = _config(tmp_path, tagged, proportions=[1.0], ood_proportion=1.0,
                  options={"all": {"embed": 8, "hidden": 8, "noise_embed": 8, "noise_hidden": 8, "batch_size": 8,
                                   "min_count": 1, "precision": "fp32", "max_steps": 4, "eval_split": "",
                                   "lr": 0.02, "checkpoint_every": 2},
                           "pretrain": {"pretrain_steps": 2}, "joint": {"ramp_steps": 2}})
    out = tmp_path / "grid"
    stop_after(3, TaggerRecipe, monkeypatch)
    capsys.readouterr()
    assert _grid(cfg, out) == 130
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert "run the same command again to continue: the grid resumes each cell" in err and "--resume" not in err
    assert _grid(cfg, out) == 0 and (out / "results.json").is_file()


def test_shards_split_the_cells(tagged, tmp_path, capsys):  # noqa: F811
    cfg, out = _config(tmp_path, tagged), tmp_path / "grid"
    halves = []
    for i in (1, 2):
        assert _grid(cfg, out, "--plan", "--shard", f"{i}/2") == 0
        text = capsys.readouterr().out
        assert f"shard {i}/2 holds 3" in text
        halves.append({line.split()[0] for line in text.splitlines() if line.startswith("  ")})
        assert "helps with the other shards' 3 unfinished cells" in text
    assert halves[0] | halves[1] == NAMES and not halves[0] & halves[1]


def test_a_ratio_past_the_pool_becomes_the_largest_it_allows(tagged, tmp_path, capsys):  # noqa: F811
    """160 training sentences, 40 labelled: a pool of 120 (no test sentence is a training one), so U/L
    up to 6 at 50 % (20 labelled) and 3 at 100 % (40): the ratios past it become that largest, once."""
    cfg, out = _config(tmp_path, tagged, ratios=[2, 5, 50], methods=["supervised", "joint"]), tmp_path / "grid"
    assert _grid(cfg, out, "--plan") == 0
    text = capsys.readouterr().out
    names = {line.split()[0] for line in text.splitlines() if line.startswith("  ")}
    assert {n for n in names if n.startswith("joint")} == {"joint-p0.5-r2-s0", "joint-p0.5-r5-s0",
                                                           "joint-p0.5-r6-s0", "joint-p1-r2-s0", "joint-p1-r3-s0"}
    assert "labelled 1: U/L 5, 50 need more unlabelled sentences than the pool has (largest U/L it allows: 3); " \
        "run U/L 2, 3" in text
    assert "labelled 0.5: U/L 50 need" in text


@pytest.mark.parametrize("over, key", [
    ({"ratio": [50]}, "`ratio` is not a setting"),
    ({"labelled": 500}, "`labelled`: 500 is more than the 160 training sentences"),
    ({"proportions": [0.5, 2]}, "`proportions` must be"),
    ({"methods": ["supervised", "semi"]}, "`methods` must be"),
    ({"methods": ["joint"]}, "`methods`: joint starts from the supervised"),
    ({"options": {"joint": {"lr": -1}}}, "`options` of joint: --lr must be greater than 0"),
    ({"options": {"all": {"epochs": "two"}}}, "`options.all.epochs` must be a number"),
    ({"options": {"all": {"seed": 3}}}, "`options.all.seed`: the grid sets it"),
    ({"options": {"joint": {"hidden": 32}}}, "`options` of joint: --hidden has no effect with --init"),
    ({"options": {"pretrain": {"bogus": 1}}}, "`options.pretrain.bogus` is not an option"),
    ({"ood": "no/such/folder"}, "`ood`"),
    ({"unlabelled": ["no/such/folder"]}, "`unlabelled` must be a list of text dataset folders"),
])
def test_a_bad_config_exits_2_naming_the_file_and_key(tagged, tmp_path, capsys, over, key):  # noqa: F811
    cfg, out = _config(tmp_path, tagged, **over), tmp_path / "grid"
    assert _grid(cfg, out) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and key in err and "Traceback" not in err
    assert not out.exists()


def test_relative_error_reduction_by_hand():
    # the paper's table 4, POS at 2 %, U/L 50: supervised 95.57, joint 95.92 -> 7.9
    assert relative_error_reduction(0.9592, 0.9557) == pytest.approx(100 * 0.0035 / 0.0443)
    assert round(relative_error_reduction(0.9592, 0.9557), 1) == 7.9
    assert relative_error_reduction(0.8, 0.9) == pytest.approx(-100.0)  # twice the errors
    # paired by seed: seed 0 removes half the errors, seed 1 a quarter
    cells = [{"method": "supervised", "proportion": 0.1, "ratio": 0, "seed": 0, "accuracy": 0.8},
             {"method": "supervised", "proportion": 0.1, "ratio": 0, "seed": 1, "accuracy": 0.6},
             {"method": "joint", "proportion": 0.1, "ratio": 50, "seed": 0, "accuracy": 0.9},
             {"method": "joint", "proportion": 0.1, "ratio": 50, "seed": 1, "accuracy": 0.7}]
    red = summarise(cells, {0.1: [50]})["reductions"][(0.1, 50)]
    assert red["joint over sup."] == pytest.approx([50.0, 25.0])
    assert red["pretrain over sup."] == [] and red["joint over pre."] == []
    # a reference without errors leaves nothing to reduce: that seed is left out, not -inf
    assert relative_error_reduction(1.0, 1.0) is None and relative_error_reduction(0.9, 1.0) is None
    perfect = [{**c, "accuracy": 1.0} if c["method"] == "supervised" and c["seed"] == 1 else c for c in cells]
    some = summarise(perfect, {0.1: [50]})["reductions"][(0.1, 50)]
    assert some["joint over sup."] == pytest.approx([50.0]) and some["seeds"]["joint over sup."] == [0]
    assert grid_report.mean_sd(red["joint over sup."], 1, 1) == "37.5 ± 17.7"


def test_the_claims_are_counted_by_hand():
    """Two proportions x two U/L x two seeds, accuracies chosen so every count is known."""
    acc = {("supervised", 0.02, 0): [0.70, 0.72], ("supervised", 0.1, 0): [0.80, 0.82],
           ("pretrain", 0.02, 50): [0.60, 0.62], ("pretrain", 0.02, 250): [0.75, 0.70],
           ("pretrain", 0.1, 50): [0.85, 0.80], ("pretrain", 0.1, 250): [0.70, 0.70],
           ("joint", 0.02, 50): [0.74, 0.70], ("joint", 0.02, 250): [0.76, 0.76],
           ("joint", 0.1, 50): [0.83, 0.81], ("joint", 0.1, 250): [0.79, 0.80]}
    cells = [{"method": m, "proportion": p, "ratio": r, "seed": s, "accuracy": a}
             for (m, p, r), xs in acc.items() for s, a in enumerate(xs)]
    ratios = {0.02: [50, 250], 0.1: [50, 250]}
    cfg = {"proportions": [0.02, 0.1], "methods": ["supervised", "pretrain", "joint"]}
    lines = grid_report.claims(summarise(cells, ratios), cfg, ratios)
    # joint means 0.72, 0.76, 0.82, 0.795 against supervised 0.71, 0.71, 0.81, 0.81: 3 of 4;
    # by seed: (0.74>0.70, 0.70<0.72), (0.76>0.70, 0.76>0.72), (0.83>0.80, 0.81<0.82), (0.79<0.80, 0.80<0.82)
    assert lines[0].startswith("joint beats supervised in 3 of 4 cells") and "in 4 of 8 (cell, seed)" in lines[0]
    # joint against pre-training (0.61, 0.725, 0.825, 0.70): 0.72>0.61, 0.76>0.725, 0.82<0.825, 0.795>0.70
    # by seed: (0.74>0.60, 0.70>0.62), (0.76>0.75, 0.76>0.70), (0.83<0.85, 0.81>0.80), (0.79>0.70, 0.80>0.70)
    assert lines[1].startswith("joint beats pre-training in 3 of 4 cells by the mean over seeds, and in 7 of 8 (cell")
    # 0.725 > 0.71, 0.825 > 0.81; by seed only 0.75 > 0.70 and 0.85 > 0.80
    assert lines[2] == ("pre-training beats supervised in 2 of 4 cells by the mean over seeds, and in 2 of 8 (cell, "
                        "seed) pairs (paper: 8 of 9 for POS)")
    assert lines[3] == "labelled 2%: joint's accuracy by U/L 50: 72.00, 250: 76.00 (rises with U/L)"
    assert lines[4] == "labelled 10%: joint's accuracy by U/L 50: 82.00, 250: 79.50 (does not rise throughout)"
    # reductions over supervised at 2 %: 100(0.74-0.70)/0.30, 100(0.70-0.72)/0.28, 100(0.76-0.70)/0.30, ...
    at2 = [100 * (a - s) / (1 - s) for a, s in ((0.74, 0.70), (0.70, 0.72), (0.76, 0.70), (0.76, 0.72))]
    at10 = [100 * (a - s) / (1 - s) for a, s in ((0.83, 0.80), (0.81, 0.82), (0.79, 0.80), (0.80, 0.82))]
    assert f"2%: {sum(at2) / 4:.1f}, 10%: {sum(at10) / 4:.1f}; largest at 2%" in lines[5]
    one = [c for c in cells if c["proportion"] == 0.02]
    last = grid_report.claims(summarise(one, {0.02: [50, 250]}), {**cfg, "proportions": [0.02]}, {0.02: [50, 250]})[-1]
    assert last.endswith("(one labelled size so far: where the gain is largest cannot be told yet)")


def test_a_bio_grid_counts_the_claims_and_table_4_on_span_f1():
    """A BIO tag set (every cell has span F1): the counts are those of F1, whatever accuracy says.
    Here accuracy runs the other way (1 − F1), so counting accuracy would give every count reversed."""
    f1 = {("supervised", 0.1, 0): [0.10, 0.12], ("joint", 0.1, 5): [0.14, 0.11], ("pretrain", 0.1, 5): [0.09, 0.13]}
    cells = [{"method": m, "proportion": p, "ratio": r, "seed": s, "f1": x, "accuracy": 1 - x}
             for (m, p, r), xs in f1.items() for s, x in enumerate(xs)]
    ratios, cfg = {0.1: [5]}, {"proportions": [0.1], "methods": ["supervised", "pretrain", "joint"]}
    summary = summarise(cells, ratios)
    assert summary["metric"] == "f1"
    # joint over supervised by seed: 100 (0.14 − 0.10) / 0.90, 100 (0.11 − 0.12) / 0.88
    assert summary["reductions"][(0.1, 5)]["joint over sup."] == pytest.approx([400 / 90, -100 / 88])
    lines = grid_report.claims(summary, cfg, ratios)
    assert lines[0].startswith("counted on span F1")
    # joint 0.125 > supervised 0.11; by seed 0.14 > 0.10, 0.11 < 0.12
    assert lines[1].startswith("joint beats supervised in 1 of 1 cells") and "in 1 of 2 (cell, seed)" in lines[1]
    # pre-training 0.11 = supervised 0.11: not ahead; by seed 0.09 < 0.10, 0.13 > 0.12
    assert lines[3].startswith("pre-training beats supervised in 0 of 1 cells") and "in 1 of 2 (cell" in lines[3]
    assert "e = 1 − span F1" in grid_report.tables(summary, {**cfg, "data": "d", "labelled": 100, "seeds": [0, 1],
                                                              "ood": ""}, ratios, [])
    pos = [{k: v for k, v in c.items() if k != "f1"} for c in cells]
    assert summarise(pos, ratios)["metric"] == "accuracy"


def test_the_plot_joins_the_largest_ratio_to_its_replacement():
    """At 100 % the pool gives U/L 50 and 85 only: the U/L=500 line ends at 85 there, and says so;
    the U/L=250 line stops at 10 %."""
    cfg = {"proportions": [0.02, 0.1, 1.0], "ratios": [50, 250, 500], "methods": ["supervised", "joint"]}
    ratios = {0.02: [50, 250, 500], 0.1: [50, 250, 500], 1.0: [50, 85]}
    lines = grid_report.plot_lines(cfg, ratios)
    assert lines == [("supervised", "supervised", {0.02: 0, 0.1: 0, 1.0: 0}),
                     ("joint", "joint, U/L=50", {0.02: 50, 0.1: 50, 1.0: 50}),
                     ("joint", "joint, U/L=250", {0.02: 250, 0.1: 250}),
                     ("joint", "joint, U/L=500 (85 at 100%)", {0.02: 500, 0.1: 500, 1.0: 85})]


def test_other_corpora_widen_the_pool_and_key_only_the_semi_supervised_cells(tagged, tmp_path, capsys):  # noqa: F811
    """242 text sentences beside the 120 of the pool: U/L up to 9 at 100 % (40 labelled), so 5 now
    fits; supervised cells keep their key, pretrain and joint ones take the corpus's content."""
    from textebm.data.layout import write_dataset

    write_dataset(tmp_path / "text", {"train": [{"text": f"The dog number {i} ran home."} for i in range(240)],
                                      "dev": [{"text": "A cat."}], "test": [{"text": "A hat."}]},
                  {"name": "toy-text"})
    plain = _config(tmp_path, tagged, ratios=[2, 5, 50])
    assert _grid(plain, tmp_path / "a", "--plan") == 0
    before = capsys.readouterr().out
    cfg = json.loads(plain.read_text())
    cfg["unlabelled"] = [str(tmp_path / "text")]
    (tmp_path / "wide.json").write_text(json.dumps(cfg))
    assert _grid(tmp_path / "wide.json", tmp_path / "a", "--plan") == 0
    text = capsys.readouterr().out
    assert "labelled 1: U/L 50 need more unlabelled sentences than the pool has (largest U/L it allows: 9); " \
        "run U/L 2, 5, 9" in text
    g0 = tag_grid.TagGrid(tag_grid.read_config(plain), tmp_path / "a")
    g1 = tag_grid.TagGrid(tag_grid.read_config(tmp_path / "wide.json"), tmp_path / "a")
    sup, joint = tag_grid.Setting("supervised", 1.0, 0, 0), tag_grid.Setting("joint", 1.0, 2, 0)
    assert g0.run_dir(sup) == g1.run_dir(sup) and g0.run_dir(joint) != g1.run_dir(joint)
    assert "run U/L 2, 3" in before


def test_the_plan_prices_dnce_by_the_vocabulary_it_will_have(tagged, tmp_path, monkeypatch):  # noqa: F811
    """A joint cell's estimate: its unlabelled passes times (fixed part + per word x the vocabulary
    grown from its pool, or max_words when smaller), by hand."""
    cfg = tag_grid.read_config(_config(tmp_path, tagged))
    joint = tag_grid.Setting("joint", 1.0, 2, 0)
    base = tag_grid.TagGrid(cfg, tmp_path / "g")
    n_unl = 2 * 40
    words = grid_cost.VOCAB_GROWTH[0] * n_unl ** grid_cost.VOCAB_GROWTH[1]
    per = grid_cost.SECONDS["unlabelled"] + grid_cost.SECONDS["per_word"] * words
    assert grid_cost.dnce_seconds(n_unl, {}) == pytest.approx(per)
    capped = {**cfg, "options": {**cfg["options"], "joint": {**cfg["options"]["joint"], "max_words": 10}}}
    small = tag_grid.TagGrid(capped, tmp_path / "h")
    per_capped = grid_cost.SECONDS["unlabelled"] + grid_cost.SECONDS["per_word"] * 10
    # max_steps 2 of batch 8: 16 unlabelled sentence passes either way
    assert base.seconds(joint) - small.seconds(joint) == pytest.approx(16 * (per - per_capped))
    assert words > 10
    # each joint step also runs a labelled batch of the same size through the CRF: 16 sentences
    with_labelled = base.seconds(joint)
    monkeypatch.setitem(grid_cost.SECONDS, "labelled", 0.0)
    assert with_labelled - base.seconds(joint) == pytest.approx(16 * 0.0016)


def test_pretrain_cells_fine_tune_by_default_and_a_frozen_cell_keeps_its_earlier_key(tagged, tmp_path):  # noqa: F811
    """Stage 2 fine-tunes every weight since issue 34: those cells take a new key (no frozen result is
    read for them); `options.pretrain.freeze` gives the ablation, under the key frozen cells had."""
    plain = _config(tmp_path, tagged)
    cfg = json.loads(plain.read_text())
    cfg.setdefault("options", {}).setdefault("pretrain", {})["freeze"] = True
    (tmp_path / "frozen.json").write_text(json.dumps(cfg))
    g0 = tag_grid.TagGrid(tag_grid.read_config(plain), tmp_path / "a")
    g1 = tag_grid.TagGrid(tag_grid.read_config(tmp_path / "frozen.json"), tmp_path / "a")
    pre, sup = tag_grid.Setting("pretrain", 1.0, 2, 0), tag_grid.Setting("supervised", 1.0, 0, 0)
    assert g0.train_settings(pre)["stage2"] == "every weight" and "stage2" not in g1.train_settings(pre)
    assert "freeze" not in g1.train_settings(pre)["options"]  # the key of a cell made before --freeze existed
    assert g0.run_dir(pre) != g1.run_dir(pre) and g0.run_dir(sup) == g1.run_dir(sup)
    assert g1.seconds(pre) < g0.seconds(pre)  # a frozen stage 2 is cheaper


def test_a_bio_data_set_keys_its_cells_by_selection_on_span_f1(tagged, tmp_path):  # noqa: F811
    """Runs of a BIO tag set keep their dev-best span F1 epoch; those kept by accuracy before have
    keys without `select`, so none of them is read as a cell now. A POS grid keeps its keys."""
    from textebm.data.layout import write_dataset
    from textebm.data.tagging import load_tagged

    bio = tmp_path / "bio"
    def bio_row(r: dict) -> dict:
        return {"text": " ".join(r["tokens"]), "tokens": r["tokens"],
                "tags": ["B-N" if t == "NOUN" else "O" for t in r["tags"]]}

    write_dataset(bio, {split: [bio_row(r) for r in load_tagged(tagged, split)] for split in ("train", "dev", "test")},
                  {"name": "toy-bio"})
    def grid(data: Path, keep_best: bool, **over) -> tag_grid.TagGrid:
        cfg = json.loads(_config(tmp_path, data, **over).read_text())
        cfg["options"]["all"].update({"keep_best": keep_best, "eval_split": "dev" if keep_best else ""})
        (tmp_path / "g.json").write_text(json.dumps(cfg))
        return tag_grid.TagGrid(tag_grid.read_config(tmp_path / "g.json"), tmp_path / "out")

    pos, ner, ner_last = grid(tagged, True), grid(bio, True, ood=""), grid(bio, False, ood="")
    for s in (tag_grid.Setting("supervised", 1.0, 0, 0), tag_grid.Setting("joint", 1.0, 2, 0)):
        assert "select" not in pos.train_settings(s) and ner.train_settings(s)["select"] == "dev span F1"
        assert "select" not in ner_last.train_settings(s)  # the last weights: nothing is selected


def test_a_cell_records_the_kept_and_the_last_dev_accuracy(tmp_path):
    """--keep-best: the dev accuracy of the weights kept (1 − validation loss) beside the last epoch's."""
    run = tmp_path / "run"
    (run / "pretrain").mkdir(parents=True)
    validation = [{"step": 5, "epoch": 0, "loss": 0.3}, {"step": 10, "epoch": 1, "loss": 0.2},
                  {"step": 15, "epoch": 2, "loss": 0.25}]
    (run / "metrics.json").write_text(json.dumps({"train": {"steps": 15, "validation": validation,
                                                            "kept": validation[1]}}))
    (run / "pretrain" / "metrics.json").write_text(json.dumps({"train": {"steps": 40}}))
    got = tag_grid.training_steps(run, "pretrain")
    assert got == {"crf_steps": 15, "dnce_steps": 40, "dev_accuracy_kept": pytest.approx(0.8),
                   "dev_accuracy_last": pytest.approx(0.75), "kept_epoch": 2}
    assert tag_grid.training_steps(run, "supervised").keys() == {"crf_steps", "dev_accuracy_kept",
                                                                 "dev_accuracy_last", "kept_epoch"}
    # a BIO tag set's run selected by span F1: the same figures, named so
    metrics = {"train": {"steps": 15, "validation": validation, "kept": validation[1]},
               "eval": {"selected_by": "dev span F1"}}
    assert tag_grid.training_steps(run, "supervised", metrics) == {
        "crf_steps": 15, "dev_span_f1_kept": pytest.approx(0.8), "dev_span_f1_last": pytest.approx(0.75),
        "kept_epoch": 2}


def test_pretrain_frozen_and_joint_from_pretraining_share_one_stage_1_per_pool(tagged, tmp_path, capsys):  # noqa: F811
    """`joint_start: pretrained` with the frozen ablation: the pretrain, frozen and joint cells of a
    pool start from one stage 1 in OUT/stage1 (trained once, stage-1 cost counted once in the plan),
    and joint needs no supervised run; --keep-best cells report the last weights' test accuracy
    beside the kept ones'; the tables show the frozen column and the rows' sentence counts."""
    cfg = _config(tmp_path, tagged, proportions=[1.0], methods=["supervised", "pretrain", "frozen", "joint"],
                  joint_start="pretrained", ood="")
    raw = json.loads(cfg.read_text())
    raw["options"]["all"].update({"eval_split": "dev", "keep_best": True, "max_steps": 0, "epochs": 2})
    raw["options"]["pretrain"].update({"pretrain_lr": 0.01})
    cfg.write_text(json.dumps(raw))
    g = tag_grid.TagGrid(tag_grid.read_config(cfg), tmp_path / "grid")
    pre, frozen, joint = (tag_grid.Setting(m, 1.0, 2, 0) for m in ("pretrain", "frozen", "joint"))
    assert g.seconds(frozen) < g.seconds(pre) and "init" not in g.train_settings(joint)
    assert _grid(cfg, tmp_path / "grid") == 0
    res = json.loads((tmp_path / "grid" / "results.json").read_text())
    stage1 = [p for p in (tmp_path / "grid" / "stage1").iterdir() if p.is_dir()]
    assert len(stage1) == 1
    by = {c["method"]: c for c in res["cells"]}
    for m in ("pretrain", "frozen", "joint"):
        metrics = json.loads((tmp_path / "grid" / by[m]["run"] / "metrics.json").read_text())
        assert Path(metrics["eval"]["stage1"]) == stage1[0], m
    assert by["joint"]["stage1_dnce_steps"] == by["pretrain"]["dnce_steps"] > 0
    assert not (tmp_path / "grid" / by["joint"]["run"] / "pretrain").exists()
    for c in res["cells"]:
        assert c["labelled_sentences"] == 40
        run = tmp_path / "grid" / c["run"]
        train = json.loads((run / "metrics.json").read_text())["train"]
        # RUN/last exactly when an earlier epoch was kept; accuracy_last is its test figure, else the kept one's
        assert (run / "last").is_dir() == (train["kept"] != train["validation"][-1])
        last = run / "last" if (run / "last").is_dir() else run
        assert main(["tag", "eval", "--model", str(last), "--data", str(tagged), "--split", "test",
                     "--out", str(tmp_path / f"{c['method']}-last.json")]) == 0
        assert c["accuracy_last"] == json.loads((tmp_path / f"{c['method']}-last.json").read_text())["test_accuracy"]
    tables = (tmp_path / "grid" / "tables.md").read_text()
    assert "pre. (frozen)" in tables and "100% (40)" in tables and "frozen ablation beats supervised" in tables


def test_a_bio_grid_tables_span_f1_beside_accuracy():
    """Cells of a BIO tag set carry span F1 (`f1`); tables.md then has a span-F1 table of the
    same layout, mean ± sd over seeds."""
    cells = [{"method": "supervised", "proportion": 0.1, "ratio": 0, "seed": s, "accuracy": 0.9, "f1": f}
             for s, f in ((0, 0.20), (1, 0.30))]
    cells += [{"method": "joint", "proportion": 0.1, "ratio": 5, "seed": s, "accuracy": 0.91, "f1": 0.4}
              for s in (0, 1)]
    ratios = {0.1: [5]}
    cfg = {"data": "d", "labelled": 100, "proportions": [0.1], "methods": ["supervised", "joint"], "seeds": [0, 1],
           "ood": ""}
    text = grid_report.tables(summarise(cells, ratios), cfg, ratios, [])
    f1 = text[text.index("## Span F1"):]
    assert "25.00 ± 7.07" in f1 and "40.00 ± 0.00" in f1 and "10% (10)" in f1
    assert "## Span F1" not in grid_report.tables(summarise([{k: v for k, v in c.items() if k != "f1"} for c in cells],
                                                         ratios), cfg, ratios, [])
