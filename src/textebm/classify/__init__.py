"""Calibrated classifiers by joint energy-based training (He et al. 2021, paper a)."""

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use so that importing a library module of this package loads no command module.
_EXPORTS = {
    "ClassifyTrainConfig": "train",
    "classify_train": "train",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
