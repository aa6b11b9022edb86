"""Brown-style word tokens for unlabelled text (textebm.data.words), on hand-picked sentences."""

from __future__ import annotations

import pytest

from textebm.data.words import brown_words


@pytest.mark.parametrize("text, tokens", [
    ('"It\'s $1,000," Mr. Smith said -- 50% of U.S. sales.',
     ["``", "It's", "$1,000", ",", "''", "Mr.", "Smith", "said", "--", "50%", "of", "U.S.", "sales", "."]),
    ("The workers' union (J. Doe's) didn't say; why?",
     ["The", "workers'", "union", "(", "J.", "Doe's", ")", "didn't", "say", ";", "why", "?"]),
    ("\u201cFine\u201d \u2014 it\u2019s 1.5 and 2nd in 1960s, a 10-year plan in the 1960's!",
     ["``", "Fine", "''", "--", "it's", "1.5", "and", "2nd", "in", "1960s", ",", "a", "10-year", "plan",
      "in", "the", "1960's", "!"]),
    ("Term-end presentments, etc. in Calif. at 3:30 p.m. cost $2.50.",
     ["Term-end", "presentments", ",", "etc.", "in", "Calif.", "at", "3:30", "p.m.", "cost", "$2.50", "."]),
    ("", []),
    ("   ", []),
])
def test_hand_picked(text, tokens):
    assert brown_words(text) == tokens


def test_brown_text_gives_back_its_tokens():
    text = "The/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' that/cs Atlanta's/np$ " \
           "over-all/jj 1-1/2/cd election/nn ,/, I'll/ppss+md say/vb ,/, was/bedz n't/* fine/jj ./."
    tokens = [t.rpartition("/")[0] for t in text.split()]
    assert brown_words(" ".join(tokens)) == tokens
