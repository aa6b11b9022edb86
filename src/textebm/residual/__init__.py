"""Residual energy-based language models for generation (Deng et al. 2020): the joint model
P_LM(x) exp(-E(x)), its partition function's estimators and perplexity bounds."""

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use so that importing a library module of this package loads no command module.
_EXPORTS = {
    "ResidualGenerateConfig": "commands",
    "residual_generate": "commands",
    "ResidualPPLConfig": "commands",
    "residual_ppl": "commands",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
