"""Causal language models: the noise models and generators of papers a, c and d."""
