"""The one batched-inference helper and its three users (LM scoring, classifier predictions, the
LM's dev perplexity): each fast path (length-sorted batches) equals a slow reference that runs
the items one by one in input order."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from test_lm_sampling import make_tiny_lm, sentence
from textebm.inference import batched


def test_batched_sorts_by_length_and_restores_input_order():
    rng = random.Random(0)
    items = [[i] * rng.randint(1, 20) for i in range(23)]
    seen = []

    def fn(batch):
        seen.append([len(x) for x in batch])
        return [x[0] * 10 for x in batch]

    out = batched(items, [len(x) for x in items], 4, fn)
    assert out == [i * 10 for i in range(23)]
    flat = [n for b in seen for n in b]
    assert flat == sorted(flat, reverse=True) and max(len(b) for b in seen) == 4 and len(seen) == 6
    seen.clear()
    assert batched(items, [len(x) for x in items], 5, fn, sort=False) == out
    assert [n for b in seen for n in b] == [len(x) for x in items]  # input order
    assert batched([], [], 3, fn) == []
    with pytest.raises(ValueError, match="outputs for a batch"):
        batched(items, [len(x) for x in items], 4, lambda b: b[:1])


def test_score_sequences_equals_one_by_one(tmp_path):
    from textebm.lm.scoring import next_token_logprobs, score_sequences
    from textebm.models.load import load_lm

    model, tok, _ = load_lm(make_tiny_lm(tmp_path / "lm", seed=3))
    seqs = [[2, *tok(sentence(i, n), add_special_tokens=False)["input_ids"], 3]
            for i, n in enumerate([4, 9, 1, 6, 6, 12, 3])]
    fast = score_sequences(model, seqs, pad=0, batch_size=3)
    with torch.no_grad():
        slow = [next_token_logprobs(model(input_ids=torch.tensor([s])).logits, torch.tensor([s]),
                                    torch.ones(1, len(s), dtype=torch.long))[0].tolist() for s in seqs]
    assert [len(x) for x in fast] == [len(s) - 1 for s in seqs]
    for a, b in zip(fast, slow):
        assert a == pytest.approx(b, abs=1e-5)


@pytest.mark.parametrize("energy", ["none", "hidden", "scalar"])
def test_predict_equals_one_by_one(classify_fixture, energy):
    from textebm.classify.data import batch_inputs, encode_examples
    from textebm.models.classifier import ClassifierSpec
    from textebm.models.load import build_classifier
    from textebm.classify.predict import predict
    from textebm.data.readers import load_split

    torch.manual_seed(0)
    model, tok = build_classifier(classify_fixture / "encoder",
                                  ClassifierSpec(labels=["negative", "positive"], energy=energy))
    rows = load_split(classify_fixture / "data", "dev")[:21]
    ex = encode_examples(tok, rows, model.spec.labels, 64)
    model.train()  # predict switches to eval mode (no dropout) and back
    fast = predict(model, ex, tok.pad_token_id, batch_size=4)
    assert model.training
    model.eval()
    with torch.no_grad():
        ref = [model(**batch_inputs([(e.ids, e.type_ids)], tok.pad_token_id)) for e in ex]
    logits = np.array([lg[0].double().numpy() for lg, _ in ref])
    np.testing.assert_allclose(fast["logits"], logits, atol=1e-5)
    np.testing.assert_allclose(fast["probs"], torch.softmax(torch.from_numpy(logits), -1).numpy(), atol=1e-5)
    if energy == "none":
        assert np.isnan(fast["energy"]).all()
    else:
        np.testing.assert_allclose(fast["energy"], [float(e[0]) for _, e in ref], atol=1e-5)
    assert fast["labels"].tolist() == [e.label for e in ex]
    assert fast["logits"].dtype == np.float64


def test_evaluate_lm_equals_one_by_one(tmp_path):
    from textebm.models.lm import special_ids
    from textebm.lm.train import LMBatcher, evaluate_lm, lm_loss
    from textebm.models.load import load_lm

    model, tok, meta = load_lm(make_tiny_lm(tmp_path / "lm", seed=2))
    batcher = LMBatcher(special_ids(tok, meta), "causal", "l2r", 0.4)
    ids = [tok(sentence(i, n), add_special_tokens=False)["input_ids"] for i, n in enumerate([5, 2, 9, 4, 7])]
    m = evaluate_lm(model, batcher, ids, batch_size=2, seed=0, split="dev")
    with torch.no_grad():
        parts = [lm_loss(model, batcher([x])) for x in ids]
    nll, count = math.fsum(float(n) for n, _ in parts), sum(int(c) for _, c in parts)
    assert m["dev_tokens"] == count == sum(len(x) + 1 for x in ids)
    assert m["dev_nll_per_token"] == pytest.approx(nll / count, abs=1e-5)
    assert m["dev_perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-5)
