"""Cells given twice in one write are refused, naming the first ones, unless the write says
`duplicates="last"` (then the last row a task receives for a cell wins).

A write task sees every row of its chunks (write_array partitions rows by chunk; two tasks
writing one chunk are refused at the commit), so it finds every duplicate: `Coverage` keeps
which cells of each chunk the task has written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from zarrlake.errors import InvalidInputError
from zarrlake.spark import options as opts
from zarrlake.spark.arrays import ArrayInfo

ERROR, LAST = "error", "last"
SHOWN = 3
"""Duplicated cells an error names."""


def refuses_duplicates(options: Mapping[str, str]) -> bool:
    """Option `duplicates`: "error" (the default: refuse a cell given twice) or "last"."""
    value = (opts.get_names(options, "duplicates") or (ERROR,))[0].lower()
    if value not in (ERROR, LAST):
        raise InvalidInputError(f"option 'duplicates' must be 'error' or 'last', not {value!r}")
    return value == ERROR


def refuse(info: ArrayInfo, cells: Sequence[tuple[int, ...]], what: str = "cell") -> None:
    """InvalidInputError naming the first of `cells` (coordinates), given more than once."""
    first = sorted(set(cells))
    named = "; ".join(
        "(" + ", ".join(f"{d}={c}" for d, c in zip(info.dims, cell, strict=True)) + ")"
        for cell in first[:SHOWN]
    )
    more = f" and {len(first) - SHOWN} more" if len(first) > SHOWN else ""
    raise InvalidInputError(
        f"rows give the same {what} of array {info.path!r} more than once: {named}{more}; "
        f"give duplicates='last' to keep the last row of each"
    )


class Coverage:
    """The cells one task has written, per chunk: whole chunks, and masks of the chunks
    written in part."""

    def __init__(self, info: ArrayInfo) -> None:
        self.info = info
        self.full: set[tuple[int, ...]] = set()
        self.partial: dict[tuple[int, ...], np.ndarray] = {}

    def whole(self, coords: tuple[int, ...], box: tuple[slice, ...]) -> None:
        """Chunk `coords` (region `box`) is written whole."""
        seen = self.partial.pop(coords, None)
        if coords in self.full or seen is not None:
            flat = 0 if seen is None else int(np.flatnonzero(seen)[0])
            refuse(self.info, [_cell(box, flat)])
        self.full.add(coords)

    def cells(self, coords: tuple[int, ...], box: tuple[slice, ...], flat: np.ndarray) -> None:
        """Rows write the cells at C-order positions `flat` of chunk `coords` (region `box`)."""
        size = int(np.prod([s.stop - s.start for s in box]))
        counts = np.bincount(flat, minlength=size)
        seen = self.partial.get(coords)
        if coords in self.full:
            dup = counts > 0
        else:
            dup = counts > 1 if seen is None else (counts > 1) | (seen & (counts > 0))
        if dup.any():
            refuse(self.info, [_cell(box, int(i)) for i in np.flatnonzero(dup)[:SHOWN]])
        mask = counts > 0 if seen is None else seen | (counts > 0)
        if mask.all():
            self.partial.pop(coords, None)
            self.full.add(coords)
        else:
            self.partial[coords] = mask


def _cell(box: tuple[slice, ...], flat: int) -> tuple[int, ...]:
    local = np.unravel_index(flat, [s.stop - s.start for s in box])
    return tuple(int(s.start + i) for s, i in zip(box, local, strict=True))
