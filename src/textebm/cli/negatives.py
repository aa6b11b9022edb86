"""negatives: real windows of a corpus and LM-generated negatives for them (Bakhtin et al. 2019).

  textebm negatives generate --data DIR --generator RUN --vocab VOCAB --split train --out FILE.jsonl

Windows of --length tokens, a context of one of --contexts tokens kept, the rest written by the
generator (a left-to-right one completes suffixes, a right-to-left one prefixes), --k negatives
each, top-k sampled; every line carries its provenance. Resumable (FILE.partial).
"""

from textebm.detection.negatives import NegativesConfig


def generate(cfg: NegativesConfig) -> None:
    """Windows of a split with k generated negatives each (resumable, cached in --out)."""
    from textebm.detection.negatives import generate_negatives

    generate_negatives(cfg)


COMMANDS = {"generate": (NegativesConfig, generate)}
