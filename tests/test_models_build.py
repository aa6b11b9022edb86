"""From-scratch Llama and BERT builders: shapes, special ids, KV cache, save/load, seeding."""

from __future__ import annotations

import pytest
import torch

from textebm.errors import TextebmError
from textebm.models import SmallLMConfig, build_causal_lm, build_encoder, llama_ffn
from textebm.tokenizer import train_tokenizer

TINY = SmallLMConfig(layers=2, width=32, heads=2, context=64)


@pytest.fixture(scope="module")
def tok():
    texts = [f"the {a} {b} sat on the {c}." for a in ("cat", "dog", "fox") for b in ("big", "small")
             for c in ("mat", "rug", "log")] * 5
    return train_tokenizer(texts, 290, "bpe")


def _ids(tok, *texts: str) -> torch.Tensor:
    """[bos] x [eos] rows cut to the shortest, so they stack without padding."""
    rows = [[tok.bos_token_id, *tok(t).input_ids, tok.eos_token_id] for t in texts]
    n = min(len(r) for r in rows)
    return torch.tensor([r[:n] for r in rows])  # (B, T)


def test_causal_lm_shapes_and_config(tok):
    lm = build_causal_lm(TINY, tok).eval()
    ids = _ids(tok, "the cat sat on the mat.", "the dog sat on the rug.")
    logits = lm(ids).logits
    assert logits.shape == (2, ids.shape[1], len(tok))
    c = lm.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.max_position_embeddings) == (2, 32, 2, 64)
    assert c.intermediate_size == llama_ffn(TINY) == 128  # 8/3 * 32 rounded up to 64
    assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    assert lm.lm_head.weight is lm.model.embed_tokens.weight
    assert llama_ffn(SmallLMConfig(width=256)) == 704 and llama_ffn(SmallLMConfig(ffn=100)) == 100


def test_causal_lm_kv_cache_matches_full_forward(tok):
    from transformers import DynamicCache

    from textebm.lm.generate import cache_arg

    lm = build_causal_lm(TINY, tok).eval()
    ids = _ids(tok, "the fox big sat on the log.")
    with torch.no_grad():
        full = lm(ids).logits  # (1, T, V)
        cache = DynamicCache(config=lm.config)  # filled in place, as textebm's sampler uses it
        steps = [lm(ids[:, :3], use_cache=True, **cache_arg(lm, cache)).logits]
        for t in range(3, ids.shape[1]):
            steps.append(lm(ids[:, t:t + 1], use_cache=True, **cache_arg(lm, cache)).logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    gen = lm.generate(ids[:, :2], max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert gen.shape[0] == 1 and 2 < gen.shape[1] <= 7


def test_causal_lm_save_load(tok, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = build_causal_lm(TINY, tok).eval()
    lm.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    lm2 = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    tok2 = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    ids = _ids(tok2, "the cat small sat on the rug.")
    with torch.no_grad():
        torch.testing.assert_close(lm2(ids).logits, lm(ids).logits, rtol=0, atol=0)
    assert lm2.lm_head.weight is lm2.model.embed_tokens.weight


def test_seeded_init_leaves_global_rng(tok):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_causal_lm(TINY, tok, seed=1)
    after = torch.rand(1)
    b = build_causal_lm(TINY, tok, seed=1)
    c = build_causal_lm(TINY, tok, seed=2)
    assert torch.equal(before, after)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_encoder_shapes_and_save_load(tok, tmp_path):
    from transformers import AutoModel

    enc = build_encoder(TINY, tok).eval()
    assert enc.config.intermediate_size == 128 and enc.config.pad_token_id == tok.pad_token_id
    ids = _ids(tok, "the cat sat on the mat.", "the dog sat on the rug.")
    mask = torch.ones_like(ids)
    with torch.no_grad():
        out = enc(input_ids=ids, attention_mask=mask)
    assert out.last_hidden_state.shape == (2, ids.shape[1], 32) and out.pooler_output.shape == (2, 32)
    enc.save_pretrained(tmp_path)
    enc2 = AutoModel.from_pretrained(tmp_path, local_files_only=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(enc2(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   out.last_hidden_state, rtol=0, atol=0)


def test_config_validation():
    with pytest.raises(TextebmError, match="divisible"):
        SmallLMConfig(width=30, heads=4)
    with pytest.raises(TextebmError, match="at least 1"):
        SmallLMConfig(layers=0)
    with pytest.raises(TextebmError, match="dropout"):
        SmallLMConfig(dropout=1.5)
    assert SmallLMConfig.from_dict({"layers": 2, "width": 64}) == SmallLMConfig(layers=2, width=64)
    with pytest.raises(TextebmError, match="unknown model setting.*hidden"):
        SmallLMConfig.from_dict({"hidden": 64})
