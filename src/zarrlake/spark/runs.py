"""Runs of neighbouring whole small chunks that a Spark task writes as one zarr region.

A zarr write costs about 1 ms of CPU a call on our machines whatever its size (its event
loop round trip, the selection, the codec pipeline's tasks); a 1 KiB chunk's share of a
region's write is about a quarter of that. zarr splits the region into the same chunks
again, and takes their statistics together (`pipeline._taken_together`, from
`TOGETHER_MIN` whole chunks), so what is stored is what chunk-by-chunk writes store.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from zarrlake.vc.statistics import TILES_MAX
from zarrlake.zarr_store.pipeline import TOGETHER_MIN

RUN_BYTES = 1 << 20
"""The most bytes of chunks one run holds."""


def runs(
    whole: Iterable[tuple[int, ...]], chunk: tuple[int, ...], itemsize: int
) -> list[list[tuple[int, ...]]]:
    """Runs of the chunk coordinates `whole` (chunks written whole, none clipped by the
    array's edge) that are neighbours along the first dimension: `TOGETHER_MIN` chunks at
    least, `RUN_BYTES` at most, in order; none for chunks of `TILES_MAX` values or more
    (their statistics are taken one by one, and their writes cost more than the call)."""
    size = math.prod(chunk)
    most = RUN_BYTES // (size * itemsize)
    if size >= TILES_MAX or most < TOGETHER_MIN:
        return []
    ordered = sorted((at[1:], at[0]) for at in whole)
    found: list[list[tuple[int, ...]]] = []
    start = 0
    for i in range(1, len(ordered) + 1):
        if (
            i < len(ordered)
            and ordered[i][0] == ordered[i - 1][0]
            and ordered[i][1] == ordered[i - 1][1] + 1
            and i - start < most
        ):
            continue
        if i - start >= TOGETHER_MIN:
            found.append([(k, *rest) for rest, k in ordered[start:i]])
        start = i
    return found


def region(run: list[tuple[int, ...]], chunk: tuple[int, ...]) -> tuple[slice, ...]:
    """The array region the chunks of `run` cover."""
    first, last = run[0], run[-1]
    return (
        slice(first[0] * chunk[0], (last[0] + 1) * chunk[0]),
        *(slice(k * c, (k + 1) * c) for k, c in zip(first[1:], chunk[1:], strict=True)),
    )
