"""Chunk maps: an array's chunk grid, as a 2-D slice, with the chunks a change wrote or
deleted marked. Large grids are shown in blocks of chunks, so a map never has more than
MAX_SIDE x MAX_SIDE cells whatever the array's size. A sharded array stored as inner
chunks is drawn in inner chunks, with lines at its shards' boundaries (`shard_lines`). A
map can colour every cell by its chunks' value statistics (`colour`): min, max, mean or
NaN fraction, read from the manifests."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zarrlake.errors import InvalidInputError

MAX_SIDE = 64


@dataclass(frozen=True)
class MapSlice:
    """Which two grid dimensions are drawn (rows, cols; None for a missing one) and the chunk
    index of every other dimension."""

    rows: int | None
    cols: int | None
    index: dict[int, int]


def default_slice(grid: tuple[int, ...], changed: Iterable[tuple[int, ...]]) -> MapSlice:
    """The two dimensions with the most chunks; the others at the first changed chunk."""
    nd = len(grid)
    if nd == 0:
        return MapSlice(None, None, {})
    if nd == 1:
        return MapSlice(None, 0, {})
    by_size = sorted(range(nd), key=lambda d: (grid[d], d), reverse=True)[:2]
    rows, cols = sorted(by_size)
    first = min(changed, default=None)
    index = {d: (first[d] if first is not None else 0) for d in range(nd) if d not in (rows, cols)}
    return MapSlice(rows, cols, index)


def parse_slice(text: str, grid: tuple[int, ...]) -> MapSlice:
    """A map slice from text such as '3,:,:' (one item per dimension: a chunk index, or ':'
    for the two drawn dimensions)."""
    nd = len(grid)
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    want = min(nd, 2)
    for t in items:
        if t != ":" and not t.isdigit():
            raise InvalidInputError(
                f"chunk map slice {text!r}: item {t!r} is neither a chunk index (an integer) "
                "nor ':'"
                "; give an integer or ':'"
            )
    if len(items) != nd:
        raise InvalidInputError(
            f"chunk map slice {text!r} has {len(items)} items; the grid has {nd} dimensions"
            "; give one item per dimension"
        )
    drawn = [d for d, t in enumerate(items) if t == ":"]
    if len(drawn) != want:
        raise InvalidInputError(f"chunk map slice {text!r} must have exactly {want} ':' items")
    index = {}
    for d, t in enumerate(items):
        if t == ":":
            continue
        if not t.isdigit() or len(t) > 18 or int(t) >= grid[d]:
            raise InvalidInputError(
                f"chunk index {t!r} for dimension {d} must be an integer in 0..{grid[d] - 1}"
            )
        index[d] = int(t)
    if nd == 1:
        return MapSlice(None, 0, {})
    return MapSlice(drawn[0], drawn[1], index) if drawn else MapSlice(None, None, {})


def slice_text(s: MapSlice, nd: int) -> str:
    """The slice as in the `slice` parameter: ":" for the drawn dimensions, an index for others."""
    return ",".join(":" if d in (s.rows, s.cols) else str(s.index.get(d, 0)) for d in range(nd))


def build_map(
    grid: tuple[int, ...],
    written: Iterable,
    deleted: Iterable,
    where: MapSlice | None = None,
    virtual: Iterable = (),
) -> dict:
    """The cells of one slice of the grid, as JSON-able data for a template or a script.
    Cells whose written chunks are all `virtual` (references into source files) are of
    kind "virtual"."""
    written_c = [c for c in written if isinstance(c, tuple)]
    virtual_c = [c for c in virtual if isinstance(c, tuple)]
    deleted_c = [c for c in deleted if isinstance(c, tuple)]
    nd = len(grid)
    # Chunks beyond the current grid (the array shrank) still get drawn.
    ext = list(grid)
    for c in written_c + deleted_c:
        if len(c) == nd:
            ext = [max(e, x + 1) for e, x in zip(ext, c, strict=True)]
    where = where or default_slice(tuple(ext), written_c + deleted_c)
    n_rows = ext[where.rows] if where.rows is not None else 1
    n_cols = ext[where.cols] if where.cols is not None else 1
    br, bc = math.ceil(n_rows / MAX_SIDE), math.ceil(n_cols / MAX_SIDE)

    def cells_of(coords: list[tuple[int, ...]]) -> Counter:
        out: Counter = Counter()
        for c in coords:
            if len(c) != nd or any(c[d] != i for d, i in where.index.items()):
                continue
            r = c[where.rows] if where.rows is not None else 0
            k = c[where.cols] if where.cols is not None else 0
            out[(r // br, k // bc)] += 1
        return out

    w, x, v = cells_of(written_c), cells_of(deleted_c), cells_of(virtual_c)
    cells = []
    for rc in sorted(w.keys() | x.keys()):
        kind = "written" if rc in w else "deleted"
        if rc in w and rc in x:
            kind = "both"
        elif kind == "written" and v[rc] == w[rc]:
            kind = "virtual"
        cells.append({"row": rc[0], "col": rc[1], "kind": kind, "written": w[rc], "deleted": x[rc]})
    others: dict[int, list[int]] = {}
    for d in where.index:
        others[d] = sorted({c[d] for c in written_c + deleted_c if len(c) == nd})[:100]
    return {
        "grid": ext,
        "rows_dim": where.rows,
        "cols_dim": where.cols,
        "index": {str(d): i for d, i in sorted(where.index.items())},
        "slice": slice_text(where, nd),
        "block": [br, bc],
        "map_rows": math.ceil(n_rows / br),
        "map_cols": math.ceil(n_cols / bc),
        "cells": cells,
        "written_in_slice": sum(w.values()),
        "deleted_in_slice": sum(x.values()),
        "written_total": len(written_c),
        "deleted_total": len(deleted_c),
        "changed_indices_of_other_dims": {str(d): v for d, v in others.items()},
    }


def shard_lines(m: dict, per_shard: tuple[int, ...]) -> None:
    """Add to map `m` (from `build_map`) the shards as a grouping of its inner chunks:
    `shards` with the inner chunks per shard along the drawn rows and columns, and the
    positions (in map cells) of the shard boundaries between them; a dimension whose shards
    are no bigger than one map cell gets no lines (every cell edge is one)."""
    drawn = {"rows": (m["rows_dim"], m["block"][0], m["map_rows"])}
    drawn["cols"] = (m["cols_dim"], m["block"][1], m["map_cols"])
    out: dict = {"per": [], "row_lines": [], "col_lines": []}
    for name, (dim, block, cells) in drawn.items():
        per = per_shard[dim] if dim is not None and dim < len(per_shard) else 1
        out["per"].append(per)
        step = per / block
        if dim is None or step <= 1:
            continue
        k, lines = 1, []
        while k * step < cells and len(lines) < MAX_SIDE:
            lines.append(round(k * step, 3))
            k += 1
        out["row_lines" if name == "rows" else "col_lines"] = lines
    m["shards"] = out


def mark_failing(m: dict, coords: Iterable[tuple[int, ...]]) -> int:
    """Flag the cells of map `m` (from `build_map`) holding chunks a check failed on
    (`failing: True`, drawn outlined); a failing chunk the map has no cell for gets one of
    kind "failing". Returns how many failing chunks fall in the map's slice."""
    rows, cols = m["rows_dim"], m["cols_dim"]
    index = {int(d): i for d, i in m["index"].items()}
    br, bc = m["block"]
    nd = len(m["grid"])
    cells = {(c["row"], c["col"]): c for c in m["cells"]}
    shown = 0
    for c in coords:
        if len(c) != nd or any(c[d] != i for d, i in index.items()):
            continue
        r = (c[rows] if rows is not None else 0) // br
        k = (c[cols] if cols is not None else 0) // bc
        cell = cells.get((r, k))
        if cell is None:
            cell = cells[(r, k)] = {
                "row": r,
                "col": k,
                "kind": "failing",
                "written": 0,
                "deleted": 0,
            }
            m["cells"].append(cell)
        cell["failing"] = True
        shown += 1
    return shown


COLOURS = {"min": "min", "max": "max", "mean": "mean", "nan": "NaN fraction"}
"""What a map can colour its cells by (`colour=`), and how its legend names it."""
_SCALE = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
"""viridis, in five stops: low values dark, high ones light."""


def check_colour(by: str) -> str:
    """`by` if a map can be coloured by it; InvalidInputError naming the choices."""
    if by not in COLOURS:
        raise InvalidInputError(f"colour must be one of {', '.join(COLOURS)}, not {by!r}")
    return by


def colour(m: dict, table: Any, by: str) -> None:
    """Colour every cell of map `m`'s slice by its chunks' statistics (`table`, from
    `Repo.chunk_stats`): `m["colour"]` holds the value of each cell (a block of chunks: the
    min of their mins, the max of their maxes, the mean of their values, the share of
    their elements that are NaN), its colour on a scale from the slice's lowest to its
    highest, and how many chunks' statistics are unknown (cells of only those: grey)."""
    import numpy as np

    check_colour(by)
    nd = len(m["grid"])
    coords = [np.asarray(table.column(d).to_numpy()) for d in range(nd)]
    rows, cols = m["rows_dim"], m["cols_dim"]
    inside = np.ones(table.num_rows, bool)
    for d, i in m["index"].items():
        inside &= coords[int(d)] == i
    known = np.asarray(table["known"].to_numpy(zero_copy_only=False)) & inside

    def col(name: str) -> np.ndarray:
        c = table[name]
        return np.asarray(c.cast("float64").fill_null(np.nan).to_numpy())

    count, nan = col("count"), col("nan_count")
    br, bc = m["block"]
    r = (coords[rows] if rows is not None else np.zeros(table.num_rows, np.int64)) // br
    k = (coords[cols] if cols is not None else np.zeros(table.num_rows, np.int64)) // bc
    cell = r * m["map_cols"] + k
    n_cells = m["map_rows"] * m["map_cols"]
    if by in ("min", "max"):
        vals = col(by)
        fold = np.fmin if by == "min" else np.fmax
        values = np.full(n_cells, np.nan)
        ok = known & ~np.isnan(vals)
        fold.at(values, cell[ok], vals[ok])
    else:
        top = col("sum") if by == "mean" else nan
        bottom = count - nan if by == "mean" else count
        num, den = np.zeros(n_cells), np.zeros(n_cells)
        np.add.at(num, cell[known], top[known])
        np.add.at(den, cell[known], bottom[known])
        with np.errstate(invalid="ignore", divide="ignore"):
            values = np.where(den > 0, num / den, np.nan)
    unknown = np.zeros(n_cells, np.int64)
    np.add.at(unknown, cell[inside & ~known], 1)
    shown = values[~np.isnan(values)]
    low, high = (float(shown.min()), float(shown.max())) if len(shown) else (None, None)
    cells = []
    for at in np.flatnonzero(~np.isnan(values) | (unknown > 0)).tolist():
        value = None if np.isnan(values[at]) else float(values[at])
        cells.append(
            {
                "row": at // m["map_cols"],
                "col": at % m["map_cols"],
                "value": value,
                "fill": _shade(value, low, high),
                "unknown": int(unknown[at]),
            }
        )
    m["colour"] = {
        "by": by,
        "label": COLOURS[by],
        "low": low,
        "high": high,
        "cells": cells,
        "unknown": int((inside & ~known).sum()),
        "scale": [_shade(v, 0.0, 1.0) for v in (0.0, 0.25, 0.5, 0.75, 1.0)],
    }


def _shade(value: float | None, low: float | None, high: float | None) -> str:
    """The colour of `value` on the scale from `low` to `high` (grey: unknown)."""
    if value is None or low is None or high is None:
        return "#bdbdbd"
    t = 0.0 if high == low else (value - low) / (high - low)
    t = min(max(t, 0.0), 1.0) * (len(_SCALE) - 1)
    i = min(int(t), len(_SCALE) - 2)
    f = t - i
    a, b = _SCALE[i], _SCALE[i + 1]
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))
