"""Staged records: one session write (or delete) of one key, as held in the metastore."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from zarrlake.errors import CorruptionError
from zarrlake.format.chunk_ref import ChunkRef, RefKind

_HEAD = struct.Struct("<BB8s32sQ")  # op, ref kind, writer, digest, length
_DIGEST_AT = struct.calcsize("<BB8s")
OP_WRITE = 1
OP_DELETE = 2
_KINDS = {k.value: k for k in RefKind}


@dataclass(frozen=True, slots=True)
class StagedRecord:
    """One staged write or delete of one key, as held in the metastore with the session that staged
    it."""

    op: int
    writer: bytes  # 8 bytes naming the session handle that staged it
    ref: ChunkRef | None  # None for deletes

    def encode(self) -> bytes:
        """The record as stored: a fixed header, then inline bytes or the virtual body."""
        if self.ref is None:
            return _HEAD.pack(self.op, 0, self.writer, b"\0" * 32, 0)
        head = _HEAD.pack(self.op, self.ref.kind, self.writer, self.ref.digest, self.ref.length)
        if self.ref.kind == RefKind.VIRTUAL:
            return head + self.ref.virtual_body()
        return head + (self.ref.data or b"")

    @classmethod
    def decode(cls, data: bytes, key: str) -> StagedRecord:
        """Parse the stored record for `key`; raises CorruptionError when it is malformed."""
        try:
            op, kind, writer, digest, length = _HEAD.unpack_from(data)
        except struct.error as e:
            raise CorruptionError(
                f"staged record for {key!r}: cannot decode ({e})"
                "; abandon the session and write its data again in a new one"
            ) from e
        if op == OP_DELETE:
            return cls(op, writer, None)
        body = data[_HEAD.size :]
        if kind == RefKind.INLINE:
            if len(body) != length:
                raise CorruptionError(
                    f"staged record for {key!r}: truncated"
                    "; abandon the session and write its data again in a new one"
                )
            return cls(op, writer, ChunkRef(RefKind.INLINE, digest, length, data=body))
        if kind == RefKind.VIRTUAL:
            what = f"staged record for {key!r}"
            return cls(op, writer, ChunkRef.from_virtual_body(digest, length, body, what))
        return cls(op, writer, ChunkRef(_KINDS[kind], digest, length))

    @staticmethod
    def content(data: bytes) -> bytes:
        """The part of an encoded record that says what was written (op and digest), without
        who wrote it: two workers' records with equal content staged the same bytes."""
        return data[:1] + data[_DIGEST_AT : _DIGEST_AT + 32]
