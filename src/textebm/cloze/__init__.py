"""Cloze models of Clark et al. (2020): Electric, ELECTRA-TT, masked LM, TwoTower."""

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use so that importing a library module of this package loads no command module.
_EXPORTS = {
    "ClozeTrainConfig": "train",
    "cloze_train": "train",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
