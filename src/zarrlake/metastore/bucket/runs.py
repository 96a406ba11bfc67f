"""Reading and compacting a bucket partition: lookups and ordered scans over the inline
table and the runs of pages, and the flush that moves inline entries into a new run.

Runs are size-tiered: a flush merges the inline entries with the newest runs while those
are no bigger than twice what is being merged, so run sizes grow geometrically (about
log2(partition / inline limit) runs) and each entry is rewritten O(log n) times. A merge
that reaches the oldest run drops tombstones.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator

from zarrlake.metastore.bucket.format import Head, PageRef, Run, Table

PAGE_BYTES = 1 << 20
"""A page holds about this many bytes of keys and values (at least one entry)."""
INLINE_BYTES = 64 << 10
"""When the inline entries outgrow this, the write that grew them flushes them to a run."""

Load = Callable[[PageRef], Table]
"""Reads a page (from a cache or the bucket)."""
Entry = tuple[bytes, int, bytes | None, int]
"""(key, source priority: 0 = inline, 1 = newest run, ...; value or None; version)."""


def find(table: Table, key: bytes) -> int | None:
    """The index of `key` in `table`, or None."""
    i = bisect.bisect_left(table.keys, key)
    return i if i < len(table.keys) and table.keys[i] == key else None


def lookup(head: Head, key: bytes, load: Load) -> tuple[bytes, int] | None:
    """(value, version) of the newest entry for `key`, or None if absent or deleted."""
    i = find(head.table, key)
    if i is not None:
        value = head.table.values[i]
        return None if value is None else (value, head.table.versions[i])
    for run in head.runs:
        page = _page_of(run, key)
        if page is None:
            continue
        table = load(page)
        i = find(table, key)
        if i is not None:
            value = table.values[i]
            return None if value is None else (value, table.versions[i])
    return None


def _page_of(run: Run, key: bytes) -> PageRef | None:
    i = bisect.bisect_left([p.last for p in run.pages], key)
    if i < len(run.pages) and run.pages[i].first <= key:
        return run.pages[i]
    return None


def _table_from(table: Table, low: bytes, priority: int) -> Iterator[Entry]:
    for i in range(bisect.bisect_left(table.keys, low), len(table.keys)):
        yield table.keys[i], priority, table.values[i], table.versions[i]


def _run_from(
    run: Run, low: bytes, high: bytes | None, priority: int, load: Load
) -> Iterator[Entry]:
    """Entries of `run` from `low`, loading each page only when the scan reaches it."""
    start = bisect.bisect_left([p.last for p in run.pages], low)
    for page in run.pages[start:]:
        if high is not None and page.first >= high:
            return
        yield from _table_from(load(page), low, priority)


def scan(head: Head, low: bytes, high: bytes | None, size: int, load: Load) -> list:
    """Up to `size` live (key, value, version) with low <= key (< high), in key order."""
    sources = [_table_from(head.table, low, 0)]
    sources += [_run_from(run, low, high, n, load) for n, run in enumerate(head.runs, 1)]
    out: list[tuple[bytes, bytes, int]] = []
    last: bytes | None = None
    for key, _, value, version in heapq.merge(*sources):
        if high is not None and key >= high:
            break
        if key == last:
            continue  # an older source's entry for a key a newer one already decided
        last = key
        if value is not None:
            out.append((key, value, version))
            if len(out) >= size:
                break
    return out


def sort_table(table: Table) -> Table:
    """The same entries in key order."""
    order = sorted(range(len(table)), key=table.keys.__getitem__)
    return Table(
        [table.keys[i] for i in order],
        [table.values[i] for i in order],
        [table.versions[i] for i in order],
    )


def merge(newer: Table, older: Table, tombstones: bool) -> Table:
    """The entries of both, the newer winning on equal keys; tombstones kept if asked."""
    out = Table()
    streams = (_table_from(newer, b"", 0), _table_from(older, b"", 1))
    last: bytes | None = None
    for key, _, value, version in heapq.merge(*streams):
        if key == last:
            continue
        last = key
        if value is None and not tombstones:
            continue
        out.keys.append(key)
        out.values.append(value)
        out.versions.append(version)
    return out


def whole(run: Run, load: Load) -> Table:
    """Every entry of a run, in order."""
    out = Table()
    for page in run.pages:
        t = load(page)
        out.keys += t.keys
        out.values += t.values
        out.versions += t.versions
    return out


def paginate(table: Table) -> list[Table]:
    """`table` cut into pages of about PAGE_BYTES."""
    pages: list[Table] = []
    current, size = Table(), 0
    for k, v, ver in zip(table.keys, table.values, table.versions, strict=True):
        entry = len(k) + (len(v) if v is not None else 0)
        if current.keys and size + entry > PAGE_BYTES:
            pages.append(current)
            current, size = Table(), 0
        current.keys.append(k)
        current.values.append(v)
        current.versions.append(ver)
        size += entry
    if current.keys:
        pages.append(current)
    return pages


def flush(head: Head, load: Load) -> tuple[Table, list[Run]]:
    """Plan moving the inline entries into a run: (the merged table to write as the new
    newest run, the runs it replaces). The caller writes its pages and puts the new run
    in front of the runs left over."""
    merged, replaced = head.table, []
    rest = list(head.runs)
    while rest and rest[0].size <= 2 * max(merged.size, 1):
        replaced.append(rest.pop(0))
        merged = merge(merged, whole(replaced[-1], load), tombstones=bool(rest))
    if not rest:
        merged = merge(merged, Table(), tombstones=False)
    return merged, replaced
