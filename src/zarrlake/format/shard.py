"""Shards stored as their inner chunks: the keys of inner-chunk entries, the layout of a
sharded array (from its zarr.json), and a shard assembled from inner-chunk references.

zarr's `sharding_indexed` codec packs many inner chunks into one object and ends (or
starts) it with an index of (offset, length) pairs. zarrlake stores the inner chunks of a
shard written through the store as entries of their own, `<shard key>\\x1f<i.j...>` (local
coordinates in the shard; store keys cannot hold control characters, so these never
collide with a user's key), and presents the shard to readers as a valid shard object: the
present inner chunks in C order followed (or preceded) by an index made here. Conflicts,
rebase, dedup and diffs then work per inner chunk with no change of their own.

Handled: arrays whose codecs are exactly one `sharding_indexed` codec, on a regular chunk
grid, with index codecs `bytes` (little endian) optionally followed by `crc32c`, and the
index at the start or the end. Any other configuration (array-to-array codecs before the
sharding codec, bytes-to-bytes codecs after it, other index codecs, 0-d arrays) is staged
whole, as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, overload

from zarrlake.format.chunk_ref import ChunkRef, RefKind

if TYPE_CHECKING:
    import numpy as np

    from zarrlake.format.manifest import ManifestRange

SEP = "\x1f"
"""Separates a shard's key from an inner chunk's local coordinates in an entry's key."""
EMPTY = 2**64 - 1
"""zarr's index marks an absent inner chunk with this offset and length."""


def inner_key(shard_key: str, name: str) -> str:
    """The entry key of inner chunk `name` ("i.j") of the shard stored under `shard_key`."""
    return f"{shard_key}{SEP}{name}"


def split_inner_key(key: str) -> tuple[str, str] | None:
    """(shard key, inner chunk name) of an inner-chunk entry key; None for other keys."""
    shard, sep, name = key.partition(SEP)
    return (shard, name) if sep else None


def shard_key_of(key: str) -> str:
    """The key a reader sees for an entry key: the shard's key for inner-chunk entries."""
    return key.partition(SEP)[0]


def shown(key: str) -> str:
    """An entry key for people: `a/c/0/0#1.2` for an inner chunk."""
    return key.replace(SEP, "#")


@dataclass(frozen=True)
class ShardLayout:
    """What zarrlake needs of a sharded array's codec to split and assemble its shards."""

    chunks_per_shard: tuple[int, ...]
    index_at_start: bool
    checksum: bool

    @property
    def count(self) -> int:
        """Inner chunks per shard."""
        return math.prod(self.chunks_per_shard)

    @property
    def index_size(self) -> int:
        """Bytes of the encoded index: 16 per inner chunk, plus 4 of crc32c."""
        return 16 * self.count + (4 if self.checksum else 0)

    def name(self, i: int) -> str:
        """The name ("i.j") of the inner chunk at C-order position `i`."""
        import numpy as np  # numpy and crc32c load with the first shard, not the package

        return ".".join(str(int(c)) for c in np.unravel_index(i, self.chunks_per_shard))

    def position(self, name: str) -> int | None:
        """The C-order position of inner chunk `name`, or None if it is not one."""
        if self.count <= _NAMED_MAX:  # the names `name` makes, looked up; others parsed
            at = _positions(self.chunks_per_shard).get(name)
            if at is not None:
                return at
        parts = name.split(".")
        if len(parts) != len(self.chunks_per_shard):
            return None
        at = 0
        for part, n in zip(parts, self.chunks_per_shard, strict=True):
            if not part.isdigit() or int(part) >= n:
                return None
            at = at * n + int(part)
        return at

    def positions(self, names: list[str]) -> list[int]:
        """The C-order position of each inner chunk of `names`, -1 for a name that is not
        one (`position` for many: the grid's names mapped once, each looked up)."""
        known = _positions(self.chunks_per_shard) if self.count <= _NAMED_MAX else {}
        out = [known.get(name, -1) for name in names]
        for i, at in enumerate(out):
            if at < 0:  # (not a name `name` makes: parsed)
                found = self.position(names[i])
                out[i] = -1 if found is None else found
        return out

    def coords(self, shard: tuple[int, ...], name: str) -> tuple[int, ...] | None:
        """The inner chunk's coordinates in the array's grid of inner chunks."""
        if self.position(name) is None or len(shard) != len(self.chunks_per_shard):
            return None
        local = [int(c) for c in name.split(".")]
        return tuple(s * n + c for s, n, c in zip(shard, self.chunks_per_shard, local, strict=True))

    def encode_index(self, table: np.ndarray) -> bytes:
        """The index bytes of a (count, 2) table of offsets and lengths, as zarr's
        `bytes` + `crc32c` index codecs write it."""
        import google_crc32c
        import numpy as np

        raw = np.ascontiguousarray(table, dtype="<u8").tobytes()
        if self.checksum:
            raw += np.array([google_crc32c.value(raw)], dtype="<u4").tobytes()
        return raw

    def decode_index(self, raw: bytes | memoryview) -> np.ndarray:
        """The (count, 2) table of an index; ValueError if its size or checksum is wrong."""
        if len(raw) != self.index_size:
            raise ValueError(f"shard index of {len(raw)} bytes, expected {self.index_size}")
        import google_crc32c
        import numpy as np

        body = bytes(raw[: 16 * self.count])
        if self.checksum and np.array([google_crc32c.value(body)], dtype="<u4").tobytes() != bytes(
            raw[-4:]
        ):
            raise ValueError("shard index checksum mismatch")
        return np.frombuffer(body, dtype="<u8").reshape(self.count, 2)

    def split(self, data: bytes | memoryview) -> dict[str, tuple[int, int]] | None:
        """name -> (start, end) of each present inner chunk of shard bytes `data`; None if
        they are not a valid shard of this layout (then they are stored whole)."""
        import numpy as np

        size = self.index_size
        if len(data) < size:
            return None
        raw = data[:size] if self.index_at_start else data[len(data) - size :]
        try:
            table = self.decode_index(raw)
        except ValueError:
            return None
        lo, hi = (size, len(data)) if self.index_at_start else (0, len(data) - size)
        out: dict[str, tuple[int, int]] = {}
        for i in np.flatnonzero(table[:, 0] != EMPTY).tolist():
            start, length = int(table[i, 0]), int(table[i, 1])
            if start < lo or start + length > hi:
                return None
            if length:
                out[self.name(i)] = (start, start + length)
        return out


def layout_of(doc: bytes | None) -> ShardLayout | None:
    """The shard layout of an array's zarr.json, or None if it is not sharded in a way
    zarrlake handles (see the module docstring)."""
    return _layout(doc) if doc else None


@lru_cache(maxsize=256)
def _layout(doc: bytes) -> ShardLayout | None:
    try:
        meta = json.loads(doc)
        if meta.get("node_type") != "array" or meta.get("zarr_format") != 3:
            return None
        grid = meta["chunk_grid"]
        codecs = meta["codecs"]
        if grid.get("name") != "regular" or len(codecs) != 1:
            return None
        codec = codecs[0]
        if codec.get("name") != "sharding_indexed":
            return None
        config = codec["configuration"]
        shard = tuple(int(n) for n in grid["configuration"]["chunk_shape"])
        inner = tuple(int(n) for n in config["chunk_shape"])
        location = config.get("index_location", "end")
        index = config.get("index_codecs") or []
        names = [c.get("name") if isinstance(c, dict) else c for c in index]
        endian = (index[0].get("configuration") or {}).get("endian", "little") if index else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if (
        not shard
        or len(inner) != len(shard)
        or any(n <= 0 or s % n for s, n in zip(shard, inner, strict=True))
        or location not in ("start", "end")
        or names not in (["bytes"], ["bytes", "crc32c"])
        or endian != "little"
    ):
        return None
    return ShardLayout(
        tuple(s // n for s, n in zip(shard, inner, strict=True)),
        location == "start",
        names == ["bytes", "crc32c"],
    )


_NAMED_MAX = 1 << 16
"""Shards of up to this many inner chunks have their names mapped to positions once."""


@lru_cache(maxsize=64)
def _positions(chunks_per_shard: tuple[int, ...]) -> dict[str, int]:
    """name ("i.j") -> C-order position of every inner chunk of a shard of this grid
    (assembling a shard looks up each of its inner chunks)."""
    names = [""]
    for n in chunks_per_shard:  # (C order: the last coordinate varies fastest)
        digits = [str(c) for c in range(n)]
        names = [f"{head}.{d}" if head else d for head in names for d in digits]
    return {name: at for at, name in enumerate(names)}


@dataclass(frozen=True, eq=False)
class ShardRef:
    """A shard as readers see it, assembled from its inner chunks' entries: the present
    ones (`entries`, manifest columns, in C order) lie at `starts`, the index at
    `index_at`. Never stored: made for a lookup from the entries. Held as columns, not as
    a reference object per inner chunk (a read builds the references of the inner chunks
    it reads, `parts`), so a shard of thousands of inner chunks is a few arrays. When the
    parts are exactly the inner chunks of one stored shard object, at their places in it,
    `whole` is that object, and a read of the whole shard reads it; otherwise the parts
    follow each other in C order. A ranged read (zarr's of inner chunks) reads the parts it
    touches, each checked against its own digest, in either case."""

    entries: ManifestRange
    starts: np.ndarray  # int64, where each part begins in the shard
    index: bytes
    index_at: int
    length: int
    digest: bytes  # names the assembly (index and the parts' digests), not the bytes
    whole: ChunkRef | None = None
    kind = None  # not a stored kind (RefKind): code that dispatches on kinds skips it

    @classmethod
    def assemble(cls, layout: ShardLayout, refs: dict[str, ChunkRef]) -> ShardRef | None:
        """The shard of these inner chunks (name -> reference); None if none is present."""
        from zarrlake.format.manifest import ManifestRange

        if not refs:
            return None
        names = [name.encode() for name in refs]
        return cls.of_entries(layout, [ManifestRange.from_refs(names, list(refs.values()))])

    @classmethod
    def of_entries(cls, layout: ShardLayout, entries: list[ManifestRange]) -> ShardRef | None:
        """The shard of the inner-chunk entries `entries` (manifest ranges whose keys end in
        the inner chunks' names, after SEP: `SnapshotView.entries_under`), assembled from
        their columns; None if none is present."""
        import hashlib

        import numpy as np

        from zarrlake.format.manifest import take_from

        if not entries:
            return None
        rng = (
            entries[0]
            if len(entries) == 1
            else take_from(entries, np.arange(sum(map(len, entries))))
        )
        if not len(rng):
            return None
        at = np.array(layout.positions(_local_names(rng)), dtype=np.int64)
        present = np.flatnonzero((at >= 0) & (rng.length > 0))
        if not len(present):
            return None
        positions = at[present]
        order = np.argsort(positions, kind="stable")
        parts = rng.take(present[order])
        positions = positions[order]
        first = layout.index_size if layout.index_at_start else 0
        lengths = parts.length.astype(np.int64)
        in_place = _in_place(parts, first)
        if in_place is not None:
            starts = parts.offset.astype(np.int64)
        else:
            starts = first + np.cumsum(lengths) - lengths
        table = np.full((layout.count, 2), EMPTY, dtype="<u8")
        table[positions, 0] = starts
        table[positions, 1] = lengths
        index = layout.encode_index(table)
        end = first + int(lengths.sum())
        length = end + (0 if layout.index_at_start else len(index))
        whole = None
        if in_place is not None:
            whole = ChunkRef.object(bytes.fromhex(in_place[len(CHUNKS) :]), length)
        return cls(
            parts,
            starts,
            index,
            0 if layout.index_at_start else end,
            length,
            hashlib.sha256(index + parts.digest.tobytes()).digest(),
            whole,
        )

    @property
    def parts(self) -> Sequence[ChunkRef]:
        """The present inner chunks' references, in C order (each built when asked for)."""
        return _Parts(self.entries)

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The present inner chunks' names ("i.j"), in C order."""
        return tuple(_local_names(self.entries))

    def name(self, part: int) -> str:
        """The name ("i.j") of the present inner chunk `part` (C order), alone."""
        return bytes(self.entries.keys[part]).rpartition(_SEP)[2].decode()

    def digests(self) -> dict[str, bytes]:
        """name -> digest of each present inner chunk."""
        raw = self.entries.digest.tobytes()
        return {name: raw[32 * i : 32 * i + 32] for i, name in enumerate(self.names)}

    def any_virtual(self) -> bool:
        """Whether some inner chunk's bytes lie in a file outside the repository."""
        return bool((self.entries.kind == RefKind.VIRTUAL).any())

    def pieces(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """[start, end) as (part, from, to) pieces in order; part -1 is the index."""
        import numpy as np

        at = np.concatenate(([self.index_at], self.starts))
        size = np.concatenate(([len(self.index)], self.entries.length.astype(np.int64)))
        order = np.argsort(at, kind="stable")
        at, size = at[order], size[order]
        lo, hi = np.maximum(at, start), np.minimum(at + size, end)
        hit = np.flatnonzero(lo < hi)
        return list(
            zip(
                (order[hit] - 1).tolist(),
                (lo[hit] - at[hit]).tolist(),
                (hi[hit] - at[hit]).tolist(),
                strict=True,
            )
        )


class _Parts(Sequence[ChunkRef]):
    """The references of a shard's parts, built from its entries' columns when asked for."""

    def __init__(self, entries: ManifestRange) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, i: int) -> ChunkRef: ...
    @overload
    def __getitem__(self, i: slice) -> list[ChunkRef]: ...
    def __getitem__(self, i: int | slice) -> ChunkRef | list[ChunkRef]:
        n = len(self._entries)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"part {i} of a shard of {n}")
        return self._entries.ref_at(j, stats=False)  # (a read of the bytes: no statistics)


CHUNKS = "chunks/"
_SEP = SEP.encode()


def _local_names(entries: ManifestRange) -> list[str]:
    """The inner chunks' names ("i.j") of inner-chunk entries: their keys after SEP."""
    return [k.rpartition(_SEP)[2].decode() for k in entries.keys.tolist()]


def _in_place(parts: ManifestRange, first: int) -> str | None:
    """The chunk object whose data section the parts tile exactly, at their own offsets
    (the shard zarr wrote, every inner chunk still in it), or None."""
    import numpy as np

    if not (parts.kind == RefKind.LOCATION).all() or (parts.loc < 0).any():
        return None
    loc = parts.loc
    if (loc == loc[0]).all():  # (the usual case: one location, no set of them made)
        location = parts.locations[int(loc[0])]
    else:
        locations = {parts.locations[i] for i in np.unique(loc).tolist()}
        if len(locations) != 1:
            return None
        location = locations.pop()
    if not location.startswith(CHUNKS):
        return None
    order = np.argsort(parts.offset, kind="stable")
    offsets = parts.offset[order]
    ends = offsets + parts.length[order]
    # (each part begins where the one before it ends, the first right after a leading index)
    tiled = int(offsets[0]) == first and bool((offsets[1:] == ends[:-1]).all())
    return location if tiled else None
