"""Markdown table of calibration results in the layout of He et al. (2021) table 1.

`render_table({method: {"accuracy", "ece_classwise", "ece_toplabel", "nll", "brier"}})`:
rows in the paper's order (only the methods present), columns accuracy (or MCC), class-wise ECE
(the paper's ECE, eq. (15)), top-label ECE, NLL, Brier. In each calibration column the best
(lowest) value among the methods that do not use the dev set is bold, as the paper does for ECE;
ties at the printed precision are all bold.

Any method name is accepted: the paper's get their labels (`METHODS`); others appear as given,
after the paper's methods that use no dev data and before those that do. A name ending in `-dev`
counts as using the dev set (`tscal-dev`, `scalbin-dev`, and any new calibrator named that way).
"""

from __future__ import annotations

import math
from typing import Mapping

from textebm.markdown import table

# (key, label as in the paper), in the paper's row order.
METHODS = (
    ("baseline", "Baseline"),
    ("scalbin-train", "Scal-bin(train)"),
    ("tscal-train", "T-Scal(train)"),
    ("poscal", "PosCal"),
    ("ebm-scalar", "(EBM)scalar"),
    ("ebm-hidden", "(EBM)hidden"),
    ("ebm-sharp-hidden", "(EBM)s-hidden"),
    ("scalbin-dev", "Scal-bin(dev)"),
    ("tscal-dev", "T-Scal(dev)"),
)
USES_DEV = frozenset({"scalbin-dev", "tscal-dev"})  # and any name ending in "-dev"
CALIBRATION_COLUMNS = (
    ("ece_classwise", "ECE (class-wise)"),
    ("ece_toplabel", "ECE (top-label)"),
    ("nll", "NLL"),
    ("brier", "Brier"),
)
PERF_COLUMNS = {"accuracy": "acc.", "mcc": "mcc."}


def render_table(results: Mapping[str, Mapping[str, float]], *, perf: str = "accuracy", digits: int = 3) -> str:
    """Markdown for `results`; perf = "accuracy" or "mcc" (CoLA) picks the first column."""
    known = dict(METHODS)
    if perf not in PERF_COLUMNS:
        raise ValueError(f"perf must be one of {', '.join(PERF_COLUMNS)}, got {perf!r}")
    paper = [key for key, _ in METHODS if key in results]
    others = [key for key in results if key not in known]
    rows = ([k for k in paper if not uses_dev(k)] + [k for k in others if not uses_dev(k)]
            + [k for k in paper if uses_dev(k)] + [k for k in others if uses_dev(k)])

    def fmt(v: float | None) -> str:
        if v is None:
            return "–"
        return "nan" if not math.isfinite(v) else f"{v:.{digits}f}"

    best: dict[str, float] = {}
    for col, _ in CALIBRATION_COLUMNS:
        vals = [round(results[k][col], digits) for k in rows if not uses_dev(k) and _finite(results[k].get(col))]
        if vals:
            best[col] = min(vals)

    columns = [(perf, PERF_COLUMNS[perf]), *CALIBRATION_COLUMNS]
    body = []
    for key in rows:
        cells = []
        for col, _ in columns:
            v = results[key].get(col)
            text = fmt(v)
            if col in best and not uses_dev(key) and _finite(v) and round(v, digits) == best[col]:
                text = f"**{text}**"
            cells.append(text)
        body.append([method_label(key), *cells])
    lines = [table(["Method", *(label for _, label in columns)], body, ["left"] + ["right"] * len(columns)), ""]
    lines.append("Bold: best calibration among the methods that do not use the dev set.")
    return "\n".join(lines) + "\n"


def method_label(key: str) -> str:
    """The paper's label of a method ("ebm-hidden" -> "(EBM)hidden"); any other name as given."""
    return dict(METHODS).get(key) or key


def uses_dev(key: str) -> bool:
    """Whether a method was fit on the dev half (never bold: it sees data the others do not)."""
    return key in USES_DEV or key.endswith("-dev")


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)
