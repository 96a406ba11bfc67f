"""Manifest ranges: sorted, immutable runs of (key -> chunk reference), stored columnar.

A snapshot's keys are split into ranges of a few thousand entries; a commit rewrites only
the ranges its changes fall into, so its cost does not grow with the number of chunks.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from zarrlake.format import columns, envelope
from zarrlake.format import statistics as stats_format
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.digest import Hash

TARGET_ENTRIES = 4096
"""Ranges are split into pieces of this many entries once they exceed twice as many."""
FEW = 64
"""Writes of at most this many entries into a range are set in place (`_with_few`), not
merged through the general concatenate-and-sort."""
_INLINE = int(RefKind.INLINE)  # (compared with a column: as a plain number, not the enum)


@dataclass(frozen=True)
class ManifestRange:
    """A sorted, immutable run of (key -> chunk reference) entries held as numpy columns."""

    keys: np.ndarray  # S<n>, sorted, unique
    kind: np.ndarray  # uint8
    digest: np.ndarray  # (n, 32) uint8
    offset: np.ndarray  # uint64
    length: np.ndarray  # uint64
    loc: np.ndarray  # int32 index into locations, -1 for none
    locations: tuple[str, ...]
    inline: np.ndarray  # uint8 buffer holding INLINE data at offset/length
    identities: tuple[str | None, ...] = ()
    """Per location: the identity of a VIRTUAL source at import (None for packs). Empty when
    no entry is virtual (and in ranges written before virtual references existed)."""
    stored_stats: np.ndarray | stats_format.Stored | None = None
    """Per entry: the chunk's value statistics (format/statistics.py records), or as read
    and not decoded yet (`stats` decodes them); None when no entry has any (ranges written
    before statistics, or with them off)."""
    plain_stats: bool = field(default=False, compare=False)
    """Whether its statistics are encoded plain (neither differenced nor compressed),
    whatever its size: so is a range a few writes were set into (`_with_few`, a small
    commit's), which the next small commit rewrites again. A Blosc frame of a few hundred
    records saves a few bytes an entry and costs a zstd set-up at every such commit (the
    range's records decoded, differenced and compressed again: +0.17 ms of a W5 commit
    from 64 entries on) and at every read; a large write's ranges stay compressed."""

    @property
    def stats(self) -> np.ndarray | None:
        """The statistics records of the entries (None: no entry has any), decoded at the
        first use of a range read back."""
        s = self.stored_stats
        return s.records() if isinstance(s, stats_format.Stored) else s

    @property
    def has_stats(self) -> bool:
        """Whether some entry may have statistics (nothing decoded)."""
        return self.stored_stats is not None

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def empty(cls) -> ManifestRange:
        """A range with no entries."""
        return _from_refs([], [])

    @property
    def first_key(self) -> bytes:
        """The smallest key, which the snapshot's range index is searched by."""
        return bytes(self.keys[0])

    def index(self, key: bytes) -> int:
        """Position of `key`, or -1 (a bisection of the column: for one key it is several
        times cheaper than numpy's `searchsorted`, which costs ~20 us at its first call)."""
        i = bisect_left(self.keys, key)
        return i if i < len(self.keys) and self.keys[i] == key else -1

    def ref_at(self, i: int, stats: bool = True) -> ChunkRef:
        """The reference of the entry at position `i`, built from the columns (without its
        statistics unless `stats`: a read of the chunk's bytes never uses them)."""
        if stats and self.stored_stats is not None:
            return self.refs(slice(i, i + 1))[0]
        return self._ref(
            self.kind.item(i),
            self.digest[i].tobytes(),
            self.offset.item(i),
            self.length.item(i),
            self.loc.item(i),
            None,
        )

    def refs(self, part: slice, stats: bool = True) -> list[ChunkRef]:
        """The references of the entries at positions `part`, built from the columns a
        column at a time (a shard's inner chunks are read together: `SnapshotView.inner`),
        with their statistics decoded unless not `stats`."""
        kinds = self.kind[part].tolist()
        digests = self.digest[part].tobytes()
        records = (
            self._stats_at(part).tolist()
            if stats and self.stored_stats is not None
            else [None] * len(kinds)
        )
        return [
            self._ref(k, digests[32 * j : 32 * j + 32], off, length, loc, st)
            for j, (k, off, length, loc, st) in enumerate(
                zip(
                    kinds,
                    self.offset[part].tolist(),
                    self.length[part].tolist(),
                    self.loc[part].tolist(),
                    records,
                    strict=True,
                )
            )
        ]

    def _ref(
        self, k: int, digest: bytes, off: int, length: int, loc: int, st: tuple | None
    ) -> ChunkRef:
        """One reference from its entry's column values (`st`: its statistics record)."""
        kind = RefKind(k)
        inline = kind == RefKind.INLINE
        return ChunkRef(
            kind=kind,
            digest=digest,
            length=length,
            offset=0 if inline else off,
            location=self.locations[loc] if loc >= 0 else None,
            data=self.inline[off : off + length].tobytes() if inline else None,
            identity=self.identities[loc] if loc >= 0 and self.identities else None,
            stats=stats_format.ChunkStats._make(st) if st and st[0] else None,
        )

    def _stats_at(self, part: slice) -> np.ndarray:
        """The statistics records at `part`, decoding no further than its end."""
        s = self.stored_stats
        return s.part(part) if isinstance(s, stats_format.Stored) else s[part]  # type: ignore[index]

    def get(self, key: bytes, stats: bool = True) -> ChunkRef | None:
        """The reference stored for `key` (with its statistics if `stats`), or None when
        the range does not hold it."""
        i = self.index(key)
        return self.ref_at(i, stats) if i >= 0 else None

    def key_slice(self, start: bytes, stop: bytes | None) -> slice:
        """Positions of keys in [start, stop)."""
        lo = bisect_left(self.keys, start)
        hi = len(self.keys) if stop is None else bisect_left(self.keys, stop)
        return slice(lo, hi)

    def iter_keys(self, start: bytes = b"", stop: bytes | None = None) -> Iterator[bytes]:
        """The keys in [start, stop) in order, as bytes."""
        yield from (bytes(k) for k in self.keys[self.key_slice(start, stop)])

    def merge(self, changes: Sequence[tuple[bytes, ChunkRef | None]]) -> list[ManifestRange]:
        """This range with `changes` (sorted by key; None deletes) applied, split into
        pieces of at most 2 * TARGET_ENTRIES entries. An empty result means the range is gone."""
        writes = _from_refs(
            [k for k, r in changes if r is not None], [r for _, r in changes if r is not None]
        )
        return list(self.apply(writes, columns.keys_array([k for k, r in changes if r is None])))

    def apply(
        self, writes: ManifestRange | RangeView, deletes: np.ndarray
    ) -> Iterator[ManifestRange]:
        """This range with the entries of `writes` set and the keys in `deletes` removed,
        in pieces of at most 2 * TARGET_ENTRIES entries, made one at a time (none: the range
        is gone). Many writes are copied out TARGET_ENTRIES at a time, so a view over
        millions of staged entries is never materialized whole."""
        if len(self) and not len(deletes) and 0 < len(writes) <= FEW:
            few = self._with_few(writes.take(slice(None)))
            if few is not None:
                yield from [few] if len(few) <= 2 * TARGET_ENTRIES else few._split()
                return
        if len(self):
            gone = np.concatenate([writes.keys, deletes]) if len(deletes) else writes.keys
            kept = self.without_keys(gone)
        else:
            kept = self
        n = len(writes)
        if n <= 2 * TARGET_ENTRIES:
            yield from _concat(kept, writes.take(slice(None)))._split()
            return
        starts = list(range(0, n, TARGET_ENTRIES))
        cuts = [0, *np.searchsorted(kept.keys, writes.keys[starts[1:]]).tolist(), len(kept)]
        for j, start in enumerate(starts):
            part = writes.take(slice(start, start + TARGET_ENTRIES))
            yield from _concat(kept._take(slice(cuts[j], cuts[j + 1])), part)._split()

    def _with_few(self, w: ManifestRange) -> ManifestRange | None:
        """This range with the few entries of `w` set: replaced where their key is here,
        inserted where it is not, with the locations no entry uses any more dropped (what
        `apply`'s general path makes, without its concatenation, sort and compaction of
        every column). None where that path is needed: inline bytes, virtual sources, or
        keys wider than this range's."""
        if (
            len(self.inline)
            or len(w.inline)
            or self.identities
            or w.identities
            or w.keys.dtype.itemsize > self.keys.dtype.itemsize
        ):
            return None
        n, nloc = len(self), len(self.locations)
        pos = np.searchsorted(self.keys, w.keys)
        hit = self.keys[np.minimum(pos, n - 1)] == w.keys
        w_loc = np.where(w.loc >= 0, w.loc + nloc, -1).astype(np.int32) if nloc else w.loc
        cols = [self.kind, self.digest, self.offset, self.length, self.loc]
        new = [w.kind, w.digest, w.offset, w.length, w_loc]
        ours, theirs = self.stats, w.stats
        stats = ours is not None or theirs is not None
        if stats:  # (records saying "unknown" for the side without any)
            cols.append(stats_format.unknown(n) if ours is None else ours)
            new.append(stats_format.unknown(len(w)) if theirs is None else theirs)
        at = pos[hit]
        if len(at):
            cols = [c.copy() for c in cols]
            for c, v in zip(cols, new, strict=True):
                c[at] = v[hit]
        keys = self.keys
        if not hit.all():  # the new keys' rows and the old rows' places, found once
            miss = ~hit
            m = int(miss.sum())
            where = pos[miss]  # (each goes before the row at its place)
            cols, new = [keys, *cols], [w.keys, *new]
            if m == 1:  # one new key (a one-chunk commit's): the rows before and after it
                at_, row = int(where[0]), int(np.flatnonzero(miss)[0])
                for j, (c, v) in enumerate(zip(cols, new, strict=True)):
                    out = np.empty((n + 1, *c.shape[1:]), c.dtype)
                    out[:at_] = c[:at_]
                    out[at_] = v[row]
                    out[at_ + 1 :] = c[at_:]
                    cols[j] = out
            else:
                added = where + np.arange(m)
                kept = np.arange(n) + np.searchsorted(where, np.arange(n), side="right")
                for j, (c, v) in enumerate(zip(cols, new, strict=True)):
                    out = np.empty((n + m, *c.shape[1:]), c.dtype)
                    out[kept] = c
                    out[added] = v[miss]
                    cols[j] = out
            keys = cols.pop(0)
        loc = cols[4]
        locations = self.locations + w.locations
        # (no locations: every entry names a chunk object by its digest, nothing to drop)
        if locations and not (used := _used(loc, len(locations))).all():
            remap = np.full(len(locations) + 1, -1, np.int32)  # (the last: -1 stays -1)
            remap[:-1][used] = np.arange(int(used.sum()), dtype=np.int32)
            loc = remap[loc]
            locations = tuple(name for name, u in zip(locations, used.tolist(), strict=True) if u)
        kind, digest, offset, length = cols[:4]
        stored = cols[5] if stats else None
        return ManifestRange(
            keys, kind, digest, offset, length, loc, locations, self.inline, (), stored, True
        )

    def _take(self, idx: np.ndarray | slice) -> ManifestRange:
        return ManifestRange(
            keys=self.keys[idx],
            kind=self.kind[idx],
            digest=_digests_at(self.digest, idx),
            offset=self.offset[idx],
            length=self.length[idx],
            loc=self.loc[idx],
            locations=self.locations,
            inline=self.inline,
            identities=self.identities,
            stored_stats=_stats_taken(self.stored_stats, idx),
        )

    def _split(self) -> Iterator[ManifestRange]:
        n = len(self)
        if n == 0:
            return
        if n <= 2 * TARGET_ENTRIES:
            yield self._compact()
            return
        for i in range(0, n, TARGET_ENTRIES):
            yield self._take(slice(i, min(i + TARGET_ENTRIES, n)))._compact()

    def _compact(self) -> ManifestRange:
        """Drop inline bytes and location strings no entry refers to any more."""
        offset, inline = _packed(self)
        used = np.unique(self.loc[self.loc >= 0])
        remap = np.full(len(self.locations) + 1, -1, np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return ManifestRange(
            keys=self.keys,
            kind=self.kind,
            digest=self.digest,
            offset=offset,
            length=self.length,
            loc=remap[self.loc],
            locations=tuple(self.locations[i] for i in used),
            inline=inline,
            identities=_identities([self.identity_of(i) for i in used]),
            stored_stats=self.stored_stats,  # (the same entries: kept as read, if so)
        )

    def identity_of(self, loc: int) -> str | None:
        """The source identity of location `loc` (None: not a virtual source)."""
        return self.identities[loc] if self.identities else None

    def columns(self, staged: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
        """(metadata, columns) of the columnar encoding (shared with staged fragments,
        `staged`, whose statistics are stored uncompressed: format/statistics.py)."""
        meta: dict[str, Any] = {"locations": list(self.locations)}
        if self.identities:  # ranges without virtual entries keep their earlier encoding
            meta["identities"] = list(self.identities)
        head, stat_cols = stats_format.encode(self.stored_stats, staged or self.plain_stats)
        if head is not None:  # and so do ranges without statistics
            meta["stats"] = head
        return meta, {
            "keys": self.keys,
            "kind": self.kind,
            "digest": self.digest,
            "offset": self.offset,
            "length": self.length,
            "loc": self.loc,
            "inline": self.inline,
            **stat_cols,
        }

    @classmethod
    def from_columns(
        cls, meta: dict, c: dict[str, np.ndarray], what: str = "manifest range"
    ) -> ManifestRange:
        """Build a range from decoded columns and header (shared by manifests and fragment
        indexes); CorruptionError naming `what` if its statistics do not decode."""
        return cls(
            keys=c["keys"],
            kind=c["kind"],
            digest=c["digest"],
            offset=c["offset"],
            length=c["length"],
            loc=c["loc"],
            locations=tuple(meta["locations"]),
            inline=c["inline"],
            identities=tuple(meta.get("identities", ())),
            stored_stats=_stored(meta.get("stats"), c, what),
        )

    def encode(self, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
        """Frame the range as a columnar object; returns (object id, bytes)."""
        meta, cols = self.columns()
        return envelope.encode_columns(envelope.KIND_MANIFEST, meta, cols, algo)

    @classmethod
    def decode(cls, oid: str, data: bytes) -> ManifestRange:
        """Read back a range stored under `oid`, verifying its checksum."""
        payload = envelope.decode(envelope.KIND_MANIFEST, oid, data)
        what = f"manifest object {oid}"
        meta, c = columns.unpack(payload, what)
        return cls.from_columns(meta, c, what)

    @classmethod
    def from_refs(cls, keys: list[bytes], refs: list[ChunkRef]) -> ManifestRange:
        """A range of `refs` under `keys` (given sorted and unique)."""
        return _from_refs(keys, refs)

    def take(self, idx: np.ndarray | slice) -> ManifestRange:
        """The entries at positions `idx` (in that order), sharing this range's buffers."""
        return self._take(idx)

    def sub(self, part: slice) -> ManifestRange:
        """A slice of the entries (shared buffers, nothing copied)."""
        return self._take(part)

    def without_stats(self) -> ManifestRange:
        """The same entries without their statistics (nothing copied or decoded): what a
        read of the chunks' bytes takes, so picking entries does not decode them."""
        return self if self.stored_stats is None else replace(self, stored_stats=None)

    def without_keys(self, keys: np.ndarray) -> ManifestRange:
        """This range less the entries whose key is in `keys`."""
        if not len(self) or not len(keys):
            return self
        keep = ~np.isin(self.keys, keys)
        return self if keep.all() else self._take(np.flatnonzero(keep))


def _used(loc: np.ndarray, count: int) -> np.ndarray:
    """Which of `count` locations the entries' `loc` column refers to."""
    used = np.zeros(count, bool)
    used[loc[loc >= 0]] = True
    return used


def _from_refs(keys: list[bytes], refs: list[ChunkRef]) -> ManifestRange:
    """The columns of `refs`, each built from one Python list (a one-chunk flush's
    fragment: a few list-to-array conversions, not a numpy assignment per field)."""
    n = len(refs)
    locations: dict[tuple[str, str | None], int] = {}
    offsets: list[int] = []
    locs: list[int] = []
    inline_parts: list[bytes] = []
    pos = 0
    for r in refs:
        if r.kind == RefKind.INLINE:
            assert r.data is not None
            offsets.append(pos)
            inline_parts.append(r.data)
            pos += len(r.data)
        else:
            offsets.append(r.offset)
        if r.location is None:
            locs.append(-1)
        else:  # a file rewritten between imports: one entry per version
            locs.append(locations.setdefault((r.location, r.identity), len(locations)))
    return ManifestRange(
        keys=columns.keys_array(keys),
        kind=np.array([r.kind for r in refs], np.uint8),
        digest=np.frombuffer(b"".join([r.digest for r in refs]), np.uint8).reshape(n, 32),
        offset=np.array(offsets, np.uint64),
        length=np.array([r.length for r in refs], np.uint64),
        loc=np.array(locs, np.int32),
        locations=tuple(name for name, _ in locations),
        inline=np.frombuffer(b"".join(inline_parts), np.uint8),
        identities=_identities([identity for _, identity in locations]),
        stored_stats=stats_format.records([r.stats for r in refs]),
    )


def _stats_taken(
    stats: np.ndarray | stats_format.Stored | None, idx: np.ndarray | slice
) -> np.ndarray | stats_format.Stored | None:
    """The statistics of the entries at `idx`: gathered as stored when they are plain (a
    staged fragment's), else decoded."""
    if stats is None:
        return None
    if isinstance(stats, stats_format.Stored):
        return stats.taken(idx) or stats.records()[idx]
    return stats[idx]


def _plain_layout(ranges: list[ManifestRange]) -> tuple[dict[str, Any], np.ndarray] | None:
    """(header, rows of the first) when every one of `ranges` holds its statistics plain
    in one layout (staged fragments of one array, usually), so a commit gathers their
    records as stored instead of decoding them; None otherwise."""
    first = ranges[0].stored_stats
    if not isinstance(first, stats_format.Stored):
        return None
    key = first.layout_key()
    if key is None:
        return None
    for r in ranges[1:]:
        s = r.stored_stats
        if not isinstance(s, stats_format.Stored) or s.layout_key() != key:
            return None
    rows = first.rows()
    return None if rows is None else (first.head, rows)


def _stored(
    head: dict[str, Any] | None, cols: dict[str, np.ndarray], what: str
) -> stats_format.Stored | None:
    """A range's statistics as read (None: it has none), decoded at their first use."""
    return None if head is None else stats_format.Stored(head, cols, len(cols["keys"]), what)


def _identities(identities: list[str | None]) -> tuple[str | None, ...]:
    """Identities as stored: empty unless some location is a virtual source."""
    return tuple(identities) if any(i is not None for i in identities) else ()


def _concat(a: ManifestRange, b: ManifestRange) -> ManifestRange:
    """Entries of both (keys disjoint, each sorted), sorted by key: the columns laid end to
    end and ordered once, with the inline bytes the entries use (a range cut from a larger
    one shares its whole buffer) and both ranges' locations (`_compact` drops unused ones)."""
    if len(b) == 0:
        return a
    if len(a) == 0:
        return b
    a_offset, a_inline = _packed(a)
    b_offset, b_inline = _packed(b)
    if len(a_inline) and len(b_inline):
        shift = np.uint64(len(a_inline))
        b_offset = np.where(b.kind == RefKind.INLINE, b_offset + shift, b_offset)
    keys = np.concatenate([a.keys, b.keys])
    both = ManifestRange(
        keys=keys,
        kind=np.concatenate([a.kind, b.kind]),
        digest=np.concatenate([a.digest, b.digest]),
        offset=np.concatenate([a_offset, b_offset]),
        length=np.concatenate([a.length, b.length]),
        loc=np.concatenate([a.loc, np.where(b.loc >= 0, b.loc + len(a.locations), -1)]),
        locations=a.locations + b.locations,
        inline=np.concatenate([a_inline, b_inline]),
        identities=_identities(
            [a.identity_of(i) for i in range(len(a.locations))]
            + [b.identity_of(i) for i in range(len(b.locations))]
        ),
        stored_stats=stats_format.joined([(a.stats, len(a)), (b.stats, len(b))]),
    )
    return both._take(np.argsort(keys, kind="stable"))


def _packed(r: ManifestRange) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, inline bytes) of `r` with only the bytes its inline entries use, in entry
    order; the range's own when its buffer holds nothing else."""
    inline = r.kind == _INLINE
    lens = r.length[inline].astype(np.int64)
    total = int(lens.sum())
    if total == len(r.inline):
        return r.offset, r.inline
    begin = r.offset[inline].astype(np.int64)
    new_begin = np.cumsum(lens) - lens
    offset = r.offset.copy()
    offset[inline] = new_begin.astype(np.uint64)
    return offset, r.inline[np.repeat(begin - new_begin, lens) + np.arange(total)]


class Sources:
    """Ranges laid end to end, as `take_from` picks entries out of them by position: where
    each begins is found once, so a pick visits only the ranges holding its entries (a
    commit of a million staged chunks picks each manifest range's few thousand entries out
    of hundreds of fragments, and paid for every fragment on every pick)."""

    __slots__ = ("ranges", "starts")

    def __init__(self, ranges: Sequence[ManifestRange]) -> None:
        self.ranges = list(ranges)
        self.starts = _starts(self.ranges)


def take_from(ranges: Sequence[ManifestRange] | Sources, positions: np.ndarray) -> ManifestRange:
    """The entries at `positions` of the ranges laid end to end, in that order, without
    building the concatenation (only the ranges holding some of them are read)."""
    n = len(positions)
    src = ranges if isinstance(ranges, Sources) else Sources(ranges)
    if not src.ranges or not n:
        return ManifestRange.empty()
    if len(src.ranges) == 1:
        whole = src.ranges[0]
        if n == len(whole) and (positions == np.arange(n)).all():  # all of it, in order
            return whole
        return _take_one(whole, positions)
    perm = np.argsort(positions, kind="stable")
    ordered = positions[perm]
    owner = np.searchsorted(src.starts, ordered, side="right") - 1
    cuts = (np.flatnonzero(owner[1:] != owner[:-1]) + 1).tolist()
    lows, highs = [0, *cuts], [*cuts, n]
    present = owner[lows].tolist()
    if len(present) == 1:  # all from one range: its rows, in the order asked
        i = present[0]
        return _take_one(src.ranges[i], positions - src.starts[i])
    picked = [src.ranges[i] for i in present]
    width = max(r.keys.dtype.itemsize for r in picked)
    keys = np.empty(n, f"S{width}")
    kind = np.empty(n, np.uint8)
    digest = np.empty((n, 32), np.uint8)
    digests = _as_void(digest)
    offset = np.empty(n, np.uint64)
    length = np.empty(n, np.uint64)
    loc = np.empty(n, np.int32)
    plain = _plain_layout(picked)
    stats = (
        None
        if plain is not None or not any(r.has_stats for r in picked)
        else stats_format.unknown(n)
    )
    if plain is not None:
        plain_rows = np.empty(n, plain[1].dtype)
    locations: list[str] = []
    identities: list[str | None] = []
    inline_parts: list[np.ndarray] = []
    inline_base = 0
    for i, r, a, b in zip(present, picked, lows, highs, strict=True):
        rows = ordered[a:b] - src.starts[i]
        out = perm[a:b]
        keys[out] = r.keys[rows]
        kinds = kind[out] = r.kind[rows]
        digests[out] = _as_void(r.digest)[rows]
        lengths = length[out] = r.length[rows]
        got = r.loc[rows]
        loc[out] = np.where(got >= 0, got + len(locations), -1) if locations else got
        if plain is not None:
            plain_rows[out] = r.stored_stats.rows()[rows]
        elif stats is not None and r.has_stats:
            stats[out] = r.stats[rows]
        locations += r.locations
        if r.identities:
            identities += r.identities
        else:
            identities += [None] * len(r.locations)
        off = r.offset[rows]
        inline = kinds == _INLINE
        if inline.any():
            lens = lengths[inline].astype(np.int64)
            begin = off[inline].astype(np.int64)
            gather = np.repeat(begin - (np.cumsum(lens) - lens), lens) + np.arange(lens.sum())
            inline_parts.append(r.inline[gather])
            off[inline] = (inline_base + np.cumsum(lens) - lens).astype(np.uint64)
            inline_base += int(lens.sum())
        offset[out] = off
    return ManifestRange(
        keys=keys,
        kind=kind,
        digest=digest,
        offset=offset,
        length=length,
        loc=loc,
        locations=tuple(locations),
        inline=np.concatenate(inline_parts) if inline_parts else np.zeros(0, np.uint8),
        identities=_identities(identities),
        stored_stats=stats
        if plain is None
        else stats_format.Stored.of_rows(plain[0], plain_rows, "gathered statistics"),
    )


def _as_void(digest: np.ndarray) -> np.ndarray:
    """A digest column as one 32-byte item per entry: picking rows of it copies each as one
    item, twice as fast as picking rows of the (n, 32) bytes."""
    return np.ascontiguousarray(digest).view("V32").reshape(-1)


def _digests_at(digest: np.ndarray, idx: np.ndarray | slice) -> np.ndarray:
    """The rows `idx` of a digest column (a slice: a view; positions: copied as items)."""
    if isinstance(idx, slice):
        return digest[idx]
    return _as_void(digest)[idx].view(np.uint8).reshape(-1, 32)


def _take_one(r: ManifestRange, rows: np.ndarray) -> ManifestRange:
    """`take_from` of a single range: its columns at `rows`, with only the inline bytes of
    the picked entries (the usual case of a commit from one writer, without the general
    path's bookkeeping across ranges)."""
    picked = r._take(rows)
    offset, inline = _packed(picked)
    return replace(picked, offset=offset, inline=inline, identities=_identities(list(r.identities)))


def _starts(ranges: list[ManifestRange]) -> np.ndarray:
    return np.cumsum([0] + [len(r.keys) for r in ranges])


@dataclass(frozen=True)
class RangeView:
    """Entries picked from several ranges, in key order, copied out only a slice at a time
    (`take`): a commit of millions of staged chunks reads them from the fragments' indexes
    as it writes each manifest range, instead of holding a second copy of them all."""

    sources: Sources | list[ManifestRange]  # (a list is indexed once, into Sources)
    positions: np.ndarray  # into the sources laid end to end, in key order
    keys: np.ndarray  # the picked keys, sorted

    def __post_init__(self) -> None:
        if not isinstance(self.sources, Sources):
            object.__setattr__(self, "sources", Sources(self.sources))

    def __len__(self) -> int:
        return len(self.positions)

    def take(self, idx: slice | np.ndarray) -> ManifestRange:
        """The picked entries at `idx`, copied out of the sources."""
        return take_from(self.sources, self.positions[idx])

    def sub(self, part: slice) -> RangeView:
        """The view of a slice of the picked entries (nothing copied)."""
        return RangeView(self.sources, self.positions[part], self.keys[part])

    def without_keys(self, keys: np.ndarray) -> RangeView:
        """The view minus the entries whose keys are in `keys` (self when nothing is dropped)."""
        if not len(self) or not len(keys):
            return self
        keep = ~np.isin(self.keys, keys)
        return RangeView(self.sources, self.positions[keep], self.keys[keep])

    def ref_at(self, i: int) -> ChunkRef:
        """The reference of the entry at position `i`, copying out only that entry."""
        return self.take(slice(i, i + 1)).ref_at(0)
