"""textebm: energy-based models of text trained with noise-contrastive estimation."""

__version__ = "0.1.0"
