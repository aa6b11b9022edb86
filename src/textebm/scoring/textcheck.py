"""Does a set of texts look like the text a model was trained on? Three cheap signs, read off the
model's tokenizer (no forward pass), each a warning with its figures:

- **unknown pieces**: the share of the texts' tokens that are the tokenizer's unknown token;
- **clitics attached**: the share of words with a clitic attached ("didn't", "it's") when the
  tokenizer has a piece for the split form " n't" (a BPE learnt on PTB-style text, which
  splits clitics): the model has hardly seen them attached (`--normalize ptb`);
- **case**: for a tokenizer that tells case apart, the share of words with capitals when its
  vocabulary has almost none (its training text was lower case), or the share of words in
  capitals throughout (upper-case ASR output) (`--normalize asr` or `ptb`).

`text_figures` measures, `mismatch_warnings` turns figures into messages (empty when the texts
look fine); both take at most `SAMPLE` texts, the first ones.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

SAMPLE = 5000
UNK_SHARE = 0.005  # warn above 0.5 % unknown pieces
CLITIC_SHARE = 0.002  # words with a clitic attached, above 0.2 %
CAPS_SHARE = 0.5  # words in capitals throughout, above half
CAPITALS_SHARE = 0.05  # words with a capital when the vocabulary is lower case, above 5 %
LOWER_VOCAB = 0.01  # a vocabulary is lower case when under 1 % of its pieces with letters have a capital

_ATTACHED = re.compile(r"[^\W\d_](n't|'s|'m|'d|'ll|'re|'ve)$", re.IGNORECASE)
_LETTER = re.compile(r"[^\W\d_]")


def _pieces(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def splits_clitics(tokenizer) -> bool:
    """True when the tokenizer writes " n't" (after a word) as one piece of its own."""
    return len(_pieces(tokenizer, "did n't")) - len(_pieces(tokenizer, "did")) == 1


def case_sensitive(tokenizer) -> bool:
    return _pieces(tokenizer, "The Words") != _pieces(tokenizer, "the words")


def text_figures(texts: Sequence[str], tokenizer) -> dict[str, Any]:
    """Figures of the first `SAMPLE` texts: tokens, unknown pieces, words, words with a clitic
    attached, with a capital, in capitals throughout; and what the tokenizer tells of its text."""
    sample = list(texts[:SAMPLE])
    ids = tokenizer(sample, add_special_tokens=False)["input_ids"] if sample else []
    unk = getattr(tokenizer, "unk_token_id", None)
    words = [w for t in sample for w in t.split()]
    lettered = [w for w in words if _LETTER.search(w)]
    fig: dict[str, Any] = {
        "texts": len(sample), "tokens": sum(map(len, ids)),
        "unknown": sum(x == unk for seq in ids for x in seq) if unk is not None else 0,
        "words": len(words), "clitics_attached": sum(bool(_ATTACHED.search(w)) for w in words),
        "with_capitals": sum(w != w.lower() for w in lettered),
        "all_capitals": sum(w == w.upper() and sum(c.isalpha() for c in w) > 1 for w in lettered),
        "splits_clitics": splits_clitics(tokenizer), "case_sensitive": case_sensitive(tokenizer)}
    if fig["case_sensitive"]:
        vocab = [p for p in tokenizer.get_vocab() if _LETTER.search(p)]
        fig["vocab_capitals_share"] = sum(p != p.lower() for p in vocab) / max(1, len(vocab))
    return fig


def mismatch_warnings(fig: dict[str, Any]) -> list[str]:
    """One message per sign that the texts are unlike the model's training text."""
    out = []
    tokens, words = max(1, fig["tokens"]), max(1, fig["words"])
    if fig["unknown"] / tokens > UNK_SHARE:
        out.append(f"{fig['unknown']} of {fig['tokens']} tokens ({100 * fig['unknown'] / tokens:.1f} %) are the "
                   "unknown token: the model cannot tell those words apart")
    if fig["splits_clitics"] and fig["clitics_attached"] / words > CLITIC_SHARE:
        out.append(f"{fig['clitics_attached']} of {fig['words']} words ({100 * fig['clitics_attached'] / words:.1f} %) "
                   "have a clitic attached (\"didn't\", \"it's\"), but the tokenizer has a piece of its own for "
                   "\" n't\": the model was trained on text that splits them (\"did n't\"); try --normalize ptb")
    if fig["case_sensitive"]:
        if fig["all_capitals"] / words > CAPS_SHARE:
            out.append(f"{fig['all_capitals']} of {fig['words']} words ({100 * fig['all_capitals'] / words:.1f} %) "
                       "are in capitals throughout (upper-case ASR output?), and the tokenizer tells case apart; "
                       "try --normalize asr or ptb")
        elif fig["vocab_capitals_share"] < LOWER_VOCAB and fig["with_capitals"] / words > CAPITALS_SHARE:
            out.append(f"{fig['with_capitals']} of {fig['words']} words ({100 * fig['with_capitals'] / words:.1f} %) "
                       f"have capitals, but only {100 * fig['vocab_capitals_share']:.2f} % of the vocabulary's pieces "
                       "do (the model's training text was lower case); try --normalize asr or ptb")
    return out
