"""The tagger's character CNN (models/crf.py `char_features`, tagging/vocab.py spelling): its
features on a hand example (the mask keeps padding from winning the max-pool, and padding length
changes nothing), the word table agreeing with explicit characters, spelling and its file, and
`tag train --char-cnn` tagging words it never saw by their suffix where the word-only tagger
cannot, plus its bad options (exit 2, nothing written)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from textebm.cli import main
from textebm.data.layout import write_dataset
from textebm.errors import InputError
from textebm.models.crf import BiLSTMCRF, TaggerSpec, char_features
from textebm.tagging.folder import pad_chars, tag_sentences
from textebm.tagging.recipes import transfer_tagger
from textebm.tagging.vocab import BOW, EOW, MAX_WORD_CHARS, build_vocab, load_vocab, save_vocab


def _hand_cnn(weights: list[float], bias: float) -> tuple[nn.Embedding, nn.ModuleList]:
    """Character k embeds as the number k (1-d); one width-2 filter with the given weights."""
    emb = nn.Embedding(10, 1, padding_idx=0)
    conv = nn.Conv1d(1, 1, 2)
    with torch.no_grad():
        emb.weight.copy_(torch.arange(10.0)[:, None])
        conv.weight.copy_(torch.tensor(weights).reshape(1, 1, 2))
        conv.bias.fill_(bias)
    return emb, nn.ModuleList([conv])


def test_char_features_on_a_hand_example():
    # 'same' padding for width 2 pads one zero on the right: out[j] = w0 x[j] + w1 x[j+1] + b
    emb, convs = _hand_cnn([1.0, 1.0], 0.0)
    word = torch.tensor([[2, 5, 3, 0, 0]])  # (1, C): a 3-character word padded to 5
    assert char_features(emb, convs, word).item() == 8.0  # max(2+5, 5+3, 3+0) = 8
    # a filter that fires on padding: relu(-x[j] + 10) is 10 on every padded position; the mask
    # zeroes those, so the word's own windows decide: max(10-2, 10-5, 10-3) = 8
    emb, convs = _hand_cnn([-1.0, 0.0], 10.0)
    assert char_features(emb, convs, word).item() == 8.0
    # the same word padded further, or not at all, gives the same features
    assert char_features(emb, convs, torch.tensor([[2, 5, 3]])).item() == 8.0
    assert char_features(emb, convs, torch.tensor([[2, 5, 3, 0, 0, 0, 0, 0]])).item() == 8.0


def _spec(V: int, chars: int) -> TaggerSpec:
    return TaggerSpec(vocab_size=V, tags=["A", "B"], embed=4, hidden=3, char_vocab=chars, char_embed=5,
                      char_filters=2, char_widths=[2, 3])


def test_shapes_and_the_word_table_agree_with_explicit_characters():
    rows = [{"tokens": ["The", "dogs", "ran", "The"]}, {"tokens": ["dogs", "sat"]}]
    vocab = build_vocab(rows, chars=True)
    torch.manual_seed(0)
    model = BiLSTMCRF(_spec(len(vocab), len(vocab.chars))).eval()
    model.set_word_chars(vocab.word_chars())
    tokens = [["The", "dogs", "sat"], ["ran"]]
    ids = torch.tensor([vocab.encode(tokens[0]), vocab.encode(tokens[1]) + [0, 0]])  # (2, 3)
    chars = pad_chars([vocab.encode_chars(t) for t in tokens], 3)  # (2, 3, C)
    assert chars.shape == (2, 3, 6)  # "dogs" spelt <w> d o g s </w>
    x = model.inputs(ids, chars)
    assert x.shape == (2, 3, 4 + 2 * 2)  # the word embedding and F = 2 filters x 2 widths
    # a sentence known only by its word ids reads its words' characters from the table: the same
    torch.testing.assert_close(model.inputs(ids), x, rtol=0, atol=0)
    mask = ids > 0
    torch.testing.assert_close(model.potentials(ids, mask), model.potentials(ids, mask, chars), rtol=0, atol=0)
    # an unknown word keeps its spelling only when the characters are given
    unk = torch.tensor([vocab.encode(["cats"])])
    spelt = pad_chars([vocab.encode_chars(["cats"])], 1)
    assert not torch.equal(model.inputs(unk, spelt), model.inputs(unk))


def test_spelling_marks_unknown_characters_truncation_and_the_file(tmp_path):
    vocab = build_vocab([{"tokens": ["ab", "ba", "a"]}], chars=True)
    assert vocab.chars[4:] == ("a", "b")  # most frequent first
    a, b = vocab.char_index["a"], vocab.char_index["b"]
    assert vocab.spell("ab") == [BOW, a, b, EOW]
    assert vocab.spell("aZ") == [BOW, a, 1, EOW]  # an unseen character is 1
    long = "a" * 30 + "b" * 30
    spelt = vocab.spell(long)
    assert len(spelt) == MAX_WORD_CHARS and spelt[1] == a and spelt[-2] == b  # head and suffix kept
    assert vocab.word_chars()[:2] == [[], [BOW, EOW]]  # padding, and the unknown word has no spelling
    save_vocab(vocab, tmp_path)
    assert load_vocab(tmp_path) == vocab and load_vocab(tmp_path).chars == vocab.chars
    raw = json.loads((tmp_path / "words.json").read_text())
    raw["chars"] = ["", "<unk>", "<w>", "</w>", "ab"]
    (tmp_path / "words.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="'chars' must be"):
        load_vocab(tmp_path)


def test_a_transferred_tagger_with_characters_tags_as_before():
    small = build_vocab([{"tokens": ["the", "dog", "ran"]}], chars=True)
    large = build_vocab([{"tokens": ["the", "dog", "ran", "cat", "sat"]}], chars=True)
    large = type(large)(large.words, large.lowercase, large.min_count, small.chars)
    torch.manual_seed(1)
    init = BiLSTMCRF(_spec(len(small), len(small.chars)))
    init.set_word_chars(small.word_chars())
    moved = transfer_tagger(init, small, large, dropout=0.0)
    rows = [{"tokens": ["the", "cat", "ran", "dog"]}, {"tokens": ["sat", "the"]}]
    assert tag_sentences(moved, large, rows, 2) == tag_sentences(init, small, rows, 2)


# ---------------------------------------------------------------- tag train --char-cnn

SUFFIX_TAGS = {"ing": "VBG", "ly": "RB", "ed": "VBD", "s": "NNS"}


def _word(rng: random.Random) -> tuple[str, str]:
    stem = "".join(rng.choice("bcdfgkmnprt") + rng.choice("aeiou") for _ in range(rng.choice([1, 2])))
    suffix = rng.choice(list(SUFFIX_TAGS))
    return stem + suffix, SUFFIX_TAGS[suffix]


def _sentence(rng: random.Random) -> dict:
    words = [_word(rng) for _ in range(rng.randint(2, 6))]
    return {"text": " ".join(w for w, _ in words), "tokens": [w for w, _ in words], "tags": [t for _, t in words]}


@pytest.fixture(scope="module")
def suffixes(tmp_path_factory) -> Path:
    """Made-up words whose tag is their suffix; the training words are seen once each at most
    (min-count 2 makes every word unknown), so only the spelling can tell the tags apart."""
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("suffixes")
    write_dataset(root / "data", {s: [_sentence(rng) for _ in range(n)]
                                  for s, n in (("train", 120), ("dev", 30), ("test", 30))}, {"name": "suffixes"})
    return root / "data"


def _train(data, out, *extra) -> list[str]:
    return ["tag", "train", "--data", str(data), "--out", str(out), "--embed", "8", "--hidden", "16",
            "--epochs", "4", "--batch-size", "8", "--lr", "0.02", "--min-count", "50", "--precision", "fp32",
            "--no-progress", *map(str, extra)]


def test_the_character_cnn_tags_unseen_words_by_their_spelling(suffixes, tmp_path):
    accuracy = {}
    for name, extra in (("words", []), ("chars", ["--char-cnn", "--char-embed", "8", "--char-filters", "8"])):
        out = tmp_path / name
        assert main(_train(suffixes, out, *extra)) == 0
        assert main(["tag", "eval", "--model", str(out), "--data", str(suffixes), "--split", "test",
                     "--out", str(tmp_path / f"{name}.json")]) == 0
        accuracy[name] = json.loads((tmp_path / f"{name}.json").read_text())["test_accuracy"]
    assert load_vocab(tmp_path / "chars" / "model").chars  # the characters are kept with the tagger
    assert accuracy["words"] < 0.45 and accuracy["chars"] > 0.95, accuracy  # 4 tags, all words unknown


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("joint, expected", [(False, "--char-embed"), (True, "--char-cnn")],
                         ids=["char-embed without --char-cnn", "--char-cnn with an --init tagger that has none"])
def test_bad_character_options_exit_2_naming_them(suffixes, tmp_path, joint, expected, capsys):
    words = tmp_path / "words"
    assert main(_train(suffixes, words, "--epochs", "1")) == 0
    command = _train(suffixes, tmp_path / "o", "--char-embed", "8")
    if joint:
        command = ["tag", "train", "--data", str(suffixes), "--out", str(tmp_path / "o"), "--method", "joint",
                   "--ratio", "1", "--labelled", "40", "--char-cnn", "--init", str(words), "--precision", "fp32"]
    before = _tree(tmp_path)
    capsys.readouterr()
    assert main(command) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert _tree(tmp_path) == before
