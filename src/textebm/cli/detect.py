"""detect: sequence energies that tell real from generated text (Bakhtin et al. 2019).

  textebm detect train --train TRAIN.jsonl --val DEV.jsonl --vocab VOCAB --energy unitransf --out RUN
  textebm detect fit --zeroshot fastdetectgpt --model LM --val DEV.jsonl --vocab VOCAB --out DET
  textebm detect eval --model RUN --test TEST.jsonl [--threshold threshold.json] [--buckets 8-16 16-32]
  textebm detect score --model RUN --input texts.jsonl --out scores.jsonl
  textebm detect threshold --model RUN --human human.txt --fpr 0.01 --out threshold.json
  textebm detect analyze --model RUN --test TEST.jsonl --lm GENERATOR --out DIR
  textebm detect matrix --config bench/detection/cpu.json --out runs/detection

Negatives files come from `textebm negatives generate`. A detector (RUN of `detect train`, or DET
of `detect fit` for a zero-shot one) carries its decision rule in detector.json: the threshold and
the temperature fitted on validation windows, never on test. The energy a `detect train` run holds
is also the residual energy E(x) of paper d's joint model (`textebm residual generate / ppl`).
"""

from textebm.detection.commands import AnalyzeConfig, DetectEvalConfig, FitConfig, DetectScoreConfig, ThresholdConfig
from textebm.detection.matrix import MatrixConfig
from textebm.detection.train import DetectTrainConfig


def train(cfg: DetectTrainConfig) -> None:
    """Train a sequence energy (linear, BiLSTM, UniTransf, BiTransf, lmstats) against generated negatives."""
    from textebm.detection.train import detect_train

    m = detect_train(cfg)
    print(f"{cfg.out}: validation " + ", ".join(f"{k}={v:.4g}" for k, v in m["rule"]["val"].items()))


def fit(cfg: FitConfig) -> None:
    """Fit a zero-shot detector's decision rule (loglik, Fast-DetectGPT, Binoculars) on validation windows."""
    from textebm.detection.commands import fit_zeroshot

    rule = fit_zeroshot(cfg)
    print(f"{cfg.out}: validation " + ", ".join(f"{k}={v:.4g}" for k, v in rule["val"].items()))


def evaluate(cfg: DetectEvalConfig) -> None:
    """Test metrics of a detector: class-balanced accuracy, AUROC, TPR at 1 % FPR, P@1."""
    from textebm.detection.commands import evaluate_detector

    m = evaluate_detector(cfg)
    print(", ".join(f"{k}={v:.4g}" for k, v in m.items() if k != "by_length"))
    b = m["by_length"]
    print(f"by length (text tokens), TPR and FPR at threshold {b['threshold']:.4g} from {b['from']}:")
    for x in b["buckets"]:
        print(f"  {x['bucket']:>7}: AUROC {x['auroc']:.4f}, TPR {x['tpr']:.4f}, FPR {x['fpr']:.4f}, "
              f"balanced accuracy {x['accuracy']:.4f} ({x['n_real']} real, {x['n_generated']} generated windows)")


def score(cfg: DetectScoreConfig) -> None:
    """Energy and calibrated P(machine-generated) of each text of a file."""
    from textebm.detection.commands import score_texts

    score_texts(cfg)


def threshold(cfg: ThresholdConfig) -> None:
    """Re-fit the threshold on your own human texts for a false-positive rate; report it held out."""
    from textebm.detection.commands import refit_threshold

    r = refit_threshold(cfg)
    print(f"threshold {r['threshold']:.6g} for FPR {r['target_fpr']:g} (was {r['previous_threshold']:.6g}): "
          f"{r['fpr_fit']:.4f} on the {r['n_fit']} texts it was fitted on (the smallest FPR they can show: "
          f"{r['smallest_reachable_fpr']:.4g}), {r['fpr_held_out']:.4f} on {r['n_held_out']} held-out texts")
    if r["val_tpr_before"] is not None:
        print(f"detection on the detector's {r['val_negatives']} generated validation windows: TPR "
              f"{r['val_tpr_before']:.4f} before, {r['val_tpr_after']:.4f} after (FPR on its {r['val_windows']} real "
              f"ones {r['val_fpr_before']:.4f} -> {r['val_fpr_after']:.4f})")
    warned = f" ({len(r['warnings'])} warnings, logged and in the file)" if r["warnings"] else ""
    print(f"written to {cfg.out}{warned}")


def analyze(cfg: AnalyzeConfig) -> None:
    """Accuracy against context length (fig. 1); energy and LM NLL against a perturbation's position (fig. 2)."""
    from textebm.detection.commands import analyze as run

    r = run(cfg)
    print("context length -> accuracy: " + ", ".join(f"{p['context_len']}: {p['accuracy']:.3f}" for p in r["context"]))


def matrix(cfg: MatrixConfig) -> None:
    """The generalisation tables as a config: every cell cached; results.json, tables.md, heatmaps."""
    from textebm.detection.matrix import run_matrix

    summary = run_matrix(cfg)
    if summary:
        print(f"{len(summary['cells'])} cells; tables in {cfg.out}/tables.md")


COMMANDS: dict = {
    "train": (DetectTrainConfig, train),
    "fit": (FitConfig, fit),
    "eval": (DetectEvalConfig, evaluate),
    "score": (DetectScoreConfig, score),
    "threshold": (ThresholdConfig, threshold),
    "matrix": (MatrixConfig, matrix),
    "analyze": (AnalyzeConfig, analyze),
}
