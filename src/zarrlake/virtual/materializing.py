"""Replacing an array's virtual chunks by native ones: each chunk's bytes are read from its
source (checked against its identity at import) and written into the repository, for users
who want to retire the original files."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.format.chunk_ref import RefKind
from zarrlake.virtual.decoding import ChunkDecoder, check_batch

if TYPE_CHECKING:
    from zarrlake.session import Session

BATCH = 256
"""Chunks read and staged together."""
HELD_BYTES = 256 << 20
"""Up to this many bytes of chunks, the checking pass's reads are kept for storing them."""


def materialize(session: Session, path: str) -> int:
    """Copy the virtual chunks of the array at `path` into the repository.

    The caller commits; returns how many were copied.

    Raises
    ------
    NotFoundError
        No array at `path`.
    StaleVirtualChunkError
        A source changed since import, or holds bytes that do not decode (rewritten with
        its size and mtime kept), naming the file and the key. Every chunk is read and
        decoded before any is stored, so nothing is staged then.
    """
    path = path.strip("/") if isinstance(path, str) else path
    doc = session.read(f"{path}/zarr.json") if isinstance(path, str) and path else None
    if doc is None:
        raise NotFoundError(f"no array at {path!r}; run `zarrlake ls REF` to see the arrays")
    if json.loads(doc).get("node_type") != "array":
        raise InvalidInputError(f"{path!r} is a group, not an array; give an array path")
    decoder, held = ChunkDecoder(path, doc), Held()
    keys = session.list_prefix(f"{path}/c/") + (
        [f"{path}/c"] if session.exists(f"{path}/c") else []
    )
    virtual = []
    for key in keys:
        ref = session._engine.lookup(key)
        if ref is not None and ref.kind == RefKind.VIRTUAL:
            virtual.append((key, ref))
    objects = session._engine.context.objects
    for i in range(0, len(virtual), BATCH):  # bounded memory: a batch at a time
        batch = virtual[i : i + BATCH]
        datas = objects.map(lambda kr: objects.read_ref(kr[1], f"key {kr[0]!r}"), batch)
        check_batch(decoder, batch, datas)
        held.keep(datas)
    for i in range(0, len(virtual), BATCH):  # all decode: store them (read again if not held)
        batch = virtual[i : i + BATCH]
        datas = held.batch(i // BATCH)
        if datas is None:
            datas = objects.map(lambda kr: objects.read_ref(kr[1], f"key {kr[0]!r}"), batch)
            check_batch(decoder, batch, datas)
        session.write_many([(k, d) for (k, _), d in zip(batch, datas, strict=True)])
    return len(virtual)


class Held:
    """The batches read by the checking pass, kept for the storing pass while they total
    at most HELD_BYTES (then none are kept: the storing pass reads them again)."""

    def __init__(self) -> None:
        self._batches: list[list[bytes | memoryview]] | None = []
        self._bytes = 0

    def keep(self, datas: list[bytes | memoryview]) -> None:
        """Keep one more batch, or drop them all once over HELD_BYTES."""
        if self._batches is None:
            return
        self._bytes += sum(len(d) for d in datas)
        if self._bytes > HELD_BYTES:
            self._batches = None
        else:
            self._batches.append(datas)

    def batch(self, index: int) -> list[bytes | memoryview] | None:
        """Batch `index` as read, or None if it was not kept."""
        return None if self._batches is None else self._batches[index]
