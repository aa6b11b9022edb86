"""Calibration of classifiers (He et al. 2021): metrics, post-hoc calibrators, the dev-halving
protocol. Plots (`textebm.calibration.plots`, matplotlib) and the Markdown table
(`textebm.calibration.report`) are imported from their modules."""

from textebm.calibration.calibrators import (
    CalibrationWarning,
    ScalingBinning,
    TemperatureScaling,
    halve_dev,
    softmax,
)
from textebm.calibration.metrics import (
    ReliabilityBins,
    accuracy,
    brier,
    calibration_summary,
    ece_classwise,
    ece_toplabel,
    entropy,
    matthews_corrcoef,
    nll,
    reliability_bins,
)

__all__ = [
    "CalibrationWarning",
    "ReliabilityBins",
    "ScalingBinning",
    "TemperatureScaling",
    "accuracy",
    "brier",
    "calibration_summary",
    "ece_classwise",
    "ece_toplabel",
    "entropy",
    "halve_dev",
    "matthews_corrcoef",
    "nll",
    "reliability_bins",
    "softmax",
]
