"""bench/tagging/word_groups.py: the four word groups and their accuracy on a hand example."""

import importlib.util
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location(
    "word_groups", Path(__file__).resolve().parents[1] / "bench" / "tagging" / "word_groups.py")
word_groups = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(word_groups)


def test_token_groups_by_hand():
    sup = {"the", "cat", "sat"}            # the labelled sentences' words
    cell = {"the", "sat", "mat", "dog"}    # the cell's vocabulary: "cat" lost to the cap, "mat"/"dog" from the pool
    tokens = ["the", "cat", "sat", "on", "the", "mat", "dog"]
    group = word_groups.token_groups(tokens, sup, cell)
    # labelled 0, labelled-cut 1, pool-only 2, neither 3
    assert group.tolist() == [0, 1, 0, 3, 0, 2, 2]
    ok = np.array([True, False, True, True, False, True, False])
    acc = word_groups.group_accuracy(ok, group)
    assert acc["labelled"] == {"tokens": 3, "accuracy": 2 / 3}
    assert acc["labelled, cut"] == {"tokens": 1, "accuracy": 0.0}
    assert acc["pool-only"] == {"tokens": 2, "accuracy": 0.5}
    assert acc["neither"] == {"tokens": 1, "accuracy": 1.0}
    assert word_groups.group_accuracy(ok[:1], group[:1])["neither"] == {"tokens": 0, "accuracy": None}
