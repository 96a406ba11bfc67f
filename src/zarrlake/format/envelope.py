"""The frame every format object is stored in: magic, kind, format version, payload.

Objects are named by the content hash of their framed bytes, so the name is the checksum:
`decode` recomputes it and refuses bytes that do not match. Version 1 frames are hashed with
SHA-256; version 2 frames name their hash algorithm and digest length in the header, which
also applies to the chunk digests the object holds.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from zarrlake.errors import CorruptionError
from zarrlake.format.digest import DIGEST_LENGTH, Hash, digest

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"ZLK\x01"
FORMAT_VERSION = 2
_HEADER = struct.Struct("<4sBH")  # magic, kind, version
_HASH = struct.Struct("<BB")  # version 2: hash algorithm, digest length

KIND_MANIFEST = 1
KIND_SNAPSHOT = 2
KIND_CHANGES = 3
KIND_COMMIT = 4
KIND_FRAGMENT = 5
KIND_NAMES = {
    KIND_MANIFEST: "manifest",
    KIND_SNAPSHOT: "snapshot",
    KIND_CHANGES: "changes",
    KIND_COMMIT: "commit",
    KIND_FRAGMENT: "fragment",
}
ID_LENGTH = 40
"""Hex digits of an object id (160 bits of its content hash, as git)."""


def object_id(data: bytes, algo: Hash = Hash.SHA256) -> str:
    """The id an object with these framed bytes is stored under: its truncated hex digest."""
    return digest(algo, data).hex()[:ID_LENGTH]


def header(kind: int, algo: Hash = Hash.SHA256) -> bytes:
    """The frame's header. SHA-256 objects keep the version 1 frame, so their bytes and ids
    are what older zarrlake wrote and reads."""
    if algo is Hash.SHA256:
        return _HEADER.pack(MAGIC, kind, 1)
    return _HEADER.pack(MAGIC, kind, 2) + _HASH.pack(algo, DIGEST_LENGTH)


def named(framed: bytes, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
    """(object id, framed bytes) of bytes that start with `header` (built in one piece by
    callers that frame large payloads without copying them twice)."""
    return object_id(framed, algo), framed


def encode_columns(
    kind: int, meta: dict, cols: dict[str, np.ndarray], algo: Hash = Hash.SHA256
) -> tuple[str, bytes]:
    """Frame a columnar payload (format/columns.py), copying the columns once."""
    from zarrlake.format import columns  # numpy: loaded by the columnar kinds, not commits

    return named(columns.pack(meta, cols, header(kind, algo)), algo)


def encode(kind: int, payload: bytes, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
    """Frame `payload`; returns (object id, framed bytes)."""
    return named(header(kind, algo) + payload, algo)


def _hash_of(data: bytes) -> tuple[Hash, int]:
    """The hash algorithm a frame names and where its payload starts (best effort: a frame
    too damaged to say is checked as SHA-256, and fails that check)."""
    if len(data) >= _HEADER.size + _HASH.size and _HEADER.unpack_from(data)[2] >= 2:
        algo, length = _HASH.unpack_from(data, _HEADER.size)
        if algo in Hash._value2member_map_ and length == DIGEST_LENGTH:
            return Hash(algo), _HEADER.size + _HASH.size
    return Hash.SHA256, _HEADER.size


def decode(kind: int, oid: str, data: bytes) -> memoryview:
    """Verify checksum, magic, kind and version; returns the payload (a view of `data`:
    columnar objects decode without copying it)."""
    what = f"{KIND_NAMES.get(kind, kind)} object {oid}"
    if len(data) >= _HEADER.size and data[:4] == MAGIC:
        version = _HEADER.unpack_from(data)[2]
        if version > FORMAT_VERSION:
            raise CorruptionError(
                f"{what}: format version {version} is newer than this zarrlake "
                f"({FORMAT_VERSION}); upgrade zarrlake to read it"
            )
    algo, start = _hash_of(data)
    if object_id(data, algo) != oid:
        raise CorruptionError(
            f"{what}: checksum mismatch (stored bytes were altered or truncated)"
            "; run `zarrlake fsck` to find every damaged object"
        )
    if len(data) < _HEADER.size:
        raise CorruptionError(
            f"{what}: too short to be a zarrlake object"
            "; run `zarrlake fsck` to find every damaged object"
        )
    magic, got_kind, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptionError(
            f"{what}: not a zarrlake object (bad magic)"
            "; run `zarrlake fsck` to find every damaged object"
        )
    if got_kind != kind:
        raise CorruptionError(
            f"{what}: is a {KIND_NAMES.get(got_kind, got_kind)} object"
            "; run `zarrlake fsck` to find every damaged object"
        )
    return memoryview(data)[start:]
