"""Plots write non-empty PNGs atomically; the Markdown report follows the paper's table 1."""

import re

import numpy as np

import pytest
from matplotlib.figure import Figure

from textebm.calibration.plots import (
    plot_energy_histogram,
    plot_entropy_vs_energy,
    plot_reliability,
    plot_tradeoff,
)
from textebm.calibration.report import render_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def case(seed, n=200, c=3):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * 2
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    return p, rng.integers(0, c, n), -np.log(np.exp(z).sum(1))


def assert_png(path, min_ink=0.01):
    """A PNG that decodes and has something drawn on it: at least `min_ink` of its pixels are
    neither white nor one flat colour."""
    from matplotlib.image import imread

    assert path.read_bytes().startswith(PNG_MAGIC)
    img = imread(path)[..., :3]  # (H, W, 3) in [0, 1]
    ink = (img < 0.9).any(-1).mean()
    assert ink > min_ink, f"{path.name}: only {ink:.3%} of the pixels are drawn on"
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 8  # not one or two flat colours
    return img


def leftovers(directory):
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("mode", ["toplabel", "classwise"])
def test_reliability_png(tmp_path, mode):
    p1, y1, _ = case(0)
    p2, y2, _ = case(1)
    methods = {"baseline": (p1, y1), "ebm-hidden": (p2, y2)}
    out = plot_reliability(methods, tmp_path / "sub" / f"rel-{mode}.png", mode=mode)
    both = assert_png(out)
    assert leftovers(out.parent) == []
    one = assert_png(plot_reliability({"baseline": (p1, y1)}, tmp_path / "one.png", mode=mode))
    assert both.shape[1] > 1.5 * one.shape[1]  # a panel per method
    right = both[:, both.shape[1] // 2:]
    assert (right < 0.9).any(-1).mean() > 0.01  # and the second one is drawn on


@pytest.mark.parametrize("overlay", [True, False])
def test_energy_histogram_png(tmp_path, overlay):
    _, _, e1 = case(0)
    _, _, e2 = case(1)
    out = plot_energy_histogram({"scalar": e1, "hidden": e2 + 1}, tmp_path / "energy.png", overlay=overlay)
    assert_png(out)


def test_energy_histogram_single_value(tmp_path):
    assert_png(plot_energy_histogram({"x": np.zeros(5)}, tmp_path / "flat.png"))


def test_entropy_vs_energy_png(tmp_path):
    p, _, e = case(2)
    assert_png(plot_entropy_vs_energy({"baseline": (e, p), "ebm": (e * 2, p)}, tmp_path / "scatter.png"))


def test_tradeoff_png(tmp_path):
    points = {"baseline 2 ep": ([0.83, 0.84, 0.85], [0.057, 0.061, 0.058]),
              "baseline 3 ep": ([0.84, 0.83, 0.85], [0.07, 0.08, 0.075]),
              "EBM scalar": ([0.82], [0.05])}  # one seed: no bars
    assert_png(plot_tradeoff(points, tmp_path / "t.png", line=["baseline 2 ep", "baseline 3 ep"]))


def test_tradeoff_refuses_bad_points_and_leaves_no_file(tmp_path):
    with pytest.raises(ValueError, match="'a'"):
        plot_tradeoff({"a": ([0.8, 0.9], [0.1])}, tmp_path / "t.png")
    with pytest.raises(ValueError, match="finite"):
        plot_tradeoff({"a": ([0.8, float("nan")], [0.1, 0.1])}, tmp_path / "t.png")
    with pytest.raises(ValueError, match="not given: b"):
        plot_tradeoff({"a": ([0.8], [0.1])}, tmp_path / "t.png", line=["a", "b"])
    assert list(tmp_path.iterdir()) == []


def test_bad_input_leaves_no_file(tmp_path):
    p, y, e = case(3)
    with pytest.raises(ValueError):
        plot_reliability({"a": (p, y[:-1])}, tmp_path / "r.png")
    with pytest.raises(ValueError):
        plot_energy_histogram({"a": np.array([1.0, np.nan])}, tmp_path / "h.png")
    with pytest.raises(ValueError):
        plot_entropy_vs_energy({"a": (e[:-1], p)}, tmp_path / "s.png")
    with pytest.raises(ValueError):
        plot_reliability({}, tmp_path / "r.png")
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_leaves_no_file_and_keeps_old(tmp_path, monkeypatch):
    p, y, _ = case(4)
    target = tmp_path / "rel.png"
    target.write_bytes(b"old")

    def broken_savefig(self, f, **kwargs):
        f.write(b"half a png")
        raise RuntimeError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(RuntimeError, match="disk full"):
        plot_reliability({"a": (p, y)}, target)
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


# --- report -----------------------------------------------------------------------------------

RESULTS = {
    "tscal-dev": {"accuracy": 0.942, "ece_classwise": 0.010, "ece_toplabel": 0.02, "nll": 0.15, "brier": 0.09},
    "baseline": {"accuracy": 0.942, "ece_classwise": 0.050, "ece_toplabel": 0.06, "nll": 0.30, "brier": 0.11},
    "ebm-hidden": {"accuracy": 0.956, "ece_classwise": 0.032, "ece_toplabel": 0.04, "nll": 0.20, "brier": 0.10},
    "ebm-sharp-hidden": {"accuracy": 0.947, "ece_classwise": 0.038, "ece_toplabel": 0.03, "nll": 0.25, "brier": 0.10},
    "poscal": {"accuracy": 0.944, "ece_classwise": 0.040, "ece_toplabel": 0.05},
}


def test_report_layout_order_and_bold():
    text = render_table(RESULTS)
    lines = text.splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["", "Method", "acc.", "ECE (class-wise)", "ECE (top-label)",
                                                         "NLL", "Brier", ""]
    assert [c.strip(" -") for c in lines[1].split("|")] == ["", ":", *[":"] * 5, ""]  # numbers right-aligned
    names = [line.split("|")[1].strip() for line in lines[2:7]]
    assert names == ["Baseline", "PosCal", "(EBM)hidden", "(EBM)s-hidden", "T-Scal(dev)"]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[2:7]}
    # best class-wise ECE without dev data is (EBM)hidden (.032), although T-Scal(dev) is lower
    assert rows["(EBM)hidden"][1] == "**0.032**"
    assert rows["T-Scal(dev)"][1] == "0.010"
    assert rows["(EBM)s-hidden"][2] == "**0.030**"
    assert rows["(EBM)hidden"][3] == "**0.200**"
    # Brier tie at the printed precision: both bold
    assert rows["(EBM)hidden"][4] == "**0.100**" and rows["(EBM)s-hidden"][4] == "**0.100**"
    # accuracy never bold; a missing metric is a dash
    assert rows["(EBM)hidden"][0] == "0.956"
    assert rows["PosCal"][3] == "–"


def test_report_mcc_and_errors():
    text = re.sub(r" *\| *", " | ", render_table({"baseline": {"mcc": 0.539, "ece_classwise": 0.18}}, perf="mcc"))
    assert "| mcc. |" in text and "| Baseline | 0.539 | **0.180** |" in text
    other = re.sub(r" *\| *", " | ", render_table({"ebm-hiden": {"ece_classwise": 0.1},
                                                    "baseline": {"ece_classwise": 0.2}}))
    assert other.index("| Baseline |") < other.index("| ebm-hiden |")  # any name, shown as given
    with pytest.raises(ValueError):
        render_table({}, perf="f1")
