"""Manifest ranges: sorted, immutable runs of (key -> chunk reference), stored columnar.

A snapshot's keys are split into ranges of a few thousand entries; a commit rewrites only
the ranges its changes fall into, so its cost does not grow with the number of chunks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from zarrlake.format import columns, envelope
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.digest import Hash

TARGET_ENTRIES = 4096
"""Ranges are split into pieces of this many entries once they exceed twice as many."""


@dataclass(frozen=True)
class ManifestRange:
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

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def empty(cls) -> ManifestRange:
        return _from_refs([], [])

    @property
    def first_key(self) -> bytes:
        return bytes(self.keys[0])

    def index(self, key: bytes) -> int:
        """Position of `key`, or -1."""
        i = int(np.searchsorted(self.keys, key))
        return i if i < len(self.keys) and self.keys[i] == key else -1

    def ref_at(self, i: int) -> ChunkRef:
        kind = RefKind(int(self.kind[i]))
        off, length = int(self.offset[i]), int(self.length[i])
        loc = int(self.loc[i])
        return ChunkRef(
            kind=kind,
            digest=self.digest[i].tobytes(),
            length=length,
            offset=off if kind != RefKind.INLINE else 0,
            location=self.locations[loc] if loc >= 0 else None,
            data=self.inline[off : off + length].tobytes() if kind == RefKind.INLINE else None,
            identity=self.identities[loc] if loc >= 0 and self.identities else None,
        )

    def get(self, key: bytes) -> ChunkRef | None:
        i = self.index(key)
        return self.ref_at(i) if i >= 0 else None

    def key_slice(self, start: bytes, stop: bytes | None) -> slice:
        """Positions of keys in [start, stop)."""
        lo = int(np.searchsorted(self.keys, start))
        hi = len(self.keys) if stop is None else int(np.searchsorted(self.keys, stop))
        return slice(lo, hi)

    def iter_keys(self, start: bytes = b"", stop: bytes | None = None) -> Iterator[bytes]:
        yield from (bytes(k) for k in self.keys[self.key_slice(start, stop)])

    def merge(self, changes: Sequence[tuple[bytes, ChunkRef | None]]) -> list[ManifestRange]:
        """This range with `changes` (sorted by key; None deletes) applied, split into
        pieces of at most 2 * TARGET_ENTRIES entries. An empty result means the range is gone."""
        writes = _from_refs(
            [k for k, r in changes if r is not None], [r for _, r in changes if r is not None]
        )
        return self.apply(writes, columns.keys_array([k for k, r in changes if r is None]))

    def apply(self, writes: ManifestRange, deletes: np.ndarray) -> list[ManifestRange]:
        """This range with the entries of `writes` set and the keys in `deletes` removed,
        split into pieces of at most 2 * TARGET_ENTRIES entries (none: the range is gone)."""
        if len(self):
            gone = np.concatenate([writes.keys, deletes]) if len(deletes) else writes.keys
            kept = self.without_keys(gone)
        else:
            kept = self
        return _concat(kept, writes)._split()

    def _take(self, idx: np.ndarray) -> ManifestRange:
        return ManifestRange(
            keys=self.keys[idx],
            kind=self.kind[idx],
            digest=self.digest[idx],
            offset=self.offset[idx],
            length=self.length[idx],
            loc=self.loc[idx],
            locations=self.locations,
            inline=self.inline,
            identities=self.identities,
        )

    def _split(self) -> list[ManifestRange]:
        n = len(self)
        if n == 0:
            return []
        if n <= 2 * TARGET_ENTRIES:
            return [self._compact()]
        return [
            self._take(np.arange(i, min(i + TARGET_ENTRIES, n)))._compact()
            for i in range(0, n, TARGET_ENTRIES)
        ]

    def _compact(self) -> ManifestRange:
        """Drop inline bytes and location strings no entry refers to any more."""
        inline_idx = np.flatnonzero(self.kind == RefKind.INLINE)
        lengths = self.length[inline_idx].astype(np.int64)
        offset, inline = self.offset, self.inline
        if lengths.sum() != len(self.inline):  # some inline bytes are no longer referenced
            starts = self.offset[inline_idx].astype(np.int64)
            new_starts = np.cumsum(lengths) - lengths
            gather = np.repeat(starts - new_starts, lengths) + np.arange(lengths.sum())
            inline = self.inline[gather]
            offset = self.offset.copy()
            offset[inline_idx] = new_starts.astype(np.uint64)
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
        )

    def identity_of(self, loc: int) -> str | None:
        """The source identity of location `loc` (None: not a virtual source)."""
        return self.identities[loc] if self.identities else None

    def columns(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(metadata, columns) of the columnar encoding (shared with staged fragments)."""
        meta: dict[str, list] = {"locations": list(self.locations)}
        if self.identities:  # ranges without virtual entries keep their earlier encoding
            meta["identities"] = list(self.identities)
        return meta, {
            "keys": self.keys,
            "kind": self.kind,
            "digest": self.digest,
            "offset": self.offset,
            "length": self.length,
            "loc": self.loc,
            "inline": self.inline,
        }

    @classmethod
    def from_columns(cls, meta: dict, c: dict[str, np.ndarray]) -> ManifestRange:
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
        )

    def encode(self, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
        meta, cols = self.columns()
        return envelope.encode(envelope.KIND_MANIFEST, columns.pack(meta, cols), algo)

    @classmethod
    def decode(cls, oid: str, data: bytes) -> ManifestRange:
        payload = envelope.decode(envelope.KIND_MANIFEST, oid, data)
        meta, c = columns.unpack(payload, f"manifest object {oid}")
        return cls.from_columns(meta, c)

    @classmethod
    def from_refs(cls, keys: list[bytes], refs: list[ChunkRef]) -> ManifestRange:
        """A range of `refs` under `keys` (given sorted and unique)."""
        return _from_refs(keys, refs)

    def take(self, idx: np.ndarray) -> ManifestRange:
        """The entries at positions `idx` (in that order), sharing this range's buffers."""
        return self._take(idx)

    def without_keys(self, keys: np.ndarray) -> ManifestRange:
        """This range less the entries whose key is in `keys`."""
        if not len(self) or not len(keys):
            return self
        return self._take(np.flatnonzero(~np.isin(self.keys, keys)))


def _from_refs(keys: list[bytes], refs: list[ChunkRef]) -> ManifestRange:
    n = len(refs)
    locations: dict[tuple[str, str | None], int] = {}
    kind = np.empty(n, np.uint8)
    digest = np.empty((n, 32), np.uint8)
    offset = np.zeros(n, np.uint64)
    length = np.empty(n, np.uint64)
    loc = np.full(n, -1, np.int32)
    inline_parts: list[bytes] = []
    pos = 0
    for i, r in enumerate(refs):
        kind[i] = r.kind
        digest[i] = np.frombuffer(r.digest, np.uint8)
        length[i] = r.length
        if r.kind == RefKind.INLINE:
            assert r.data is not None
            offset[i] = pos
            inline_parts.append(r.data)
            pos += len(r.data)
        else:
            offset[i] = r.offset
        if r.location is not None:  # a file rewritten between imports: one entry per version
            loc[i] = locations.setdefault((r.location, r.identity), len(locations))
    return ManifestRange(
        keys=columns.keys_array(keys),
        kind=kind,
        digest=digest,
        offset=offset,
        length=length,
        loc=loc,
        locations=tuple(name for name, _ in locations),
        inline=np.frombuffer(b"".join(inline_parts), np.uint8),
        identities=_identities([identity for _, identity in locations]),
    )


def _identities(identities: list[str | None]) -> tuple[str | None, ...]:
    """Identities as stored: empty unless some location is a virtual source."""
    return tuple(identities) if any(i is not None for i in identities) else ()


def _concat(a: ManifestRange, b: ManifestRange) -> ManifestRange:
    """Entries of both (keys disjoint, each sorted), sorted by key."""
    if len(b) == 0:
        return a
    if len(a) == 0:
        return b
    both = concat_ranges([a, b])
    return both._take(np.argsort(both.keys, kind="stable"))


def concat_ranges(ranges: list[ManifestRange]) -> ManifestRange:
    """The entries of every range, in the given order (not sorted, keys not merged)."""
    ranges = [r for r in ranges if len(r)]
    if not ranges:
        return ManifestRange.empty()
    if len(ranges) == 1:
        return ranges[0]
    locations: list[str] = []
    locs, offsets, inline_base = [], [], 0
    for r in ranges:
        locs.append(np.where(r.loc >= 0, r.loc + len(locations), -1).astype(np.int32))
        inline = r.kind == RefKind.INLINE
        offsets.append(np.where(inline, r.offset + np.uint64(inline_base), r.offset))
        locations += r.locations
        inline_base += len(r.inline)
    return ManifestRange(
        keys=np.concatenate([r.keys for r in ranges]),
        kind=np.concatenate([r.kind for r in ranges]),
        digest=np.concatenate([r.digest for r in ranges]),
        offset=np.concatenate(offsets).astype(np.uint64),
        length=np.concatenate([r.length for r in ranges]),
        loc=np.concatenate(locs),
        locations=tuple(locations),
        inline=np.concatenate([r.inline for r in ranges]),
        identities=_identities([r.identity_of(i) for r in ranges for i in range(len(r.locations))]),
    )
