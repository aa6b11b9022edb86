"""textebm: energy-based models of text trained with noise-contrastive estimation.

From Python, `textebm.load(path)` returns the object for a folder textebm wrote (`textebm.api`,
docs/api.md); the names of `textebm.api.__all__` are importable from here. The training commands'
configs and functions are in `textebm.training`.
"""

from textebm.version import __version__

# textebm.api's public names, imported on first use (PEP 562), so that `import textebm` loads
# neither torch nor transformers (`textebm --help` stays fast). tests/test_api.py keeps this list
# equal to textebm.api.__all__.
_API = ("load", "Scorer", "ScoredText", "Reranked", "Sample", "InfillLM", "InfillSample", "Classifier", "Tagger",
        "TaggedSentence", "Detector", "JointModel", "JointGeneration", "JointPerplexity", "TextebmError", "InputError",
        "ArgumentError", "TextTooLong")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        from textebm import api  # on first use, so that `import textebm` stays light (docs/architecture.md)

        return getattr(api, name)
    if name == "training":  # `textebm.training.classify_train(...)` without importing it first
        import textebm.training  # (`from textebm import training` would ask this function again)

        return textebm.training
    raise AttributeError(f"module 'textebm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API, "training"])
