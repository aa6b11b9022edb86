"""PNG figures: matplotlib's Agg canvas (no pyplot state), written atomically through
`textebm.io.atomic_write`, so a failure leaves no file behind."""

from __future__ import annotations

from pathlib import Path


def save_png(fig, path: str | Path, dpi: int = 110) -> Path:
    """Draw `fig` (a `matplotlib.figure.Figure`) on an Agg canvas and write it to `path` as PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from textebm.io import atomic_write

    FigureCanvasAgg(fig)
    path = Path(path)
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi)
    return path
