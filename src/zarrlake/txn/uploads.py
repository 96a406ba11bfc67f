"""A session handle's record of the objects it uploads, made durable before each upload.

An upload is known to the garbage collector from the moment it starts, not only once a
flushed fragment names it: when the session is abandoned or expires (its writer alive,
or killed before it flushed), the next incremental gc finds every object the session
uploaded in its uploads partition (`gc_protocol.uploads_partition`); while the session
is live, the same records mark those objects live. (A new session's first upload on a
remote metastore is recorded in its session record as first stored, and copied here beside
the upload: txn/birth.py, `carried`, `copy`, `store_carried`.)

Concurrent uploads of one handle share one metastore transaction (group commit), and an
object this handle already recorded is not recorded again, so a write of N new chunks
costs far fewer than N metastore writes; `write_many` records all its chunks in one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from zarrlake.format.chunk_ref import ChunkRef, chunk_object_key
from zarrlake.metastore.base import MetaStore
from zarrlake.txn.batching import GroupCommit
from zarrlake.vc.gc_protocol import uploads_of
from zarrlake.vc.objects import MANIFEST_INLINE_MAX, Objects

REMEMBER = 200_000
"""Keys a handle remembers as recorded; past that it forgets them (recording again is
harmless, only a metastore write more)."""


class UploadLog:
    """Records the keys a handle uploads in its session's uploads partition."""

    def __init__(self, objects: Objects, meta: MetaStore, stage_partition: str) -> None:
        self.objects = objects
        self.meta = meta
        self.partition = uploads_of(stage_partition)
        self._recorded: set[str] = set()
        self._lock = threading.Lock()
        self._group = GroupCommit[tuple[str, int]](self._write)

    def _write(self, items: list[tuple[str, int]]) -> None:
        sizes = dict(items)
        self.meta.set_many(
            self.partition, [(k.encode(), json.dumps(n).encode()) for k, n in sizes.items()]
        )

    def record(self, items: list[tuple[str, int]]) -> None:
        """Make `(key, size)` durable before those objects are uploaded; keys recorded
        already are skipped."""
        with self._lock:
            new = [(k, n) for k, n in items if k not in self._recorded]
            if len(self._recorded) > REMEMBER:
                self._recorded.clear()
            self._recorded.update(k for k, _ in new)
        if not new:
            return
        try:
            self._group.submit(new)
        except BaseException:
            with self._lock:
                self._recorded.difference_update(k for k, _ in new)
            raise

    def carried(self, items: list[tuple[str, int]]) -> None:
        """Note `(key, size)` as recorded: the session's record carries them (txn/birth.py),
        so their uploads need not wait for a write here; `copy` writes them here too."""
        with self._lock:
            self._recorded.update(k for k, _ in items)

    def copy(self, items: list[tuple[str, int]]) -> None:
        """Write the records of `items` (noted `carried`) to the uploads partition, where
        the session's later readers and its clean-up find its uploads."""
        self._group.submit(items)

    def store_carried(
        self, data: bytes | memoryview, table: bool, digest: bytes, retired: bool
    ) -> tuple[ChunkRef, bool]:
        """`store_chunk` of an object recorded already (or whose record the session's
        record carries): uploaded at once (a block table, if any, is recorded before it
        is uploaded)."""
        return self.objects.store_chunk(
            data,
            digest,
            table,
            record=lambda key, size: self.record([(key, size)]),
            retired=retired,
        )

    def digests(
        self, chunks: Sequence[bytes | memoryview], known: Sequence[bytes | None] = ()
    ) -> list[bytes | None]:
        """Each chunk's digest, hashed in parallel (None for one staged inline, which has no
        object), to record in one write (`record`) and hand to `store_chunk`; `known`, the
        digests the writer took of some of them already (None: not taken), kept."""
        digests: list[bytes | None] = [None] * len(chunks)
        todo = []
        for i, (data, digest) in enumerate(zip(chunks, list(known) or digests, strict=True)):
            if len(data) > MANIFEST_INLINE_MAX:
                if digest is None:
                    todo.append(i)
                else:
                    digests[i] = digest
        hashed = self.objects.map(self.objects.digest, [chunks[i] for i in todo])
        for i, h in zip(todo, hashed, strict=True):
            digests[i] = h
        return digests

    def store_chunk(
        self,
        data: bytes | memoryview,
        table: bool = True,
        digest: bytes | None = None,
        retired: bool = True,
    ) -> tuple[ChunkRef, bool]:
        """`Objects.store_chunk`, with the object recorded before it is uploaded (and its
        block table unless `table` is false); `digest`, of `data`, if hashed already;
        `retired` False when no purge can have retired the object (see `store_chunk`)."""
        if len(data) <= MANIFEST_INLINE_MAX:
            return self.objects.store_chunk(data)
        if digest is None:
            digest = self.objects.digest(data)
        self.record([(chunk_object_key(digest), len(data))])
        return self.store_carried(data, table, digest, retired)
