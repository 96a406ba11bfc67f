"""Block tables: per-block digests of a large chunk object, so a byte range of it can be
read and verified without reading the whole object.

A chunk object `chunks/<digest>` of at least TABLE_MIN bytes gets a sidecar
`blocks/<digest>` when it is written: the digest of each BLOCK-sized block (the last one
shorter), named by the repository's content hash, plus the object's own digest and length,
all closed by a digest of the table itself. A ranged read fetches the table (once per
process) and the blocks covering the range, checks each block and slices. The table is an
addition: objects written before it, or by older zarrlake, have none and are read whole
and checked against their digest as before (no format version change).

What a block check proves: the bytes are those hashed when the object was written. The
table is bound to the object by name and by the object digest and length it records, not
by a hash tree to the object digest, so a consistent rewrite of both object and table is
seen only by a whole-object read (fsck); random corruption of either is always seen.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from zarrlake.errors import CorruptionError
from zarrlake.format.digest import DIGEST_LENGTH, Hash, digest

PREFIX = "blocks/"
"""Where tables live: `blocks/<hex digest of the chunk object>`."""

BLOCK = 64 << 10
"""Block size of objects up to MAX_BLOCKS blocks; larger objects use the smallest power of
two times this that keeps them within MAX_BLOCKS."""
MAX_BLOCKS = 4096
TABLE_MIN = 4 * BLOCK
"""Smaller objects get no table: a ranged read of them reads the whole object."""

MAGIC = b"ZLBT"
VERSION = 1
_HEADER = struct.Struct("<4sBBIQ")  # magic, version, hash, block size, object length


def table_key(object_digest: bytes) -> str:
    """The storage key of the table of the chunk object with this digest."""
    return f"{PREFIX}{object_digest.hex()}"


def block_size(length: int) -> int:
    """The block size of an object of `length` bytes (a function of the length alone, so a
    reader knows which blocks to fetch before the table arrives)."""
    size = BLOCK
    while length > size * MAX_BLOCKS:
        size *= 2
    return size


@dataclass(frozen=True, slots=True)
class BlockTable:
    """The per-block digests of one chunk object."""

    algo: Hash
    block_size: int
    length: int
    object_digest: bytes
    digests: bytes  # DIGEST_LENGTH bytes per block, in order

    @property
    def blocks(self) -> int:
        """How many blocks the object has."""
        return -(-self.length // self.block_size)

    @classmethod
    def build(cls, algo: Hash, data: bytes | memoryview, object_digest: bytes) -> BlockTable:
        """The table of `data` (whose digest is `object_digest`)."""
        size = block_size(len(data))
        view = memoryview(data)
        parts = [digest(algo, view[i : i + size]) for i in range(0, len(data), size)]
        return cls(algo, size, len(data), object_digest, b"".join(parts))

    def encode(self) -> bytes:
        """The stored bytes: header, object digest, block digests, digest of all before."""
        body = (
            _HEADER.pack(MAGIC, VERSION, self.algo, self.block_size, self.length)
            + self.object_digest
            + self.digests
        )
        return body + digest(self.algo, body)

    @classmethod
    def decode(cls, data: bytes, object_digest: bytes, length: int, what: str) -> BlockTable:
        """The table stored as `data` for the object with this digest and length.

        Raises
        ------
        CorruptionError
            If the table fails its own checksum or belongs to another object.
        """
        bad = f"{what}: its block table is damaged"
        if len(data) < _HEADER.size + 2 * DIGEST_LENGTH:
            raise CorruptionError(
                f"{bad} (too short); run `zarrlake fsck` to find every damaged object"
            )
        magic, version, algo, size, got_length = _HEADER.unpack_from(data)
        if magic != MAGIC or algo not in Hash._value2member_map_ or size <= 0:
            raise CorruptionError(
                f"{bad} (bad header); run `zarrlake fsck` to find every damaged object"
            )
        if version > VERSION:
            raise CorruptionError(
                f"{bad} (version {version} is newer than this zarrlake)"
                "; upgrade zarrlake to read it"
            )
        hash_ = Hash(algo)
        body = memoryview(data)[:-DIGEST_LENGTH]
        if digest(hash_, body) != bytes(data[-DIGEST_LENGTH:]):
            raise CorruptionError(
                f"{bad} (checksum mismatch); run `zarrlake fsck` to find every damaged object"
            )
        start = _HEADER.size
        table = cls(
            hash_,
            size,
            got_length,
            bytes(body[start : start + DIGEST_LENGTH]),
            bytes(body[start + DIGEST_LENGTH :]),
        )
        if table.object_digest != object_digest or got_length != length:
            raise CorruptionError(
                f"{what}: its block table belongs to another object"
                "; run `zarrlake fsck` to find every damaged object"
            )
        if len(table.digests) != table.blocks * DIGEST_LENGTH:
            raise CorruptionError(
                f"{bad} (wrong number of block digests)"
                "; run `zarrlake fsck` to find every damaged object"
            )
        return table

    def covering(self, start: int, end: int) -> tuple[int, int]:
        """The byte span of the whole blocks covering [start, end) (end > start)."""
        size = self.block_size
        return start // size * size, min(-(-end // size) * size, self.length)

    def verify(self, start: int, end: int, data: bytes | memoryview, what: str) -> None:
        """Check `data`, read as the whole blocks [start, end) of the object.

        Raises
        ------
        CorruptionError
            If the object is shorter than that, or naming the first block whose bytes do
            not match their digest.
        """
        size = self.block_size
        view = memoryview(data)
        if start % size or (end % size and end != self.length):
            raise ValueError(f"[{start}, {end}) is not whole blocks of {size} bytes")
        if len(view) != end - start:
            raise CorruptionError(
                f"{what}: checksum mismatch: {len(view)} bytes at {start}, expected "
                f"{end - start} (the object is truncated)"
            )
        first = start // size
        for i in range(0, len(view), size):
            block = first + i // size
            want = self.digests[block * DIGEST_LENGTH : (block + 1) * DIGEST_LENGTH]
            if digest(self.algo, view[i : i + size]) != want:
                raise CorruptionError(
                    f"{what}: checksum mismatch in block {block} "
                    f"(bytes {block * size}-{min((block + 1) * size, self.length)})"
                    "; run `zarrlake fsck` to find every damaged object"
                )
