"""The data the workloads write and what they measure it with, shared by workloads.py and
the group modules (s3pg.py, ...), so that no group module imports workloads.py (which names
the group modules' workers in WORKLOADS): seeded float32 data, the array's name and
chunking, peak RSS."""

from __future__ import annotations

import resource
from typing import Any

import numpy as np
import zarr

ARRAY = "a"
MIB = 1024 * 1024
SEED = 20240601
W5_CHUNK = (64, 64)
"""The chunking of W5's array (and of the S3 round-trip workloads, W5-shaped)."""


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def generate(shape: tuple[int, ...], seed: int = SEED) -> np.ndarray:
    """Seeded float32 data of `shape`: the same bytes for every engine."""
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def chunk_value(k: int, shape: tuple[int, ...]) -> np.ndarray:
    """The data one-chunk commits write into chunk `k` (W5, W6, W7)."""
    return generate(shape, SEED + 1 + k)


def new_array(store: Any, shape: tuple[int, ...], chunks: tuple[int, ...]) -> zarr.Array:
    """The benchmark's float32 array, named ARRAY, with zarr's default codecs."""
    return zarr.create_array(store, name=ARRAY, shape=shape, chunks=chunks, dtype="float32")
