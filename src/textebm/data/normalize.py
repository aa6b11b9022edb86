"""Text normalisation presets for texts written by another system (a speech recogniser's n-best
lists), so that a model sees text in the form of its training text.

    none   the text as written
    ptb    Penn Treebank form: lower case; clitics split off as PTB's tokenizer does
           ("didn't" -> "did n't", "can't" -> "ca n't", "won't" -> "wo n't", "it's" -> "it 's",
           "we're" -> "we 're", "i'm" -> "i 'm", "they'll", "'ve", "'d", the plural possessive
           "companies'" -> "companies '", and "cannot" -> "can not", "gonna" -> "gon na",
           "gotta" -> "got ta", "wanna" -> "wan na", "gimme", "lemme", "'tis", "'twas");
           other punctuation is left as written
    asr    LibriSpeech style: lower case, punctuation dropped (hyphens and other marks become
           spaces), an apostrophe kept only inside a word ("didn't" stays whole)

Every preset also turns typographic apostrophes (’ ‘ ʼ) into ' and collapses runs of whitespace
into one space, stripped at both ends. Every preset is idempotent: normalising twice gives what
normalising once gives. The functions are pure (str -> str); `normalize` picks one by name.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
_SPACE = re.compile(r"\s+")

# PTB's tokenizer (the Treebank sed script, as NLTK's TreebankWordTokenizer writes it): a clitic
# after a character that is neither a space nor an apostrophe, at the end of a word. "n't" comes
# first, so "don't" gives "do n't", not "don 't".
_CLITIC = re.compile(r"(?<=[^'\s])(n't|'s|'m|'d|'ll|'re|'ve|')(?=[\s.,;:!?)\]}\"]|$)")
# Words PTB splits though they carry no apostrophe, and two with a leading one.
_SPECIAL = [(re.compile(rf"\b({a})({b})\b"), r"\1 \2") for a, b in (
    ("can", "not"), ("d", "'ye"), ("gim", "me"), ("gon", "na"), ("got", "ta"), ("lem", "me"), ("more", "'n"))]
_SPECIAL += [(re.compile(r"\b(wan)(na)(?=\s|$)"), r"\1 \2"),
             (re.compile(r"(?:(?<=\s)|^)('t)(is|was)\b"), r"\1 \2")]


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text.translate(_APOSTROPHES)).strip()


def none(text: str) -> str:
    """The text as written."""
    return text


def ptb(text: str) -> str:
    """Lower case, clitics split off as in the Penn Treebank (see the module docstring)."""
    t = _clean(text).lower()
    for pattern, repl in _SPECIAL:
        t = pattern.sub(repl, t)
    while True:  # "he'd've" -> "he'd 've" -> "he 'd 've": split until nothing is left to split
        split = _CLITIC.sub(r" \1", t)
        if split == t:
            return t
        t = split


def asr(text: str) -> str:
    """Lower case, punctuation dropped, apostrophes kept only between two letters or digits."""
    t = text.translate(_APOSTROPHES).lower()
    t = "".join(" " if c != "'" and unicodedata.category(c)[0] in "PS" else c for c in t)
    t = re.sub(r"(?<![^\W_])'|'(?![^\W_])", " ", t)  # an apostrophe without a word character on both sides
    return _clean(t)


PRESETS: dict[str, Callable[[str], str]] = {"none": none, "ptb": ptb, "asr": asr}


def normalizer(preset: str) -> Callable[[str], str]:
    """The function of a preset; ValueError for an unknown name."""
    try:
        return PRESETS[preset]
    except KeyError:
        raise ValueError(f"unknown normalisation {preset!r}; choose one of {', '.join(PRESETS)}") from None


def normalize(text: str, preset: str) -> str:
    return normalizer(preset)(text)
