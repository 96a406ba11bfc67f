"""Chunk references: where the bytes of one key live, and their checksum."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from zarrlake.errors import CorruptionError

if TYPE_CHECKING:  # the statistics (and numpy) load with the first manifest
    from zarrlake.format.statistics import ChunkStats


class RefKind(IntEnum):
    """Where a reference's bytes live; stored as one byte per manifest entry."""

    OBJECT = 0  # a content-addressed chunk object: chunks/<digest hex>
    INLINE = 1  # the bytes are held in the manifest itself
    LOCATION = 2  # a byte range of another object of the repository (a pack)
    VIRTUAL = 3  # a byte range of a file outside the repository, as it was when imported


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Where the bytes of one key live (a chunk object, inline, a pack range or an outside file) and
    their checksum."""

    kind: RefKind
    digest: bytes  # content hash of the referenced bytes (the repository's): verified on read
    length: int
    offset: int = 0
    location: str | None = None
    data: bytes | None = None
    identity: str | None = None
    """VIRTUAL: the source's identity at import (`size=N;mtime=US` for files, `size=N;etag=E`
    for objects); a read of a source whose identity changed fails instead of returning
    other bytes."""
    stats: ChunkStats | None = field(default=None, compare=False)
    """The values' statistics (format/statistics.py), None when unknown. Not part of the
    reference's identity: two references to the same bytes are equal either way."""

    @classmethod
    def inline(cls, data: bytes, digest: bytes, stats: ChunkStats | None = None) -> ChunkRef:
        """A reference holding small chunk bytes in the manifest itself."""
        return cls(RefKind.INLINE, digest, len(data), data=data, stats=stats)

    @classmethod
    def object(cls, digest: bytes, length: int) -> ChunkRef:
        """A reference to the content-addressed chunk object named by `digest`."""
        return cls(RefKind.OBJECT, digest, length)

    @classmethod
    def virtual(cls, location: str, offset: int, length: int, identity: str) -> ChunkRef:
        """A byte range of the source `location` (a file:// or s3:// URL). Its digest names
        the range and the source's identity, not the bytes (they are never read to import):
        two references to the same bytes of the same version of a file are equal."""
        return cls(
            RefKind.VIRTUAL,
            virtual_digest(location, offset, length, identity),
            length,
            offset,
            location,
            identity=identity,
        )

    def virtual_body(self) -> bytes:
        """What a staged record of a VIRTUAL reference holds besides digest and length:
        offset, then location and identity separated by a NUL."""
        assert self.location is not None and self.identity is not None
        return _OFFSET.pack(self.offset) + f"{self.location}\0{self.identity}".encode()

    @classmethod
    def from_virtual_body(cls, digest: bytes, length: int, body: bytes, what: str) -> ChunkRef:
        """Rebuild a VIRTUAL reference from its stored body (offset, location, identity).

        Raises CorruptionError naming `what` when the body cannot be decoded."""
        try:
            (offset,) = _OFFSET.unpack_from(body)
            location, identity = body[_OFFSET.size :].decode().split("\0")
        except (struct.error, ValueError) as e:
            raise CorruptionError(
                f"{what}: cannot decode its virtual reference ({e})"
                "; run `zarrlake fsck` to find every damaged object"
            ) from e
        return cls(RefKind.VIRTUAL, digest, length, offset, location, identity=identity)


_OFFSET = struct.Struct("<Q")


def virtual_digest(location: str, offset: int, length: int, identity: str) -> bytes:
    """The 32-byte name of a virtual reference: SHA-256 of what it points at."""
    import hashlib

    named = f"zarrlake-virtual\0{location}\0{identity}\0{offset}\0{length}"
    return hashlib.sha256(named.encode()).digest()


def chunk_object_key(digest: bytes) -> str:
    """The storage key of the chunk object with this digest (`chunks/<hex>`)."""
    return f"chunks/{digest.hex()}"
