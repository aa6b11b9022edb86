"""Calibrated classifiers by joint energy-based training (He et al. 2021, paper a)."""
