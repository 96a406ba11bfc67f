"""Byte ranges asked of one value, and the plan of requests that fetches them: nearby
ranges of one object are merged into one request (reading the gap between them costs less
than another round trip), up to a size past which separate requests, run side by side,
are faster."""

from __future__ import annotations

from dataclasses import dataclass

from zarrlake.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Span:
    """A byte range of a value: [start, end) (end None: to the end), or its last `suffix`
    bytes."""

    start: int = 0
    end: int | None = None
    suffix: int | None = None

    def __post_init__(self) -> None:
        if self.suffix is not None:
            if not _is_int(self.suffix) or self.suffix < 0:
                raise InvalidInputError(f"suffix length must be >= 0, not {self.suffix!r}")
            return
        if not _is_int(self.start) or self.start < 0:
            raise InvalidInputError(f"range start must be >= 0, not {self.start!r}")
        if self.end is not None and (not _is_int(self.end) or self.end < self.start):
            raise InvalidInputError(f"range end must be >= start, not {self.end!r}")

    def resolve(self, length: int) -> tuple[int, int]:
        """(start, end) within a value of `length` bytes, clamped to it."""
        if self.suffix is not None:
            return max(length - self.suffix, 0), length
        end = length if self.end is None else min(self.end, length)
        start = min(self.start, length)
        return start, max(start, end)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def coalesce(spans: list[tuple[int, int]], gap: int, max_request: int) -> list[tuple[int, int]]:
    """Requests covering the non-empty `spans`, sorted: spans that overlap or lie at most `gap`
    bytes apart share one request unless it would grow past `max_request` bytes."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out:
            last_start, last_end = out[-1]
            merged_end = max(last_end, end)
            if start <= last_end + gap and (
                start < last_end or merged_end - last_start <= max_request
            ):
                out[-1] = (last_start, merged_end)
                continue
        out.append((start, end))
    return out


def within(requests: list[tuple[int, int]], start: int, end: int) -> int:
    """The index of the request holding [start, end) (requests sorted, one of them holds it)."""
    lo, hi = 0, len(requests) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if requests[mid][0] <= start:
            lo = mid
        else:
            hi = mid - 1
    assert requests[lo][0] <= start and end <= requests[lo][1]
    return lo
