"""Brown and Penn tags -> the 12 universal tags (textebm.data.tagsets), on hand-picked tags."""

from __future__ import annotations

import pytest

from textebm.data.tagsets import (
    BROWN_BASE,
    PTB_TO_UNIVERSAL,
    UNIVERSAL_TAGS,
    brown_to_universal,
    ptb_to_universal,
)


@pytest.mark.parametrize("tag, want", [
    # simple tags (rule 7)
    ("nn", "NOUN"), ("np", "NOUN"), ("pn", "NOUN"), ("vbz", "VERB"), ("md", "VERB"),
    ("bedz", "VERB"), ("hvd", "VERB"), ("jjt", "ADJ"), ("od", "ADJ"), ("ap", "ADJ"),
    ("ql", "ADV"), ("wrb", "ADV"), ("in", "ADP"), ("cs", "ADP"), ("cc", "CONJ"), ("at", "DET"),
    ("abn", "DET"), ("abl", "DET"), ("abx", "DET"), ("wdt", "DET"), ("ex", "DET"),
    ("pps", "PRON"), ("ppss", "PRON"), ("wps", "PRON"), ("cd", "NUM"), ("rp", "PRT"),
    ("to", "PRT"), ("uh", "X"), ("nil", "X"),
    # 1: foreign words, whatever follows
    ("fw-nn", "X"), ("fw-in+at-tl", "X"), ("fw-*", "X"), ("fw-in+at-t", "X"),
    # 2: title / headline / cited-word suffixes, repeated
    ("nn-tl", "NOUN"), ("vbz-hl", "VERB"), ("nn-tl-hl", "NOUN"), ("vbn-tl-nc", "VERB"),
    ("jj-nc", "ADJ"), ("---hl", "."), (".-hl", "."), (",-nc", "."), ("nn-tl-nc", "NOUN"),
    # 3: contractions take the first part's tag
    ("ppss+md", "PRON"), ("pps+bez", "PRON"), ("vb+ppo", "VERB"), ("vbg+to", "VERB"),
    ("nn+bez-tl", "NOUN"), ("ppss+ber-n", "PRON"), ("dt+bez", "DET"), ("ex+bez", "DET"),
    ("wdt+ber+pp", "DET"), ("in+ppo", "ADP"), ("to+vb", "PRT"),
    # 4: negation
    ("*", "ADV"), ("*-hl", "ADV"), ("md*", "VERB"), ("do*", "VERB"), ("bez*", "VERB"),
    ("dod*-tl", "VERB"), ("ppss+bez*", "PRON"),
    # 5: possessives
    ("nn$", "NOUN"), ("np$-tl", "NOUN"), ("nns$-tl-hl", "NOUN"), ("pn$", "NOUN"),
    ("cd$", "NUM"), ("pp$", "PRON"), ("pp$$", "PRON"), ("wp$", "PRON"), ("pp$-tl", "PRON"),
    # 6: punctuation
    (".", "."), (",", "."), (":", "."), ("(", "."), (")", "."), ("--", "."), ("``", "."),
    ("''", "."), ("'", "."),
    # case does not matter (NLTK's copy of the corpus is upper case)
    ("NN-TL", "NOUN"), ("FW-NN", "X"), ("PPS+BEZ", "PRON"),
])
def test_brown_tags(tag, want):
    assert brown_to_universal(tag) == want


@pytest.mark.parametrize("tag", ["zz", "nn-xx", "", "$", "+", "vbq*"])
def test_brown_unknown_tags_are_refused(tag):
    with pytest.raises(ValueError, match="unknown Brown tag"):
        brown_to_universal(tag)


@pytest.mark.parametrize("tag, want", [
    ("NN", "NOUN"), ("NNP", "NOUN"), ("NNPS", "NOUN"), ("VBP", "VERB"), ("MD", "VERB"),
    ("JJS", "ADJ"), ("RBR", "ADV"), ("WRB", "ADV"), ("IN", "ADP"), ("CC", "CONJ"),
    ("DT", "DET"), ("PDT", "DET"), ("EX", "DET"), ("WDT", "DET"), ("PRP", "PRON"),
    ("PRP$", "PRON"), ("WP$", "PRON"), ("CD", "NUM"), ("POS", "PRT"), ("RP", "PRT"),
    ("TO", "PRT"), ("FW", "X"), ("UH", "X"), ("SYM", "X"), ("LS", "X"), ("$", "."),
    ("#", "."), ("-LRB-", "."), ("``", "."), (":", "."),
])
def test_penn_tags(tag, want):
    assert ptb_to_universal(tag) == want


def test_penn_unknown_tag_and_case():
    with pytest.raises(ValueError, match="unknown Penn Treebank tag 'nn'"):
        ptb_to_universal("nn")  # Penn tags are upper case
    with pytest.raises(ValueError, match="'-NONE-'"):
        ptb_to_universal("-NONE-")  # traces are not words


def test_tables_use_only_the_universal_tags():
    assert len(UNIVERSAL_TAGS) == 12
    assert set(PTB_TO_UNIVERSAL.values()) == set(UNIVERSAL_TAGS)
    assert set(BROWN_BASE.values()) == set(UNIVERSAL_TAGS) - {"."}


def test_brown_and_penn_agree_where_the_tags_correspond():
    """The same word class gets the same universal tag from both corpora (what a brown-pos
    tagger tested on wsj-pos relies on)."""
    pairs = {"ex": "EX", "uh": "UH", "pp$": "PRP$", "wp$": "WP$", "abn": "PDT", "md": "MD",
             "to": "TO", "cs": "IN", "rb": "RB", "wdt": "WDT", "wps": "WP", "ppo": "PRP",
             "jjs": "JJS", "nps": "NNPS", "fw-nn": "FW", "cd": "CD", "rp": "RP", "``": "``"}
    for brown, penn in pairs.items():
        assert brown_to_universal(brown) == ptb_to_universal(penn), (brown, penn)
