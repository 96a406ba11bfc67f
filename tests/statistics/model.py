"""What the statistics of an array's chunks should be, from numpy alone: each chunk's
values are the array's values inside it, and the fill value beyond the array's shape (zarr
writes edge chunks so), and a chunk never written is all fill value."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest


@dataclass(frozen=True)
class Spec:
    """An array of the tests: its shape, (inner) chunk shape, shards, dtype, fill value."""

    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    fill: object
    shards: tuple[int, ...] | None = None

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks, strict=True))

    def blank(self) -> np.ndarray:
        return np.full(self.shape, self.fill, dtype=self.dtype)

    def create(self, store, **codecs):  # -> zarr.Array
        """The array in `store` (with `codecs`: zarr's serializer, compressors, ...)."""
        import zarr

        return zarr.create_array(
            store,
            name=self.name,
            shape=self.shape,
            chunks=self.chunks,
            shards=self.shards,
            dtype=self.dtype,
            fill_value=self.fill,
            dimension_names=[f"d{i}" for i in range(len(self.shape))],
            **codecs,
        )


def chunk_values(spec: Spec, values: np.ndarray, coords: tuple[int, ...]) -> np.ndarray:
    """The values chunk `coords` holds as stored: the array's inside, fill beyond."""
    block = np.full(spec.chunks, spec.fill, dtype=spec.dtype)
    box = tuple(
        slice(k * c, min((k + 1) * c, s))
        for k, c, s in zip(coords, spec.chunks, spec.shape, strict=True)
    )
    block[tuple(slice(0, b.stop - b.start) for b in box)] = values[box]
    return block


def expected(spec: Spec, values: np.ndarray) -> dict[str, list]:
    """The statistics table `Repo.chunk_stats` should give for an array holding `values`."""
    out: dict[str, list] = {k: [] for k in ("count", "nan", "fill", "min", "max", "sum")}
    for coords in np.ndindex(*spec.grid):
        block = chunk_values(spec, values, coords)
        floats = block.dtype.kind == "f"
        nan = np.isnan(block) if floats else np.zeros(block.shape, bool)
        fill_nan = isinstance(spec.fill, float) and math.isnan(spec.fill)
        is_fill = nan if fill_nan else block == np.asarray(spec.fill, dtype=block.dtype)
        out["count"].append(block.size)
        out["nan"].append(int(nan.sum()))
        out["fill"].append(int(is_fill.sum()))
        real = block[~nan]
        out["min"].append(real.min().item() if real.size else None)
        out["max"].append(real.max().item() if real.size else None)
        out["sum"].append(float(real.astype(np.float64).sum()))
    return out


def assert_matches(table, spec: Spec, values: np.ndarray, what: str = "") -> None:
    """The statistics table of `spec`'s array equals numpy's on `values`, chunk by chunk."""
    want = expected(spec, values)
    assert table.num_rows == math.prod(spec.grid), what
    assert table["known"].to_pylist() == [True] * table.num_rows, what
    assert table["count"].to_pylist() == want["count"], what
    assert table["nan_count"].to_pylist() == want["nan"], what
    assert table["fill_count"].to_pylist() == want["fill"], what
    assert table["min"].to_pylist() == want["min"], what
    assert table["max"].to_pylist() == want["max"], what
    assert table["sum"].to_pylist() == pytest.approx(want["sum"], rel=1e-12, abs=1e-9), what


def random_values(dtype: str, shape: tuple[int, ...], fill: object, seed: int) -> np.ndarray:
    """Seeded values of `dtype`: floats with NaN scattered, integers over their whole range,
    booleans; about a tenth of them the fill value (unless it is None)."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "f":
        out = rng.normal(0, 100, shape).astype(dtype)
        out[rng.random(shape) < 0.1] = np.nan
    elif kind == "b":
        out = rng.random(shape) < 0.3
    else:
        info = np.iinfo(dtype)
        out = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if fill is not None:
        out[rng.random(shape) < 0.1] = fill
    return out
