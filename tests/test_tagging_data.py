"""Tagging sentences read and checked (textebm.data.tagging): dataset folders, JSONL and CoNLL
files, bad rows named by file and line, tags unseen in training."""

from __future__ import annotations

import json

import pytest

from textebm.data.layout import write_dataset
from textebm.data.tagging import check_known_tags, load_tagged, tag_set
from textebm.errors import InputError

ROWS = [{"text": "The jury said .", "tokens": ["The", "jury", "said", "."],
         "tags": ["DET", "NOUN", "VERB", "."], "doc": "ca01"},
        {"text": "It rained", "tokens": ["It", "rained"], "tags": ["PRON", "VERB"], "doc": "ca02"}]


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dataset_folder_jsonl_and_conll(tmp_path):
    write_dataset(tmp_path / "ds", {"train": ROWS, "dev": ROWS[1:], "test": ROWS[:1]}, {"name": "ds"})
    train = load_tagged(tmp_path / "ds")
    assert [r["tokens"] for r in train] == [r["tokens"] for r in ROWS]
    assert [r["line"] for r in train] == [1, 2] and train[0]["id"] == "train-000000"
    assert train[0]["doc"] == "ca01"  # other fields kept
    assert load_tagged(tmp_path / "ds", "dev")[0]["tags"] == ["PRON", "VERB"]
    assert tag_set(train) == [".", "DET", "NOUN", "PRON", "VERB"]
    conll = tmp_path / "f.conll"
    conll.write_text("EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n")
    assert [r["tags"] for r in load_tagged(conll)] == [["B-ORG", "O"], ["B-PER"]]
    assert [r["tags"] for r in load_tagged(conll, tag_column=1)] == [["NNP", "VBZ"], ["NNP"]]
    assert "tags" not in load_tagged(conll, tags=False)[0]
    # tokens only: rows without tags are fine for tagging
    raw = jsonl(tmp_path / "raw.jsonl", [{"text": "a b", "tokens": ["a", "b"]}])
    assert load_tagged(raw, tags=False)[0]["tokens"] == ["a", "b"]
    # a row needs no `text`: its tokens are the sentence
    bare = jsonl(tmp_path / "bare.jsonl", [{"tokens": ["a", "b"], "tags": ["X", "Y"]}])
    assert [(r["tokens"], r["tags"]) for r in load_tagged(bare)] == [(["a", "b"], ["X", "Y"])]
    with pytest.raises(InputError, match="bad.jsonl:1: no 'tokens' list"):
        load_tagged(jsonl(tmp_path / "bad.jsonl", [{"tokens": "a b", "tags": ["X", "Y"]}]))
    csv = tmp_path / "t.csv"
    csv.write_text("tokens,tags\na,X\n")
    with pytest.raises(InputError, match="t.csv: a tagging file is JSONL"):
        load_tagged(csv)


@pytest.mark.parametrize("bad, what", [
    ({"text": "a b"}, "no 'tokens' list"),
    ({"text": "a", "tokens": [], "tags": []}, "an empty sentence"),
    ({"text": "a b", "tokens": ["a", "b"], "tags": ["X"]}, "1 tags for 2 tokens"),
    ({"text": "a", "tokens": ["a"]}, "no 'tags' list"),
    ({"text": "New York", "tokens": ["New York"], "tags": ["X"]}, r"token 1 \('New York'\)"),
    ({"text": "a", "tokens": [3], "tags": ["X"]}, r"token 1 \(3\)"),
    ({"text": "a", "tokens": ["a"], "tags": [""]}, r"tag 1 \(''\)"),
])
def test_bad_rows_name_file_and_line(tmp_path, bad, what):
    path = jsonl(tmp_path / "t.jsonl", [ROWS[0], bad])
    with pytest.raises(InputError, match=f"t.jsonl:2: {what}"):
        load_tagged(path)


def test_missing_files_and_splits(tmp_path):
    conll = tmp_path / "f.conll"
    conll.write_text("a X\n")
    with pytest.raises(InputError, match="single file is read as the train split only"):
        load_tagged(conll, "dev")
    with pytest.raises(InputError, match="nope: not found"):
        load_tagged(tmp_path / "nope")
    empty = tmp_path / "ds"
    write_dataset(empty, {"train": [], "dev": [], "test": ROWS}, {"name": "wsj-like"})
    with pytest.raises(InputError, match=r"train.jsonl: no examples \(empty file\)"):
        load_tagged(empty, "train")


def test_a_tag_unseen_in_training_names_file_and_line(tmp_path):
    path = jsonl(tmp_path / "test.jsonl", ROWS)
    rows = load_tagged(path)
    check_known_tags(rows[:1], tag_set(rows[:1]), path)
    with pytest.raises(InputError, match=r"test.jsonl:2: tag 'PRON' \(token 1, 'It'\) was not seen in "
                                         r"training; the model's tags: \., DET, NOUN, VERB"):
        check_known_tags(rows, tag_set(rows[:1]), path)


def test_unlabelled_text_of_other_corpora_is_cut_into_brown_tokens(tmp_path):
    from textebm.data.tagging import load_unlabelled_text

    write_dataset(tmp_path / "news", {"train": [{"text": 'He said "no," Mr. Smith\'s dog ran.'}, {"text": "Yes."}],
                                      "dev": [{"text": "It cost $1,000."}], "test": [{"text": "Done!"}]},
                  {"name": "toy-news"})
    assert load_unlabelled_text([tmp_path / "news"]) == [
        ["He", "said", "``", "no", ",", "''", "Mr.", "Smith's", "dog", "ran", "."], ["Yes", "."],  # train first,
        ["It", "cost", "$1,000", "."], ["Done", "!"]]  # then dev, then test
    with pytest.raises(InputError, match="--unlabelled: not a dataset folder") as e:
        load_unlabelled_text([tmp_path / "nothing"])
    assert "nothing" in str(e.value)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train.jsonl").write_text('{"text": "fine"}\n{"tokens": ["no", "text"]}\n')
    with pytest.raises(InputError, match="'text'") as e:
        load_unlabelled_text([tmp_path / "bad"])
    assert "train.jsonl" in str(e.value) and ":2" in str(e.value)


def test_the_pool_takes_other_corpora_and_the_labelled_draw_stays(tmp_path):
    from textebm.tagging.train import ssl_rows

    rows = [{"tokens": [f"w{i}", "x"], "tags": ["N", "N"]} for i in range(30)]
    extra = [[f"e{i}", "y"] for i in range(60)]
    lab, unl = ssl_rows(rows, 10, 1.0, 2, 0, "data")  # 20 of the 20 outside the labelled set
    with pytest.raises(Exception, match=r"--ratio 5: .* \(the largest --ratio it allows is 2\)"):
        ssl_rows(rows, 10, 1.0, 5, 0, "data")
    lab2, unl2 = ssl_rows(rows, 10, 1.0, 5, 0, "data", extra=extra)
    assert lab2 == lab and len(unl2) == 50  # the same labelled sentences; a pool of 20 + 60
    assert any(u["tokens"][0].startswith("e") for u in unl2) and any(u["tokens"][0].startswith("w") for u in unl2)
    assert not {tuple(r["tokens"]) for r in lab} & {tuple(u["tokens"]) for u in unl2}
