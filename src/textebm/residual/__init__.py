"""Residual energy-based language models for generation (Deng et al. 2020): the joint model
P_LM(x) exp(-E(x)), its partition function's estimators and perplexity bounds."""

from textebm.lazy import lazy_exports

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use: importing a library module of this package loads no command module.
__getattr__, __all__ = lazy_exports(__name__, {
    "ResidualGenerateConfig": "commands",
    "residual_generate": "commands",
    "ResidualPPLConfig": "commands",
    "residual_ppl": "commands",
})
