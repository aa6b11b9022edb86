"""Readers of user files: good input gives normalised examples, bad input an `InputError`
that names the file and the 1-based line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textebm.data.readers import load_split, read_examples
from textebm.errors import InputError


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def error_of(path: Path, **kw) -> str:
    with pytest.raises(InputError) as e:
        read_examples(path, **kw)
    return str(e.value)


# ---------------------------------------------------------------- JSONL


def test_jsonl_reads_fields_labels_as_strings_and_keeps_extras(tmp_path):
    f = write(tmp_path / "a.jsonl",
              '{"text": "good film", "label": 1, "tags": ["a", "b"]}\n'
              "\n"
              '{"text": "bad film", "label": 0, "tags": []}\n')
    rows = read_examples(f)
    assert rows == [{"text": "good film", "label": "1", "tags": ["a", "b"]},
                    {"text": "bad film", "label": "0", "tags": []}]


def test_a_reader_of_texts_only_looks_for_no_label_and_takes_a_named_text_field(tmp_path):
    """labels=False (the commands that score texts): rows that carry a label only here and there
    are read as texts, not refused; a named text field and id field are taken as given."""
    f = write(tmp_path / "part.jsonl", '{"text": "a b", "label": "x"}\n{"text": "c d"}\n')
    assert "has 'label' but the one on line 1" in error_of(f) or "missing field 'label'" in error_of(f)
    assert [r["text"] for r in read_examples(f, labels=False)] == ["a b", "c d"]
    csv = write(tmp_path / "reviews.csv", "review,stars,ref\ngreat film,5,r1\ndull,1,r2\n")
    assert "cannot tell which field holds the text" in error_of(csv)
    rows = read_examples(csv, "review", id_field="ref", labels=False)
    assert rows == [{"text": "great film", "id": "r1"}, {"text": "dull", "id": "r2"}]
    with pytest.raises(ValueError):
        read_examples(csv, "review", label_field="stars", labels=False)


def test_jsonl_with_a_byte_order_mark_reads_as_without(tmp_path):
    f = write(tmp_path / "bom.jsonl", b'\xef\xbb\xbf{"text": "a"}\n{"text": "b"}\n')
    assert [r["text"] for r in read_examples(f)] == ["a", "b"]


def test_jsonl_auto_detects_glue_names_and_explicit_fields(tmp_path):
    f = write(tmp_path / "nli.jsonl",
              '{"premise": "A man sleeps.", "hypothesis": "A man rests.", '
              '"gold_label": "entailment", "idx": 7}\n')
    assert read_examples(f) == [{"text": "A man sleeps.", "text_pair": "A man rests.",
                                 "label": "entailment", "id": "7"}]
    g = write(tmp_path / "custom.jsonl", '{"body": "hello", "stars": "5"}\n')
    assert read_examples(g, text_field="body", label_field="stars") == [{"text": "hello", "label": "5"}]


@pytest.mark.parametrize("lines, line, words", [
    (['{"text": "a"}', '{"text": "b"}', '{"text": "c"'], 3, "malformed JSON: Expecting ',' delimiter (column 13)"),
    (['{"text": "a"}', '{"other": "b"}'], 2, "missing field 'text'"),
    (['{"text": "a"}', '["not", "an", "object"]'], 2, "expected a JSON object"),
    (['{"text": "a"}', '{"text": 5}'], 2, "must be a string"),
    (['{"text": "a"}', '{"text": "   "}'], 2, "is empty"),
    (['{"text": "a", "label": "x"}', '{"text": "b", "label": "y"}', '{"text": "c"}'], 3,
     "missing field 'label'"),
    (['{"text": "a"}', '{"text": "b"}', '{"text": "c", "label": "y"}'], 3,
     "has 'label' but the one on line 1"),
    (['{"text": "a", "label": [1]}'], 1, "string or integer"),
    (['{"words": "a"}'], 1, "cannot tell which field holds the text"),
    (['{"text": "a"}', '{"text": "a\\ud800b"}'], 2, "invalid Unicode: a lone surrogate"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, lines, line, words):
    f = write(tmp_path / "bad.jsonl", "\n".join(lines) + "\n")
    msg = error_of(f)
    assert f"bad.jsonl:{line}:" in msg and words in msg


def test_jsonl_undecodable_bytes(tmp_path):
    f = write(tmp_path / "latin.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    msg = error_of(f)
    assert "latin.jsonl:2:" in msg and "UTF-8" in msg


def test_jsonl_explicit_field_absent(tmp_path):
    f = write(tmp_path / "a.jsonl", '{"text": "a"}\n')
    msg = error_of(f, label_field="stars")
    assert "a.jsonl:1:" in msg and "'stars'" in msg and "text" in msg


# ---------------------------------------------------------------- CSV


def test_csv_quoting_multiline_cells_and_bom(tmp_path):
    f = write(tmp_path / "r.csv", '\ufefftext,label\n"Fine, really ""fine""",pos\n"two\nlines",neg\n')
    assert read_examples(f) == [{"text": 'Fine, really "fine"', "label": "pos"},
                                {"text": "two\nlines", "label": "neg"}]


def test_csv_line_numbers_count_physical_lines(tmp_path):
    # The record on lines 3-4 spans two lines; the short row is on line 5.
    f = write(tmp_path / "r.csv", 'text,label\na,pos\n"b\nb",neg\nc\n')
    msg = error_of(f)
    assert "r.csv:5:" in msg and "expected 2 columns" in msg and "found 1" in msg


def test_csv_unterminated_quote(tmp_path):
    f = write(tmp_path / "q.csv", 'text,label\na,pos\n"b,neg\n')
    msg = error_of(f)
    assert "q.csv:3:" in msg and "malformed CSV" in msg


def test_csv_explicit_columns_and_missing_column(tmp_path):
    f = write(tmp_path / "r.csv", "review,stars,extra\nnice,5,x\n")
    rows = read_examples(f, text_field="review", label_field="STARS")
    assert rows == [{"text": "nice", "label": "5"}]
    msg = error_of(f, text_field="body")
    assert "r.csv:1:" in msg and "'body'" in msg and "review, stars, extra" in msg


def test_csv_empty_cell_and_header_only(tmp_path):
    f = write(tmp_path / "e.csv", "text,label\na,pos\nb,\n")
    assert "e.csv:3:" in error_of(f) and "'label' is empty" in error_of(f)
    h = write(tmp_path / "h.csv", "text,label\n")
    assert "h.csv" in error_of(h) and "no rows" in error_of(h)
    # one column: a quoted "" is an empty text (refused), a blank line or a row of empty cells is skipped
    one = write(tmp_path / "one.csv", 'text\na\n""\nb\n')
    assert "one.csv:3:" in error_of(one) and "'text' is empty" in error_of(one)
    blank = write(tmp_path / "blank.csv", "text,label\na,pos\n\n,\nb,neg\n")
    assert [r["text"] for r in read_examples(blank)] == ["a", "b"]


# ---------------------------------------------------------------- TSV / GLUE


def test_glue_single_sentence_tsv(tmp_path):
    # SST-2 layout; TSV is read without quoting, as GLUE's own readers do.
    f = write(tmp_path / "train.tsv",
              'sentence\tlabel\nit \'s a "charming" journey \t1\nbad , bad\t0\n')
    assert read_examples(f) == [{"text": 'it \'s a "charming" journey ', "label": "1"},
                                {"text": "bad , bad", "label": "0"}]


def test_glue_sentence_pair_tsvs(tmp_path):
    mrpc = write(tmp_path / "mrpc.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                        "1\t702876\t702977\tHe said so.\tHe said it.\n")
    assert read_examples(mrpc) == [{"text": "He said so.", "text_pair": "He said it.", "label": "1"}]
    qnli = write(tmp_path / "qnli.tsv", "index\tquestion\tsentence\tlabel\n"
                                        "0\tWho?\tHim.\tentailment\n")
    assert read_examples(qnli) == [{"text": "Who?", "text_pair": "Him.", "label": "entailment",
                                    "id": "0"}]
    mnli = write(tmp_path / "mnli.tsv", "index\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n"
                                        "3\tfiction\tA cat.\tAn animal.\tentailment\tentailment\n")
    assert read_examples(mnli) == [{"text": "A cat.", "text_pair": "An animal.",
                                    "label": "entailment", "id": "3"}]
    qqp = write(tmp_path / "qqp.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                                      "5\t1\t2\tHow?\tWhy?\t0\n")
    assert read_examples(qqp) == [{"text": "How?", "text_pair": "Why?", "label": "0", "id": "5"}]


def test_glue_test_file_without_labels(tmp_path):
    f = write(tmp_path / "test.tsv", "index\tsentence1\tsentence2\n0\ta\tb\n1\tc\td\n")
    rows = read_examples(f)
    assert rows[1] == {"text": "c", "text_pair": "d", "id": "1"}


@pytest.mark.parametrize("content, line, words", [
    (b"sentence\tlabel\na\t1\nb\t0\tEXTRA\n", 3, "expected 2 columns"),
    (b"sentence\tlabel\na\t1\nb\t0\n\xff\xfe\t1\n", 4, "UTF-8"),
    (b"sentence1\tsentence2\tlabel\na\tb\t1\nc\t\t0\n", 3, "'sentence2' is empty"),
    (b"sentence\tSentence\tlabel\na\tb\t1\n", 1, "the column 'Sentence' twice in the header"),
])
def test_tsv_errors_name_file_and_line(tmp_path, content, line, words):
    f = write(tmp_path / "dev.tsv", content)
    msg = error_of(f)
    assert f"dev.tsv:{line}:" in msg and words in msg


# ---------------------------------------------------------------- plain text and dispatch


def test_plain_text_one_item_a_line(tmp_path):
    f = write(tmp_path / "lm.txt", "first line\r\n\n  second line  \n")
    assert read_examples(f) == [{"text": "first line"}, {"text": "second line"}]
    msg = error_of(write(tmp_path / "bad.txt", b"ok\nok\n\xc3\x28\n"))
    assert "bad.txt:3:" in msg and "UTF-8" in msg
    assert "fields" in error_of(f, label_field="label")


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.csv", "empty.tsv", "empty.txt"])
def test_empty_files(tmp_path, name):
    f = write(tmp_path / name, "\n\n")
    msg = error_of(f)
    assert name in msg and "empty" in msg


def test_missing_file_and_unknown_extension(tmp_path):
    msg = error_of(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in msg and "not found" in msg
    msg = error_of(write(tmp_path / "data.xlsx", "x"))
    assert "data.xlsx" in msg and "unknown file type" in msg


# ---------------------------------------------------------------- load_split


def test_load_split_from_directory_or_file(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    rows = [{"id": "dev-000000", "text": "a", "label": "positive", "tokens": ["a"], "tags": ["x"]}]
    write(d / "dev.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert load_split(d, "dev") == rows
    assert load_split(d / "dev.jsonl") == rows
    with pytest.raises(InputError, match=r"train\.jsonl: file not found"):
        load_split(d, "train")
    with pytest.raises(InputError, match="unknown split"):
        load_split(d, "validation")
