"""SplitMix64's finaliser over numpy arrays: the bit mix behind every hash partitioning of
keys (the merge's buckets, the mirror check's key files). Every input bit moves every output
bit, so keys spread evenly over partitions however they are spaced."""

from __future__ import annotations

import numpy as np


def splitmix64(x: np.ndarray) -> np.ndarray:
    """``x`` (uint64) mixed; a new array."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
