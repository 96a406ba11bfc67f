"""Rows to chunks, vectorised: group row indices by the chunk they fall in, and write each
chunk once (read-modify-write when the rows cover it only partly)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import zarr

from zarrlake.errors import InvalidInputError
from zarrlake.spark.arrays import ArrayInfo
from zarrlake.spark.duplicates import Coverage
from zarrlake.spark.runs import region, runs
from zarrlake.vc.statistics import TILES_MAX, of_rows
from zarrlake.zarr_store.pipeline import given, taken_by


def check_bounds(info: ArrayInfo, index: Sequence[np.ndarray]) -> None:
    """InvalidInputError naming the column and a value outside the array's shape."""
    for dim, size, values in zip(info.dims, info.shape, index, strict=True):
        if len(values) == 0:
            continue
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            raise InvalidInputError(
                f"column {dim!r} has index {bad}, outside array {info.path!r} of shape "
                f"{info.shape} (valid: 0..{size - 1})"
                "; drop or fix those rows"
            )


def group_by_chunk(
    info: ArrayInfo, index: Sequence[np.ndarray]
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """(chunk coordinates, row numbers) for every chunk the rows touch, in chunk order."""
    if len(index[0]) == 0:
        return
    chunk_index = tuple(v // c for v, c in zip(index, info.chunks, strict=True))
    linear = np.ravel_multi_index(chunk_index, info.grid)
    order = np.argsort(linear, kind="stable")
    ordered = linear[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = np.append(starts[1:], len(ordered))
    coords = np.unravel_index(ordered[starts], info.grid)
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        yield tuple(int(c[i]) for c in coords), order[s:e]


def chunk_box(info: ArrayInfo, coords: tuple[int, ...]) -> tuple[slice, ...]:
    """The region of chunk `coords` in array coordinates (clipped at the array's edge)."""
    return tuple(
        slice(c * n, min((c + 1) * n, s))
        for c, n, s in zip(coords, info.chunks, info.shape, strict=True)
    )


def takes_together(array: zarr.Array) -> bool:
    """Whether a task's writes to `array` take the statistics of many whole chunks together
    (`taken_together`): the session keeps statistics, the array is not sharded (a shard's
    inner chunks are taken by its own write) and its chunks are small."""
    return (
        array.shards is None
        and math.prod(array.chunks) < TILES_MAX
        and bool(getattr(array.store, "computes_statistics", False))
    )


def taken_together(array: zarr.Array, blocks: Sequence[tuple[str, np.ndarray]]) -> Any:
    """The statistics of whole chunks a task is about to write to `array` (store key, the
    values it writes as that chunk, each a view of one memory), taken together
    (`statistics.of_rows`) for the writes to use (`pipeline.given`); None when there are
    too few, or they have no statistics (each chunk's are taken as zarr encodes it)."""
    if len(blocks) < 2:
        return None
    fill = np.asarray(array.fill_value).item()
    fields = of_rows([block for _, block in blocks], fill)
    if fields is None:
        return None
    return taken_by(blocks[0][1], {key: f for (key, _), f in zip(blocks, fields, strict=True)})


def write_chunks(
    array: zarr.Array,
    info: ArrayInfo,
    index: Sequence[np.ndarray],
    values: np.ndarray,
    *,
    replace: bool,
    done: set[tuple[int, ...]] = frozenset(),  # type: ignore[assignment]
    coverage: Coverage | None = None,
) -> list[tuple[int, ...]]:
    """Write `values` at `index` (one array per dimension) chunk by chunk; returns the chunk
    coordinates written. A chunk the rows do not fully cover keeps its other stored values,
    or with `replace` gets the fill value there (unless this task already wrote it: `done`).
    With `coverage`, a cell given twice (in these rows or earlier ones) is refused. Runs of
    neighbouring whole chunks (`spark.runs`) are written as regions; the other whole chunks
    the rows cover are laid in one array first if their statistics are taken together
    (`taken_together`)."""
    fill = array.fill_value
    plans = []
    for coords, rows in group_by_chunk(info, index):
        box = chunk_box(info, coords)
        shape = tuple(s.stop - s.start for s in box)
        local = tuple(v[rows] - s.start for v, s in zip(index, box, strict=True))
        flat = np.ravel_multi_index(local, shape)
        if coverage is not None:
            coverage.cells(coords, box, flat)
        size = int(np.prod(shape))
        covered = len(rows) >= size and bool(np.bincount(flat, minlength=size).all())
        plans.append((coords, rows, box, shape, flat, covered))
    full = [p[0] for p in plans if p[5] and p[3] == info.chunks]
    found = runs(full, info.chunks, array.dtype.itemsize)
    in_run = {at for run in found for at in run}
    whole = [p for p in plans if p[5] and p[3] == info.chunks and p[0] not in in_run]
    whole = whole if takes_together(array) else []
    laid = np.empty((len(whole), *info.chunks), dtype=array.dtype) if len(whole) > 1 else None
    blocks: dict[tuple[int, ...], np.ndarray] = {}
    if laid is not None:
        for j, (coords, rows, _, _, flat, _) in enumerate(whole):
            laid[j].reshape(-1)[flat] = values[rows]
            blocks[coords] = laid[j]
    taken = taken_together(array, [(info.chunk_key(array, c), b) for c, b in blocks.items()])
    by_coords = {p[0]: p for p in plans}
    step = info.chunks[0]
    for run in found:  # (not within `given`: zarr takes a region's statistics together)
        lay = np.empty((len(run) * step, *info.chunks[1:]), dtype=array.dtype)
        for j, at in enumerate(run):
            _, rows, _, _, flat, _ = by_coords[at]
            lay[j * step : (j + 1) * step].reshape(-1)[flat] = values[rows]
        array[region(run, info.chunks)] = lay

    def write() -> None:
        for coords, rows, box, shape, flat, covered in plans:
            if coords in in_run:
                continue
            block = blocks.get(coords)
            if block is None:
                if covered:
                    block = np.empty(shape, dtype=array.dtype)
                elif replace and coords not in done:
                    block = np.full(shape, fill, dtype=array.dtype)
                else:
                    block = np.asarray(array[box])
                block.reshape(-1)[flat] = values[rows]
            array[box] = block

    given(taken, write)
    return [p[0] for p in plans]
