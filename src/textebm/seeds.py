"""Seeds derived from named parts, so a sample depends on what it is, not on its batch or on a resume."""

from __future__ import annotations

import hashlib
import random


def derive_seed(*parts) -> int:
    """A 63-bit seed from any parts, e.g. (seed, example, sample, field, purpose): stable across runs,
    machines and batchings, for a sequence's own `torch.Generator`."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def seeded_sample(n: int, k: int, *parts) -> list[int]:
    """k of the indices 0..n-1, drawn without replacement by a generator seeded from `parts`
    (`derive_seed`), in increasing order: a subset that keeps its items' order."""
    return sorted(random.Random(derive_seed(*parts)).sample(range(n), k))
