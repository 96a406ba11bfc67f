"""Appending along a dimension (`append_dim`, as xarray's `to_zarr(append_dim=...)`): a write
whose rows go past an array's end along that dimension grows the array to cover them, in the
same commit as the data.

Tasks write beyond the stored shape through a handle whose shape is grown in memory only
(`grown`); each reports the largest index it wrote, and the driver stores the new shape once,
before the commit (`resize`). Rows at indices the array already has are refused, naming the
first ones, unless the write says overwrite: then they replace those cells and the rest of
the array is kept. Two jobs appending from one base both change the array's metadata, so the
second to commit conflicts, as two xarray appends would."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import zarr
from zarr.core.array import AsyncArray

from zarrlake.errors import InvalidInputError
from zarrlake.spark.arrays import ArrayInfo

SHOWN = 3
"""Existing indices an error names."""


@dataclass(frozen=True)
class Append:
    """Grow the target arrays along dimension `dim`; with `overwrite`, rows at existing
    indices replace those cells instead of being refused."""

    dim: str
    overwrite: bool = False

    def axis(self, info: ArrayInfo) -> int | None:
        """The position of the append dimension in `info`'s dims (None: it has none)."""
        return info.dims.index(self.dim) if self.dim in info.dims else None

    def check(self, infos: Sequence[ArrayInfo]) -> None:
        """InvalidInputError unless the first (widest) target array has the dimension."""
        if self.axis(infos[0]) is None:
            raise InvalidInputError(
                f"append_dim {self.dim!r} is not a dimension of array {infos[0].path!r} "
                f"(dims {list(infos[0].dims)})"
                "; use one of its dimensions"
            )


def grown(array: zarr.Array, axis: int, extent: int) -> zarr.Array:
    """`array` as if its shape along `axis` were `extent`, without storing anything: a
    task writes past the stored end through it."""
    shape = list(array.shape)
    shape[axis] = extent
    meta = array.metadata.update_shape(tuple(shape))
    return zarr.Array(AsyncArray(meta, array.store_path, array.config))


def refuse_existing(info: ArrayInfo, axis: int, values: np.ndarray, base: int) -> None:
    """InvalidInputError naming the first rows' indices below `base` (the array's extent
    along `axis` before this write), if any."""
    old = values[(values >= 0) & (values < base)]  # a negative index is out of bounds
    if not len(old):
        return
    first = np.unique(old)
    shown = ", ".join(str(int(v)) for v in first[:SHOWN])
    more = f" and {len(first) - SHOWN} more" if len(first) > SHOWN else ""
    dim = info.dims[axis]
    raise InvalidInputError(
        f"rows at {dim} {shown}{more} are already in array {info.path!r} ({dim} 0..{base - 1}); "
        f"an append writes past the end, or give mode('overwrite') to replace them"
    )


class Growth:
    """One task's rows along the append dimension: refuses existing indices, and says how far
    the task's handles must reach (whole stored chunks at a time, from the start, so a
    chunk's region in the task never changes) and the largest index + 1 it wrote."""

    def __init__(self, append: Append, info: ArrayInfo) -> None:
        axis = append.axis(info)
        assert axis is not None
        self.append, self.info, self.axis = append, info, axis
        self.base = info.shape[axis]
        self.step = info.chunks[axis]
        self.reach = -(-self.base // self.step) * self.step  # the handles' extent
        self.extent = 0

    def take(self, starts: np.ndarray, end: int) -> int | None:
        """Account for rows starting at indices `starts` along the dimension and reaching
        up to `end` (exclusive); the new reach when the handles must grow to cover them,
        else None."""
        if not len(starts):
            return None
        if not self.append.overwrite:
            refuse_existing(self.info, self.axis, starts, self.base)
        self.extent = max(self.extent, end)
        if end <= self.reach:
            return None
        self.reach = -(-end // self.step) * self.step
        return self.reach


def widened(info: ArrayInfo, axis: int, extent: int) -> ArrayInfo:
    """`info` with its shape along `axis` set to `extent`."""
    shape = list(info.shape)
    shape[axis] = extent
    return dataclasses.replace(info, shape=tuple(shape))


def resize(array: zarr.Array, axis: int, extent: int) -> bool:
    """Store `array`'s new extent along `axis` (driver side, before the commit) if it grew."""
    if extent <= array.shape[axis]:
        return False
    shape = list(array.shape)
    shape[axis] = extent
    array.resize(tuple(shape))
    return True
