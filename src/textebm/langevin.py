"""Stochastic gradient Langevin dynamics (SGLD) on an energy, and JEM's replay buffer.

For a density p(x) ∝ exp(−E(x)) over x ∈ R^D, the Langevin chain

    x_{k+1} = x_k − (α/2) ∇_x E(x_k) + sqrt(α) ε_k,        ε_k ~ N(0, I)

leaves p invariant as α → 0 (Welling & Teh 2011; JEM, Grathwohl et al. 2020, eq. 11). `sgld` runs
it with `noise_std=None`. JEM's code (and paper e's [11], the inclusive NRF) use a separate step
size and noise scale, x_{k+1} = x_k − α ∇E(x_k) + σ ε_k (JEM: α = 1, σ = 0.01), a biased sampler
that mixes faster in practice; `sgld(..., noise_std=σ)` runs that form.

`ReplayBuffer` is JEM's persistent chains: each chain starts from a stored sample with probability
1 − reinit (JEM: 0.95), from fresh uniform noise otherwise, and its end is written back.

A pure function of an energy (a callable from a (N, ...) tensor to (N,) energies) and tensors: the
energy's parameters get no gradient from sampling, the result is detached.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor


def sgld(energy: Callable[[Tensor], Tensor], x0: Tensor, steps: int, step_size: float,
         noise_std: float | None = None, generator: torch.Generator | None = None,
         clamp: tuple[float, float] | None = None) -> Tensor:
    """`steps` SGLD steps from x0 (N, ...) on `energy`; returns the last samples (N, ...), detached.

    noise_std None: x − (α/2)∇E + sqrt(α) ε (the Langevin discretisation, α = step_size);
    noise_std σ: x − α∇E + σ ε (JEM's form). clamp: optional (low, high) applied after each step
    (images in a box). generator: for the noise (same seed, same chain on CPU)."""
    if steps < 0 or step_size <= 0 or (noise_std is not None and noise_std < 0):
        raise ValueError(f"need steps >= 0, step_size > 0 and noise_std >= 0, got {steps}, {step_size}, {noise_std}")
    drift = step_size / 2 if noise_std is None else step_size
    scale = math.sqrt(step_size) if noise_std is None else noise_std
    x = x0.detach().clone()  # (N, ...)
    for _ in range(steps):
        x.requires_grad_(True)
        with torch.enable_grad():
            e = energy(x)  # (N,)
            (grad,) = torch.autograd.grad(e.sum(), x)  # (N, ...): rows are independent
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)  # (N, ...)
        x = (x.detach() - drift * grad + scale * noise)  # (N, ...)
        if clamp is not None:
            x = x.clamp(*clamp)
    return x.detach()


class ReplayBuffer:
    """A store of `size` samples of shape `shape`, first uniform in [low, high] (JEM's buffer)."""

    def __init__(self, size: int, shape: tuple[int, ...], low: float = -1.0, high: float = 1.0,
                 reinit: float = 0.05, generator: torch.Generator | None = None, dtype=torch.float32):
        if size < 1 or not 0.0 <= reinit <= 1.0 or not low < high:
            raise ValueError(f"need size >= 1, 0 <= reinit <= 1 and low < high, got {size}, {reinit}, {low}, {high}")
        self.shape, self.low, self.high, self.reinit, self.dtype = tuple(shape), low, high, reinit, dtype
        self.samples = self._uniform(size, generator)  # (size, *shape)

    def _uniform(self, n: int, generator: torch.Generator | None) -> Tensor:
        u = torch.rand((n, *self.shape), generator=generator, dtype=self.dtype)  # (n, *shape)
        return self.low + (self.high - self.low) * u

    def __len__(self) -> int:
        return self.samples.shape[0]

    def draw(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """n chain starts: (x0 (n, *shape), their buffer indices (n,), fresh (n,) bool: which ones
        are new uniform noise rather than stored samples)."""
        idx = torch.randint(len(self), (n,), generator=generator)  # (n,)
        fresh = torch.rand(n, generator=generator) < self.reinit  # (n,)
        x0 = torch.where(fresh.view(-1, *([1] * len(self.shape))), self._uniform(n, generator), self.samples[idx])
        return x0, idx, fresh

    def update(self, idx: Tensor, x: Tensor) -> None:
        """Write chain ends x (n, *shape) back at buffer indices idx (n,)."""
        self.samples[idx] = x.detach().to(self.samples.dtype).cpu()
