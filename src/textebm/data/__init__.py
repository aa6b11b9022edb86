"""Data: user-file readers, the standard dataset layout and the named offline datasets.

    from textebm.data import load_split, read_examples, prepare
    train = load_split("data/rt-polarity", "train")   # [{"id", "text", "label"}, ...]

See docs/data.md for the layout, the recipes and the accepted file formats.
"""

from textebm.data.convert import convert
from textebm.data.layout import (
    SPLITS,
    seeded_split,
    split_documents,
    split_examples,
    write_dataset,
)
from textebm.data.readers import load_split, read_examples
from textebm.data.recipes import RECIPES, Recipe, get_recipe, prepare

__all__ = [
    "RECIPES",
    "Recipe",
    "SPLITS",
    "convert",
    "get_recipe",
    "load_split",
    "prepare",
    "read_examples",
    "seeded_split",
    "split_documents",
    "split_examples",
    "write_dataset",
]
