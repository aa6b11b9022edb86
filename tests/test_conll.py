"""CoNLL column files (textebm.data.conll): the CoNLL-2000 / 2003 layouts, bad files named by
file and line, and the writer's round trip."""

from __future__ import annotations

import pytest

from textebm.data.conll import read_conll, write_conll
from textebm.errors import InputError, TextebmError

CHUNKING = """Confidence NN B-NP
in IN B-PP
the DT B-NP
pound NN I-NP

Chancellor NNP O
said VBD B-VP
"""

NER = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
"""


def write(tmp_path, text, name="f.conll"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_chunking_layout(tmp_path):
    rows = read_conll(write(tmp_path, CHUNKING))
    assert rows == [
        {"text": "Confidence in the pound", "tokens": ["Confidence", "in", "the", "pound"],
         "tags": ["B-NP", "B-PP", "B-NP", "I-NP"], "line": 1},
        {"text": "Chancellor said", "tokens": ["Chancellor", "said"], "tags": ["O", "B-VP"],
         "line": 6}]
    assert [r["tags"] for r in read_conll(tmp_path / "f.conll", tag_column=1)] == [
        ["NN", "IN", "DT", "NN"], ["NNP", "VBD"]]


def test_ner_layout_skips_docstart_and_tolerates_tabs_crlf_and_extra_blank_lines(tmp_path):
    text = NER.replace("EU NNP", "EU\tNNP").replace("\n", "\r\n") + "\n\n\n"
    rows = read_conll(write(tmp_path, text), tag_column=3)
    assert [r["tokens"] for r in rows] == [["EU", "rejects", "German"], ["Peter", "Blackburn"],
                                           ["BRUSSELS"]]
    assert [r["tags"] for r in rows] == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["B-LOC"]]
    assert [r["line"] for r in rows] == [3, 7, 12]
    # a -DOCSTART- line with no blank line around it still ends the sentence
    rows = read_conll(write(tmp_path, "a X O\n-DOCSTART- -X- O\nb X O\n", "g.conll"))
    assert [r["tokens"] for r in rows] == [["a"], ["b"]]


def test_tokens_only(tmp_path):
    rows = read_conll(write(tmp_path, "Hello\nworld\n\nBye\n"), tag_column=None)
    assert rows == [{"text": "Hello world", "tokens": ["Hello", "world"], "line": 1},
                    {"text": "Bye", "tokens": ["Bye"], "line": 4}]


@pytest.mark.parametrize("text, options, where, what", [
    (CHUNKING.replace("the DT B-NP", "the DT"), {}, "f.conll:3:",
     "2 columns, but line 1 has 3"),
    (CHUNKING.replace("said VBD B-VP", "said VBD B-VP extra"), {}, "f.conll:7:",
     "4 columns, but line 1 has 3"),
    ("", {}, "f.conll:", r"no sentences \(empty file\)"),
    ("\n\n-DOCSTART- -X- O\n\n", {}, "f.conll:", r"no sentences \(empty file\)"),
    ("just\ntokens\n", {}, "f.conll:1:", "has 1 column.*no tag column"),
    (CHUNKING, {"tag_column": 3}, "f.conll:1:", "has 3 column.*no tag column 3"),
    (CHUNKING, {"token_column": -4}, "f.conll:1:", "no token column -4"),
    (b"a X\n\xff X\n", {}, "f.conll:2:", "not valid UTF-8"),
])
def test_bad_files_name_file_and_line(tmp_path, text, options, where, what):
    path = write(tmp_path, text)
    with pytest.raises(InputError, match=f"{where} .*{what}"):
        read_conll(path, **options)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="nope.conll: file not found"):
        read_conll(tmp_path / "nope.conll")


def test_writer_round_trip(tmp_path):
    rows = read_conll(write(tmp_path, NER), tag_column=3)
    for r in rows:
        r["gold"] = r["tags"]
        r["tags"] = ["O"] * len(r["tokens"])
    out = tmp_path / "pred.conll"
    write_conll(out, rows, columns=("tokens", "gold", "tags"))
    assert out.read_text().splitlines()[:4] == ["EU\tB-ORG\tO", "rejects\tO\tO", "German\tB-MISC\tO", ""]
    back = read_conll(out, tag_column=1)
    assert [r["tokens"] for r in back] == [r["tokens"] for r in rows]
    assert [r["tags"] for r in back] == [r["gold"] for r in rows]
    assert [r["tags"] for r in read_conll(out)] == [r["tags"] for r in rows]


@pytest.mark.parametrize("row, what", [
    ({"tokens": [], "tags": []}, "sentence 2: empty"),
    ({"tokens": ["a", "b"], "tags": ["X"]}, "sentence 2: 1 tags for 2 tokens"),
    ({"tokens": ["New York"], "tags": ["X"]}, "sentence 2, token 1: tokens 'New York'"),
    ({"tokens": ["a"], "tags": [""]}, "sentence 2, token 1: tags ''"),
    ({"tokens": ["a"]}, "sentence 2: no list 'tags'"),
    ({"tokens": ["-DOCSTART-"], "tags": ["O"]}, "document marker"),
])
def test_writer_refuses_what_it_cannot_write_and_writes_nothing(tmp_path, row, what):
    out = tmp_path / "pred.conll"
    out.write_text("earlier\n")
    with pytest.raises(TextebmError, match=what):
        write_conll(out, [{"tokens": ["ok"], "tags": ["O"]}, row])
    assert out.read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.conll"]
