"""The `isel` read option: the region of an array a read covers, as half-open index ranges
per dimension ("time=10:20,lat=0:90"; "time=5" is one index; an end left out is the edge),
as xarray's `isel` takes them. (`region` would clash with the storage option.)

The region is in the coordinates the rows carry: element indices in the cell layout, chunk
coordinates in the chunk layout and the change feed. It is part of the read's options, so
every query of the DataFrame reads the same region. Spark's filter push-down is not used to
narrow reads: Spark 4.1-4.3 keep the read a pushed filter planned on the data source object
that every later query of the same DataFrame shares, so a query without filters would read
an earlier query's subset."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from zarrlake.errors import InvalidInputError

_PART = re.compile(r"^\s*([^=\s]+)\s*=\s*(\d*)\s*(?:(:)\s*(\d*))?\s*$")

Bounds = list[tuple[int, int]]
"""[start, stop) per dimension."""


ISEL = "isel"


def parse_region(options: Mapping[str, str], dims: Sequence[str], extent: Sequence[int]) -> Bounds:
    """The `isel` option as [start, stop) per dimension, clipped to `extent` (the whole
    extent where the option, or a dimension in it, is not given)."""
    bounds = [(0, n) for n in extent]
    text = {str(k).lower(): v for k, v in options.items()}.get(ISEL)
    if text is None:
        return bounds
    seen: set[str] = set()
    for part in str(text).split(","):
        if not part.strip():
            continue
        match = _PART.match(part)
        if match is None:
            raise InvalidInputError(
                f"option 'isel' takes dim=start:stop (or dim=index) separated by commas, "
                f"e.g. 'time=10:20,lat=0:90'; {part.strip()!r} is not one"
            )
        dim, start, colon, stop = match.groups()
        if dim not in dims:
            raise InvalidInputError(
                f"option 'isel' names dimension {dim!r}; the array's are {list(dims)}"
                "; use one of those"
            )
        if dim in seen:
            raise InvalidInputError(
                f"option 'isel' names dimension {dim!r} twice; give each dimension once"
            )
        seen.add(dim)
        d = dims.index(dim)
        lo = int(start) if start else 0
        if colon:
            hi = int(stop) if stop else extent[d]
        elif start:
            hi = lo + 1
        else:
            raise InvalidInputError(
                f"option 'isel' gives no index for dimension {dim!r}"
                "; give dim=index or dim=start:stop"
            )
        lo, hi = min(lo, extent[d]), min(hi, extent[d])
        bounds[d] = (lo, max(lo, hi))
    return bounds


def in_region(coords: Sequence[int], bounds: Bounds) -> bool:
    """Whether `coords` lies inside `bounds`."""
    return all(lo <= c < hi for c, (lo, hi) in zip(coords, bounds, strict=True))
