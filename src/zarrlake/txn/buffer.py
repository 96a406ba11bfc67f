"""The chunk writes one session handle holds in memory until it flushes them as a fragment.

Writes through the zarr store are acknowledged when buffered and become durable when
flushed (`Session.flush`, a commit from the same handle, pickling the handle, the end of a
Spark task, a full buffer, or a short idle time). A handle holding unflushed writes leaves a
marker in the metastore, so a commit never silently leaves them out.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zarrlake.format.chunk_ref import ChunkRef, RefKind, chunk_object_key

if TYPE_CHECKING:
    from zarrlake.vc.gc_protocol import Phase


@dataclass
class Batch:
    """Writes staged between two flushes of one handle."""

    generation: int
    changes: dict[str, ChunkRef | None] = field(default_factory=dict)
    reads: set[str] = field(default_factory=set)
    listed: set[str] = field(default_factory=set)
    data_bytes: int = 0  # inline chunk bytes held
    held_bytes: int = 0  # bytes of uploads kept to put back after a gc sweep
    uploads: dict[str, tuple[bytes | None, Phase]] = field(default_factory=dict)
    since: float = 0.0  # when its first write arrived (monotonic)
    markers: list[int] = field(default_factory=list)  # its unflushed-writes markers

    def __bool__(self) -> bool:
        return bool(self.changes or self.reads or self.listed)

    def add(self, key: str, ref: ChunkRef | None) -> None:
        """Buffer a write (or a delete, `ref` None) of `key`, keeping the inline byte count
        current."""
        old = self.changes.get(key)
        if old is not None and old.kind == RefKind.INLINE:
            self.data_bytes -= old.length
        self.changes[key] = ref
        if ref is not None and ref.kind == RefKind.INLINE:
            self.data_bytes += ref.length

    def hold(self, object_key: str, data: bytes | None, phase: Phase) -> None:
        """Remember an upload (its bytes too, if it reused an object gc may delete)."""
        if object_key not in self.uploads:
            self.uploads[object_key] = (data, phase)
            self.held_bytes += len(data) if data is not None else 0


class WriteBuffer:
    """The current batch of a handle, and the batches being flushed (still readable)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.generation = 0
        self.current = Batch(0)
        self.flushing: list[Batch] = []
        self.uploading = 0  # uploads under way
        self.pending: dict[str, tuple[bytes | None, Phase]] = {}  # uploaded, not yet buffered

    @property
    def claims_uploads(self) -> bool:
        """Whether uploads exist whose references are not in a batch yet."""
        return bool(self.uploading or self.pending)

    def take(self) -> Batch:
        """Swap in an empty batch; the old one stays readable until `done`. While uploads
        are not in a batch yet, the new batch keeps the old one's markers (so the uploaded
        objects never look unclaimed to a garbage collector)."""
        with self.lock:
            batch = self.current
            self.generation += 1
            self.current = Batch(self.generation)
            if self.claims_uploads:
                self.current.markers, batch.markers = batch.markers, []
                self.current.since = batch.since
            self.flushing.append(batch)
            return batch

    def add(self, changes: list[tuple[str, ChunkRef | None]]) -> Batch:
        """Buffer changes in the current batch, with the uploads their references name."""
        batch = self.current
        for key, ref in changes:
            batch.add(key, ref)
            obj = _uploaded(ref)
            if obj is not None:
                upload = self.pending.pop(obj, None)
                if upload is not None:
                    batch.hold(obj, *upload)
        return batch

    def done(self, batch: Batch) -> None:
        """Forget `batch` once its fragment is durable (reads then find it in staging)."""
        with self.lock:
            self.flushing.remove(batch)

    def restore(self, batch: Batch) -> None:
        """Put a batch whose flush failed back under the current writes (older first)."""
        with self.lock:
            self.flushing.remove(batch)
            newer = self.current
            for key, ref in newer.changes.items():
                batch.add(key, ref)
            batch.reads |= newer.reads
            batch.listed |= newer.listed
            for k, (data, phase) in newer.uploads.items():
                batch.hold(k, data, phase)
            batch.markers += newer.markers
            self.current = batch

    def lookup(self, key: str) -> tuple[bool, ChunkRef | None]:
        """(buffered?, ref): the newest batch holding `key` decides (None: deleted)."""
        with self.lock:
            for batch in [self.current, *reversed(self.flushing)]:
                if key in batch.changes:
                    return True, batch.changes[key]
        return False, None

    def keys(self, prefix: str) -> dict[str, bool]:
        """key -> deleted? for buffered keys under `prefix` (newest batch wins)."""
        out: dict[str, bool] = {}
        with self.lock:
            for batch in [*self.flushing, self.current]:
                for k, ref in batch.changes.items():
                    if k.startswith(prefix):
                        out[k] = ref is None
        return out


def _uploaded(ref: ChunkRef | None) -> str | None:
    """The chunk object a reference names (an inner chunk's may be a range of its shard's
    object), or None."""
    if ref is None:
        return None
    if ref.kind == RefKind.OBJECT:
        return chunk_object_key(ref.digest)
    if ref.kind == RefKind.LOCATION and ref.location and ref.location.startswith("chunks/"):
        return ref.location
    return None
