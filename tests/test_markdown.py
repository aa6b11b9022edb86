"""The one Markdown table of every report."""

import pytest

from textebm.markdown import table


def test_table_by_hand():
    got = table(["Method", "acc."], [["a|b", "0.5"], ["baseline", "**0.25**"]], ["left", "right"])
    assert got.splitlines() == [
        "| Method   |     acc. |",
        "|:---------|---------:|",
        "| a\\|b     |      0.5 |",
        "| baseline | **0.25** |",
    ]


def test_cells_are_not_reformatted():
    assert "0.500" in table(["x"], [["0.500"]]) and "1e-05" in table(["x"], [["1e-05"]])


def test_width_mismatch_is_an_error():
    with pytest.raises(ValueError):
        table(["a", "b"], [["1"]])
