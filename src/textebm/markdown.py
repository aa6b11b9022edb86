"""Markdown tables for every report textebm writes (one function, on `tabulate`).

Columns are padded so that a report reads as well in a terminal as rendered; a "|" inside a cell
is escaped (it would end the cell); numbers are formatted by the caller, so a table shows exactly
the digits the report chose.
"""

from __future__ import annotations

from typing import Sequence

from tabulate import tabulate


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str | Sequence[str] = "left") -> str:
    """A GitHub-flavoured Markdown table. `align`: one of left / right / center for every column, or
    one per column. Cells are shown as given (str() of each); no number is re-formatted."""
    cols = len(header)
    aligns = [align] * cols if isinstance(align, str) else list(align)
    if len(aligns) != cols or any(len(r) != cols for r in rows):
        raise ValueError(f"a table of {cols} columns got rows or alignments of another width")
    cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    return tabulate([[cell(v) for v in r] for r in rows], headers=[cell(h) for h in header], tablefmt="pipe",
                    colalign=aligns, disable_numparse=True)
