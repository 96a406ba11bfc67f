"""Checking that a virtual chunk's bytes decode with its array's codecs.

A source file rewritten with its size and mtime kept passes the identity check of every
read, and its new bytes are not the chunks the references point at: zarr then fails deep in
a codec (a bare zlib error naming no file). Decoding the bytes here, with the array's own
metadata, turns that into StaleVirtualChunkError naming the file, the key and the byte
range: `materialize` checks every chunk before it stores any, and readers that saw a codec
fail (`zarrlake cat`) use `find_undecodable` to say which chunk and file it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from zarrlake.errors import ZarrLakeError
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.zarr_store.store import stale_virtual_chunk

if TYPE_CHECKING:
    import zarr

    from zarrlake.session import Session


class ChunkDecoder:
    """Decodes stored objects (chunks) of the array at `path`, described by its metadata
    document `doc`, with zarr's codec pipeline, in memory: nothing is read or written."""

    def __init__(self, path: str, doc: bytes) -> None:
        meta = json.loads(doc)
        self.path = path
        self._doc = doc
        self._object_shape = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])

    def _array(self, items: list[tuple[str, bytes | memoryview]]) -> zarr.Array:
        import zarr
        from zarr.core.buffer import cpu
        from zarr.storage import MemoryStore

        held = {f"{self.path}/zarr.json": cpu.Buffer.from_bytes(self._doc)}
        held |= {key: cpu.Buffer.from_bytes(bytes(data)) for key, data in items}
        return zarr.open_array(MemoryStore(held, read_only=True), path=self.path, mode="r")

    def first_failure(
        self, items: list[tuple[str, bytes | memoryview]]
    ) -> tuple[str, Exception] | None:
        """(key, the codec's error) of the first of `items` (key, stored bytes) that does
        not decode, or None when all do."""
        if not items:
            return None
        arr = self._array(items)
        decode_key = arr.metadata.chunk_key_encoding.decode_chunk_key
        for key, _ in items:
            coords = decode_key(key[len(self.path) + 1 :])
            region = tuple(
                slice(c * size, min((c + 1) * size, n))
                for c, size, n in zip(coords, self._object_shape, arr.shape, strict=True)
            )
            try:
                arr[region]
            except Exception as exc:  # any codec's own error type
                return key, exc
        return None


undecodable = stale_virtual_chunk
"""The error for virtual chunk `key` whose bytes at `ref` do not decode (zarr_store's: a
read through a session store raises it too)."""


def virtual_chunks(session: Session, path: str) -> list[tuple[str, ChunkRef]]:
    """(key, reference) of the virtual chunks of the array at `path`, in key order."""
    keys = session.list_prefix(f"{path}/c/") + (
        [f"{path}/c"] if session.exists(f"{path}/c") else []
    )
    found = []
    for key in keys:
        ref = session._engine.lookup(key)
        if isinstance(ref, ChunkRef) and ref.kind == RefKind.VIRTUAL:
            found.append((key, ref))
    return found


def check_batch(
    decoder: ChunkDecoder, batch: list[tuple[str, ChunkRef]], datas: Iterable[bytes | memoryview]
) -> None:
    """StaleVirtualChunkError if any chunk of `batch`, read as `datas`, does not decode."""
    failed = decoder.first_failure([(k, d) for (k, _), d in zip(batch, datas, strict=True)])
    if failed is not None:
        key, error = failed
        raise undecodable(key, dict(batch)[key], error)


def find_undecodable(session: Session, path: str, batch_size: int = 256) -> ZarrLakeError | None:
    """The error naming the first virtual chunk of the array at `path` whose source no
    longer holds what was imported (changed, gone, or bytes that do not decode), or None.
    For explaining a codec failure a reader saw: it reads the array's virtual chunks."""
    doc = session.read(f"{path}/zarr.json")
    if doc is None:
        return None
    decoder = ChunkDecoder(path, doc)
    chunks = virtual_chunks(session, path)
    objects = session._engine.context.objects
    for i in range(0, len(chunks), batch_size):
        batch = chunks[i : i + batch_size]
        try:
            datas = objects.map(lambda kr: objects.read_ref(kr[1], f"key {kr[0]!r}"), batch)
            check_batch(decoder, batch, datas)
        except ZarrLakeError as exc:
            return exc
    return None


def explained(session: Session, path: str, error: Exception) -> Exception:
    """For a codec's own error (zlib's, ...) raised reading the array at `path`: the
    StaleVirtualChunkError naming the virtual chunk and source file that caused it, or
    `error` itself when no virtual chunk explains it. Readers import this module only
    when a read failed (it loads the virtual-dataset machinery)."""
    if isinstance(error, ZarrLakeError):
        return error
    return find_undecodable(session, path) or error
