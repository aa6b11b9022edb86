"""The small convolutional network of paper e's image experiments (Song & Ou 2021, sec. 3.2-3.3),
its spec and its folder.

    images x (B, H, W) in [-1, 1] -> 3 convolutions (SiLU; the 2nd and 3rd stride 2) -> flatten
    -> linear -> SiLU -> h(x) (B, hidden) -> the head, a linear layer in fp32: (B, outputs)

One body h(x) for the three methods; the head decides what the network is:

- `head="classifier"`, outputs = K classes: logits Ψ(x) (B, K). Supervised training reads them as
  softmax(W h(x)); joint training as u(x, y) = Ψ(x)[y], whose marginal is
  u(x) = logsumexp_y Ψ(x)[y] (`losses/ebm.py`).
- `head="energy"`, outputs = 1: the pre-training EBM's potential u(x) = wᵀh(x) (+ a bias). Its
  body initialises a classifier for fine-tuning (`classifier_from_ebm`: w dropped, a new W).

No normalisation layers (batch norm makes an EBM's energy depend on the batch; JEM leaves it
out), and SiLU rather than ReLU, so the energy is smooth in x for Langevin dynamics.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from textebm import specs
from textebm.energy import fp32_linear
from textebm.errors import InputError
from textebm.models.kinds import ModelKind

SPEC_FILE = "convnet.json"
KIND = ModelKind("image-net", SPEC_FILE, "a textebm image network",
                 "an image network trained with `textebm ssl-images train` or `ssl-images pretrain` "
                 "(RUN or RUN/model)")
HEADS = ("classifier", "energy")


@dataclass
class ConvNetSpec:
    """What `convnet.json` records of an image network."""

    height: int  # image height in pixels
    width: int  # image width in pixels
    outputs: int  # K classes (head "classifier") or 1 (head "energy")
    head: str = "classifier"  # classifier: logits Ψ(x); energy: u(x) = wᵀh(x)
    channels: int = 32  # channels of the first convolution (the other two have twice as many)
    hidden: int = 128  # size of h(x)
    classes: list[str] = dataclasses.field(default_factory=list)  # class names (head "classifier")


def spec_from_dict(raw: dict, where) -> ConvNetSpec:
    """A `ConvNetSpec` from the parsed `convnet.json` at `where` (InputError naming file and field)."""
    spec = specs.spec_from_dict(ConvNetSpec, raw, where)
    for name in ("height", "width", "outputs", "channels", "hidden"):
        if getattr(spec, name) < 1:
            raise InputError(where, f"'{name}' must be at least 1, got {getattr(spec, name)}")
    if spec.head not in HEADS:
        raise InputError(where, f"'head' must be one of {', '.join(HEADS)}, got {spec.head!r}")
    if spec.head == "energy" and spec.outputs != 1:
        raise InputError(where, f"an energy head has 1 output, got 'outputs' {spec.outputs}")
    if spec.head == "classifier" and len(spec.classes) != spec.outputs:
        raise InputError(where, f"'classes' names {len(spec.classes)} classes, 'outputs' is {spec.outputs}")
    return spec


def _size_after(n: int) -> int:
    """Pixels along one side after the two stride-2 convolutions (kernel 3, padding 1)."""
    for _ in range(2):
        n = (n - 1) // 2 + 1
    return n


class ConvNet(nn.Module):
    """Images (B, H, W) in; h(x) (`features`) and the head's outputs (B, outputs) in fp32 out."""
    FP32_MODULES = ("head",)  # logits and energies stay fp32 (models/mixed.py)

    def __init__(self, spec: ConvNetSpec):
        super().__init__()
        self.spec = spec
        c = spec.channels
        self.body = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1), nn.SiLU(),
            nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1), nn.SiLU(),
            nn.Flatten(),
            nn.Linear(2 * c * _size_after(spec.height) * _size_after(spec.width), spec.hidden), nn.SiLU(),
        )
        self.head = nn.Linear(spec.hidden, spec.outputs)

    def features(self, x: Tensor) -> Tensor:
        """h(x) (B, hidden) of images x (B, H, W)."""
        return self.body(x.unsqueeze(1))  # (B, 1, H, W) -> (B, hidden)

    def forward(self, x: Tensor) -> Tensor:
        """The head's outputs (B, outputs) in fp32 or better: logits Ψ(x), or u(x) as (B, 1)."""
        return fp32_linear(self.features(x), self.head.weight, self.head.bias)  # (B, outputs)

    def potential(self, x: Tensor) -> Tensor:
        """u(x) (B,): wᵀh(x) for an energy head, logsumexp_y Ψ(x)[y] for a classifier (the joint
        model's marginal); the energy is −u(x)."""
        out = self(x)  # (B, outputs)
        return out[:, 0] if self.spec.head == "energy" else torch.logsumexp(out, -1)  # (B,)


def classifier_from_ebm(ebm: ConvNet, classes: list[str], generator: torch.Generator | None = None) -> ConvNet:
    """Sec. 3.2's fine-tuning start: a classifier whose body is `ebm`'s (copied), with a new
    output layer W (PyTorch's default initialisation, drawn from `generator`); w is dropped."""
    if ebm.spec.head != "energy":
        raise ValueError(f"classifier_from_ebm needs an energy head, got {ebm.spec.head!r}")
    spec = dataclasses.replace(ebm.spec, head="classifier", outputs=len(classes), classes=list(classes))
    net = ConvNet(spec)
    net.body.load_state_dict(ebm.body.state_dict())
    bound = 1 / spec.hidden ** 0.5  # nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    with torch.no_grad():
        net.head.weight.uniform_(-bound, bound, generator=generator)
        net.head.bias.uniform_(-bound, bound, generator=generator)
    return net


def save_convnet(model: ConvNet, path: str | Path) -> None:
    """model.safetensors and convnet.json (the spec) in `path`; `load_convnet` in models/load.py
    reads them back."""
    specs.save_with_spec(model, path, SPEC_FILE)
