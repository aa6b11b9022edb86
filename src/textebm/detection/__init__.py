"""Real vs generated text (Bakhtin et al. 2019, paper c; `textebm detect`): sequence energies that tell
real text from LM-generated text, their evaluation (`metrics`) and the zero-shot detectors beside
them (`zeroshot`); paper d's residual energy is such an energy."""

from textebm.lazy import lazy_exports

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use: importing a library module of this package loads no command module.
__getattr__, __all__ = lazy_exports(__name__, {
    "DetectTrainConfig": "train",
    "detect_train": "train",
    "FitConfig": "commands",
    "fit_zeroshot": "commands",
})
