"""Causal language models: the noise models and generators of papers a, c and d."""

from textebm.lazy import lazy_exports

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use: importing a library module of this package loads no command module.
__getattr__, __all__ = lazy_exports(__name__, {
    "LMTrainConfig": "train",
    "lm_train": "train",
})
