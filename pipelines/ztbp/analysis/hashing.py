"""splitmix64's finaliser: a seeded, uniform 64-bit hash of integers (SHARDS' page sample, the streaming folds)."""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(values: np.ndarray, seed: int = 0) -> np.ndarray:
    """splitmix64's finaliser of (value + seed): a uniform 64-bit hash of each value; other seeds, other hashes."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + np.uint64(seed) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
