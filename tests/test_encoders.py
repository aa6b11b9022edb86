"""Every documented encoder family builds, loses its pooler and trains: BERT (minilm-l6), MPNet
(mpnet-base), ELECTRA and RoBERTa, each from a tiny config (hidden 32, 2 layers) saved as a
Hugging Face folder with a tokenizer.

A pooler left in the model gets no gradient (textebm pools itself), which breaks multi-process
(DDP) training; ELECTRA has no pooler and no `add_pooling_layer` argument, which used to crash
`classify train`."""

from __future__ import annotations

import json

import pytest
import torch

from textebm.cli import main

from conftest import _sentence

FAMILIES = ["bert", "mpnet", "electra", "roberta"]


def _config(family: str, vocab: int, pad: int):
    from transformers import BertConfig, ElectraConfig, MPNetConfig, RobertaConfig

    common = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, pad_token_id=pad)
    if family == "bert":
        return BertConfig(max_position_embeddings=64, type_vocab_size=2, **common)
    if family == "mpnet":  # positions start after the padding index, as in RoBERTa
        return MPNetConfig(max_position_embeddings=66, **common)
    if family == "electra":  # a discriminator with a smaller embedding, projected up
        return ElectraConfig(embedding_size=16, max_position_embeddings=64, type_vocab_size=2, **common)
    return RobertaConfig(max_position_embeddings=66, type_vocab_size=1, **common)


def _model(family: str, config):
    """Each family saved as the checkpoint it is distributed as: BERT and MPNet as bare encoders
    with a pooler, ELECTRA as a discriminator (`ElectraForPreTraining`), RoBERTa with its MLM head."""
    from transformers import BertModel, ElectraForPreTraining, MPNetModel, RobertaForMaskedLM

    cls = {"bert": BertModel, "mpnet": MPNetModel, "electra": ElectraForPreTraining, "roberta": RobertaForMaskedLM}
    torch.manual_seed(0)
    return cls[family](config)


@pytest.fixture(scope="module")
def encoders(classify_fixture, tmp_path_factory):
    """{family: folder} of tiny encoders sharing the fixture's WordPiece tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(classify_fixture / "encoder")
    root = tmp_path_factory.mktemp("encoders")
    out = {}
    for family in FAMILIES:
        folder = root / family
        _model(family, _config(family, len(tok), tok.pad_token_id)).save_pretrained(folder)
        tok.save_pretrained(folder)
        out[family] = folder
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_encoder_is_an_encoder_without_a_pooler(encoders, family):
    from textebm.models.load import ENCODER, folder_kind, load_encoder

    assert folder_kind(encoders[family]) == ENCODER
    enc, _ = load_encoder(encoders[family])
    pooler = getattr(enc, "pooler", None)
    assert pooler is None or not any(p.requires_grad for p in pooler.parameters())


@pytest.mark.parametrize("family", FAMILIES)
def test_every_trainable_parameter_learns(encoders, family):
    """A few steps of CE + scalar energy: every parameter that requires a gradient gets one (what
    DDP needs), and the loss falls."""
    from textebm.classify.data import batch_inputs
    from textebm.models.classifier import ClassifierSpec
    from textebm.models.load import build_classifier

    torch.manual_seed(0)
    model, tok = build_classifier(encoders[family], ClassifierSpec(labels=["negative", "positive"],
                                                                   energy="scalar", dropout=0.0))
    model.train()
    texts = ["great film", "dull plot", "a truly moving story", "the cast is awful and boring"] * 2
    labels = torch.tensor([1, 0, 1, 0] * 2)
    enc = tok(texts)
    inputs = batch_inputs([(ids, None) for ids in enc["input_ids"]], tok.pad_token_id)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(8):
        opt.zero_grad()
        logits, energy = model(**inputs)  # (B, 2), (B,)
        loss = torch.nn.functional.cross_entropy(logits, labels) + 0.01 * energy.pow(2).mean()
        loss.backward()
        if step == 0:
            no_grad = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
            assert not no_grad, f"{family}: parameters without a gradient: {no_grad}"
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] * 0.8, losses


@pytest.mark.parametrize("family", FAMILIES)
def test_classify_train_and_eval_on_each_encoder(encoders, family, classify_fixture, tmp_path):
    from textebm.classify.data import encode_examples
    from textebm.classify.predict import predict
    from textebm.models.load import load_classifier

    d = classify_fixture
    run = tmp_path / "run"
    assert main(["classify", "train", "--data", str(d / "data"), "--encoder", str(encoders[family]),
                 "--out", str(run), "--max-steps", "2", "--batch-size", "16", "--precision", "fp32",
                 "--eval-split", "", "--no-progress"]) == 0
    model, tok = load_classifier(run)
    assert not any(k.startswith("encoder.pooler.") for k in model.state_dict())
    rows = [{"text": _sentence(__import__("random").Random(i), "positive"), "label": "positive"} for i in range(5)]
    out = predict(model, encode_examples(tok, rows, model.spec.labels, 64), tok.pad_token_id, 2)
    assert out["probs"].shape == (5, 2)
    spec = json.loads((run / "model" / "classifier.json").read_text())
    assert spec["labels"] == ["negative", "positive"]
