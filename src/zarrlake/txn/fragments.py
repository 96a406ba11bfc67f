"""Reading a session's staged fragments: lookups and listings for reads inside the session,
and the gather a commit makes of every worker's fragments into one change table.

The gather is columnar: the fragments' key columns are concatenated and sorted once (they
are sorted runs, so the stable sort merges them), each worker's latest change of a key is
kept, and keys two workers changed differently are reported as clashes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from cachetools import LRUCache

from zarrlake.errors import NotFoundError
from zarrlake.format import columns
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.fragment import FragmentIndex, FragmentRecord
from zarrlake.format.manifest import ManifestRange, RangeView, take_from
from zarrlake.metastore.checks import prefix_upper_bound
from zarrlake.vc.objects import Objects

_NO_KEYS = columns.keys_array([])
_NO_POSITIONS = np.zeros(0, np.int32)
CACHED_ENTRIES = 500_000
"""Staged entries whose fragment indexes a handle keeps decoded for reads."""


@dataclass(frozen=True)
class Merged:
    """Every worker's chunk changes merged."""

    writes: RangeView
    deletes: np.ndarray
    clashes: list[str]  # keys two workers changed differently
    reads: list[str]
    listed: list[str]
    blobs: list[tuple[str, bytes]]  # fragments held in records that the commit writes out


class StagedFragments:
    """Decoded fragment indexes of one session, cached by object key."""

    def __init__(self, objects: Objects) -> None:
        self.objects = objects
        self._cache: LRUCache[str, FragmentIndex] = LRUCache(
            CACHED_ENTRIES, getsizeof=lambda index: max(len(index), 1)
        )

    def index(self, record: FragmentRecord) -> FragmentIndex:
        """The index of a staged fragment, read once and cached while small."""
        cached = self._cache.get(record.location)
        if cached is not None:
            return cached
        index = self._read(record)
        self.remember(record, index)
        return index

    def _read(self, record: FragmentRecord) -> FragmentIndex:
        try:
            if record.blob is not None:
                data = record.blob[record.index_offset :]
            else:
                data = self.objects.store.get(record.location, record.span)
        except NotFoundError:
            raise NotFoundError(
                f"staged fragment {record.location} of writer {record.writer} is missing"
                "; abandon the session and write its data again in a new one"
            ) from None
        return FragmentIndex.decode(record.index_id, data)

    def remember(self, record: FragmentRecord, index: FragmentIndex) -> None:
        """Cache the index of a fragment this handle wrote, unless it is large."""
        if len(index) < CACHED_ENTRIES:
            self._cache[record.location] = index

    def indexes(self, records: list[FragmentRecord]) -> list[FragmentIndex]:
        """The indexes of `records`, read in parallel."""
        return self.objects.map(self.index, records)

    # reads --------------------------------------------------------------------------------

    def lookup(self, records: list[FragmentRecord], key: str) -> tuple[bool, ChunkRef | None]:
        """(staged?, ref) of `key`: the newest fragment holding it decides (None: deleted)."""
        k = key.encode()
        for rec in sorted(records, key=_newest_first):
            index = self.index(rec)
            ref = index.writes.get(k)
            if ref is not None and rec.blob is not None and ref.location == rec.location:
                data = rec.blob[ref.offset : ref.offset + ref.length]  # no object yet
                return True, ChunkRef(
                    RefKind.INLINE, ref.digest, ref.length, data=data, stats=ref.stats
                )
            if ref is not None:
                return True, ref
            if _holds(index.deletes, k):
                return True, None
        return False, None

    def keys(self, records: list[FragmentRecord], prefix: str) -> Iterator[tuple[str, bool]]:
        """(key, deleted?) of staged chunk keys under `prefix` (the newest fragment decides)."""
        state: dict[bytes, bool] = {}
        p = prefix.encode()
        for rec in sorted(records, key=_newest_first, reverse=True):
            index = self.index(rec)
            for k in _with_prefix(index.writes.keys, p):
                state[bytes(k)] = False
            for k in _with_prefix(index.deletes, p):
                state[bytes(k)] = True
        for k in sorted(state):
            yield k.decode(), state[k]

    # the commit's gather --------------------------------------------------------------------

    def gather(self, records: list[FragmentRecord]) -> Merged:
        """Merge the fragments of `records`: per key, each writer's latest change; a key two
        writers changed differently (other bytes, or a write and a delete) is a clash. Only
        the key columns are merged; the writes are a view that the commit copies out of the
        fragments' indexes one manifest range at a time (a commit of millions of chunks
        holds its change list once, not twice)."""
        records = sorted(records, key=lambda r: (r.writer, r.seq))
        indexes = self.objects.map(self.read_index, records)  # not cached: read once
        reads = sorted({bytes(k).decode() for i in indexes for k in i.reads})
        listed = sorted({p for i in indexes for p in i.listed})
        blobs = [(r.location, r.blob) for r in records if r.needs_object and r.blob is not None]
        writes = [i.writes for i in indexes]
        deleted = [i.deletes for i in indexes]
        if not sum(len(w) + len(d) for w, d in zip(writes, deleted, strict=True)):
            return Merged(
                RangeView([], _NO_POSITIONS, _NO_KEYS), _NO_KEYS, [], reads, listed, blobs
            )
        del indexes
        if len(records) == 1 and not len(deleted[0]):  # one flush's writes: sorted, no clash
            keys = writes[0].keys
            return Merged(
                RangeView(writes, np.arange(len(keys), dtype=np.int32), keys),
                _NO_KEYS,
                [],
                reads,
                listed,
                blobs,
            )
        # One row per entry, fragment by fragment in (writer, flush) order; a row's `source`
        # is its position among the writes, or -1 - its position among the deletes.
        parts_keys, parts_source, parts_owner = [], [], []
        w = d = 0
        owners = {wr: n for n, wr in enumerate(sorted({r.writer for r in records}))}
        for rec, rng, dels in zip(records, writes, deleted, strict=True):
            nw, nd = len(rng), len(dels)
            parts_keys += [rng.keys, dels]
            parts_source += [
                np.arange(w, w + nw, dtype=np.int32),
                -1 - np.arange(d, d + nd, dtype=np.int32),
            ]
            parts_owner.append(np.full(nw + nd, owners[rec.writer], np.int32))
            w, d = w + nw, d + nd
        keys = np.concatenate(parts_keys)
        del parts_keys
        order = np.argsort(keys, kind="stable")  # sorted runs: merges them, keeps flush order
        keys = keys[order]
        source = np.concatenate(parts_source)[order]
        del parts_source
        owner = np.concatenate(parts_owner)[order]
        del order, parts_owner
        # the last row of each (key, writer) run is that writer's latest change of the key
        last = np.ones(len(keys), bool)
        last[:-1] = (keys[1:] != keys[:-1]) | (owner[1:] != owner[:-1])
        del owner
        if not last.all():  # a writer changed some key twice
            keys, source = keys[last], source[last]
        del last
        final = np.ones(len(keys), bool)
        final[:-1] = keys[1:] != keys[:-1]
        if final.all():  # no key changed by two writers: no clash, every row counts
            clashes: list[str] = []
        else:
            clashes = _clashes(writes, keys, source, final)
            keys, source = keys[final], source[final]
        del final
        written = source >= 0
        if written.all():
            view, gone = RangeView(writes, source, keys), _NO_KEYS
        else:
            view, gone = RangeView(writes, source[written], keys[written]), keys[~written]
        return Merged(
            view,
            gone,
            clashes,
            reads,
            listed,
            blobs,
        )

    def read_index(self, record: FragmentRecord) -> FragmentIndex:
        """A fragment's index, from the cache or read (and not cached)."""
        cached = self._cache.get(record.location)
        return cached if cached is not None else self._read(record)


def _clashes(
    writes: list[ManifestRange], keys: np.ndarray, source: np.ndarray, final: np.ndarray
) -> list[str]:
    """Keys whose writers' latest changes differ (compared with the run's final row)."""
    several = ~final | np.concatenate([[False], ~final[:-1]])
    if not several.any():
        return []
    pos = np.flatnonzero(several)
    finals = np.flatnonzero(final)
    a, b = source[pos], source[finals[np.searchsorted(finals, pos)]]
    differ = (a < 0) != (b < 0)
    both = (a >= 0) & (b >= 0)
    if both.any():
        ra, rb = take_from(writes, a[both]), take_from(writes, b[both])
        differ[both] = (ra.digest != rb.digest).any(axis=1) | (ra.length != rb.length)
    return sorted({bytes(k).decode() for k in keys[pos[differ]]})


def _newest_first(rec: FragmentRecord) -> tuple[float, str, int]:
    return (-rec.at, rec.writer, -rec.seq)


def _holds(sorted_keys: np.ndarray, key: bytes) -> bool:
    i = int(np.searchsorted(sorted_keys, key))
    return i < len(sorted_keys) and sorted_keys[i] == key


def _with_prefix(sorted_keys: np.ndarray, prefix: bytes) -> np.ndarray:
    if not prefix:
        return sorted_keys
    lo = int(np.searchsorted(sorted_keys, prefix))
    end = prefix_upper_bound(prefix)
    hi = len(sorted_keys) if end is None else int(np.searchsorted(sorted_keys, end))
    return sorted_keys[lo:hi]
