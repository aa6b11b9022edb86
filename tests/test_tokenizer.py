"""Tokenizer training: special tokens, no automatic bos/eos, round trips, determinism, the CLI."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys

import pytest

from textebm.cli import main
from textebm.errors import InputError, TextebmError
from textebm.tokenizer import SPECIAL_TOKENS, train_tokenizer

WORDS = ("the a cat dog sat on mat ran quickly over lazy fox brown jumps hello world café naïve "
         "don't New York Paris it's 1984 well-known").split()


def corpus(n: int = 1500, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + rng.choice([".", "!", "?", ""])
            for _ in range(n)]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return corpus()


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_special_tokens_and_no_auto_bos_eos(texts, kind, tmp_path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    train_tokenizer(texts, 320, kind).save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert isinstance(tok, PreTrainedTokenizerFast)
    for i, (attr, token) in enumerate(SPECIAL_TOKENS.items()):
        assert getattr(tok, attr) == token
        assert tok.convert_tokens_to_ids(token) == i
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.sep_token_id) == (0, 2, 3, 5)
    ids = tok("the cat sat").input_ids
    assert ids and not set(ids) & set(range(len(SPECIAL_TOKENS)))
    assert tok("the cat sat", add_special_tokens=True).input_ids == ids
    # Special tokens written in text stay whole, so layouts built from strings also work.
    assert tok("<s> the cat </s>").input_ids[0] == tok.bos_token_id
    assert len(tok) <= 320


def test_bpe_round_trip(texts):
    tok = train_tokenizer(texts, 400, "bpe")
    for text in ["the cat sat on the mat.", "Hello world, the café is naïve!", "  two  spaces\nand a line",
                 "unseen: Ærøskøbing 東京 🙂", "it's well-known"]:
        ids = tok(text).input_ids
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text
    assert len(tok("the cat sat on the mat").input_ids) < len("the cat sat on the mat")  # merges learnt


def test_wordpiece_round_trip(texts):
    tok = train_tokenizer(texts, 200, "wordpiece")
    for text in ["the cat sat on the mat.", "hello world! the café is naïve?", "New York 1984"]:
        ids = tok(text).input_ids
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(tok("quickly").input_ids)
    assert "".join(p.removeprefix("##") for p in pieces) == "quickly"
    assert tok.decode(tok("Zebra").input_ids) == "<unk>"  # unseen first letter


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_lowercase(texts, kind):
    tok = train_tokenizer(texts, 300, kind, lowercase=True)
    assert tok("Hello WORLD").input_ids == tok("hello world").input_ids
    assert tok.decode(tok("Hello WORLD").input_ids) == "hello world"


def _digest(tok) -> str:
    return hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest()


def test_training_is_deterministic_across_processes(texts):
    """Rust hash maps are seeded per process; ties between equal-count merges must not depend on them."""
    here = {kind: _digest(train_tokenizer(texts, 300, kind)) for kind in ("bpe", "wordpiece")}
    code = ("import hashlib, json, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "from test_tokenizer import corpus, _digest\n"
            "from textebm.tokenizer import train_tokenizer\n"
            "print(json.dumps({k: _digest(train_tokenizer(corpus(), 300, k)) for k in ('bpe', 'wordpiece')}))\n")
    res = subprocess.run([sys.executable, "-c", code, str(__import__("pathlib").Path(__file__).parent)],
                         capture_output=True, text=True, check=True)
    assert json.loads(res.stdout.strip().splitlines()[-1]) == here
    assert _digest(train_tokenizer(texts, 300, "wordpiece")) == here["wordpiece"]


def test_bad_settings(texts):
    with pytest.raises(TextebmError, match="too small"):
        train_tokenizer(texts, 100, "bpe")
    with pytest.raises(TextebmError, match="unknown tokenizer kind"):
        train_tokenizer(texts, 300, "unigram")
    with pytest.raises(TextebmError, match="no texts"):
        train_tokenizer([], 300, "bpe")


def test_cli_train(tmp_path, capsys):
    from transformers import AutoTokenizer

    data = tmp_path / "data"
    data.mkdir()
    rows = [{"text": t, "label": i % 2} for i, t in enumerate(corpus(300))]
    rows += [{"text": "a premise.", "text_pair": "zyzzyva zyzzyva zyzzyva"} for _ in range(200)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "tok"
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(out)]) == 0
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert tok.mask_token == "<mask>" and len(tok) == 300
    assert len(tok(" zyzzyva").input_ids) == 1  # text_pair fields are trained on too

    # Same data, same tokenizer; a second run needs --overwrite, then replaces textebm's files only.
    first = (out / "tokenizer.json").read_bytes()
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(out)]) == 2
    (out / "notes.txt").write_text("mine")
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(out),
                 "--overwrite"]) == 0
    assert (out / "tokenizer.json").read_bytes() == first and (out / "notes.txt").read_text() == "mine"

    assert main(["tokenizer", "train", "--data", str(data / "train.jsonl"), "--kind", "wordpiece",
                 "--vocab-size", "120", "--lowercase", "--out", str(tmp_path / "wp")]) == 0
    assert AutoTokenizer.from_pretrained(tmp_path / "wp").decode([]) == ""


def test_cli_errors(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "fine"}\n{"label": 1}\n', encoding="utf-8")
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(tmp_path / "t")]) == 2
    assert f"{data / 'train.jsonl'}:2: missing field 'text'" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()

    assert main(["tokenizer", "train", "--data", str(tmp_path / "nope"), "--vocab-size", "300",
                 "--out", str(tmp_path / "t")]) == 2
    assert "not found" in capsys.readouterr().err

    (data / "train.jsonl").write_text('{"text": "fine"}\n', encoding="utf-8")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(keep)]) == 2
    assert (keep / "notes.txt").read_text() == "mine"

    with pytest.raises(InputError):
        from textebm.tokenizer import train_jsonl

        (data / "train.jsonl").write_text('{"text": 3}\n', encoding="utf-8")
        train_jsonl(data / "train.jsonl", 300)


def test_tokenizer_train_on_a_text_file_says_what_it_expects(tmp_path, capsys):
    """A plain-text file is not malformed JSON: the message names the file and the way to a dataset."""
    from textebm.cli import main

    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\non the mat\n")
    assert main(["tokenizer", "train", "--data", str(texts), "--vocab-size", "300", "--out", str(tmp_path / "tok")]) == 2
    err = capsys.readouterr().err
    assert f"--data {texts}: a .txt file" in err and "textebm data convert" in err and "malformed" not in err
    assert not (tmp_path / "tok").exists()


def test_an_empty_training_file_is_named(tmp_path, capsys):
    """A dataset whose train split has no rows (a tagging dataset of tokens only) names the file."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("")
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out", str(tmp_path / "t")]) == 2
    assert f"{data / 'train.jsonl'}: no texts to train the tokenizer on" in capsys.readouterr().err


def test_a_load_error_keeps_the_line_that_says_what_failed():
    from pathlib import Path

    from textebm.models.load import _load_error

    e = RuntimeError("Error(s) in loading state_dict for ConvNet:\n\tsize mismatch for head.weight: (10, 128) vs (10, 64)")
    assert "size mismatch for head.weight" in str(_load_error("--init", Path("m"), e))
    assert str(_load_error("--init", Path("m"), ValueError())) == "--init m: cannot load the model: ValueError"
