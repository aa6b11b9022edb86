"""JEM's negative samples for an image EBM: persistent SGLD chains from a replay buffer, with a
divergence check.

    sampler = ChainSampler(shape=(8, 8), size=10000, reinit=0.05, steps=20, step_size=1.0,
                           noise_std=0.01, max_energy=1e4, seed=0)
    x = sampler.sample(lambda x: -model.potential(x), n=64, step=at.step)   # (64, 8, 8), detached
    sampler.check(u_data, u_samples, step)     # TrainingDiverged when |u| explodes or is not finite

Each call draws n chain starts (`ReplayBuffer.draw`: a stored sample, or fresh uniform noise in
[−1, 1] with probability `reinit`), runs `steps` SGLD steps on the energy in JEM's form
x ← x − α ∇E(x) + σ ε, clamped to [−1, 1] (`textebm.langevin.sgld`), and writes the chain ends
back. The buffer and the sampler's generator are its state (`state()` / `load_state()`), so a
resumed run draws the same chains as an uninterrupted one.

A diverging EBM shows first in its energies: SGLD's chains run off along an ever steeper
gradient and |u| grows by orders of magnitude within a few steps, while the clamp keeps the
samples themselves finite, so the loss can stay finite for a while. `check` stops the run when a
sample, or u of the data or of the samples, is not finite or exceeds `max_energy` in magnitude;
nothing non-finite is ever written into the buffer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from textebm.errors import TrainingDiverged
from textebm.langevin import ReplayBuffer, sgld
from textebm.seeds import derive_seed

BOX = (-1.0, 1.0)  # images live in [-1, 1]


class ChainSampler:
    """Persistent SGLD chains for images of `shape` (see the module doc)."""

    def __init__(self, shape: tuple[int, int], size: int, reinit: float, steps: int, step_size: float,
                 noise_std: float, max_energy: float, seed: int):
        self.generator = torch.Generator().manual_seed(derive_seed(seed, "ssl-images", "sgld"))
        self.buffer = ReplayBuffer(size, tuple(shape), *BOX, reinit=reinit, generator=self.generator)
        self.steps, self.step_size, self.noise_std, self.max_energy = steps, step_size, noise_std, max_energy

    def sample(self, energy: Callable[[Tensor], Tensor], n: int, step: int, device=None) -> Tensor:
        """n SGLD samples (n, H, W) on `energy` (a callable (n, H, W) -> (n,)), detached; their
        chain ends replace their starts in the buffer."""
        x0, idx, _ = self.buffer.draw(n, self.generator)  # (n, H, W)
        gen = self.generator if device is None or torch.device(device).type == "cpu" else None
        x = sgld(energy, x0.to(device) if device is not None else x0, self.steps, self.step_size,
                 noise_std=self.noise_std, generator=gen, clamp=BOX)  # (n, H, W)
        if not torch.isfinite(x).all():
            raise TrainingDiverged(f"SGLD's samples are not finite at step {step + 1}: the EBM diverged; stopping")
        self.buffer.update(idx, x)
        return x

    def check(self, u_data: Tensor, u_samples: Tensor, step: int) -> None:
        """Stop the run (TrainingDiverged) when u of the data (B,) or of the samples (N,) is not
        finite or larger than `max_energy` in magnitude."""
        for what, u in (("the data", u_data), ("SGLD's samples", u_samples)):
            u = u.detach().float()
            if not torch.isfinite(u).all():
                raise TrainingDiverged(f"the EBM's energy of {what} is not finite at step {step + 1}: the EBM "
                                       "diverged; stopping")
            top = float(u.abs().max())
            if top > self.max_energy:
                raise TrainingDiverged(f"the EBM's energy of {what} reached {top:.3g} at step {step + 1}, past "
                                       f"--max-energy {self.max_energy:g}: the EBM diverged; stopping")

    def state(self) -> dict[str, Tensor]:
        return {"sgld_buffer": self.buffer.samples.clone(), "sgld_generator": self.generator.get_state()}

    def load_state(self, tensors: dict[str, Tensor]) -> None:
        self.buffer.samples = tensors["sgld_buffer"].to(self.buffer.dtype).clone()
        self.generator.set_state(tensors["sgld_generator"].to(torch.uint8))
