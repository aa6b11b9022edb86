"""Tests of the Kneser-Ney scorer (not collected by the project's pytest run, which looks in tests/):

    python -m pytest bench/asr_nbest/test_ngram_scores.py     # or: python bench/asr_nbest/test_ngram_scores.py
"""

from __future__ import annotations

import itertools
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ngram_scores import BOS, KneserNey  # noqa: E402

TOY = [s.split() for s in [
    "the cat sat on the mat", "the dog sat on the log", "a cat saw a dog", "the cat saw the dog",
    "a dog sat", "the mat is on the log", "cats and dogs", "the cat ran", "a dog ran on the mat",
]]


def random_corpus(seed: int, n: int = 400) -> list[list[str]]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    weights = [1 / (i + 1) for i in range(30)]
    return [rng.choices(words, weights, k=rng.randint(1, 12)) for _ in range(n)]


def contexts(lm: KneserNey, extra: list[str]) -> list[tuple[str, ...]]:
    words = sorted(lm.vocab) + extra
    out = [(), (BOS,)]
    for w in words[:8]:
        out += [(w,), (BOS, w)]
    out += list(itertools.product(words[:6], repeat=2))
    return out


def check_normalised(lm: KneserNey, extra: list[str]) -> None:
    for h in contexts(lm, extra):
        total = sum(lm.prob(w, h) for w in lm.vocab)
        assert abs(total - 1.0) < 1e-9, (h, total)
        assert all(lm.prob(w, h) > 0 for w in lm.vocab)


def test_distributions_sum_to_one():
    for order in (1, 2, 3, 4):
        check_normalised(KneserNey(TOY, order), ["zebra"])  # toy: the 0.75 fallback discount
        check_normalised(KneserNey(random_corpus(order), order), ["unseen"])  # count-of-count discounts


def test_modified_discounts_from_count_of_counts():
    lm = KneserNey(random_corpus(0, 2000), 3)
    for k in (1, 2, 3):
        d1, d2, d3 = lm.discounts[k]
        assert 0 < d1 < 1 and 0 < d2 < 2 and 0 < d3 < 3, lm.discounts[k]


def test_sentence_logprob_is_the_chain_rule_with_end_and_unk():
    lm = KneserNey(TOY + [["<unk>", "sat"]], 3)
    words = "the cat sat on a zebra".split()
    toks = [BOS] + [w if w in lm.vocab else "<unk>" for w in words] + ["</s>"]
    expect = sum(math.log(lm.prob(toks[i], tuple(toks[max(0, i - 2):i]))) for i in range(1, len(toks)))
    assert abs(lm.sentence_logprob(words) - expect) < 1e-12
    assert lm.prob("zebra", ("the",)) == lm.prob("<unk>", ("the",))


def test_hand_computed_bigram():
    # corpus "a b" and "a a": order 2, fixed discount 0.75 (too few counts for modified KN)
    lm = KneserNey([["a", "b"], ["a", "a"]], 2)
    V = 4  # a, b, </s>, <unk>
    # unigram level, continuation counts N1+(. w): a <- {<s>, a} = 2, b <- {a} = 1, </s> <- {b, a} = 2
    p1 = {w: max(c - 0.75, 0) / 5 + (0.75 * 3 / 5) / V
          for w, c in {"a": 2, "b": 1, "</s>": 2, "<unk>": 0}.items()}
    assert abs(sum(p1.values()) - 1) < 1e-12
    for w in p1:
        assert abs(lm.prob(w, ()) - p1[w]) < 1e-12
    # bigram level after "a": counts a->b 1, a->a 1, a-></s> 1: total 3, each discounted by 0.75
    for w in p1:
        c = {"a": 1, "b": 1, "</s>": 1, "<unk>": 0}[w]
        assert abs(lm.prob(w, ("a",)) - (max(c - 0.75, 0) / 3 + 0.75 * 3 / 3 * p1[w])) < 1e-12
    # after <s>: raw counts (a 2): P(a|<s>) = (2 - .75)/2 + .75/2 * p1(a)
    assert abs(lm.prob("a", (BOS,)) - ((2 - 0.75) / 2 + 0.75 / 2 * p1["a"])) < 1e-12
    # an unseen context ("zzz" is <unk>, never a context in training) passes the unigram level through
    assert abs(lm.prob("a", ("zzz",)) - p1["a"]) < 1e-12


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print("ok", name)
