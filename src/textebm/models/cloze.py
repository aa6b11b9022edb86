"""Cloze models of Clark et al. (2020): Electric, ELECTRA-TT, a masked LM and the two-tower model.

    TwoTower    q(x_t | x_\\t) = softmax(W [h_fwd(t−1); h_bwd(t+1)])  (sec. 2.4; Baevski et al. 2019):
                a left-to-right and a right-to-left causal transformer (Llama blocks) over the
                sequence; position t is predicted from the forward state of t−1 and the backward
                state of t+1, so q never sees the token it predicts.
    ClozeModel  one of the four objectives around a bidirectional encoder (BERT-like; MiniLM or
                from scratch):
                  electric  E(x)_t = w^T h(x)_t + b           per-token energy   (sec. 2.1)
                  electra   s_t = w^T h(x)_t + b               logit of "replaced" (sec. 2.5)
                  mlm       BERT's masked-LM head, tied to the input embeddings
                  twotower  no encoder: a TwoTower of its own, trained by maximum likelihood
                electric and electra carry a small TwoTower as their noise model, whose token
                embeddings are the encoder's (projected to its width): appendix A's weight sharing.

Every sequence is framed as [start] x [end] (the encoder's [CLS] / [SEP], or <s> / </s> of a
textebm tokenizer); the framing tokens are never predicted, replaced or scored.

Saved as a folder: the encoder's HF config.json (absent for twotower), the tokenizer,
`model.safetensors` (the whole module) and `cloze.json` (`ClozeSpec`). `textebm.models.load.load_cloze`
reads it back after checking what the folder holds.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from textebm import specs
from textebm.energy import fp32_linear
from textebm.checkpoint import save_weights
from textebm.errors import InputError, TextebmError
from textebm.io import write_json
from textebm.models.kinds import ModelKind

SPEC_FILE = "cloze.json"
KIND = ModelKind("cloze", SPEC_FILE, "a textebm cloze model",
                 "a cloze model trained with `textebm cloze train` (RUN or RUN/model)")
OBJECTIVES = ("electric", "electra", "mlm", "twotower")

log = logging.getLogger(__name__)


@dataclass
class TowerShape:
    """Shape of each of the two causal towers."""

    layers: int
    width: int
    heads: int
    ffn: int


@dataclass
class ClozeSpec:
    objective: str  # electric | electra | mlm | twotower
    vocab_size: int
    start_id: int  # [CLS] / <s>
    end_id: int  # [SEP] / </s>
    pad_id: int
    mask_id: int | None  # [MASK] (mlm)
    tower: dict | None  # TowerShape as a dict: the noise model (electric, electra) or the model (twotower)
    embedding_dim: int  # token-embedding width (the encoder's hidden size; the towers' for twotower)
    mask_fraction: float = 0.15  # k = ceil(fraction · n) positions replaced (or masked) per sequence
    max_len: int = 128  # tokens per text, framing included
    context: int = 512  # longest sequence the towers take (RoPE range)


def spec_from_dict(raw, path: str | Path) -> ClozeSpec:
    """A `ClozeSpec` from parsed `cloze.json`; InputError naming the file and the field."""
    spec = specs.spec_from_dict(ClozeSpec, raw, path)
    if spec.objective not in OBJECTIVES:
        raise InputError(path, f"'objective' must be one of {', '.join(OBJECTIVES)}, got {spec.objective!r}")
    if spec.objective != "mlm" and spec.tower is None:
        raise InputError(path, f"'tower' is needed for objective {spec.objective}")
    if spec.objective == "mlm" and spec.mask_id is None:
        raise InputError(path, "'mask_id' is needed for objective mlm")
    if not (isinstance(spec.mask_fraction, (int, float)) and 0 < spec.mask_fraction < 1):
        raise InputError(path, f"'mask_fraction' must be in (0, 1), got {spec.mask_fraction!r}")
    if spec.tower is not None:
        try:
            TowerShape(**spec.tower)
        except TypeError as e:
            raise InputError(path, f"'tower': {e}") from None
    return spec


def scaled_tower(width: int, ffn: int, heads: int, layers: int, scale: float) -> TowerShape:
    """Each tower `scale` times a transformer of this shape in width, feed-forward and heads (appendix
    A: 1/4 for the noise model; the TwoTower baseline: 2/3), the width a multiple of the heads and
    each head's size even (rotary positions need it)."""
    h = max(1, round(heads * scale))
    head_dim = max(8, 2 * round(width * scale / h / 2))
    tower = TowerShape(layers=layers, width=h * head_dim, heads=h, ffn=max(8, round(ffn * scale)))
    asked = width * scale
    if tower.width > 2 * asked:  # the smallest tower (one head of width 8) is far from what was asked
        raise ValueError(f"{scale} x a transformer of width {width} ({heads} heads) asks for a tower of width "
                         f"{asked:.3g}, below the smallest one (one head of width 8): it would be {tower.width / asked:.1f}x "
                         f"the size asked; use a scale of at least {4 / width:.3g}")
    if tower.width != round(asked) or tower.heads != heads * scale:
        log.warning("tower of %s x (width %d, %d heads, feed-forward %d): width %d, %d head(s), feed-forward %d "
                    "(rounded to whole heads of even width >= 8)", scale, width, heads, ffn, tower.width, tower.heads,
                    tower.ffn)
    return tower


class TwoTower(nn.Module):
    """q(x_t | x_\\t) from two causal transformers. With `embedding` (the encoder's nn.Embedding)
    the token embeddings are shared and projected to the towers' width; else its own."""

    def __init__(self, shape: TowerShape, vocab_size: int, context: int, embedding: nn.Embedding | None = None):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel

        self.shape = shape
        if embedding is None:
            embedding = nn.Embedding(vocab_size, shape.width)
            nn.init.normal_(embedding.weight, std=0.02)
        self.embed = embedding
        dim = embedding.weight.shape[1]
        self.proj_in = nn.Linear(dim, shape.width) if dim != shape.width else nn.Identity()
        config = LlamaConfig(vocab_size=1, hidden_size=shape.width, intermediate_size=shape.ffn,
                             num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                             num_key_value_heads=shape.heads, max_position_embeddings=context,
                             rms_norm_eps=1e-5, initializer_range=0.02,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                             bos_token_id=None, eos_token_id=None, pad_token_id=None)
        self.fwd, self.bwd = LlamaModel(config), LlamaModel(config)
        for tower in (self.fwd, self.bwd):
            tower.embed_tokens = None  # fed embeddings; a (1, width) table would get no gradient
        self.proj_out = nn.Linear(2 * shape.width, dim)  # to the (tied) output embedding
        self.out_bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Logits of q(· | x_\\t) at every position (B, T, V); rows of the first and last real
        position (the framing tokens) and of padding are meaningless. Right padding."""
        b, t = input_ids.shape
        lengths = attention_mask.sum(1)  # (B,)
        pos = torch.arange(t, device=input_ids.device).expand(b, t)  # (B, T)
        rev = torch.where(pos < lengths[:, None], lengths[:, None] - 1 - pos, pos)  # (B, T) reversal in length
        x = self.proj_in(self.embed(input_ids))  # (B, T, w)
        h_f = self.fwd(inputs_embeds=x, attention_mask=attention_mask).last_hidden_state  # (B, T, w)
        x_r = torch.gather(x, 1, rev[..., None].expand_as(x))  # (B, T, w) each sequence reversed
        h_r = self.bwd(inputs_embeds=x_r, attention_mask=attention_mask).last_hidden_state  # (B, T, w)
        h_b = torch.gather(h_r, 1, rev[..., None].expand_as(h_r))  # (B, T, w) back in order: sees x_t..x_end
        zero = torch.zeros_like(h_f[:, :1])  # (B, 1, w)
        left = torch.cat([zero, h_f[:, :-1]], 1)  # (B, T, w) h_fwd(t-1)
        right = torch.cat([h_b[:, 1:], zero], 1)  # (B, T, w) h_bwd(t+1) (padding beyond the end)
        right = torch.where((pos + 1 < lengths[:, None])[..., None], right, torch.zeros_like(right))
        h = self.proj_out(torch.cat([left, right], -1))  # (B, T, D)
        return fp32_linear(h, self.embed.weight, self.out_bias)  # (B, T, V)


class MLMHead(nn.Module):
    """BERT's masked-LM head: dense, GELU, LayerNorm, then the tied output embedding plus a bias."""

    def __init__(self, embedding: nn.Embedding, eps: float = 1e-12):
        super().__init__()
        dim = embedding.weight.shape[1]
        self.dense, self.norm = nn.Linear(dim, dim), nn.LayerNorm(dim, eps=eps)
        self.embed = embedding
        self.bias = nn.Parameter(torch.zeros(embedding.weight.shape[0]))

    def forward(self, h: Tensor) -> Tensor:
        h = self.norm(nn.functional.gelu(self.dense(h)))  # (B, T, D)
        return fp32_linear(h, self.embed.weight, self.bias)  # (B, T, V)


class ClozeModel(nn.Module):
    FP32_MODULES = ("head",)  # energies / logits of "replaced": never rounded to bf16 (models/mixed.py)

    def __init__(self, encoder: nn.Module | None, spec: ClozeSpec):
        super().__init__()
        self.spec = spec
        self.encoder = encoder
        shape = TowerShape(**spec.tower) if spec.tower else None
        if spec.objective == "twotower":
            self.noise = TwoTower(shape, spec.vocab_size, spec.context)
        else:
            emb = encoder.get_input_embeddings()
            hidden = encoder.config.hidden_size
            if spec.objective == "mlm":
                self.mlm_head = MLMHead(emb, getattr(encoder.config, "layer_norm_eps", 1e-12))
            else:
                self.head = nn.Linear(hidden, 1)  # E(x)_t = w^T h_t + b (electric); s_t (electra)
                self.noise = TwoTower(shape, spec.vocab_size, spec.context, embedding=emb)

    def hidden(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)

    def token_scores(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """electric: energies E(x)_t; electra: logits s_t of "replaced".  (B, T) fp32."""
        h = self.hidden(input_ids, attention_mask)  # (B, T, H)
        return fp32_linear(h, self.head.weight, self.head.bias).squeeze(-1)  # (B, T)

    def mlm_logits(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.mlm_head(self.hidden(input_ids, attention_mask))  # (B, T, V)

    def noise_log_probs(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """log q(· | x_\\t) of the two-tower model at every position (B, T, V), in fp32, normalised
        over the vocabulary without the framing, padding and mask tokens (never data)."""
        logits = self.noise(input_ids, attention_mask).float()  # (B, T, V)
        logits = logits.masked_fill(self.special_tokens, float("-inf"))  # (B, T, V)
        return torch.log_softmax(logits, -1)

    @property
    def special_tokens(self) -> Tensor:
        """(V,) bool: the ids q never proposes."""
        s = self.spec
        ids = [i for i in (s.start_id, s.end_id, s.pad_id, s.mask_id) if i is not None and i < s.vocab_size]
        mask = torch.zeros(s.vocab_size, dtype=torch.bool, device=self.noise.out_bias.device)
        mask[ids] = True
        return mask


def frame_ids(tokenizer) -> tuple[int, int, int, int | None]:
    """(start, end, pad, mask) ids: [CLS] [SEP] of an encoder's tokenizer, else <s> </s>."""

    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.cls_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end
    if start is None or end is None:
        raise TextebmError("the tokenizer has neither [CLS]/[SEP] nor <s>/</s> tokens to frame a text with")
    return start, end, pad, tokenizer.mask_token_id


def real_positions(input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """(B, T) bool: the text's tokens, without the framing tokens and padding (right padding)."""
    lengths = attention_mask.sum(1, keepdim=True)  # (B, 1)
    pos = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # (1, T)
    return (pos >= 1) & (pos < lengths - 1)


def save_cloze(model: ClozeModel, tokenizer, path: str | Path) -> None:

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if model.encoder is not None:
        model.encoder.config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    save_weights(model, path / "model.safetensors")
    write_json(path / SPEC_FILE, dataclasses.asdict(model.spec))


__all__ = ["ClozeModel", "ClozeSpec", "TwoTower", "TowerShape", "MLMHead", "frame_ids", "real_positions",
           "save_cloze", "scaled_tower", "spec_from_dict", "OBJECTIVES", "SPEC_FILE"]
