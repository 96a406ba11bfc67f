"""Chunk references: where the bytes of one key live, and their checksum."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class RefKind(IntEnum):
    OBJECT = 0  # a content-addressed chunk object: chunks/<digest hex>
    INLINE = 1  # the bytes are held in the manifest itself
    LOCATION = 2  # a byte range of another object (a pack, or a virtual reference)


@dataclass(frozen=True, slots=True)
class ChunkRef:
    kind: RefKind
    digest: bytes  # content hash of the referenced bytes (the repository's): verified on read
    length: int
    offset: int = 0
    location: str | None = None
    data: bytes | None = None

    @classmethod
    def inline(cls, data: bytes, digest: bytes) -> ChunkRef:
        return cls(RefKind.INLINE, digest, len(data), data=data)

    @classmethod
    def object(cls, digest: bytes, length: int) -> ChunkRef:
        return cls(RefKind.OBJECT, digest, length)


def chunk_object_key(digest: bytes) -> str:
    return f"chunks/{digest.hex()}"
