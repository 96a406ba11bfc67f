"""`CheckContext`: the read-only view of a proposed commit that checks run on (the zarr
group at the commit and at its base, and the chunks changed per array). Every chunk a
check reads goes through it and is counted, so the cost of a check can be shown to grow
with the change, not the array."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrlake._util.zarr_reads import read_boxes
from zarrlake.connection import RepoContext
from zarrlake.format import statistics as sf
from zarrlake.format.snapshot import SnapshotRoot, is_meta_key
from zarrlake.txn.fragments import StagedFragments
from zarrlake.txn.overlay import Overlay
from zarrlake.vc import statistics
from zarrlake.vc.checks.changes import Change
from zarrlake.vc.checks.context import Coords, Known
from zarrlake.vc.ranges import Span
from zarrlake.vc.snapshot_view import SnapshotView
from zarrlake.zarr_store import SessionStore

if TYPE_CHECKING:
    import zarr

SLAB_BYTES = 64 << 20
"""A dense block of changed chunks is read in slabs of about this many bytes."""
BATCH = 128
"""Scattered chunks are read this many at a time, concurrently."""


class _Pinned:
    """A read-only StoreSession over one commit that counts the chunk reads."""

    def __init__(self, ctx: RepoContext, commit: str, counter: _Counter) -> None:
        objects = ctx.objects
        snapshot = objects.snapshot_of(commit)
        view = SnapshotView(objects, objects.read(SnapshotRoot, snapshot), snapshot)
        self.overlay = Overlay(objects, view, None, StagedFragments(objects), False)
        self.base_commit = commit
        self.spec = ctx.spec
        self.inline_max = ctx.settings.stage_inline_max
        self.counter = counter

    id = None
    read_only = True

    @property
    def _engine(self) -> _Pinned:
        """The engine hooks the store calls (lookup, peek, inline_max): this view itself."""
        return self

    def lookup(self, key: str) -> Any:
        """The reference of `key` at the commit."""
        return self.overlay.lookup(key)

    def read(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes | None:
        """The bytes of `key` at the commit (a chunk read is counted)."""
        self.counter.add(key)
        return self.overlay.read(key, byte_range)

    def read_ranges(self, key: str, spans: list[Span]) -> list[bytes] | None:
        """Byte ranges of `key` at the commit (counted as one read of the key)."""
        self.counter.add(key)
        return self.overlay.read_ranges(key, spans)

    def exists(self, key: str) -> bool:
        """Whether `key` exists at the commit."""
        return self.overlay.exists(key)

    def peek(self, key: str) -> tuple[bool, bytes | None]:
        """The answer for `key` when it needs no I/O (an inline chunk: counted)."""
        answered, data = self.overlay.peek(key)
        if answered and data is not None:
            self.counter.add(key)
        return answered, data

    def list_prefix(self, prefix: str = "") -> list[str]:
        """Keys under `prefix` at the commit."""
        return self.overlay.list_prefix(prefix)

    def list_dir(self, prefix: str = "") -> list[str]:
        """Names directly under `prefix` at the commit."""
        return self.overlay.list_dir(prefix)


class _Counter:
    """Chunk reads (not metadata) made through a context, thread-safe."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self, key: str) -> None:
        if not is_meta_key(key):
            with self._lock:
                self.count += 1


def _doc(meta: dict[str, bytes], path: str) -> dict[str, Any] | None:
    raw = meta.get(f"{path}/zarr.json" if path else "zarr.json")
    if raw is None:
        return None
    doc = json.loads(raw)
    return doc if doc.get("node_type") == "array" else None


class CheckContext:
    """What a check sees: the proposed commit, its base and what the change touched.

    The proposed commit is `new` (a read-only zarr group), its base `old`; per array, the
    chunk coordinates the change wrote are `written` and those it deleted `deleted`. Read
    changed chunks with `chunks` and selections with `values`; both are counted in
    `chunk_reads`.
    """

    def __init__(self, ctx: RepoContext, change: Change) -> None:
        self._ctx = ctx
        self.change = change
        self.commit = change.commit
        self.base = change.base
        self._counter = _Counter()
        self._arrays: dict[tuple[str, str], zarr.Array] = {}

    @property
    def chunk_reads(self) -> int:
        """Chunks read through this context so far."""
        return self._counter.count

    def arrays(self) -> list[str]:
        """Paths of the arrays the change touched.

        Those are the arrays it wrote or deleted chunks of, or whose metadata it changed.
        """
        return self.change.arrays()

    def written(self, array: str) -> list[Coords]:
        """Chunk coordinates of `array` the change wrote (sorted)."""
        return self.change.written.get(array.strip("/"), [])

    def deleted(self, array: str) -> list[Coords]:
        """Chunk coordinates of `array` the change deleted (sorted)."""
        return self.change.deleted.get(array.strip("/"), [])

    def doc(self, array: str, at: str = "new") -> dict[str, Any] | None:
        """`array`'s zarr.json at the commit ("new") or the base ("base"); None if absent."""
        meta = self.change.new_meta if at == "new" else self.change.old_meta
        return _doc(meta, array.strip("/"))

    def _store(self, at: str) -> SessionStore:
        commit = self.commit if at == "new" else self.base
        return SessionStore(_Pinned(self._ctx, commit, self._counter), read_only=True)  # type: ignore[arg-type]

    @cached_property
    def new(self) -> zarr.Group:
        """The root group at the proposed commit (read-only)."""
        import zarr

        return zarr.open_group(self._store("new"), mode="r")

    @cached_property
    def old(self) -> zarr.Group:
        """The root group at the base (read-only)."""
        import zarr

        return zarr.open_group(self._store("base"), mode="r")

    def array(self, path: str, at: str = "new") -> zarr.Array:
        """The array at `path` at the commit ("new") or the base ("base")."""
        import zarr

        key = (path.strip("/"), at)
        if key not in self._arrays:
            self._arrays[key] = zarr.open_array(self._store(at), path=key[0], mode="r")
        return self._arrays[key]

    def chunk_shape(self, array: str) -> tuple[int, ...]:
        """The shape of the chunks the coordinates count (inner chunks when sharded)."""
        return tuple(self.array(array).chunks)

    def _box(self, array: str, coords: Coords) -> tuple[slice, ...]:
        arr = self.array(array)
        return tuple(
            slice(c * n, min((c + 1) * n, s))
            for c, n, s in zip(coords, arr.chunks, arr.shape, strict=True)
        )

    def values(self, array: str, selection: tuple[slice, ...]) -> np.ndarray:
        """A selection of `array` at the commit (reads every chunk it covers)."""
        return np.asarray(self.array(array)[selection])

    @cached_property
    def _snapshot(self) -> SnapshotView:
        objects = self._ctx.objects
        snapshot = objects.snapshot_of(self.commit)
        return SnapshotView(objects, objects.read(SnapshotRoot, snapshot), snapshot)

    def statistics(self, array: str, coords: list[Coords]) -> list[Known | None]:
        """What the statistics of chunks of `array` at the commit say, looked up in its
        manifests (no chunk is read); None where they are unknown."""
        path = array.strip("/")
        doc = self.change.new_meta.get(f"{path}/zarr.json" if path else "zarr.json")
        if doc is None or not coords:
            return [None] * len(coords)
        try:
            layout = statistics.layout_of(doc)
        except Exception:  # an irregular grid, a document zarr cannot read: none known
            return [None] * len(coords)
        records = statistics.records_at(self._snapshot, path, layout, coords)
        out: list[Known | None] = []
        for c, r in zip(coords, records.tolist(), strict=True):
            stats = sf.ChunkStats._make(r)
            if not stats.known:
                out.append(None)
                continue
            out.append(
                Known(
                    count=stats.count,
                    inside=statistics.inside(layout, c),
                    nan=stats.nan,
                    fill=stats.fill,
                    low=stats.low,
                    high=stats.high,
                    sum=stats.sum,
                )
            )
        return out

    def chunks(self, array: str, coords: list[Coords]) -> Iterator[tuple[Coords, np.ndarray]]:
        """(coords, values) of chunks of `array` at the commit, in the order given.

        A dense block of chunks is read in slabs, scattered ones concurrently in batches.
        """
        if not coords:
            return
        arr = self.array(array)
        pts = np.asarray(coords, dtype=np.int64)
        lo, hi = pts.min(axis=0), pts.max(axis=0) + 1
        if math.prod((hi - lo).tolist()) == len(coords) and len(coords) > 1:
            yield from self._dense(array, arr, [tuple(c) for c in coords], lo, hi)
            return
        for at in range(0, len(coords), BATCH):
            part = coords[at : at + BATCH]
            yield from zip(part, read_boxes(arr, [self._box(array, c) for c in part]), strict=True)

    def _dense(
        self, array: str, arr: zarr.Array, coords: list[Coords], lo: np.ndarray, hi: np.ndarray
    ) -> Iterator[tuple[Coords, np.ndarray]]:
        chunk = arr.chunks
        per_row = math.prod((hi[1:] - lo[1:]).tolist()) * math.prod(chunk) * arr.dtype.itemsize
        rows = max(1, SLAB_BYTES // max(per_row, 1))
        wanted = set(coords)
        for r0 in range(int(lo[0]), int(hi[0]), rows):
            r1 = min(r0 + rows, int(hi[0]))
            first = (r0, *lo[1:].tolist())
            last = (r1 - 1, *(hi[1:] - 1).tolist())
            sel = tuple(
                slice(a * n, min((b + 1) * n, s))
                for a, b, n, s in zip(first, last, chunk, arr.shape, strict=True)
            )
            slab = np.asarray(arr[sel])
            for c in np.ndindex(*[r1 - r0, *(hi[1:] - lo[1:]).tolist()]):
                at = tuple(int(x) + int(o) for x, o in zip(c, (r0, *lo[1:].tolist()), strict=True))
                if at not in wanted:
                    continue
                box = self._box(array, at)
                local = tuple(
                    slice(b.start - s.start, b.stop - s.start)
                    for b, s in zip(box, sel, strict=True)
                )
                yield at, slab[local]
