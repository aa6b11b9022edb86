"""Models: from-scratch builders (`build`); pretrained ones come from `textebm.assets`."""

from textebm.models.build import SmallLMConfig, build_causal_lm, build_encoder, llama_ffn

__all__ = ["SmallLMConfig", "build_causal_lm", "build_encoder", "llama_ffn"]
