"""Scoring texts with trained models: pseudo-log-likelihoods (`pll`), per-word sums (`words`),
the token-colouring page (`html`) and n-best reranking (`rerank`)."""
