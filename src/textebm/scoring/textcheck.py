"""Does a set of texts look like the text a model was trained on? Cheap signs (no forward pass),
each a warning with its figures:

- **unknown pieces**: the share of the texts' tokens that are the tokenizer's unknown token;
- **clitics attached**: the share of the texts' words with a clitic attached ("didn't", "it's")
  when the model's training text splits them ("did n't", as PTB does): its training text (a
  sample, when the run folder names its dataset) holds them mostly on their own, or its
  tokenizer has a piece of its own for " n't" (`--normalize ptb`);
- **case**: the share of words with capitals when the model's training text has almost none (or,
  without the training text, a tokenizer that tells case apart has almost no piece with
  capitals), and the share of words in capitals throughout, for a tokenizer that tells case
  apart (upper-case ASR output; `--normalize asr` or `ptb`).

`word_figures` counts words (of the texts or of the training text), `tokenizer_figures` reads
the tokenizer, `training_texts` finds a sample of the training text, `mismatch_warnings` turns
figures into messages (none when the texts look fine). Each looks at the first `SAMPLE` texts.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Sequence

from textebm.data.layout import input_sha256

log = logging.getLogger(__name__)

SAMPLE = 5000
TRAIN_SAMPLE = 20000
UNK_SHARE = 0.005  # warn above 0.5 % unknown pieces
CLITIC_SHARE = 0.002  # words with a clitic attached, above 0.2 %
CAPS_SHARE = 0.5  # words in capitals throughout, above half
CAPITALS_SHARE = 0.05  # words with a capital where the training text has almost none, above 5 %
LOWER = 0.01  # a training text (or a vocabulary) with capitals in under 1 % of its words is lower case

CLITICS = ("n't", "'s", "'m", "'d", "'ll", "'re", "'ve")
_ATTACHED = re.compile(r"[^\W\d_](n't|'s|'m|'d|'ll|'re|'ve)$", re.IGNORECASE)
_LETTER = re.compile(r"[^\W\d_]")


def word_figures(texts: Sequence[str], limit: int = SAMPLE) -> dict[str, int]:
    """Whitespace words of the first `limit` texts: in all, with a clitic attached, clitics on
    their own; of those with two letters or more ("I" and PTB's number token "N" have one), with
    a capital, and in capitals throughout."""
    words = [w for t in texts[:limit] for w in t.split()]
    lettered = [w for w in words if len(_LETTER.findall(w)) > 1]
    return {"texts": min(len(texts), limit), "words": len(words),
            "clitics_attached": sum(bool(_ATTACHED.search(w)) for w in words),
            "clitics_alone": sum(w.lower() in CLITICS for w in words),
            "with_capitals": sum(w != w.lower() for w in lettered),
            "all_capitals": sum(w == w.upper() for w in lettered)}


def _pieces(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def tokenizer_figures(texts: Sequence[str], tokenizer) -> dict[str, Any]:
    """Tokens of the first `SAMPLE` texts and how many are the unknown token; whether the tokenizer
    writes " n't" as one piece, tells case apart, and the share of its pieces (of two letters or
    more) with a capital."""
    sample = list(texts[:SAMPLE])
    ids = tokenizer(sample, add_special_tokens=False)["input_ids"] if sample else []
    unk = getattr(tokenizer, "unk_token_id", None)
    fig: dict[str, Any] = {
        "tokens": sum(map(len, ids)), "unknown": sum(x == unk for seq in ids for x in seq) if unk is not None else 0,
        "piece_for_nt": len(_pieces(tokenizer, "did n't")) - len(_pieces(tokenizer, "did")) == 1,
        "case_sensitive": _pieces(tokenizer, "The Words") != _pieces(tokenizer, "the words")}
    pieces = (re.sub(r"^(\u0120|\u2581|##)", "", p) for p in tokenizer.get_vocab())  # less a word-start/-inside mark
    vocab = [p for p in pieces if len(_LETTER.findall(p)) > 1]
    fig["vocab_capitals_share"] = sum(p != p.lower() for p in vocab) / max(1, len(vocab))
    return fig


def _started_in(run: Path, out: Any) -> Path | None:
    """The folder a run was started from: RUN less the relative --out it was given as (config.json's
    "out"), while RUN still ends with it; None when that cannot be told."""
    if not isinstance(out, str):
        return None
    parts = Path(os.path.normpath(out)).parts
    here = Path(os.path.abspath(run))
    if not parts or Path(out).is_absolute() or ".." in parts or here.parts[-len(parts):] != parts:
        return None
    return here.parents[len(parts) - 1]


def _dataset_folder(run: Path, config: dict) -> Path | None:
    """Where the dataset a run names ("data", as typed when it was trained) is now: a relative path
    against the folder the run was started from, or (when the run recorded the content, to check
    it by) the current one; a folder of other content than the run's is not taken."""
    data, recorded = config.get("data"), config.get("inputs_sha256")
    if not isinstance(data, str):
        return None
    recorded = recorded.get("data") if isinstance(recorded, dict) else None
    path = Path(data).expanduser()
    if path.is_absolute():
        places = [path]
    else:
        started = _started_in(run, config.get("out"))
        places = [started / path] if started is not None else []
        if recorded is not None:
            places.append(Path.cwd() / path)
    for place in dict.fromkeys(places):
        if not (place / "train.jsonl").is_file():
            continue
        try:
            if recorded is None or input_sha256(place) == recorded:
                return place
        except OSError:
            continue
        log.debug("%s: not the dataset %s was trained on (other content); not compared", place, run)
    log.debug("%s: its training data %s is not at hand; not compared", run, data)
    return None


def training_texts(model_folder: str | Path, limit: int = TRAIN_SAMPLE) -> tuple[Path, list[str]] | None:
    """(file, its first `limit` texts) of the training split of the dataset a textebm run was
    trained on (RUN/config.json's "data", a folder with train.jsonl, found by `_dataset_folder`),
    looked up from the model folder or its run folder; None when the run names none, or it is not
    at hand with the run's content, or it cannot be read."""
    folder = Path(model_folder)
    for cfg in (folder / "config.json", folder.parent / "config.json"):
        try:
            config = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict) or (place := _dataset_folder(cfg.parent, config)) is None:
            continue
        train = place / "train.jsonl"
        texts = []
        try:
            with open(train, encoding="utf-8") as f:
                for line in f:
                    if len(texts) >= limit:
                        break
                    row = json.loads(line)
                    if isinstance(row, dict) and isinstance(row.get("text"), str):
                        texts.append(row["text"])
        except (OSError, ValueError):
            return None
        return (train, texts) if texts else None
    return None


def mismatch_warnings(words: dict[str, int], tok: dict[str, Any], train: dict[str, int] | None = None,
                      train_name: str = "") -> list[str]:
    """One message per sign that the texts (`words`, `tok`: their figures) are unlike the model's
    training text (`train`: the `word_figures` of a sample of it, from `train_name`, if known)."""
    out = []
    n_tok, n_words = max(1, tok["tokens"]), max(1, words["words"])
    if tok["unknown"] / n_tok > UNK_SHARE:
        out.append(f"{tok['unknown']} of {tok['tokens']} tokens ({100 * tok['unknown'] / n_tok:.1f} %) are the "
                   "unknown token: the model cannot tell those words apart")
    attached = words["clitics_attached"] / n_words
    if attached > CLITIC_SHARE:
        why = ""
        if (train and train["clitics_alone"] > 10 * train["clitics_attached"]
                and train["clitics_alone"] > 0.001 * train["words"]):
            why = (f"the model's training text ({train_name}) splits them: {train['clitics_alone']} of its "
                   f"{train['words']} sampled words are a clitic on its own, {train['clitics_attached']} have one attached")
        elif tok["piece_for_nt"]:
            why = "the tokenizer has a piece of its own for \" n't\", so the model's training text split them"
        if why:
            out.append(f"{words['clitics_attached']} of {words['words']} words ({100 * attached:.1f} %) have a clitic "
                       f"attached (\"didn't\", \"it's\"), but {why}; try --normalize ptb")
    capitals = words["with_capitals"] / n_words
    if tok["case_sensitive"] and words["all_capitals"] / n_words > CAPS_SHARE:
        out.append(f"{words['all_capitals']} of {words['words']} words ({100 * words['all_capitals'] / n_words:.1f} %) "
                   "are in capitals throughout (upper-case ASR output?), and the tokenizer tells case apart; "
                   "try --normalize asr or ptb")
    elif tok["case_sensitive"] and capitals > CAPITALS_SHARE:
        if train and train["words"] and train["with_capitals"] / train["words"] < LOWER:
            out.append(f"{words['with_capitals']} of {words['words']} words ({100 * capitals:.1f} %) have capitals, "
                       f"but only {train['with_capitals']} of the {train['words']} sampled words of the model's "
                       f"training text ({train_name}) do; try --normalize asr or ptb")
        elif not train and tok["vocab_capitals_share"] < LOWER:
            out.append(f"{words['with_capitals']} of {words['words']} words ({100 * capitals:.1f} %) have capitals, "
                       f"but only {100 * tok['vocab_capitals_share']:.2f} % of the vocabulary's pieces do (the "
                       "model's training text was lower case); try --normalize asr or ptb")
    return out


def check_texts(texts: Sequence[str], tokenizer, model_folder: str | Path | None = None) -> list[str]:
    """`mismatch_warnings` of `texts` for a model (its tokenizer and, when its run folder names
    it, its training text)."""
    found = training_texts(model_folder) if model_folder is not None else None
    train = word_figures(found[1], TRAIN_SAMPLE) if found else None
    return mismatch_warnings(word_figures(texts), tokenizer_figures(texts, tokenizer), train,
                             str(found[0]) if found else "")
