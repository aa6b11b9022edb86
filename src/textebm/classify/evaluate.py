"""`textebm classify eval`: the paper's evaluation protocol (sec. 3, appendix C).

The dev split is halved with a fixed seed into a dev half and a test half. Every number is
measured on the test half. Post-hoc calibrators (temperature scaling, scaling-binning) are fit
either on the training set (`-train`, the fair comparison with EBM training, which sees no dev
data) or on the dev half (`-dev`, for reference).

Checks before any work: the report folder (`textebm.outputs`: a new or empty folder, or earlier
`classify eval` output with --overwrite; never a training run) and every `--model` (a classifier
folder, `textebm.models.load`). The models run on the accelerator when there is one, in
`--precision` (fp32 by default, so that metrics do not come from bf16-rounded logits); metrics
are computed in float64 from the logits. The precision is recorded in metrics.json and report.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from textebm.calibration import calibration_summary, halve_dev
from textebm.calibration.calibrators import CALIBRATORS, fit_logged
from textebm.calibration.plots import (
    plot_energy_histogram,
    plot_entropy_vs_energy,
    plot_reliability,
)
from textebm.calibration.report import method_label, render_table
from textebm.calibration.uncertainty import bootstrap_ci, paired_bootstrap_diff
from textebm.classify.data import check_eval_labels, encode_examples, pairs_problem
from textebm.classify.predict import predict
from textebm.data.layout import input_sha256
from textebm.data.readers import example_id, load_split, split_file
from textebm.energy import hidden_energy
from textebm.errors import InputError, TextebmError
from textebm.inference import inference_setup, set_threads
from textebm.io import atomic_write, read_json, read_json_object, write_json
from textebm.markdown import table
from textebm.models.classifier import SPEC_FILE, spec_from_dict
from textebm.models.load import CLASSIFIER, find_model, load_classifier
from textebm.options import check_config, threads_field
from textebm.outputs import check_output_dir, output_dir
from textebm.precision import CHOICES as PRECISIONS

log = logging.getLogger(__name__)

KIND = "classify eval"  # the output marker of a report folder


@dataclass
class ClassifyEvalConfig:
    model: list[str] = field(metadata={"help": "one or more trained runs (RUN or RUN/model)"})
    data: str = field(metadata={"help": "dataset directory (train.jsonl and the split to halve)"})
    out: str = field(metadata={"help": "report directory: metrics.json, report.md, plots"})
    bins: int = field(default=20, metadata={"help": "ECE bins (paper: 20)", "min": 1})
    split: str = field(default="dev", metadata={"help": "split halved into a dev half and a test half"})
    seed: int = field(default=0, metadata={"help": "seed of the dev halving", "min": 0})
    calibrators: bool = field(default=True, metadata={"help": "also fit T-Scal and Scal-bin on train and dev half"})
    batch_size: int = field(default=64, metadata={"help": "examples per forward pass", "min": 1})
    precision: str = field(default="fp32", metadata={
        "help": "precision the models predict in (metrics are always computed in float64 from the "
                "logits); auto: bf16 where the hardware multiplies it natively", "choices": list(PRECISIONS)})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={
        "help": "replace earlier `classify eval` output in --out (never a training run or files textebm did not write)"})
    bootstrap: int = field(default=1000, metadata={
        "help": "bootstrap resamples of the test half for 95% intervals (0: none)", "min": 0})


def method_name(spec) -> str:
    if spec.energy != "none":
        return f"ebm-{spec.energy}"
    return "poscal" if spec.poscal_bins else "baseline"


def spec_of(info):
    """The `ClassifierSpec` in a classifier folder's classifier.json (checked; no weights read)."""

    f = info.path / SPEC_FILE
    return spec_from_dict(read_json_object(f, "classifier description"), f)


def run_predictions(info, data: str, split: str, batch_size: int, precision=None, device=None) -> dict:
    """Predictions of one classifier (`textebm.models.load.FolderInfo`) on its training subset and
    on `split`, the model in `precision` (a PrecisionChoice; default fp32) on `device`."""

    model, tok = load_classifier(info.path, dtype=precision.dtype if precision is not None else None,
                                 device=device)
    cfg_file = info.run / "config.json" if info.run is not None else None  # the run's training settings
    run_cfg = read_json(cfg_file) if cfg_file is not None and cfg_file.is_file() else {}
    limit = run_cfg.get("limit", 0)
    recorded = (run_cfg.get("inputs_sha256") or {}).get("data")
    if recorded and recorded != input_sha256(data):  # the -train calibrators would fit other examples
        log.warning("--data %s is not the data %s was trained on (its content differs from the run's record): the "
                    "-train calibrators are fitted on this training split, not on the examples the run learned",
                    data, info.run)
    train_rows = load_split(data, "train")
    train_rows = train_rows[:limit] if limit else train_rows
    eval_rows = load_split(data, split)
    check_eval_labels(eval_rows, model.spec.labels, split_file(data, split))
    for path, rows in ((split_file(data, "train"), train_rows), (split_file(data, split), eval_rows)):
        if why := pairs_problem(rows, model.spec.pairs):
            raise InputError(path, why)
    out = {}
    for name, rows in (("train", train_rows), (split, eval_rows)):
        ex = encode_examples(tok, rows, model.spec.labels, model.spec.max_len)
        out[name] = predict(model, ex, tok.pad_token_id or 0, batch_size)
    out["spec"] = model.spec
    out["ids"] = [example_id(r, i) for i, r in enumerate(eval_rows)]
    return out


def evaluate_runs(cfg: ClassifyEvalConfig) -> dict:
    """Evaluate runs and calibrators on the test half; write metrics.json, report.md and plots."""
    import torch

    check_config(cfg)
    set_threads(cfg.threads)
    check_output_dir(cfg.out, KIND, cfg.overwrite)  # before any work: a run given as --out is refused
    infos = [find_model(run, CLASSIFIER, "--model", ids=False) for run in cfg.model]
    device, choice = inference_setup(cfg.precision)
    methods: dict[str, dict] = {}
    arrays: dict[str, dict] = {}  # per method: probs/labels/energy on the test half, for plots
    settings: dict = {"bins": cfg.bins, "split": cfg.split, "seed": cfg.seed, "precision": choice.as_dict(),
                      "runs": {}}
    specs = [spec_of(info) for info in infos]  # from classifier.json, before any model is loaded
    names = [method_name(spec) for spec in specs]
    other = next((i for i, spec in enumerate(specs) if list(spec.labels) != list(specs[0].labels)), None)
    if other is not None:  # compared column by column, their probabilities must mean the same classes
        raise TextebmError(f"--model {cfg.model[other]}: classes {list(specs[other].labels)}, where --model "
                           f"{cfg.model[0]} has {list(specs[0].labels)}; runs evaluated together need one label set")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TextebmError(f"several runs evaluate as the same method ({', '.join(dup)}); evaluate them separately")
    n = len(load_split(cfg.data, cfg.split))
    if n < 2:  # halved into the calibrators' half and the test half
        raise InputError(split_file(cfg.data, cfg.split), f"{n} example; the evaluation halves the split into a "
                                                          "half to fit the calibrators on and a test half: give 2 or more")
    preds = [run_predictions(info, cfg.data, cfg.split, cfg.batch_size, choice, device) for info in infos]
    # The post-hoc calibrators are baselines applied to the plain fine-tuned model (table 1);
    # without a baseline among the runs they calibrate the first run given.
    calibrated = "baseline" if "baseline" in names else names[0]
    settings["calibrated_model"] = calibrated
    for run, pred, name in zip(cfg.model, preds, names):
        ev, tr = pred[cfg.split], pred["train"]
        dev_idx, test_idx = halve_dev(len(ev["labels"]), cfg.seed)
        y_test = ev["labels"][test_idx]
        settings["runs"][name] = {"run": str(run), "train_examples": len(tr["labels"]),
                                  "dev_half": len(dev_idx), "test_half": len(test_idx)}
        energy = ev["energy"][test_idx]
        if np.isnan(energy).all():  # baseline / PosCal: the EBM hidden in the classifier (eq. 4)
            energy = hidden_energy(torch.from_numpy(ev["logits"][test_idx])).numpy()
        methods[name] = calibration_summary(ev["probs"][test_idx], y_test, cfg.bins)
        arrays[name] = {"probs": ev["probs"][test_idx], "labels": y_test, "energy": energy}
        if not cfg.calibrators or name != calibrated:
            continue
        fits = {"train": (tr["logits"], tr["labels"]), "dev": (ev["logits"][dev_idx], ev["labels"][dev_idx])}
        for cal_name in CALIBRATORS:
            for where, (logits, labels) in fits.items():
                cal = fit_logged(cal_name, logits, labels, f"{cal_name}-{where} on {name}")
                probs = cal.predict_proba(ev["logits"][test_idx])
                key = f"{cal_name}-{where}"
                methods[key] = calibration_summary(probs, y_test, cfg.bins)
                if cal_name == "tscal":
                    methods[key]["temperature"] = float(cal.temperature_)
                arrays[key] = {"probs": probs, "labels": y_test, "energy": None}
    result = {"methods": methods, "settings": settings,
              **uncertainty(arrays, cfg.bins, cfg.bootstrap, cfg.seed)}
    test_ids = [preds[0]["ids"][i] for i in halve_dev(len(preds[0]["ids"]), cfg.seed)[1]]
    with output_dir(cfg.out, KIND, cfg.overwrite) as tmp:
        write_report_files(tmp, result, arrays, cfg.bins)
        write_predictions(tmp / "predictions.jsonl", test_ids, arrays)
    return result


INTERVAL_METRICS = ("accuracy", "ece_classwise", "ece_toplabel")


def uncertainty(arrays: dict, bins: int, n_boot: int, seed: int) -> dict:
    """Bootstrap intervals of each method on the test half, and of its difference from the
    baseline on the same resamples (`textebm.calibration.uncertainty`); {} when n_boot is 0."""

    if not n_boot:
        return {}
    intervals = {n: {k: list(v) for k, v in bootstrap_ci(a["probs"], a["labels"], INTERVAL_METRICS, n_boot,
                                                         seed=seed, n_bins=bins).items()}
                 for n, a in arrays.items()}
    out: dict = {"intervals": intervals, "bootstrap": {"resamples": n_boot, "level": 0.95, "seed": seed}}
    if "baseline" in arrays:
        base = arrays["baseline"]
        out["vs_baseline"] = {n: {k: paired_bootstrap_diff(a["probs"], base["probs"], base["labels"], k, n_boot,
                                                           seed=seed, n_bins=bins) for k in INTERVAL_METRICS}
                              for n, a in arrays.items() if n != "baseline"}
    return out


def write_predictions(path: Path, ids: list[str], arrays: dict) -> None:
    """One line per test-half example: id, gold label index, and per method its probabilities
    and (where the method has one) its energy, so a user can re-bin ECE or join their own data."""
    import json

    with atomic_write(path) as f:
        for i, ex_id in enumerate(ids):
            row = {"id": ex_id, "label": int(next(iter(arrays.values()))["labels"][i]),
                   "probs": {n: [round(float(x), 8) for x in a["probs"][i]] for n, a in arrays.items()},
                   "energy": {n: float(a["energy"][i]) for n, a in arrays.items() if a["energy"] is not None}}
            f.write(json.dumps(row) + "\n")


def write_report_files(out: Path, result: dict, arrays: dict, bins: int) -> None:
    """metrics.json, report.md, one reliability diagram per method (class-wise and top-label),
    all methods side by side, the energy histogram (fig. 5) and entropy vs energy (fig. 4)."""

    write_json(out / "metrics.json", result)
    for name, a in arrays.items():
        for mode in ("classwise", "toplabel"):
            plot_reliability({name: (a["probs"], a["labels"])}, out / f"reliability_{mode}_{name}.png",
                             mode=mode, n_bins=bins)
    plot_reliability({n: (a["probs"], a["labels"]) for n, a in arrays.items() if "-" not in n or n.startswith("ebm")},
                     out / "reliability_classwise_all.png", mode="classwise", n_bins=bins)
    energies = {n: a["energy"] for n, a in arrays.items() if a["energy"] is not None}
    if energies:
        plot_energy_histogram(energies, out / "energy_histogram.png")
        plot_entropy_vs_energy({n: (e, arrays[n]["probs"]) for n, e in energies.items()}, out / "entropy_vs_energy.png")
    with atomic_write(out / "report.md") as f:
        f.write("# Calibration report\n\n")
        f.write(f"Test half of the `{result['settings']['split']}` split; ECE with {bins} bins. "
                "Class-wise ECE is He et al.'s eq. (15); top-label ECE is the usual max-probability ECE.\n\n")
        prec = result["settings"].get("precision")
        if prec:
            f.write(f"Models ran in {prec['precision']} on {prec['device']} ({prec['reason']}); metrics "
                    "computed in float64 from the logits.\n\n")
        f.write(render_table(result["methods"]))
        if result.get("intervals"):
            f.write("\n\n" + render_intervals(result))
        f.write("\n\n![reliability, class-wise](reliability_classwise_all.png)\n")
        if energies:
            f.write("\n![energy histogram](energy_histogram.png)\n\n![entropy vs energy](entropy_vs_energy.png)\n")


def render_intervals(result: dict) -> str:
    """A Markdown table of 95% bootstrap intervals and the paired difference from the baseline."""

    b = result["bootstrap"]
    lines = [f"95% bootstrap intervals over {b['resamples']} resamples of the test half; the change "
             "against the baseline is measured on the same resamples (paired).", "",
             ]
    body = []
    for name, iv in result["intervals"].items():
        acc, ece = iv["accuracy"], iv["ece_classwise"]
        m = result["methods"][name]
        d = result.get("vs_baseline", {}).get(name, {}).get("ece_classwise")
        change = f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]" if d else "-"
        body.append([method_label(name), f"{m['accuracy']:.3f} [{acc[0]:.3f}, {acc[1]:.3f}]",
                     f"{m['ece_classwise']:.3f} [{ece[0]:.3f}, {ece[1]:.3f}]", change])
    header = ["Method", "acc. [95% CI]", "ECE class-wise [95% CI]", "change in class-wise ECE vs baseline [95% CI]"]
    return "\n".join([*lines, table(header, body)])
