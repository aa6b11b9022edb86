"""The kinds of model folder textebm writes itself, each recognised by a marker file.

A kind is declared beside its model (`KIND` in `models/classifier.py`, `models/cloze.py`,
`models/seq_energy.py`, `models/ralm.py`) and listed once in `textebm.models.load.MARKED`, which
recognises the folders, names them in messages and refuses a folder of the wrong kind. A new kind
(a CRF tagger) adds its `KIND` and its entry there, and its loader beside the others in load.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelKind:
    name: str  # the kind's name in messages and FolderInfo.kind ("classifier")
    marker: str  # the file that makes a folder this kind ("classifier.json"), written with the weights
    noun: str  # "a textebm classifier"
    needs: str  # what a command that takes this kind asks for, in its error message
    shows_encoder: bool = False  # describe() names the encoder class of its config.json
