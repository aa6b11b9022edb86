"""log P(x) under a causal LM against a hand computation, bucketing, perplexity."""

from __future__ import annotations

import json
import math

import pytest
import torch

from test_lm_sampling import make_tiny_lm, sentence
from textebm.errors import TextebmError
from textebm.models.load import load_lm
from textebm.lm.eval_command import LMScoreConfig, score_file
from textebm.lm.scoring import ScoreResult, perplexity_metrics, score_sequences, score_texts

TEXTS = [sentence(i, n) for i, n in enumerate([5, 1, 12, 3, 8, 0, 7])]  # one empty text: [bos] [eos]


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    root = tmp_path_factory.mktemp("score_lms")
    return {d: load_lm(make_tiny_lm(root / d, direction=d, seed=4)) for d in ("l2r", "r2l")}


def by_hand(model, tokenizer, text: str, reverse: bool) -> tuple[list[int], list[float]]:
    """Plain forward of [bos] x [eos]; log-softmax of the logits read off position by position."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
    seq = [tokenizer.bos_token_id, *(ids[::-1] if reverse else ids), tokenizer.eos_token_id]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq])).logits[0].double()  # (T, V)
    out = []
    for t in range(1, len(seq)):
        row = logits[t - 1]
        out.append(float(row[seq[t]] - torch.log(torch.exp(row).sum())))
    return seq[1:], out


@pytest.mark.parametrize("direction", ["l2r", "r2l"])
def test_scores_equal_a_hand_computation(lms, direction):
    model, tokenizer, meta = lms[direction]
    results = score_texts(model, tokenizer, meta, TEXTS, batch_size=3)
    for text, res in zip(TEXTS, results):
        ids, expected = by_hand(model, tokenizer, text, reverse=direction == "r2l")
        assert res.token_ids == ids and res.token_ids[-1] == tokenizer.eos_token_id
        assert res.num_tokens == len(text.split()) + 1
        assert res.token_logprobs == pytest.approx(expected, abs=1e-5)
        assert res.logprob == pytest.approx(sum(expected), abs=1e-4)


def test_bucketed_scoring_equals_unbucketed(lms):
    model, tokenizer, meta = lms["l2r"]
    bucketed = score_texts(model, tokenizer, meta, TEXTS, batch_size=2, bucket=True)
    plain = score_texts(model, tokenizer, meta, TEXTS, batch_size=2, bucket=False)
    alone = score_texts(model, tokenizer, meta, TEXTS, batch_size=1)
    for a, b, c in zip(bucketed, plain, alone):
        assert a.token_ids == b.token_ids == c.token_ids
        assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-5)
        assert a.token_logprobs == pytest.approx(c.token_logprobs, abs=1e-5)


def test_score_sequences_restores_input_order(lms):
    model, *_ = lms["l2r"]
    seqs = [[2, 10, 11, 3], [2, 3], [2, 12, 13, 14, 15, 3]]
    out = score_sequences(model, seqs, pad=0, batch_size=2)
    assert [len(x) for x in out] == [3, 1, 5]


def test_perplexity_by_hand():
    results = [ScoreResult(-3.0, [7, 3], [-1.0, -2.0]), ScoreResult(-6.0, [5, 6, 3], [-1.0, -2.0, -3.0])]
    m = perplexity_metrics(results, ["a b", "c d e"])
    assert m["tokens"] == 5 and m["words"] == (2 + 1) + (3 + 1)
    assert m["perplexity"] == pytest.approx(math.exp(9 / 5))
    assert m["word_perplexity"] == pytest.approx(math.exp(9 / 7))


def test_infill_models_are_refused(tmp_path):
    model, tokenizer, meta = load_lm(make_tiny_lm(tmp_path / "infill", objective="infill"))
    with pytest.raises(TextebmError, match="causal LM"):
        score_texts(model, tokenizer, meta, ["w1 w2"])


def test_score_file_reads_text_and_pairs(lms, tmp_path):
    folder = make_tiny_lm(tmp_path / "lm", seed=4)  # same weights as lms["l2r"]
    model, tokenizer, meta = lms["l2r"]
    (tmp_path / "in.txt").write_text("\n".join(TEXTS[:3]) + "\n", encoding="utf-8")
    rows = [json.loads(x) for x in score_file(LMScoreConfig(model=str(folder), input=str(tmp_path / "in.txt"),
                                                           out=str(tmp_path / "o.jsonl"), precision="fp32")
                                              ).read_text().splitlines()]
    expected = score_texts(model, tokenizer, meta, TEXTS[:3])
    assert [r["text"] for r in rows] == TEXTS[:3]
    for r, e in zip(rows, expected):
        assert r["logprob"] == pytest.approx(e.logprob, abs=1e-4) and r["num_tokens"] == e.num_tokens
        assert r["tokens"] == tokenizer.convert_ids_to_tokens(e.token_ids) and r["tokens"][-1] == "</s>"
        assert len(r["token_logprobs"]) == r["num_tokens"]

    (tmp_path / "pairs.jsonl").write_text(json.dumps({"id": "p", "text": TEXTS[0], "text_pair": TEXTS[2],
                                                      "label": "1"}) + "\n", encoding="utf-8")
    out = score_file(LMScoreConfig(model=str(folder), input=str(tmp_path / "pairs.jsonl"),
                                 out=str(tmp_path / "p.jsonl"), precision="fp32"))
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["id"] == "p" and row["label"] == "1"
    assert row["pair_logprob"] == pytest.approx(expected[2].logprob, abs=1e-4)
    assert row["logprob"] == pytest.approx(expected[0].logprob + expected[2].logprob, abs=1e-4)
    assert row["num_tokens"] == expected[0].num_tokens + expected[2].num_tokens


def test_next_token_logprobs_equal_a_slow_float64_reference():
    """Position t predicts token t+1: log softmax(logits[b, t])[ids[b, t+1]] worked out one by one
    in float64; 0 where the next token is outside the mask (padding, or a -100 label)."""
    from textebm.lm.scoring import next_token_logprobs

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=g) * 4  # (B, T, V)
    ids = torch.randint(0, 11, (3, 6), generator=g)  # (B, T)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    ids[2, 3] = -100  # a label that is not predicted, outside the mask
    fast = next_token_logprobs(logits.bfloat16(), ids, mask)  # fp32 whatever the logits' dtype
    assert fast.shape == (3, 5) and fast.dtype == torch.float32
    low = logits.bfloat16().double()
    for b in range(3):
        for t in range(5):
            if mask[b, t + 1]:
                z = low[b, t]
                ref = float(z[ids[b, t + 1]] - math.log(sum(math.exp(float(v)) for v in z)))
                assert float(fast[b, t]) == pytest.approx(ref, abs=1e-5)
            else:
                assert float(fast[b, t]) == 0.0
