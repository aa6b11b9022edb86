"""PNG figures: matplotlib's Agg canvas (no pyplot state), written atomically through
`textebm.io.atomic_write`, so a failure leaves no file behind."""

from __future__ import annotations

from pathlib import Path

from textebm.io import atomic_write


def new_figure(*args, **kwargs):
    """A `matplotlib.figure.Figure` (no pyplot state); matplotlib is imported here, when a figure is
    drawn, so that commands that draw none (and `textebm --help`) do not pay for it."""
    from matplotlib.figure import Figure

    return Figure(*args, **kwargs)


def save_png(fig, path: str | Path, dpi: int = 110) -> Path:
    """Draw `fig` (a `matplotlib.figure.Figure`) on an Agg canvas and write it to `path` as PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    path = Path(path)
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi)
    return path
