"""Reading only the chunks a value filter may match: `select` asks the chunks' statistics
(from the manifests) which chunks may hold a matching value, reads only those, and yields
each that does."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from zarrlake._util.zarr_reads import read_boxes
from zarrlake.errors import InvalidInputError
from zarrlake.vc import where as filters

if TYPE_CHECKING:
    from zarrlake.repo import Repo

STATISTICS = ("use", "ignore")
"""What a filtered read does with chunk statistics: skip the chunks they rule out, or
read every chunk."""
BATCH = 64
"""Chunks read concurrently."""


def check_statistics(value: object, what: str = "statistics") -> str:
    """`value` if it is "use" or "ignore"; InvalidInputError naming `what` otherwise."""
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in STATISTICS:
        raise InvalidInputError(f"{what} must be 'use' or 'ignore', not {value!r}")
    return str(text)


def value_names(path: str, dims: tuple[str | None, ...]) -> tuple[str, ...]:
    """The names a filter may give an array's values: its last path segment, and the name
    of its value column in Spark's rows (`<name>_value` when a dimension has its name)."""
    name = path.rsplit("/", 1)[-1]
    return (name, f"{name}_value") if name in dims else (name,)


def select(
    repo: Repo,
    array: str,
    *,
    where: str,
    ref: str = "main",
    as_of: datetime | None = None,
    statistics: str = "use",
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """(chunk coordinates, values) of each chunk of `array` at `ref` holding a value that
    matches `where`, in C order of the chunk grid (inner chunks of a sharded array).

    The chunks' statistics rule out the chunks that cannot match: only the others are
    read. A chunk's values are the part of it inside the array's shape, all of them (apply
    the same filter to them to keep the matching ones). The answer is the same whatever
    the statistics say: with `statistics="ignore"`, or where they are unknown, a chunk is
    read and kept only if a value matches.

    Parameters
    ----------
    where
        The filter, naming the values after the array, e.g. "t2m > 40", "t2m >= 0 AND t2m
        < 10", "isnan(t2m)", "t2m IN (1, 2)" (the grammar: the Spark how-to page).
    statistics
        "use" (default) or "ignore".

    Raises
    ------
    NotFoundError
        If there is no array at `array`.
    InvalidInputError
        If `where` does not parse or names something else than the array's values.
    """
    import zarr

    use = check_statistics(statistics) == "use"
    path = array.strip("/") if isinstance(array, str) else array
    if not isinstance(path, str):
        raise InvalidInputError(f"array must be an array path, not {array!r}")
    commit = repo.resolve(ref, as_of=as_of)
    arr = zarr.open_array(repo.readonly_session(commit).store, path=path, mode="r")
    dims = tuple(arr.metadata.dimension_names or (None,) * arr.ndim)
    node = filters.parse(where, value_names(path, dims))
    unit, shape = tuple(arr.chunks), tuple(arr.shape)
    grid = tuple(-(-s // u) for s, u in zip(shape, unit, strict=True))
    positions = np.arange(math.prod(grid), dtype=np.int64)
    if use:
        chunks = filters.Chunks.of_table(repo.chunk_stats(path, commit))
        positions = positions[node.may_match(chunks)]
    for at in range(0, len(positions), BATCH):
        coords = [
            tuple(int(c) for c in np.unravel_index(int(p), grid))
            for p in positions[at : at + BATCH]
        ]
        boxes = [
            tuple(slice(k * u, min((k + 1) * u, s)) for k, u, s in zip(c, unit, shape, strict=True))
            for c in coords
        ]
        for c, block in zip(coords, read_boxes(arr, boxes), strict=True):
            if node.matches(block).any():
                yield c, block
