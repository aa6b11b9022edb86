"""bf16 inference that keeps its promise: the matrix products in bf16, everything else in fp32.

Casting a whole model to bf16 (`model.to(torch.bfloat16)`) rounds the residual stream, the norms'
statistics, the softmax and the logits to 8 significant bits. On a 30-layer LM that moved token
log-probabilities by 0.056 nats on average and by 7.3 nats on one token against fp32 (issue 33).
`mixed_precision(model, torch.bfloat16)` instead converts, in place, only the layers whose cost is
a matrix product (`nn.Linear`, `nn.Conv1d`, transformers' GPT-2 `Conv1D`) to run their product in
bf16, with its input rounded to bf16 and its output returned to the dtype the input came in
(fp32), so that

- the residual stream, layer and RMS norms, attention's softmax, activations and the embeddings
  stay in fp32 (every op outside the converted layers sees fp32 tensors: no dtype mismatch in any
  model code, whoever calls which submodule);
- the output layer stays fp32: the model's output embeddings (`get_output_embeddings()`, tied or
  not), any layer whose weight is shared with an embedding, and the layers a textebm model names in
  `FP32_MODULES` (energy, class and tag heads), so that logits and energies are never rounded to
  bf16 (a logit of 20 would carry an error of up to 0.06 nats);
- what bf16 buys on a CPU with native bf16 is kept where it comes from: the products of the
  hidden layers.

Per-module dtypes were chosen over `torch.autocast` after measuring both (docs/performance.md,
"Precision"): autocast re-casts fp32 weights at every call unless one context spans the whole
job, and whether it rounds a given op depends on how the caller reaches the model (textebm's
scorers call an LM's body and head separately). A converted model is for inference: its converted
weights are bf16 and do not train.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from textebm.precision import bf16_products, reduced_fp32_matmul

LOW_PRECISION = (torch.bfloat16, torch.float16)
PRODUCTS = ("fpmath", "cast")


class _Mixed:
    """The forward of a layer whose product runs in reduced precision; its output comes back in the
    input's dtype. Two ways (`PRODUCTS`): "cast" holds the weight in bf16 (or fp16) and rounds the
    input to it; "fpmath" keeps fp32 weights and lets oneDNN compute the fp32 product with bf16
    arithmetic (`textebm.precision.reduced_fp32_matmul`). Mixed into the layer's own class, so its
    attributes and state-dict keys stay the layer's."""

    product = "cast"

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # the layer's own shapes
        if self.product == "fpmath":
            with reduced_fp32_matmul():
                return super().forward(x)
        return super().forward(x.to(self.weight.dtype)).to(x.dtype)


class MixedLinear(_Mixed, nn.Linear):
    """nn.Linear with its product in reduced precision (`_Mixed`)."""


class MixedConv1d(_Mixed, nn.Conv1d):
    """nn.Conv1d with its product in reduced precision (`_Mixed`)."""


@functools.lru_cache(maxsize=1)
def _hf_conv1d() -> tuple[type, type]:
    """(transformers' GPT-2 `Conv1D`, its reduced-precision class); imported only when met."""
    from transformers.pytorch_utils import Conv1D

    return Conv1D, type("MixedConv1D", (_Mixed, Conv1D), {"__doc__": "GPT-2's Conv1D with a reduced product."})


def fp32_module_ids(model: nn.Module, heads_only: bool = False) -> set[int]:
    """ids of the modules that stay fp32: the output embeddings, layers sharing a weight with an
    embedding, and those named by any submodule's `FP32_MODULES` (relative names; only these with
    `heads_only`)."""
    keep: set[int] = set()
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        for name in getattr(module, "FP32_MODULES", ()):
            sub = getattr(module, name, None)  # a head the model was built without is skipped
            if isinstance(sub, nn.Module):
                keep.update(id(m) for m in sub.modules())
        if heads_only:
            continue
        get_out = getattr(module, "get_output_embeddings", None)
        if callable(get_out):
            out = get_out()
            if isinstance(out, nn.Module):
                keep.add(id(out))
        weight = getattr(module, "weight", None)
        if weight is not None and id(weight) in embedding_weights and not isinstance(module, nn.Embedding):
            keep.add(id(module))
    return keep


def _mixed_class(module: nn.Module) -> type | None:
    """The reduced-precision class of a layer whose cost is a matrix product, else None."""
    if type(module) is nn.Linear:
        return MixedLinear
    if type(module) is nn.Conv1d:
        return MixedConv1d
    if type(module).__name__ == "Conv1D" and type(module) is _hf_conv1d()[0]:
        return _hf_conv1d()[1]
    return None


def mixed_precision(model: nn.Module, dtype: torch.dtype, products: str = "", device: str = "") -> nn.Module:
    """`model` with its matrix-product layers converted in place to compute in `dtype` (bf16 or
    fp16) and everything else in fp32 (module doc). `products`: "fpmath" or "cast" (see
    `MixedLinear`); empty: `textebm.precision.bf16_products` for `device` (the device type the
    model will run on; default: where its weights are now; fpmath only for bf16). fp32 leaves the
    layers as they are (the model made fp32). Returns the model."""
    if dtype not in LOW_PRECISION:
        return model.float() if dtype == torch.float32 else model
    model.float()  # every weight fp32 first: a model loaded in bf16 gets its fp32 copy back
    if not products:
        device = device or next(model.parameters()).device.type
        products = bf16_products(device) if dtype == torch.bfloat16 else "cast"
    if products not in PRODUCTS:
        raise ValueError(f"products must be one of {PRODUCTS}, got {products!r}")
    # "cast" rounds weights and inputs to 8 bits: the output layer and heads stay fp32. "fpmath" is
    # as accurate as fp32 (bf16_products checked it), so the output layer takes it too; the heads
    # are cheap and stay plain.
    keep = fp32_module_ids(model) if products == "cast" else fp32_module_ids(model, heads_only=True)
    for module in model.modules():
        if id(module) in keep:
            continue
        mixed = _mixed_class(module)
        if mixed is None:
            continue
        module.__class__ = mixed  # same attributes and state-dict keys; only forward differs
        module.product = products
        if products == "cast":
            module.weight.data = module.weight.data.to(dtype)
            if module.bias is not None:
                module.bias.data = module.bias.data.to(dtype)
    return model


def products_of(model: nn.Module) -> str:
    """How `model`'s products run: "fpmath" or "cast" where `mixed_precision` converted it, else
    the dtype of its first floating parameter ("float32", "bfloat16", ...)."""
    for m in model.modules():
        if m.__dict__.get("product"):
            return m.__dict__["product"]
    dt = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return str(dt).removeprefix("torch.")
