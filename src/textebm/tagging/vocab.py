"""The word vocabulary of a tagger: words of the training sentences -> ids, with an unknown id.

    vocab = build_vocab(rows, lowercase=False, min_count=2)   # rows of `load_tagged`
    vocab.encode(["The", "jury"])                              # [ids]; unseen words -> vocab.unk_id
    save_vocab(vocab, folder); load_vocab(folder)              # FOLDER/words.json

Id 0 is padding (`PAD`), id 1 the unknown word (`UNK`); then the words seen at least
`min_count` times, most frequent first (ties in alphabetical order), so the same sentences give
the same ids. With `lowercase`, words are lowercased before counting and before lookup. A word
seen fewer than `min_count` times maps to the unknown id, so that its vector is trained on the
rare words and serves the unseen ones at test time. `max_words` > 0 keeps only that many of the
most frequent (a semi-supervised pool of 200k sentences has 60k words seen twice; the noise LM's
softmax and every embedding grow with them: docs/tag-grid.md).

With `chars=True` the vocabulary also holds the characters of the sentences (`chars`: id 0
padding, 1 an unknown character, 2 and 3 the begin- and end-of-word marks, then the characters
seen, most frequent first), for a tagger with a character CNN (`models/crf.py`): `encode_chars`
gives each token's character ids as the paper's code reads them (begin mark, the characters of
the token as written, not lowercased, end mark), and `word_chars` those of each vocabulary word,
for sentences known only by their word ids (the noise LM's samples). A word longer than
`MAX_WORD_CHARS` keeps its first and last characters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textebm.errors import InputError
from textebm.io import read_json_object, write_json

VOCAB_FILE = "words.json"
PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
CHAR_SPECIALS = ("", "<unk>", "<w>", "</w>")  # character ids 0-3: padding, unknown, begin and end of word
BOW, EOW = 2, 3
MAX_WORD_CHARS = 24  # character ids per word, the marks included


@dataclass(frozen=True)
class WordVocab:
    """Words by id (`words[0]` padding, `words[1]` unknown) and how tokens are normalised."""

    words: tuple[str, ...]
    lowercase: bool = False
    min_count: int = 1
    chars: tuple[str, ...] = ()  # characters by id (CHAR_SPECIALS first), or () without a character CNN
    index: dict[str, int] = field(init=False, repr=False, compare=False)  # word -> id
    char_index: dict[str, int] = field(init=False, repr=False, compare=False)  # character -> id

    def __post_init__(self):
        object.__setattr__(self, "index", {w: i for i, w in enumerate(self.words)})
        object.__setattr__(self, "char_index", {c: i for i, c in enumerate(self.chars) if i >= len(CHAR_SPECIALS)})

    @property
    def unk_id(self) -> int:
        return UNK_ID

    @property
    def pad_id(self) -> int:
        return PAD_ID

    def __len__(self) -> int:
        return len(self.words)

    def norm(self, token: str) -> str:
        return token.lower() if self.lowercase else token

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Word ids of `tokens`; a word not in the vocabulary gets the unknown id."""
        return [self.index.get(self.norm(t), UNK_ID) for t in tokens]

    def spell(self, token: str) -> list[int]:
        """The character ids of one token: begin mark, its characters (unknown ones 1), end mark;
        at most MAX_WORD_CHARS, a longer word keeping its first and last characters."""
        ids = [self.char_index.get(c, 1) for c in token]
        room = MAX_WORD_CHARS - 2
        if len(ids) > room:
            ids = ids[:room - room // 2] + ids[len(ids) - room // 2:]
        return [BOW, *ids, EOW]

    def encode_chars(self, tokens: Sequence[str]) -> list[list[int]]:
        """The character ids of each token as written (`spell`)."""
        return [self.spell(t) for t in tokens]

    def word_chars(self) -> list[list[int]]:
        """The character ids of each vocabulary word by word id: padding none, the unknown word
        only the two marks (its spelling is not known), the others `spell`."""
        return [[], [BOW, EOW], *(self.spell(w) for w in self.words[2:])]


def build_vocab(rows: Sequence[dict[str, Any]], lowercase: bool = False, min_count: int = 1,
                max_words: int = 0, chars: bool = False) -> WordVocab:
    """The vocabulary of the rows' tokens, and with `chars` their characters (see the module doc)."""
    if min_count < 1:
        raise ValueError(f"min_count must be at least 1, got {min_count}")
    if max_words < 0:
        raise ValueError(f"max_words must be at least 0 (0: no cap), got {max_words}")
    counts = Counter(t.lower() if lowercase else t for row in rows for t in row["tokens"])
    counts.pop(PAD, None), counts.pop(UNK, None)  # a token spelt like a special one is unknown
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    kept = kept[:max_words] if max_words else kept
    alphabet = ()
    if chars:
        seen = Counter(c for row in rows for t in row["tokens"] for c in t)
        alphabet = (*CHAR_SPECIALS, *sorted(seen, key=lambda c: (-seen[c], c)))
    return WordVocab((PAD, UNK, *kept), lowercase, min_count, alphabet)


def save_vocab(vocab: WordVocab, folder: str | Path) -> None:
    """FOLDER/words.json, written atomically."""
    extra = {"chars": list(vocab.chars)} if vocab.chars else {}
    write_json(Path(folder) / VOCAB_FILE, {"lowercase": vocab.lowercase, "min_count": vocab.min_count,
                                           "words": list(vocab.words), **extra})


def load_vocab(folder: str | Path) -> WordVocab:
    """The vocabulary in FOLDER/words.json; InputError naming the file when it is missing or
    malformed."""
    path = Path(folder) / VOCAB_FILE
    if not path.is_file():
        raise InputError(path, "not found: a tagger's folder holds its word vocabulary (written by "
                               "`textebm tag train`)")
    raw = read_json_object(path, "word vocabulary")
    words, lowercase, min_count = raw.get("words"), raw.get("lowercase"), raw.get("min_count")
    if (not isinstance(words, list) or len(words) < 2 or words[:2] != [PAD, UNK]
            or not all(isinstance(w, str) and w for w in words) or len(set(words)) != len(words)):
        raise InputError(path, f"'words' must be a list of distinct words starting with {PAD!r}, {UNK!r}")
    if not isinstance(lowercase, bool):
        raise InputError(path, f"'lowercase' must be true or false, got {lowercase!r}")
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise InputError(path, f"'min_count' must be a whole number >= 1, got {min_count!r}")
    chars = raw.get("chars", [])
    if chars and (not isinstance(chars, list) or tuple(chars[:len(CHAR_SPECIALS)]) != CHAR_SPECIALS
                  or not all(isinstance(c, str) and len(c) == 1 for c in chars[len(CHAR_SPECIALS):])
                  or len(set(chars)) != len(chars)):
        raise InputError(path, f"'chars' must be a list of distinct characters starting with {list(CHAR_SPECIALS)!r}")
    return WordVocab(tuple(words), lowercase, min_count, tuple(chars))
