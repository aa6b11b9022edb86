"""Small transformers built from a config, for training from scratch on a CPU.

Both builders return stock Hugging Face models, so `save_pretrained`, `from_pretrained`,
`generate` and the KV cache work as for any pretrained one:

- `build_causal_lm`: a Llama decoder (the architecture of SmolLM2: RMSNorm, rotary positions,
  SwiGLU feed-forward, no biases) with tied input/output embeddings.
- `build_encoder`: a BERT encoder (learned positions, GELU, post-LayerNorm) with its pooler,
  shaped like MiniLM so code written for `minilm-l6` runs on it unchanged.

The vocabulary and the bos/eos/pad ids come from the tokenizer (`len(tokenizer)` rows).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from textebm.errors import TextebmError


@dataclass
class SmallLMConfig:
    """Shape of a from-scratch model. The defaults give about 3.2M parameters besides the embeddings."""

    layers: int = 4  # transformer blocks
    width: int = 256  # hidden size
    heads: int = 4  # attention heads; width must divide by it
    context: int = 256  # longest sequence (position embeddings for BERT, RoPE range for Llama)
    ffn: int | None = None  # feed-forward width; None: 8/3 * width rounded up to 64 for Llama's
    #                         SwiGLU, 4 * width for BERT's GELU (both 8 * width^2 weights)
    dropout: float = 0.0  # attention dropout (Llama), attention and hidden dropout (BERT)
    rope_theta: float = 10000.0  # Llama only
    init_std: float = 0.02  # normal init of all weight matrices

    def __post_init__(self) -> None:
        for name in ("layers", "width", "heads", "context"):
            if getattr(self, name) < 1:
                raise TextebmError(f"model {name} must be at least 1, got {getattr(self, name)}")
        if self.width % self.heads:
            raise TextebmError(f"model width {self.width} is not divisible by heads {self.heads}")
        if self.ffn is not None and self.ffn < 1:
            raise TextebmError(f"model ffn must be at least 1, got {self.ffn}")
        if not 0.0 <= self.dropout < 1.0:
            raise TextebmError(f"dropout must be in [0, 1), got {self.dropout}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "SmallLMConfig":
        """Build from a dict (e.g. a saved run config); an unknown key is an error, not ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TextebmError(f"unknown model setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)


def llama_ffn(cfg: SmallLMConfig) -> int:
    """Feed-forward width of the Llama builder."""
    return cfg.ffn or 64 * math.ceil(8 * cfg.width / 3 / 64)


def _special_ids(tokenizer) -> tuple[int | None, int | None, int | None]:
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    if eos is None:
        raise TextebmError("the tokenizer has no EOS token; train one with `textebm tokenizer train`")
    return (eos if bos is None else bos), eos, (eos if pad is None else pad)


def build_causal_lm(cfg: SmallLMConfig, tokenizer, seed: int = 0):
    """A freshly initialised `LlamaForCausalLM` sized by `cfg` for `tokenizer`'s vocabulary.

    Initialisation draws from its own generator seeded with `seed` (global RNG state is left as it
    was), so the same config, tokenizer and seed give the same weights.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    bos, eos, pad = _special_ids(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.width, intermediate_size=llama_ffn(cfg),
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.context, rms_norm_eps=1e-5, initializer_range=cfg.init_std,
        attention_dropout=cfg.dropout, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        bos_token_id=bos, eos_token_id=eos, pad_token_id=pad,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = pad
    return model


def build_encoder(cfg: SmallLMConfig, tokenizer, seed: int = 0):
    """A freshly initialised `BertModel` (with pooler) sized by `cfg` for `tokenizer`'s vocabulary."""
    import torch
    from transformers import BertConfig, BertModel

    _, _, pad = _special_ids(tokenizer)
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.width, intermediate_size=cfg.ffn or 4 * cfg.width,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, max_position_embeddings=cfg.context,
        hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
        initializer_range=cfg.init_std, type_vocab_size=2, pad_token_id=pad,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(config)
    return model
