"""`classify eval`: its report folder under the output rule (a training run given as --out is
refused and left intact; earlier output is replaced only with --overwrite, before any work), its
precision (fp32 by default, recorded), and its numbers against predictions computed by hand."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import patch_everywhere, same

from textebm.cli import main


@pytest.fixture(scope="module")
def run(classify_fixture, tmp_path_factory):
    d = classify_fixture
    out = tmp_path_factory.mktemp("clf_eval") / "baseline"
    assert main(["classify", "train", "--data", str(d / "data"), "--encoder", str(d / "encoder"), "--out", str(out),
                 "--epochs", "3", "--batch-size", "16", "--lr", "3e-3", "--precision", "fp32",
                 "--eval-split", "", "--no-progress"]) == 0
    return out


def _digest(folder) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _eval(run, data, out, *extra) -> int:
    return main(["classify", "eval", "--model", str(run), "--data", str(data), "--out", str(out),
                 "--no-calibrators", *map(str, extra)])


def _no_work(monkeypatch):
    import textebm.classify.evaluate as evaluate
    import textebm.models.load as load

    def boom(*args, **kwargs):
        raise AssertionError("work started before --out was checked")

    for module, name in ((load, "find_model"), (load, "load_classifier"), (evaluate, "run_predictions")):
        patch_everywhere(monkeypatch, module, name, boom)


def test_a_training_run_given_as_out_is_refused_and_intact(run, classify_fixture, capsys, monkeypatch):
    before = _digest(run)
    _no_work(monkeypatch)
    assert _eval(run, classify_fixture / "data", run, "--overwrite") == 2
    err = capsys.readouterr().err
    assert f"--out {run}" in err and "`classify train`" in err and "Traceback" not in err
    assert _digest(run) == before


def test_report_is_replaced_only_with_overwrite(run, classify_fixture, tmp_path, capsys, monkeypatch):
    report = tmp_path / "report"
    assert _eval(run, classify_fixture / "data", report) == 0
    (report / "notes.txt").write_text("mine")
    first = json.loads((report / "metrics.json").read_text())
    with monkeypatch.context() as m:
        _no_work(m)
        assert _eval(run, classify_fixture / "data", report) == 2
        assert "--overwrite" in capsys.readouterr().err
        (tmp_path / "a-file").write_text("x")
        assert _eval(run, classify_fixture / "data", tmp_path / "a-file") == 2
        assert "is a file" in capsys.readouterr().err
    assert _eval(run, classify_fixture / "data", report, "--overwrite") == 0
    assert (report / "notes.txt").read_text() == "mine"  # not textebm's: left where it is
    assert json.loads((report / "metrics.json").read_text())["methods"] == first["methods"]


def test_metrics_come_from_fp32_predictions_and_record_the_precision(run, classify_fixture, tmp_path):
    """Default fp32: the report's numbers equal those computed from an fp32 model by hand (no
    autocast); the precision and its reason are in metrics.json and report.md."""
    from textebm.calibration import calibration_summary, halve_dev
    from textebm.classify.data import encode_examples
    from textebm.classify.predict import predict
    from textebm.data.readers import load_split
    from textebm.models.load import load_classifier

    report = tmp_path / "report"
    assert _eval(run, classify_fixture / "data", report, "--bins", "10") == 0
    m = json.loads((report / "metrics.json").read_text())
    prec = m["settings"]["precision"]
    assert prec["precision"] == "fp32" and prec["requested"] == "fp32" and prec["reason"]
    assert "Models ran in fp32" in (report / "report.md").read_text()

    model, tok = load_classifier(run)
    ex = encode_examples(tok, load_split(classify_fixture / "data", "dev"), model.spec.labels, model.spec.max_len)
    out = predict(model, ex, tok.pad_token_id, 64)  # eval's default batches: the same fp32 sums, bit for bit
    _, test = halve_dev(len(ex), 0)
    expected = calibration_summary(out["probs"][test], out["labels"][test], 10)
    assert m["methods"]["baseline"] == pytest.approx(expected, abs=same(1e-9))

    bf16 = tmp_path / "bf16"
    assert _eval(run, classify_fixture / "data", bf16, "--precision", "bf16") == 0
    mb = json.loads((bf16 / "metrics.json").read_text())
    assert mb["settings"]["precision"]["precision"] == "bf16"
    assert np.isclose(mb["methods"]["baseline"]["accuracy"], m["methods"]["baseline"]["accuracy"], atol=0.05)


@pytest.mark.parametrize("args, message", [(["--bins", "0"], "--bins must be at least 1"),
                                           (["--batch-size", "0"], "--batch-size must be at least 1"),
                                           (["--seed", "-2"], "--seed must be at least 0")])
def test_option_bounds(run, classify_fixture, tmp_path, capsys, monkeypatch, args, message):
    _no_work(monkeypatch)
    assert _eval(run, classify_fixture / "data", tmp_path / "r", *args) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("as_given", ["RUN", "RUN/model"])
def test_calibrators_see_exactly_the_training_subset_and_the_dev_half(classify_fixture, tmp_path, monkeypatch,
                                                                      as_given):
    """-train calibrators are fit on the --limit examples the model saw, -dev ones on the dev half,
    whether the run is given as RUN or RUN/model."""
    from textebm.calibration import ScalingBinning, TemperatureScaling, halve_dev

    d = classify_fixture
    run = tmp_path / "run"
    assert main(["classify", "train", "--data", str(d / "data"), "--encoder", str(d / "encoder"), "--out", str(run),
                 "--limit", "40", "--max-steps", "2", "--precision", "fp32", "--eval-split", "",
                 "--no-progress"]) == 0
    seen: dict[str, list[int]] = {"tscal": [], "scalbin": []}
    for name, cls in (("tscal", TemperatureScaling), ("scalbin", ScalingBinning)):
        fit = cls.fit

        def spy(self, logits, labels, fit=fit, name=name):
            seen[name].append(len(labels))
            return fit(self, logits, labels)

        monkeypatch.setattr(cls, "fit", spy)
    model = run if as_given == "RUN" else run / "model"
    assert main(["classify", "eval", "--model", str(model), "--data", str(d / "data"), "--out", str(tmp_path / "r"),
                 "--bootstrap", "0"]) == 0
    dev_half = len(halve_dev(64, 0)[0])
    assert seen == {"tscal": [40, dev_half], "scalbin": [40, dev_half]}
