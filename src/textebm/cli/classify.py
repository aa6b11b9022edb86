"""Calibrated classifiers by joint energy-based training (He et al. 2021): train, eval."""

from textebm.classify.evaluate import ClassifyEvalConfig
from textebm.classify.train import ClassifyTrainConfig


def train(cfg: ClassifyTrainConfig) -> None:
    """Fine-tune an encoder classifier, optionally jointly with an EBM by NCE, or with PosCal."""
    from textebm.classify.train import classify_train

    m = classify_train(cfg)
    ev = m.get("eval", {})
    print(f"{cfg.out}: " + ", ".join(f"{k}={v:.4f}" for k, v in ev.items() if isinstance(v, float)))


def evaluate(cfg: ClassifyEvalConfig) -> None:
    """Accuracy, class-wise and top-label ECE, NLL, Brier, calibrators, plots and a report."""
    from textebm.calibration.report import render_table
    from textebm.classify.evaluate import evaluate_runs

    result = evaluate_runs(cfg)
    print(render_table(result["methods"]))
    print(f"report: {cfg.out}/report.md")


COMMANDS = {"train": (ClassifyTrainConfig, train), "eval": (ClassifyEvalConfig, evaluate)}
