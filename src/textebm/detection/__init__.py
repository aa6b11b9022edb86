"""Residual EBMs (Bakhtin et al. 2019; Deng et al. 2020): sequence energies that tell real text from
LM-generated text, their evaluation (`metrics`) and the zero-shot detectors beside them (`zeroshot`)."""

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use so that importing a library module of this package loads no command module.
_EXPORTS = {
    "DetectTrainConfig": "train",
    "detect_train": "train",
    "FitConfig": "commands",
    "fit_zeroshot": "commands",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
