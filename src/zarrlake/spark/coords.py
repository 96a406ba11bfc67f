"""Coordinate arrays written with data arrays (`arrays="t2m,time"`): an array whose dimensions
are some of the data arrays' (`time(time)`, `lat(y, x)`) takes its values from the same rows,
which repeat each of its cells; the rows of one cell must agree (with duplicates="last", the
last wins). A task sends the distinct cells it saw; the driver writes them into the job's
session before the commit: a coordinate array is small, and each of its chunks holds cells
of many tasks' rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import zarr

from zarrlake.errors import InvalidInputError
from zarrlake.spark.arrays import ArrayInfo, cast_values
from zarrlake.spark.chunks import check_bounds
from zarrlake.spark.duplicates import SHOWN

Cells = tuple[np.ndarray, np.ndarray]
"""(index: one row per dimension, one column per cell; values): distinct cells."""


def _column(batch: pa.RecordBatch, name: str) -> np.ndarray:
    col = batch.column(name)
    if col.null_count:
        raise InvalidInputError(
            f"column {name!r} has {col.null_count} null value(s); fill or drop those rows first"
        )
    return col.to_numpy(zero_copy_only=False)


def distinct(info: ArrayInfo, index: np.ndarray, values: np.ndarray, last: bool) -> Cells:
    """The distinct cells of rows (`index` one row per dimension); InvalidInputError naming
    the first cells whose rows disagree, unless `last` (then the last row of a cell wins)."""
    if index.shape[1] == 0:
        return index, values
    cells, inverse = np.unique(index, axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.arange(len(inverse))
    pick = np.zeros(cells.shape[1], dtype=np.int64)
    if last:
        np.maximum.at(pick, inverse, order)
        return cells, values[pick]
    pick[:] = len(inverse)
    np.minimum.at(pick, inverse, order)
    chosen = values[pick]
    same = chosen[inverse] == values
    if values.dtype.kind == "f":
        same |= np.isnan(chosen[inverse]) & np.isnan(values)
    if not same.all():
        bad = np.unique(inverse[~same])[:SHOWN]
        named = "; ".join(
            "(" + ", ".join(f"{d}={int(cells[k, i])}" for k, d in enumerate(info.dims)) + ")"
            for i in bad
        )
        raise InvalidInputError(
            f"rows give different values of coordinate array {info.path!r} (column "
            f"{info.column!r}) at {named}; give duplicates='last' to keep the last row's"
        )
    return cells, chosen


class CoordSink:
    """One task's cells of the coordinate arrays: the distinct ones, for the driver."""

    def __init__(self, infos: list[ArrayInfo], *, last: bool) -> None:
        self.infos = infos
        self.last = last
        self.parts: dict[str, list[Cells]] = {i.path: [] for i in infos}

    def add(self, batch: pa.RecordBatch) -> None:
        """Take the coordinate cells of one batch of rows."""
        for info in self.infos:
            index = np.stack([_column(batch, d).astype(np.int64, copy=False) for d in info.dims])
            values = cast_values(
                _column(batch, info.column), info.dtype, f"value column {info.column!r}"
            )
            self.parts[info.path].append(distinct(info, index, values, self.last))

    def cells(self) -> dict[str, Cells]:
        """The distinct cells per coordinate array path."""
        return {i.path: merged(i, self.parts[i.path], last=self.last) for i in self.infos}


def merged(info: ArrayInfo, parts: list[Cells], *, last: bool) -> Cells:
    """The distinct cells of several sets of cells (in order: with `last`, later ones win)."""
    if not parts:
        return np.zeros((len(info.dims), 0), dtype=np.int64), np.zeros(0, dtype=info.dtype)
    index = np.concatenate([p[0] for p in parts], axis=1)
    values = np.concatenate([p[1] for p in parts])
    return distinct(info, index, values, last)


def write_cells(array: zarr.Array, info: ArrayInfo, cells: Cells, *, replace: bool) -> None:
    """Write the cells into the coordinate array (driver side); with `replace`, every other
    cell becomes the fill value."""
    index, values = cells
    check_bounds(info, list(index))
    if replace:
        full = np.full(array.shape, array.fill_value, dtype=array.dtype)
        full[tuple(index)] = values
        array[...] = full
    elif index.shape[1]:
        array.vindex[tuple(index)] = values
