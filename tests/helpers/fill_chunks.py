"""Chunks that put a store's empty-chunk handling to the test (zarr leaves out a chunk of
fill values only, comparing bit for bit, NaN equal to any NaN)."""

from __future__ import annotations

import numpy as np


def fill_chunks(fill: float, side: int = 4) -> np.ndarray:
    """Six float32 chunks of (1, side, side): random; all fill; fill first, then not; -0.0
    first, then fill; NaN first, then random; fill everywhere but the last value."""
    rng = np.random.default_rng(5)
    v = rng.uniform(1, 2, (6, side, side)).astype("f4")
    v[1] = fill
    v[2, 0, 0] = fill
    v[3] = fill
    v[3, 0, 0] = -0.0
    v[4, 0, 0] = np.nan
    v[5] = fill
    v[5, -1, -1] = 1.5
    return v
