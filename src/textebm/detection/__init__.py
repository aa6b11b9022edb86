"""Residual EBMs (Bakhtin et al. 2019; Deng et al. 2020): sequence energies that tell real text from
LM-generated text, their evaluation (`metrics`) and the zero-shot detectors beside them (`zeroshot`)."""
