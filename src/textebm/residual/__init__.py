"""Residual energy-based language models for generation (Deng et al. 2020): the joint model
P_LM(x) exp(-E(x)), its partition function's estimators and perplexity bounds."""
