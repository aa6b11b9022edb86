"""Cloze models of Clark et al. (2020): Electric, ELECTRA-TT, masked LM, TwoTower."""
