"""POS tag sets mapped to the universal tags of Petrov, Das and McDonald (2012).

    brown_to_universal("nn-tl")   # 'NOUN'
    ptb_to_universal("PRP$")      # 'PRON'

The 12 universal tags: NOUN VERB ADJ ADV PRON DET ADP NUM CONJ PRT `.` (punctuation) X (other).

Penn Treebank tags (`wsj-pos`) follow Petrov et al.'s own `en-ptb.map` (12-tag version), as is.

Brown tags (`brown-pos`) are read by rules, so every one of the corpus's ~470 compound tags has a
stated reason (docs/data.md#tag-mappings-textebmdatatagsets lists the rules; each is tested):

1. lower case; a `fw-` prefix (foreign word: `fw-nn`, `fw-in+at-tl`) -> X, whatever follows;
2. the suffixes `-tl` (in a title), `-hl` (in a headline) and `-nc` (a cited word) are dropped,
   repeatedly (`nn-tl-hl` -> `nn`, `---hl` -> `--`);
3. a contraction `a+b[+c]` (`ppss+md` "I'll", `vb+ppo` "let's", `vbg+to` "gonna") takes the tag of
   its first part (what the word is before the clitic);
4. a trailing `*` marks a negated form (`md*` "can't", `do*` "don't", `bez*` "isn't") and is
   dropped; `*` alone (`not`, `n't`) is ADV, as Penn's RB;
5. a trailing `$` (possessive: `nn$`, `np$`, `pn$`) is dropped, except `pp$` (my, his), `pp$$`
   (mine) and `wp$` (whose), which are PRON, as Penn's PRP$ and WP$;
6. Brown's punctuation tags (`.` `,` `:` `(` `)` `--` `` `` `` `''` `'`) -> `.`;
7. the rest from `BROWN_BASE` below.

Where NLTK's `en-brown.map` (the other published Brown -> universal table) differs, this module
follows the Penn mapping instead, so that a tagger trained on brown-pos is tested fairly on
wsj-pos: `ex` (there) DET, not PRT (Penn EX -> DET); `uh` X, not PRT (Penn UH -> X); `pp$`,
`wp$` PRON, not DET (Penn PRP$, WP$ -> PRON); `abn`, `abl` (all, half, such, quite) DET, not PRT
(Penn PDT -> DET); contractions take their first part's tag where NLTK's table has PRT for most
(`pps+bez` "it's": PRON) - Penn splits them (`it/PRP 's/VBZ`), so no Penn mapping exists.
"""

from __future__ import annotations

UNIVERSAL_TAGS = ("NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".", "X")

# Petrov et al. (2012), universal-pos-tags/en-ptb.map (the 12-tag version, before UD v2).
PTB_TO_UNIVERSAL: dict[str, str] = {
    "!": ".", "#": ".", "$": ".", "''": ".", "(": ".", ")": ".", ",": ".", "-LRB-": ".",
    "-RRB-": ".", ".": ".", ":": ".", "?": ".", "``": ".",
    "CC": "CONJ", "CD": "NUM", "CD|RB": "X", "DT": "DET", "EX": "DET", "FW": "X", "IN": "ADP",
    "IN|RP": "ADP", "JJ": "ADJ", "JJR": "ADJ", "JJRJR": "ADJ", "JJS": "ADJ", "JJ|RB": "ADJ",
    "JJ|VBG": "ADJ", "LS": "X", "MD": "VERB", "NN": "NOUN", "NNP": "NOUN", "NNPS": "NOUN",
    "NNS": "NOUN", "NN|NNS": "NOUN", "NN|SYM": "NOUN", "NN|VBG": "NOUN", "NP": "NOUN",
    "PDT": "DET", "POS": "PRT", "PRP": "PRON", "PRP$": "PRON", "PRP|VBP": "PRON", "PRT": "PRT",
    "RB": "ADV", "RBR": "ADV", "RBS": "ADV", "RB|RP": "ADV", "RB|VBG": "ADV", "RN": "X",
    "RP": "PRT", "SYM": "X", "TO": "PRT", "UH": "X", "VB": "VERB", "VBD": "VERB",
    "VBD|VBN": "VERB", "VBG": "VERB", "VBG|NN": "VERB", "VBN": "VERB", "VBP": "VERB",
    "VBP|TO": "VERB", "VBZ": "VERB", "VP": "VERB", "WDT": "DET", "WH": "X", "WP": "PRON",
    "WP$": "PRON", "WRB": "ADV",
}

# Brown's simple tags (after rules 1-6 of the module docstring), by universal tag.
_BROWN_BY_UNIVERSAL = {
    "NOUN": "nn nns np nps nr nrs pn",  # pn: one, something, nothing (Penn NN)
    "VERB": "vb vbd vbg vbn vbz md be bed bedz beg bem ben ber bez do dod doz hv hvd hvg hvn hvz",
    "ADJ": "jj jjr jjs jjt od ap",  # od: first; ap: other, many, more, same, last
    "ADV": "rb rbr rbt rn ql qlp wql wrb *",  # ql: very, too; wql: how; *: not
    "ADP": "in cs",  # cs: that, if, because (Penn IN)
    "CONJ": "cc",
    "DET": "at dt dti dts dtx abn abl abx wdt ex",  # abn: all, half; abl: such, quite; abx: both
    "PRON": "pps ppss ppo ppl ppls pp$ pp$$ wps wpo wp$",
    "NUM": "cd",
    "PRT": "rp to",
    "X": "uh nil",  # uh: well, oh (Penn UH -> X); nil: untagged tokens
}
BROWN_BASE: dict[str, str] = {t: u for u, tags in _BROWN_BY_UNIVERSAL.items() for t in tags.split()}
BROWN_SUFFIXES = ("-tl", "-hl", "-nc")
BROWN_PUNCTUATION = frozenset([".", ",", ":", "(", ")", "--", "``", "''", "'"])


def ptb_to_universal(tag: str) -> str:
    """The universal tag of a Penn Treebank tag; `ValueError` for a tag not in the table."""
    try:
        return PTB_TO_UNIVERSAL[tag]
    except KeyError:
        raise ValueError(f"unknown Penn Treebank tag {tag!r}") from None


def brown_to_universal(tag: str) -> str:
    """The universal tag of a Brown corpus tag by the rules of this module's docstring;
    `ValueError` for a tag they do not cover."""
    t = tag.lower()
    if t.startswith("fw-"):  # 1
        return "X"
    while any(t.endswith(s) and len(t) > len(s) for s in BROWN_SUFFIXES):  # 2
        t = t[:-3]
    if "+" in t.strip("+"):  # 3
        t = t.split("+")[0]
    if t.endswith("*") and len(t) > 1:  # 4
        t = t[:-1]
    if t not in BROWN_BASE and t.endswith("$") and t[:-1] in BROWN_BASE:  # 5
        t = t[:-1]
    if t in BROWN_PUNCTUATION:  # 6
        return "."
    if t not in BROWN_BASE:
        raise ValueError(f"unknown Brown tag {tag!r}")
    return BROWN_BASE[t]
