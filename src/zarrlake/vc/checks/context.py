"""What a check sees (`ChangeView`: the proposed commit, its base and the chunks changed
between them) and what it answers (`Outcome`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Coords = tuple[int, ...]

SHOWN = 5
"""Failing chunk coordinates a result keeps (their count is kept whole)."""


@dataclass(frozen=True)
class Outcome:
    """A check's answer: passed or not, why, and where.

    Where is the array, a few failing chunks and how many failed.
    """

    passed: bool
    message: str = ""
    array: str | None = None
    chunks: list[Coords] = field(default_factory=list)
    failing: int = 0
    from_stats: int = 0
    """Chunks the check decided from their statistics, without reading them."""

    @classmethod
    def fail(cls, message: str, array: str | None = None, chunks: list[Coords] = ()) -> Outcome:
        """A failure at `chunks` of `array` (the first few kept, all counted)."""
        bad = sorted(chunks)
        return cls(False, message, array, [tuple(c) for c in bad[:SHOWN]], len(bad))


@dataclass(frozen=True)
class Known:
    """What a changed chunk's statistics say (format/statistics.py): its elements as stored
    (`count`; `inside` of them lie within the array's shape, fewer at its upper edges, so
    the other numbers may count elements beyond the shape too), how many are NaN and equal
    to the fill value, the smallest and largest value ignoring NaN (None: every element is
    NaN) and their sum."""

    count: int
    inside: int
    nan: int
    fill: int
    low: float | int | None
    high: float | int | None
    sum: float

    @property
    def exact(self) -> bool:
        """Whether the statistics cover exactly the elements inside the array's shape."""
        return self.inside == self.count


def where(chunks: list[Coords], failing: int) -> str:
    """'chunks (0, 1), (0, 2) (+3 more)' for a message."""
    shown = ", ".join(str(tuple(c)) for c in chunks)
    more = f" (+{failing - len(chunks)} more)" if failing > len(chunks) else ""
    return f"chunk{'s' if failing > 1 else ''} {shown}{more}" if chunks else ""


class ChangeView(Protocol):
    """The read-only view of a proposed commit and its change a check runs on. Reading goes
    through it so a check reads only the chunks the change touches."""

    commit: str
    base: str

    def arrays(self) -> list[str]:
        """The paths of the arrays the change wrote or deleted chunks of, or redefined."""

    def written(self, array: str) -> list[Coords]:
        """Chunk coordinates of `array` the change wrote, sorted."""

    def deleted(self, array: str) -> list[Coords]:
        """Chunk coordinates of `array` the change deleted, sorted."""

    def doc(self, array: str, at: str = "new") -> dict[str, Any] | None:
        """The array's zarr.json at the commit ("new") or the base ("base"); None if absent."""

    def chunk_shape(self, array: str) -> tuple[int, ...]:
        """The shape of the chunks coordinates count (inner chunks when sharded)."""

    def chunks(self, array: str, coords: list[Coords]) -> Iterator[tuple[Coords, np.ndarray]]:
        """(coords, decoded values) of chunks of `array` at the commit."""

    def statistics(self, array: str, coords: list[Coords]) -> list[Known | None]:
        """What the statistics of chunks of `array` at the commit say, from its manifests
        (no chunk is read); None for a chunk whose statistics are unknown."""

    def values(self, array: str, selection: tuple[slice, ...]) -> np.ndarray:
        """A selection of `array` at the commit (reads the chunks it covers)."""
