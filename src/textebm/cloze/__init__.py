"""Cloze models of Clark et al. (2020): Electric, ELECTRA-TT, masked LM, TwoTower."""

from textebm.lazy import lazy_exports

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use: importing a library module of this package loads no command module.
__getattr__, __all__ = lazy_exports(__name__, {
    "ClozeTrainConfig": "train",
    "cloze_train": "train",
})
