"""The nested semi-supervised split (textebm.data.ssl_split): nesting, disjointness, determinism
and errors naming the option."""

from __future__ import annotations

import pytest

from textebm.data.ssl_split import nested_split
from textebm.errors import TextebmError

TRAIN = [[f"t{i}", "w"] for i in range(3000)]
EXTRA = [[f"e{i}"] for i in range(4000)]


def split(**kw):
    args = {"train": TRAIN, "labelled_size": 200, "seed": 0, "proportions": (0.02, 0.1, 1.0),
            "ratios": (5, 10, 20), "extra": EXTRA, "ratios_by_proportion": {1.0: (5,)}}
    return nested_split(**{**args, **kw})


def test_labelled_sets_are_nested_and_sized():
    s = split()
    small, mid, full = (s.labelled(p) for p in (0.02, 0.1, 1.0))
    assert (len(small), len(mid), len(full)) == (4, 20, 200)
    assert small == mid[:4] and mid == full[:20]
    assert len(set(full)) == 200 and all(0 <= i < len(TRAIN) for i in full)


def test_unlabelled_pools_are_prefixes_and_never_labelled():
    s = split()
    full = set(s.labelled(1.0))
    cells = {(p, r): s.unlabelled(p, r) for p in (0.02, 0.1) for r in (5, 10, 20)}
    cells[1.0, 5] = s.unlabelled(1.0, 5)
    longest = max(cells.values(), key=len)
    for (p, r), pool in cells.items():
        assert len(pool) == r * len(s.labelled(p))
        assert pool == longest[:len(pool)]  # every pool a prefix of the largest
        assert not {i for src, i in pool if src == "train"} & full
    assert len(set(longest)) == len(longest)
    assert {src for src, _ in longest} == {"train", "extra"}  # the corpora are mixed
    assert s.unlabelled(0.1, 0) == []
    # the whole pool: the training sentences outside the 100 % set, and every extra one
    assert sorted(s.pool) == sorted([("train", i) for i in range(3000) if i not in full]
                                    + [("extra", i) for i in range(4000)])
    assert s.max_ratio(1.0) == (2800 + 4000) // 200


def test_same_seed_same_split_other_seed_another():
    a, b, c = split(), split(), split(seed=1)
    assert a == b and a.digest() == b.digest()
    assert a.labelled(1.0) != c.labelled(1.0) and a.pool != c.pool and a.digest() != c.digest()
    # the labelled draw does not depend on the extra corpora or the ratios asked for
    assert split(extra=[], ratios=(1,)).labelled(1.0) == a.labelled(1.0)


def test_copies_of_labelled_or_excluded_sentences_stay_out_of_the_pool():
    train = [["same"]] * 10 + [[f"t{i}"] for i in range(90)]
    s = nested_split(train, labelled_size=20, seed=3, proportions=(0.5, 1.0), extra=[["same"], ["test", "one"], ["x"]],
                     exclude=[["test", "one"]])
    labelled_texts = {tuple(train[i]) for i in s.labelled(1.0)}
    pool_texts = [tuple(train[i]) if src == "train" else (("same",), ("test", "one"), ("x",))[i]
                  for src, i in s.pool]
    assert ("test", "one") not in pool_texts and ("x",) in pool_texts
    assert not labelled_texts & set(pool_texts)


def test_the_length_cap_leaves_long_sentences_out_of_the_pool_only():
    # train sentences of 2 tokens, extra of 1..4: a cap of 2 keeps every train one and the extra ones of <= 2
    extra = [["e"] * (1 + i % 4) for i in range(400)]
    whole, capped = split(extra=extra), split(extra=extra, max_pool_tokens=2)
    assert capped.order == whole.order  # the labelled draw is the same, long labelled sentences included
    kept = [ref for ref in whole.pool if ref[0] == "train" or len(extra[ref[1]]) <= 2]
    assert sorted(capped.pool) == sorted(kept) and len(kept) == 2800 + 200
    assert all(len(extra[i]) <= 2 for src, i in capped.pool if src == "extra")
    one = split(extra=extra, max_pool_tokens=1, proportions=(0.02,), ratios=(1,), ratios_by_proportion={})
    assert len(one.pool) == 100 and {src for src, _ in one.pool} == {"extra"}  # the 2-token train rows go too
    assert split(extra=extra, max_pool_tokens=0).pool == whole.pool  # 0: no cap


@pytest.mark.parametrize("kw, message", [
    ({"max_pool_tokens": -1}, r"max_pool_tokens: -1; expected a whole number >= 0"),
    ({"labelled_size": 0}, "labelled_size: 0"),
    ({"labelled_size": 3001}, "labelled_size: 3,001 is more than the 3,000 training sentences"),
    ({"proportions": (0.002, 1.0)}, r"proportions: 0.002 of labelled_size=200 leaves no sentence"),
    ({"proportions": (0.1, 1.5)}, r"proportions: 1.5"),
    ({"proportions": ()}, "proportions: none given"),
    ({"ratios": (5, 400)}, (r"ratios: U/L=400 at proportion 0.1 \(20 labelled\) needs 8,000 "
                            r"unlabelled sentences; the pool has 6,800 \(the largest U/L it allows is 340\)")),
    ({"ratios_by_proportion": {1.0: (50,)}}, r"ratios: U/L=50 at proportion 1 .*largest U/L it allows is 34"),
    ({"ratios_by_proportion": {0.5: (5,)}}, r"ratios: given for proportion 0.5"),
    ({"ratios": (-1,)}, r"ratios: -1"),
    ({"extra": [["a"], []]}, "extra sentence 2 is empty"),
    ({"train": TRAIN[:300] + [[]]}, "train sentence 301 is empty"),
])
def test_errors_name_the_option(kw, message):
    with pytest.raises(TextebmError, match=message):
        split(**kw)


def test_asking_a_cell_the_pool_cannot_fill():
    s = split()
    with pytest.raises(TextebmError, match="ratios: U/L=500 at proportion 0.1"):
        s.unlabelled(0.1, 500)
    with pytest.raises(TextebmError, match="proportions: 0.5 is not one of this split's"):
        s.labelled(0.5)
