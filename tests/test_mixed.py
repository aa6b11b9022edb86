"""bf16 inference that keeps its promise (textebm.models.mixed, issue 33): products in bf16, the
residual stream, norms, softmax and output layer in fp32; the tolerance pinned on a tiny model of
the failing structure (many layers, a residual stream that grows)."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from textebm import precision as P
from textebm.lm.scoring import score_sequences
from textebm.models.mixed import MixedConv1d, MixedLinear, fp32_module_ids, mixed_precision, products_of


def tiny_llama(layers: int = 16, grow: float = 2.0, seed: int = 0):
    """A 16-layer Llama whose residual stream grows layer by layer (scaled output projections, a
    large embedding): the structure that made a whole-bf16 cast lose 0.056 nats a token."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.mul_(grow)
            layer.self_attn.o_proj.weight.mul_(grow)
        model.model.embed_tokens.weight.mul_(10)
    return model


@pytest.fixture(scope="module")
def llama_and_scores():
    model = tiny_llama()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(1, 256, (int(n),), generator=g).tolist() for n in torch.randint(8, 40, (24,), generator=g)]
    with torch.inference_mode():
        ref = score_sequences(model, seqs, 0)
    return model, seqs, ref


def _deviation(model, seqs, ref) -> tuple[float, float]:
    """(mean, max) |log p − fp32 log p| over every token, nats."""
    with torch.inference_mode():
        got = score_sequences(model, seqs, 0)
    d = [abs(a - b) for x, y in zip(got, ref) for a, b in zip(x, y)]
    return sum(d) / len(d), max(d)


def test_a_whole_bf16_cast_breaks_the_tolerance_on_this_model(llama_and_scores):
    """The control: the tiny model reproduces the failure the issue measured on SmolLM2."""
    model, seqs, ref = llama_and_scores
    mean, _ = _deviation(copy.deepcopy(model).to(torch.bfloat16), seqs, ref)
    assert mean > P.TOLERANCE["fpmath"]["mean_abs"]


def test_cast_products_keep_the_stream_in_fp32_and_beat_the_whole_cast(llama_and_scores):
    model, seqs, ref = llama_and_scores
    whole, _ = _deviation(copy.deepcopy(model).to(torch.bfloat16), seqs, ref)
    mixed = mixed_precision(copy.deepcopy(model), torch.bfloat16, "cast")
    mean, worst = _deviation(mixed, seqs, ref)
    assert mean < whole / 3  # the fp32 stream, norms and output layer remove most of the error
    assert mean <= P.TOLERANCE["cast"]["mean_abs"] and worst <= P.TOLERANCE["cast"]["max_abs"]


def test_fpmath_products_meet_the_bf16_tolerance(llama_and_scores):
    """The promise of `--precision bf16` where `auto` picks it (on a CPU without native bf16 torch
    runs these products in fp32: the bound holds trivially there, and is tested on bf16 CPUs)."""
    model, seqs, ref = llama_and_scores
    mean, worst = _deviation(mixed_precision(copy.deepcopy(model), torch.bfloat16, "fpmath"), seqs, ref)
    assert mean <= P.TOLERANCE["fpmath"]["mean_abs"] and worst <= P.TOLERANCE["fpmath"]["max_abs"]


def test_what_is_converted_and_what_stays_fp32():
    model = mixed_precision(tiny_llama(layers=2), torch.bfloat16, "cast")
    attn = model.model.layers[0].self_attn
    assert type(attn.q_proj) is MixedLinear and attn.q_proj.weight.dtype == torch.bfloat16
    assert type(model.model.layers[0].mlp.down_proj) is MixedLinear
    assert type(model.lm_head) is nn.Linear and model.lm_head.weight.dtype == torch.float32  # the output layer
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    assert model.model.norm.weight.dtype == torch.float32
    assert products_of(model) == "cast"
    keys = set(tiny_llama(layers=2).state_dict())
    assert set(model.state_dict()) == keys  # a converted model saves and loads under the same names
    fp = mixed_precision(tiny_llama(layers=2), torch.bfloat16, "fpmath")
    assert type(fp.lm_head) is MixedLinear and fp.lm_head.weight.dtype == torch.float32  # accurate: output too
    assert products_of(fp) == "fpmath" and products_of(tiny_llama(layers=1)) == "float32"


def test_the_residual_stream_and_norms_see_fp32(llama_and_scores):
    model = mixed_precision(copy.deepcopy(llama_and_scores[0]), torch.bfloat16, "cast")
    seen = []
    hooks = [layer.register_forward_hook(lambda m, a, out: seen.append(
        (out[0] if isinstance(out, tuple) else out).dtype)) for layer in model.model.layers]
    hooks.append(model.model.norm.register_forward_hook(lambda m, a, out: seen.append(a[0].dtype)))
    with torch.inference_mode():
        model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    for h in hooks:
        h.remove()
    assert seen and set(seen) == {torch.float32}


def test_heads_named_fp32_stay_plain():
    from textebm.models.classifier import ClassifierSpec, EBMClassifier
    from textebm.models.build import SmallLMConfig, build_encoder
    from textebm.tokenizer import train_tokenizer

    tok = train_tokenizer(["a b c d e f g"] * 4, vocab_size=40, kind="wordpiece")
    enc = build_encoder(SmallLMConfig(layers=1, width=32, heads=2, context=32), tok, seed=0)
    model = EBMClassifier(enc, ClassifierSpec(labels=["x", "y"], energy="scalar"))
    keep = fp32_module_ids(model, heads_only=True)
    assert id(model.cls) in keep and id(model.energy_head) in keep
    mixed_precision(model, torch.bfloat16, "cast")
    assert all(type(m) is nn.Linear and m.weight.dtype == torch.float32
               for m in model.cls.modules() if isinstance(m, nn.Linear))
    assert any(type(m) is MixedLinear for m in model.encoder.modules())


def test_mixed_layers_against_their_reference():
    torch.manual_seed(0)
    lin, x = nn.Linear(48, 40), torch.randn(3, 7, 48)
    ref_cast = F.linear(x.bfloat16(), lin.weight.bfloat16(), lin.bias.bfloat16()).float()
    plain = lin(x)
    cast = mixed_precision(copy.deepcopy(nn.Sequential(lin)), torch.bfloat16, "cast")[0]
    assert torch.equal(cast(x), ref_cast) and cast(x).dtype == torch.float32
    fpmath = mixed_precision(copy.deepcopy(nn.Sequential(lin)), torch.bfloat16, "fpmath")[0]
    torch.testing.assert_close(fpmath(x), plain, rtol=1e-5, atol=1e-5)
    assert P.torch.backends.mkldnn.matmul.fp32_precision != "bf16"  # restored after the product

    conv, xc = nn.Conv1d(16, 24, 3), torch.randn(2, 16, 9)
    c = mixed_precision(copy.deepcopy(nn.Sequential(conv)), torch.bfloat16, "cast")[0]
    assert type(c) is MixedConv1d
    ref = F.conv1d(xc.bfloat16(), conv.weight.bfloat16(), conv.bias.bfloat16()).float()
    assert torch.equal(c(xc), ref)

    from transformers.pytorch_utils import Conv1D

    hf, xh = Conv1D(20, 12), torch.randn(4, 5, 12)
    nn.init.normal_(hf.weight)
    h = mixed_precision(copy.deepcopy(nn.Sequential(hf)), torch.bfloat16, "cast")[0]
    assert type(h).__name__ == "MixedConv1D"
    ref = (xh.bfloat16().reshape(-1, 12) @ hf.weight.bfloat16() + hf.bias.bfloat16()).float().reshape(4, 5, 20)
    torch.testing.assert_close(h(xh), ref, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(h(xh), hf(xh), rtol=0.05, atol=0.05)


def test_fp32_leaves_the_model_and_a_bad_mode_is_refused():
    lin = nn.Sequential(nn.Linear(4, 4))
    assert type(mixed_precision(lin, torch.float32)[0]) is nn.Linear
    with pytest.raises(ValueError, match="products"):
        mixed_precision(nn.Sequential(nn.Linear(4, 4)), torch.bfloat16, "fast")


# ---------------------------------------------------------------- the inference precision's choice


def test_auto_inference_is_bf16_only_where_products_are_fp32_accurate(monkeypatch):
    monkeypatch.setattr(P, "bf16_products", lambda device: "fpmath")
    monkeypatch.setattr(P, "fpmath_probe", lambda: (2.1, 6e-7))
    c = P.resolve_precision("auto", "cpu", inference=True)
    assert c.precision == "bf16" and c.products == "fpmath" and "as accurate as fp32" in c.reason
    assert c.as_dict()["tolerance"]["max_abs"] == 0.1
    monkeypatch.setattr(P, "bf16_products", lambda device: "cast")
    c = P.resolve_precision("auto", "cpu", inference=True)
    assert c.precision == "fp32" and "8 bits" in c.reason and c.tolerance["max_abs"] == 0.0
    assert P.resolve_precision("auto", "cuda", inference=True).precision == "fp32"


def test_explicit_bf16_with_cast_products_warns_with_its_tolerance(monkeypatch, caplog):
    monkeypatch.setattr(P, "bf16_products", lambda device: "cast")
    with caplog.at_level(logging.WARNING, logger="textebm.precision"):
        c = P.resolve_precision("bf16", "cuda", inference=True)
    assert c.precision == "bf16" and c.products == "cast" and c.tolerance == P.TOLERANCE["cast"]
    assert "may move by up to" in caplog.text


def test_bf16_products_follow_the_probe(monkeypatch):
    monkeypatch.setattr(P, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setattr(P, "fpmath_probe", lambda: (2.1, 6e-7))
    assert P.bf16_products("cpu") == "fpmath"
    monkeypatch.setattr(P, "fpmath_probe", lambda: (2.1, 4e-3))  # a kernel that only rounds: not accurate
    assert P.bf16_products("cpu") == "cast"
    monkeypatch.setattr(P, "fpmath_probe", lambda: (1.1, 6e-7))  # accurate but not faster
    assert P.bf16_products("cpu") == "cast"
    monkeypatch.setattr(P, "cpu_flags", lambda: {"avx2"})
    assert P.bf16_products("cpu") == "cast" and P.bf16_products("cuda") == "cast"


def test_fpmath_probe_measures_this_cpu():
    speedup, error = P.fpmath_probe()
    assert speedup > 0 and 0 <= error < 0.05  # a real measurement: at worst bf16 rounding (4e-3)
    if not ({"avx512_bf16", "amx_bf16"} & P.cpu_flags()):
        assert error < 1e-5  # torch ignores the mode without native bf16: plain fp32


def test_without_torchs_fpmath_setting_bf16_is_cast_and_the_context_a_no_op(monkeypatch):
    """torch before 2.9 has no torch.backends.mkldnn.matmul: auto inference then runs fp32."""
    import types

    monkeypatch.setattr(P.torch.backends, "mkldnn", types.SimpleNamespace())
    monkeypatch.setattr(P, "cpu_flags", lambda: {"avx512_bf16"})
    assert P.bf16_products("cpu") == "cast"
    with P.reduced_fp32_matmul():
        pass


def test_a_training_precision_states_no_score_tolerance():
    c = P.PrecisionChoice("bf16", "auto", "cpu", "training", "AVX512")
    assert c.tolerance is None and c.as_dict()["tolerance"] is None
    assert P.PrecisionChoice("fp32", "auto", "cpu", "x", "AVX2").tolerance == P.TOLERANCE["fp32"]


def test_the_loader_converts_for_the_target_device_before_moving(monkeypatch):
    from textebm.models import load, mixed

    seen = []
    monkeypatch.setattr(mixed, "bf16_products", lambda device: seen.append(device) or "cast")
    model = load._place(tiny_llama(layers=1), torch.bfloat16, "cpu")
    assert seen == ["cpu"] and model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
