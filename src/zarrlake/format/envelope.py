"""The frame every format object is stored in: magic, kind, format version, payload.

Objects are named by the SHA-256 of their framed bytes, so the name is the checksum:
`decode` recomputes it and refuses bytes that do not match.
"""

from __future__ import annotations

import hashlib
import struct

from zarrlake.errors import CorruptionError

MAGIC = b"ZLK\x01"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBH")  # magic, kind, version

KIND_MANIFEST = 1
KIND_SNAPSHOT = 2
KIND_CHANGES = 3
KIND_COMMIT = 4
KIND_NAMES = {
    KIND_MANIFEST: "manifest",
    KIND_SNAPSHOT: "snapshot",
    KIND_CHANGES: "changes",
    KIND_COMMIT: "commit",
}
ID_LENGTH = 40
"""Hex digits of an object id (160 bits of SHA-256, as git)."""


def object_id(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:ID_LENGTH]


def encode(kind: int, payload: bytes) -> tuple[str, bytes]:
    """Frame `payload`; returns (object id, framed bytes)."""
    data = _HEADER.pack(MAGIC, kind, FORMAT_VERSION) + payload
    return object_id(data), data


def decode(kind: int, oid: str, data: bytes) -> bytes:
    """Verify checksum, magic, kind and version; returns the payload."""
    what = f"{KIND_NAMES.get(kind, kind)} object {oid}"
    if object_id(data) != oid:
        raise CorruptionError(f"{what}: checksum mismatch (stored bytes were altered or truncated)")
    if len(data) < _HEADER.size:
        raise CorruptionError(f"{what}: too short to be a zarrlake object")
    magic, got_kind, version = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptionError(f"{what}: not a zarrlake object (bad magic)")
    if got_kind != kind:
        raise CorruptionError(f"{what}: is a {KIND_NAMES.get(got_kind, got_kind)} object")
    if version > FORMAT_VERSION:
        raise CorruptionError(
            f"{what}: format version {version} is newer than this zarrlake ({FORMAT_VERSION})"
        )
    return data[_HEADER.size :]
