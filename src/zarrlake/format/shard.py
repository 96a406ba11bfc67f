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
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from zarrlake.format.chunk_ref import ChunkRef, RefKind

if TYPE_CHECKING:
    import numpy as np

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
    from itertools import product

    grid = product(*(range(n) for n in chunks_per_shard))
    return {".".join(map(str, coords)): at for at, coords in enumerate(grid)}


@dataclass(frozen=True)
class ShardRef:
    """A shard as readers see it, assembled from its inner chunks' references: `parts`
    lie at `starts`, the index at `index_at`. Never stored: made for each lookup from the
    entries. When the parts are exactly the inner chunks of one stored shard object, at
    their places in it, `whole` is that object and readers read it (its block table
    verifies ranges); otherwise the parts follow each other in C order."""

    parts: tuple[ChunkRef, ...]
    starts: tuple[int, ...]
    index: bytes
    index_at: int
    length: int
    digest: bytes  # names the assembly (index and the parts' digests), not the bytes
    names: tuple[str, ...]
    whole: ChunkRef | None = None
    kind = None  # not a stored kind (RefKind): code that dispatches on kinds skips it

    @classmethod
    def assemble(cls, layout: ShardLayout, refs: dict[str, ChunkRef]) -> ShardRef | None:
        """The shard of these inner chunks (name -> reference); None if none is present."""
        import hashlib

        import numpy as np

        present = sorted(
            (p, name, ref)
            for name, ref in refs.items()
            if ref.length and (p := layout.position(name)) is not None
        )
        if not present:
            return None
        first = layout.index_size if layout.index_at_start else 0
        parts = tuple(ref for _, _, ref in present)
        in_place = _in_place(parts, first)
        if in_place is not None:
            starts = [r.offset for r in parts]
        else:
            starts = list(np.cumsum([first] + [r.length for r in parts[:-1]]).tolist())
        table = np.full((layout.count, 2), EMPTY, dtype="<u8")
        table[[p for p, _, _ in present]] = np.array(
            [starts, [r.length for r in parts]], dtype="<u8"
        ).T
        index = layout.encode_index(table)
        end = first + sum(r.length for r in parts)
        length = end + (0 if layout.index_at_start else len(index))
        whole = None
        if in_place is not None:
            whole = ChunkRef.object(bytes.fromhex(in_place[len(CHUNKS) :]), length)
        return cls(
            parts,
            tuple(starts),
            index,
            0 if layout.index_at_start else end,
            length,
            hashlib.sha256(index + b"".join(r.digest for r in parts)).digest(),
            tuple(name for _, name, _ in present),
            whole,
        )

    def pieces(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """[start, end) as (part, from, to) pieces in order; part -1 is the index."""
        out = []
        spans = [(-1, self.index_at, len(self.index))] + [
            (i, s, r.length) for i, (s, r) in enumerate(zip(self.starts, self.parts, strict=True))
        ]
        for part, at, length in sorted(spans, key=lambda x: x[1]):
            lo, hi = max(start, at), min(end, at + length)
            if lo < hi:
                out.append((part, lo - at, hi - at))
        return out


CHUNKS = "chunks/"


def _in_place(parts: tuple[ChunkRef, ...], first: int) -> str | None:
    """The chunk object whose data section the parts tile exactly, at their own offsets
    (the shard zarr wrote, every inner chunk still in it), or None."""
    location = parts[0].location
    if location is None or not location.startswith(CHUNKS):
        return None
    if any(r.kind != RefKind.LOCATION or r.location != location for r in parts):
        return None
    at = first
    for r in sorted(parts, key=lambda r: r.offset):
        if r.offset != at:
            return None
        at += r.length
    return location
