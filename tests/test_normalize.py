"""`textebm.data.normalize`: the presets on hand-worked sentences, and idempotence."""

from __future__ import annotations

import pytest

from textebm.data.normalize import PRESETS, asr, normalize, normalizer, ptb


@pytest.mark.parametrize("text, expected", [
    ("I DIDN'T know", "i did n't know"),
    ("it's we're can't won't", "it 's we 're ca n't wo n't"),
    ("I'm sure they'll say we've lost, he'd said", "i 'm sure they 'll say we 've lost, he 'd said"),
    ("the company's and the companies' shares", "the company 's and the companies ' shares"),
    ("he'd've gone", "he 'd 've gone"),  # two clitics on one word
    ("don't. Ain't!", "do n't. ai n't!"),  # before punctuation, which stays
    ("cannot gonna gotta wanna gimme lemme", "can not gon na got ta wan na gim me lem me"),
    ("'Tis true 'twas", "'t is true 't was"),
    ("o'clock rock 'n roll", "o'clock rock 'n roll"),  # no clitic at a word's end
    ("it\u2019s  Don\u2019t \t go ", "it 's do n't go"),  # typographic apostrophes, spaces
    ("did n't it 's", "did n't it 's"),  # already in PTB form
])
def test_ptb_splits_clitics_as_the_treebank_does(text, expected):
    assert ptb(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES", "mister quilter is the apostle of the middle classes"),
    ("I DIDN'T KNOW, SAID HE.", "i didn't know said he"),
    ("a well-known \"quote\" -- yes!", "a well known quote yes"),
    ("the companies' 'hello' rock 'n' roll", "the companies hello rock n roll"),  # apostrophes at a word's edge go
    ("it\u2019s 3.5% of $10", "it's 3 5 of 10"),
])
def test_asr_lower_cases_and_drops_punctuation(text, expected):
    assert asr(text) == expected


def test_every_preset_is_idempotent_and_none_keeps_the_text():
    texts = ["He'd've said \"DON'T\" -- the companies' rock 'n' roll, 'tis o'clock.", "  Wanna  GONNA  it's  "]
    for name, fn in PRESETS.items():
        for t in texts:
            assert fn(fn(t)) == fn(t), name
    assert normalize(texts[1], "none") == texts[1]
    with pytest.raises(ValueError, match="ptb"):
        normalizer("lower")
