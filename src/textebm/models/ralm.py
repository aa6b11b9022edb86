"""The residual LM baseline of Deng et al. (2020, sec. 4.1, eq. 6): RALM.

    log P_RALM(x_t | x_<t) = log P_LM(x_t | x_<t) + log P_phi(x_t | x_<t) + const

i.e. P_RALM = softmax(logits_LM + logits_phi) over the vocabulary, with P_LM a frozen causal LM
(the base) and phi a causal transformer trained by exact maximum likelihood of P_RALM (the token
cross-entropy of the summed logits; `lm train --residual-of BASE`).

`ResidualLM` behaves like a Hugging Face causal LM where textebm's LM code calls one: `forward`
takes (input_ids, attention_mask, position_ids, cache / past_key_values, use_cache,
logits_to_keep) and returns `.logits` (fp32, the sum), and `config` has the vocabulary and
`max_position_embeddings` (the smaller of the two models'). The sampler's key-value cache (one
`DynamicCache` built from `config`) is split into the base's layers and phi's on its first use:
each model sees a cache of its own layers, and `cache.batch_select_indices` on the whole selects
both, so `textebm.lm.generate.generate` runs unchanged with or without the cache.

The folder `lm train --residual-of` writes is phi's Hugging Face folder (with the base's
tokenizer and `textebm_lm.json`) plus `residual_lm.json`, which records the base's path and
content hash (`textebm.fingerprint.folder_sha256`): `textebm.models.load.load_lm` loads the pair
and refuses a base that is gone or changed.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from textebm import specs
from textebm.io import write_json
from textebm.models.kinds import ModelKind
from textebm.models.lm import cache_arg, save_lm

SPEC_FILE = "residual_lm.json"
KIND = ModelKind(name="residual-lm", marker=SPEC_FILE, noun="a textebm residual LM (RALM)",
                 needs="a residual LM (train one with `textebm lm train --residual-of BASE`)")


@dataclass(frozen=True)
class BaseRef:
    """`residual_lm.json`: where the frozen base LM of a RALM lives and what it held when phi was
    trained on it."""

    base: str  # absolute path of the base's model folder
    base_sha256: str  # textebm.fingerprint.folder_sha256 of that folder
    base_parameters: int  # the base's parameter count (frozen; phi's are the trainable ones)


def spec_from_dict(raw: dict, where) -> BaseRef:
    """The base recorded in the parsed `residual_lm.json` at `where` (InputError naming file and field)."""
    return specs.spec_from_dict(BaseRef, raw, where)


def _layers_view(layers: list):
    """A DynamicCache over some of another cache's layer objects (shared, not copied)."""
    from transformers import DynamicCache

    view = DynamicCache()
    view.layers = list(layers)
    return view


class ResidualLM(nn.Module):
    """P_RALM ∝ exp(logits_base + logits_phi): `base` frozen (no gradient, always in eval mode),
    `phi` trained. Both must share the vocabulary (the same logits width)."""

    def __init__(self, base: nn.Module, phi: nn.Module, base_ref: BaseRef | None = None):
        super().__init__()
        vb, vp = base.config.vocab_size, phi.config.vocab_size
        if vb != vp:
            raise ValueError(f"the base LM has {vb} output tokens and phi {vp}; a RALM needs one vocabulary")
        self.base, self.phi, self.base_ref = base, phi, base_ref
        base.requires_grad_(False)
        base.eval()
        self.config = copy.deepcopy(phi.config)  # phi's, but the context both models allow
        self.config.max_position_embeddings = min(base.config.max_position_embeddings,
                                                  phi.config.max_position_embeddings)
        self._n_base = base.config.num_hidden_layers

    def train(self, mode: bool = True) -> ResidualLM:
        super().train(mode)
        self.base.eval()  # frozen: no dropout, whatever the loop asks
        return self

    def _split_cache(self, cache):
        """(base's view, phi's view) of the sampler's cache, laid out on its first use."""
        from transformers import DynamicCache

        if getattr(cache, "_textebm_ralm_split", None) != self._n_base:
            if cache.get_seq_length() > 0:
                raise ValueError("a RALM needs a fresh cache (one it laid out itself)")
            cache.layers = (DynamicCache(config=self.base.config).layers
                            + DynamicCache(config=self.phi.config).layers)
            cache._textebm_ralm_split = self._n_base
        return _layers_view(cache.layers[:self._n_base]), _layers_view(cache.layers[self._n_base:])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache=None, use_cache: bool | None = None,
                logits_to_keep: int = 0, **kwargs):
        """Logits (B, T, V) in fp32 (the last `logits_to_keep` positions when > 0): base + phi.
        With `cache` (or `past_key_values`: a `DynamicCache`), `attention_mask` covers the past and
        the new tokens (B, T_all), as for any HF causal LM."""
        from transformers.modeling_outputs import CausalLMOutputWithPast

        cache = cache if cache is not None else kwargs.get("past_key_values")
        views = self._split_cache(cache) if cache is not None and use_cache is not False else (None, None)
        args = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
                "use_cache": use_cache, "logits_to_keep": logits_to_keep}
        with torch.no_grad():
            base_logits = self.base(**args, **cache_arg(self.base, views[0])).logits  # (B, T', V)
        phi_logits = self.phi(**args, **cache_arg(self.phi, views[1])).logits  # (B, T', V)
        logits = base_logits.float() + phi_logits.float()  # (B, T', V): log P_RALM up to a constant
        return CausalLMOutputWithPast(logits=logits)

    def parameter_counts(self) -> dict[str, int]:
        """phi's parameters (the trained ones) and the frozen base's."""
        return {"trainable_parameters": sum(p.numel() for p in self.phi.parameters()),
                "base_parameters": sum(p.numel() for p in self.base.parameters())}


def save_residual_lm(model: ResidualLM, tokenizer, meta, folder: str | Path) -> None:
    """Write phi's folder (safetensors, config.json, the base's tokenizer and `textebm_lm.json`)
    and `residual_lm.json` naming the base (callers write into a temporary folder)."""
    if model.base_ref is None:
        raise ValueError("a RALM is saved with the base it was trained on (base_ref)")
    save_lm(model.phi, tokenizer, meta, folder)
    write_json(Path(folder) / SPEC_FILE, dataclasses.asdict(model.base_ref))
