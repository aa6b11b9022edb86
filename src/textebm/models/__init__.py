"""Models and their folders.

- `load`: the one home of model loading, by what a folder holds (causal LM, encoder, classifier),
  with clean errors for a folder of the wrong kind;
- `classifier`: the encoder + classifier head + energy of paper a, its spec and its folder;
- `lm`, `lm_format`: an LM folder's textebm meta and special tokens, and the sequence layouts
  (causal, right-to-left, infill) that LM training, sampling and scoring share;
- `crf`: the BiLSTM-CRF tagger of paper e, its spec (`tagger.json`) and its folder;
- `trf`: eq. (3)'s TRF potential over the tagger's BiLSTM, its log-normalisers and length
  distribution; `noise_lm`: DNCE's LSTM noise LM (log q and sampling);
- `build`: small models from scratch; pretrained ones come from `textebm.assets`.
"""

from textebm.models.build import (
    SmallLMConfig,
    build_causal_lm,
    build_encoder,
    llama_ffn,
)

__all__ = ["SmallLMConfig", "build_causal_lm", "build_encoder", "llama_ffn"]
