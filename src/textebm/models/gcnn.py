"""A gated convolutional language model (Dauphin et al. 2017), the second generator architecture
of Bakhtin et al. (2019, sec. 4.2: "Conv"), as a Hugging Face model type.

    x_0 = embed(tokens)
    x_l = x_{l-1} + A ⊙ σ(B),  [A; B] = causal_conv_k(norm(x_{l-1}))   (a gated linear unit)
    logits = norm(x_L) · embedᵀ                                           (tied output embedding)

The convolution sees the current token and the k−1 before it, so the receptive field after L
layers is L(k−1)+1 tokens; no attention, no positions. Registered with transformers' Auto classes
as `textebm-gcnn` when this module is imported (`textebm.models.load` does so), so
`save_pretrained`, `from_pretrained`, the training loop and textebm's sampler treat it like any
causal LM.

Padding: positions whose attention mask is 0 are zeroed at every layer's input, which is
exactly the zero padding a causal convolution sees at the start of a text; a left-padded batch
therefore gives each row the numbers it gets alone. The sampler's key-value cache
(`transformers.DynamicCache`) holds each layer's past (normalised, masked) inputs, and a step
convolves the last k−1 of them with the new one: the cached path equals the full recomputation.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

MODEL_TYPE = "textebm-gcnn"
# The output's cache field: `cache` from transformers 5.24 on, `past_key_values` before.
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class GatedConvConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, vocab_size: int = 8000, hidden_size: int = 256, num_hidden_layers: int = 4,
                 kernel_size: int = 4, dropout: float = 0.0, max_position_embeddings: int = 1024,
                 initializer_range: float = 0.02, rms_norm_eps: float = 1e-5, **kwargs):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.kernel_size, self.dropout, self.initializer_range = kernel_size, dropout, initializer_range
        self.max_position_embeddings = max_position_embeddings  # the longest text the sampler allows
        self.rms_norm_eps = rms_norm_eps
        kwargs.setdefault("tie_word_embeddings", False)  # the output layer reuses the embedding itself
        super().__init__(**kwargs)


class GatedConvBlock(nn.Module):
    def __init__(self, cfg: GatedConvConfig):
        super().__init__()
        self.k = cfg.kernel_size
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.conv = nn.Conv1d(cfg.hidden_size, 2 * cfg.hidden_size, cfg.kernel_size)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache, layer: int) -> torch.Tensor:
        h = self.norm(x) * mask[..., None].to(x.dtype)  # (B, T, D), pads zeroed
        t = h.shape[1]
        if cache is not None:
            past, _ = cache.update(h[:, None], h[:, None], layer)  # (B, 1, T_all, D): every input so far
            h = past[:, 0, -(t + self.k - 1):]  # (B, <= T + k - 1, D)
        h = F.pad(h, (0, 0, t + self.k - 1 - h.shape[1], 0))  # (B, T + k - 1, D) zeros before the start
        a, b = self.conv(h.transpose(1, 2)).transpose(1, 2).chunk(2, dim=-1)  # (B, T, D) each
        return x + self.drop(a * torch.sigmoid(b))


class GatedConvForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = GatedConvConfig
    base_model_prefix = "gcnn"

    def __init__(self, config: GatedConvConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(GatedConvBlock(config) for _ in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Embedding, nn.Conv1d)):
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Conv1d) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache=None, use_cache: bool | None = None,
                logits_to_keep: int = 0, labels: torch.Tensor | None = None, **kwargs) -> CausalLMOutputWithPast:
        """Logits (B, T, V) (the last `logits_to_keep` positions when > 0). `position_ids` are
        accepted and ignored (a convolution needs none). With `cache` (a `DynamicCache`), `attention_mask`
        may cover the past and the new tokens (B, T_all); its last T columns are used."""
        t = input_ids.shape[1]
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask[:, -t:]  # (B, T)
        cache = (cache if cache is not None else kwargs.get("past_key_values")) if use_cache is not False else None
        x = self.embed_tokens(input_ids)  # (B, T, D)
        for i, block in enumerate(self.layers):
            x = block(x, mask, cache, i)
        h = self.norm(x)  # (B, T, D)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        logits = h @ self.embed_tokens.weight.T  # (B, T', V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache})


def build_gcnn(vocab_size: int, width: int, layers: int, kernel: int, context: int, pad: int, bos: int,
               eos: int, dropout: float = 0.0, seed: int = 0) -> GatedConvForCausalLM:
    """A freshly initialised gated convolutional LM; weights drawn from a generator seeded with
    `seed` (the global RNG state is left as it was)."""
    config = GatedConvConfig(vocab_size=vocab_size, hidden_size=width, num_hidden_layers=layers,
                             kernel_size=kernel, dropout=dropout, max_position_embeddings=context,
                             pad_token_id=pad, bos_token_id=bos, eos_token_id=eos)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GatedConvForCausalLM(config)
    model.generation_config.pad_token_id = pad
    return model


AutoConfig.register(MODEL_TYPE, GatedConvConfig, exist_ok=True)
AutoModelForCausalLM.register(GatedConvConfig, GatedConvForCausalLM, exist_ok=True)
