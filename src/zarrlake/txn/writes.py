"""Writes inside a session: check, upload chunks too big to stage inline, buffer, flush.

Metadata documents are staged in the metastore at once (they are few, and every worker
must see them). Chunk writes and deletes are buffered per handle and flushed as one
fragment object plus one metastore record (`flush`): that is the point where they become
durable. After registering a fragment the flush re-checks that the session is still open
and settles its uploads with the garbage collector's `WriteGuard`, so a write racing the
commit's seal is either in the commit or raises, and a deduplicated upload that raced a
sweep is written again before the flush returns.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import numpy as np

from zarrlake._util import crashpoints, forksafe, runtime
from zarrlake._util.validate import check_zarr_key
from zarrlake._util.zarr_chunks import UNCHECKED, ChunkFrame, chunk_frame
from zarrlake._util.zarr_metadata import check_metadata
from zarrlake.connection import FlushPolicy, outcome, raise_first
from zarrlake.errors import InvalidInputError, SessionClosedError, SessionError, ZarrLakeError
from zarrlake.format import fragment
from zarrlake.format.blocks import TABLE_MIN
from zarrlake.format.chunk_ref import ChunkRef, RefKind, chunk_object_key
from zarrlake.format.fragment import FragmentRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.shard import split_inner_key
from zarrlake.format.snapshot import is_meta_key, meta_keys_above
from zarrlake.format.statistics import ChunkStats
from zarrlake.txn import writers
from zarrlake.txn.batching import GroupCommit
from zarrlake.txn.buffer import Batch
from zarrlake.txn.fragments import StagedFragments
from zarrlake.txn.node_change import check_node_change
from zarrlake.txn.overlay import Overlay
from zarrlake.txn.shards import WHOLE_SHARE, ShardPlanner
from zarrlake.txn.staging import Staging, WriterState
from zarrlake.txn.uploads import UploadLog
from zarrlake.vc.change_table import Change
from zarrlake.vc.chunk_keys import is_array_doc
from zarrlake.vc.gc_protocol import Phase, WriteGuard
from zarrlake.vc.objects import MANIFEST_INLINE_MAX, Objects
from zarrlake.vc.statistics import ChunkValues, as_stats, decoded_stats, decoded_together

if TYPE_CHECKING:
    from zarrlake.txn.birth import Birth

_BESIDE = forksafe.PerProcess(
    lambda: ThreadPoolExecutor(4, thread_name_prefix="zarrlake-beside-mark")
)
"""Runs the calls that go out beside a batch's marker (`Writes._mark_first_upload`)."""

log = logging.getLogger("zarrlake")


def _beside(*calls: Callable[[], object]) -> list[object]:
    """Each call's result or the exception it raised, run at once on the pool of the calls
    beside a marker (a simulation's executor, if it brings one)."""
    pool = runtime.current().executor or _BESIDE.get()
    return list(pool.map(outcome, calls))


def check_data(key: str, data: object) -> bytes | memoryview:
    """Values written to a key must be bytes-like. A C-contiguous memoryview of a chunk is
    taken as it is (bytes of it are copied out where they are kept past the write: a large
    chunk is uploaded before the write returns); anything else is copied into bytes."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"data written to {key!r} must be bytes, not {type(data).__name__}")
    if isinstance(data, memoryview) and data.c_contiguous and not is_meta_key(key):
        return data if data.format == "B" and data.ndim == 1 else data.cast("B")
    return bytes(data)


class Writes:
    """The write path of one session handle. `check_open` raises unless the session still
    accepts writes."""

    def __init__(
        self,
        objects: Objects,
        guard: WriteGuard,
        staging: Staging,
        fragments: StagedFragments,
        overlay: Overlay,
        check_open: Callable[[], None],
        inline_max: int,
        together: Callable[..., list[object]],
        clock: Callable[[], float],
        policy: FlushPolicy,
        check_chunks: bool = False,
        statistics: bool = True,
    ) -> None:
        self.objects = objects
        self.guard = guard
        self.staging = staging
        self.fragments = fragments
        self.overlay = overlay
        self.check_open = check_open
        self.inline_max = inline_max
        self.together = together
        self.clock = clock
        self.policy = policy
        self.check_chunks = check_chunks  # refuse chunk bytes the codecs cannot decode
        self._frames: tuple[str, ChunkFrame] | None = None  # (array path + "/", its frame)
        self.statistics = statistics  # chunk writes carry their values' statistics
        self._stats_docs: dict[str, bytes] = {}  # array path + "/": its document now
        self.buffer = overlay.buffer
        self.shards = ShardPlanner(objects, overlay)
        self.uploads = UploadLog(objects, staging.meta, staging.partition)  # gc sees them
        self.tag: str | None = None
        self.flushed: list[FragmentRecord] = []  # this handle's fragments, in order
        self._unsettled: tuple[Batch, FragmentRecord] | None = None  # see settle_flushed
        self._withdrawn: dict[int, set[str]] = {}  # error marker -> its keys not written again
        self._seq = 0
        self._flush_lock = threading.Lock()
        self._timer: runtime.Cancellable | None = None
        self._last_write = 0.0
        self._error: BaseException | None = None  # of a flush in the background
        # A flush registered writes, then found the session closed: a later `flush()` (even
        # with nothing left to write) must not return until the session is open again.
        self._unconfirmed = False
        self._meta = GroupCommit[Change](self._stage_meta)
        self.pid = os.getpid()  # a forked child writes as a writer of its own
        # Under the simulator, processes end only as it says: no finishing on collection.
        self.simulated = runtime.current() is not runtime.REAL
        self.state: WriterState | None = None  # of this writer's record, as last stored
        self.repository_gone: Callable[[], bool] = lambda: False  # see `release`
        self.birth: Birth | None = None  # a new session's, until its record is stored

    # the writer's state ---------------------------------------------------------------------

    def _entering(self) -> list[tuple[bytes, bytes]]:
        """The writer record to store with this handle's first write since it began or
        finished (it is writing again), or nothing."""
        if self.state == WriterState.WRITING:
            return []
        self.state = WriterState.WRITING
        writers.track(self)
        return [self.staging.writer_record(WriterState.WRITING, self.tag)]

    def _adopt(self) -> None:
        """In a forked child, become a writer of its own: the parent's buffered writes, locks,
        timer and writer id are the parent's."""
        if self.pid == os.getpid():
            return
        self.pid = os.getpid()
        self.staging.writer = secrets.token_bytes(8)
        self.buffer.__init__()  # type: ignore[misc]
        self._flush_lock = threading.Lock()
        self._timer = None
        self._unsettled = None
        self._withdrawn = {}
        self._seq = 0
        self._unconfirmed = False
        self.state = None
        self.flushed = []
        self._meta = GroupCommit[Change](self._stage_meta)
        self.uploads = UploadLog(self.objects, self.staging.meta, self.staging.partition)

    def finish(self) -> None:
        """Flush, then record this writer as finished in the same metastore transaction: a
        commit counts what it staged even once its process is gone."""
        self.stop()
        self._adopt()
        if self.state != WriterState.WRITING and not self.buffer.current:
            return
        self.flush(finish=True)

    def fail(self, error: str) -> None:
        """Give up this handle's unflushed writes and record the writer as failed: a commit
        then refuses unless told what to do with what it flushed."""
        self.stop()
        self._adopt()
        with self._flush_lock, self.buffer.lock:
            markers = self.buffer.current.markers
            dropped = sorted(self.buffer.current.changes)
            self.buffer.current = Batch(self.buffer.generation)
            record = self.staging.writer_record(WriterState.FAILED, self.tag, error, dropped)
            self.staging.drop_markers(markers, also=[record])
            self.state = WriterState.FAILED
        writers.untrack(self)

    def committed(self) -> None:
        """This handle committed the session: its writer has nothing left to finish."""
        self.state = WriterState.FINISHED
        writers.untrack(self)

    def release(self) -> str | None:
        """Finish when the handle goes away or its process ends; nobody is left to raise to,
        so a failure is logged (the commit then finds this writer unfinished) and returned
        (process exit then ends with a non-zero status: txn/writers.py). A session that
        ended first, or a repository removed meanwhile (a temporary one), leaves nothing to
        count: that is logged at debug level only, as is a session refused for good before
        the release (`_refusal_known`)."""
        if self.pid != os.getpid() or self.simulated:
            return None
        if self._refusal_known():
            self.stop()
            self.state = None  # nothing of this writer is stored: nothing to finish
            writers.untrack(self)
            log.debug("zarrlake writer %s: its session was refused before", self.writer)
            return None
        self.together = _in_turn  # at interpreter exit, thread pools take no more work
        if self.birth is not None:
            self.birth.in_turn()  # (nor does its base check: txn/birth.py)
        try:
            self.finish()
        except SessionError as e:  # the session ended first: nothing left to count
            log.debug("zarrlake writer %s: %s", self.writer, e)
        except Exception as e:
            if self.repository_gone():
                log.debug("zarrlake writer %s: its repository is gone (%s)", self.writer, e)
            else:
                log.warning("zarrlake writer %s could not finish: %s", self.writer, e)
                return f"writer {self.writer} could not finish: {e}"
        return None

    def _refusal_known(self) -> bool:
        """Whether the session was refused for good (its base gone: txn/birth.py) before
        this release, and this handle holds no write it acknowledged that the refusal
        voids. The call that met the refusal raised it (an abandon, giving the session
        up, passes over it), and the refusal deleted the session's record and what this
        writer stored: a finish could only raise it again. Writes in the buffer, or a
        background flush's error not raised yet, are writes acknowledged that do not
        count: the release warns of those, as of a refusal it meets first."""
        birth = self.birth
        return (
            birth is not None
            and birth.refused is not None
            and self._error is None
            and not self.buffer.current.changes
        )

    @property
    def writer(self) -> str:
        """This handle's writer id (hex), which its staged records carry."""
        return self.staging.writer.hex()

    # preparing ----------------------------------------------------------------------------

    def prepare(
        self, key: str, data: bytes | bytearray | memoryview, values: ChunkValues | None = None
    ) -> list[Change]:
        """Check one write and upload its bytes if they are too big to stage inline; it takes
        effect once staged (`stage`). A shard of a sharded array becomes the changes of its
        inner chunks (txn/shards.py), so there may be several changes, or none. `values`:
        what the bytes encode, when the writer has them (their statistics are computed from
        them; otherwise the bytes are decoded)."""
        item = (check_zarr_key(key), check_data(key, data))
        return self._changes_for(item, _digest_of(values), values=values)

    def _changes_for(
        self,
        item: tuple[str, bytes | memoryview],
        digest: bytes | None = None,
        batch: dict[str, bytes] | None = None,
        values: ChunkValues | None = None,
        known: tuple | None = None,
    ) -> list[Change]:
        """The changes of one checked write; `digest`, of the item's bytes if the caller
        hashed them already; `batch`, the metadata documents written with it; `known`, the
        fields of its statistics if they were taken with the batch's other chunks."""
        key, data = item
        if is_meta_key(key):
            return [self._change_for(item)]
        if self.check_chunks:
            self._check_chunk(key, data, batch)
        ops = self.shards.write(key, data)
        if ops is None:  # stored whole: inner chunks it replaces are deleted
            stats = self._stats_for(key, data, values, batch, known)  # (values in cache)
            return [self._change_for(item, digest, stats), *self.shards.stale(key)]
        view = memoryview(data)
        parts = [None if span is None else view[slice(*span)] for _, span, _ in ops]
        stats_of = [
            None if part is None else self._stats_for(k, part, values, batch)
            for (k, _, _), part in zip(ops, parts, strict=True)
        ]
        changed = sum(span[1] - span[0] for _, span, _ in ops if span is not None)
        if len(data) <= self.inline_max or changed < WHOLE_SHARE * len(data):
            return [
                (k, None) if part is None else self._change_for((k, bytes(part)), stats=stats)
                for (k, _, _), part, stats in zip(ops, parts, stats_of, strict=True)
            ]
        _, shard = self._change_for(item, digest)  # one object; inner chunks are its ranges
        assert shard is not None and shard.kind in (RefKind.OBJECT, RefKind.LOCATION)
        location = shard.location or chunk_object_key(shard.digest)  # (a purge retired its own)
        out: list[Change] = []
        for (k, span, digest), part, stats in zip(ops, parts, stats_of, strict=True):
            if span is None or part is None:
                out.append((k, None))
                continue
            if digest is None:
                digest = self.objects.digest(part)
            size = span[1] - span[0]
            ref = ChunkRef(RefKind.LOCATION, digest, size, span[0], location, stats=stats)
            out.append((k, ref))
        return out

    def _stats_for(
        self,
        key: str,
        data: bytes | memoryview,
        values: ChunkValues | None,
        batch: dict[str, bytes] | None = None,
        known: tuple | None = None,
    ) -> ChunkStats | None:
        """The statistics of chunk `key` written as `data`: `known` (their fields) if they
        were taken already, of `values` when the writer gave them, else of its bytes
        decoded with the array's document as the session has it now (None: not a chunk of
        a numeric array, bytes its codecs cannot decode, or Settings.chunk_statistics
        off). Taken before the bytes are uploaded, while the values the writer just
        encoded are likely still in the CPU's caches."""
        if not self.statistics:
            return None
        if known is not None:
            return as_stats(known)
        if values is not None and values.known is not None:  # (taken with the write's
            return values.known  # other chunks: a whole chunk's, never an inner one's)
        return self._stats_of(key, data, values, batch)

    def _stats_of(
        self,
        key: str,
        data: bytes | memoryview,
        values: ChunkValues | None,
        batch: dict[str, bytes] | None,
    ) -> ChunkStats | None:
        inner = split_inner_key(key)
        if values is not None:
            stats = values.stats() if inner is None else values.inner_stats(inner[1], data)
            if stats is not None:
                return stats
        doc = self._doc_now(key if inner is None else inner[0], batch)
        return None if doc is None else decoded_stats(doc, data, inner is not None)

    def _doc_now(self, key: str, batch: dict[str, bytes] | None) -> bytes | None:
        """The document of chunk `key`'s array as this handle knows it now: written in the
        same `batch`, staged by this handle (read once per array until it stages metadata
        again), else `array_doc`'s (no read when the base commit has the array)."""
        doc = _batch_doc(batch, key) if batch else None
        if doc is not None:
            return doc
        found = self._array_now(key)
        return None if found is None else found[1]

    def _array_now(self, key: str) -> tuple[str, bytes] | None:
        """(array path + "/", document) of chunk `key`'s array as `_doc_now` finds it when
        no document is written with the chunk."""
        for prefix, known in self._stats_docs.items():
            if key.startswith(prefix):
                return prefix, known
        if not any(meta in self.staging.own_meta for meta in meta_keys_above(key)):
            found = self.overlay.array_meta(key)
        else:
            found = self.overlay.current_array_meta(key)
            if found is not None:
                self._stats_docs[found[0][: -len("zarr.json")]] = found[1]
        return None if found is None else (found[0][: -len("zarr.json")], found[1])

    def _check_chunk(
        self, key: str, data: bytes | memoryview, batch: dict[str, bytes] | None = None
    ) -> None:
        """InvalidInputError naming `key` if its array's codecs could not decode `data`
        (a cheap look at the frame: _util/zarr_chunks.py); keys of no array pass. The
        array's document is the one written in the same `batch` if any, else the one
        `array_doc` gives at no cost; bytes that fail against that are checked again
        against the session's current one (the array may have been re-created)."""
        doc = _batch_doc(batch, key) if batch else None
        problem = _problem(doc, data) if doc is not None else self._frame_of(key).problem(data)
        if problem is not None and doc is None:
            found = self.overlay.current_array_meta(key)
            problem = None if found is None else _problem(found[1], data)
            if found is not None and problem is None:  # the array's chunks follow the new one
                self._frames = (found[0][: -len("zarr.json")], chunk_frame(found[1]) or UNCHECKED)
        if problem is not None:
            raise InvalidInputError(
                f"chunk {key!r} {problem}: zarr could not decode it with the array's codecs, "
                "so the write is refused (Settings.check_chunks)"
                "; write bytes the array's codecs decode"
            )

    def _frame_of(self, key: str) -> ChunkFrame:
        """The frame chunk `key`'s array stores its chunks in (`array_doc`'s document),
        remembered for the array's keys until this handle stages metadata: an array has
        no child nodes, so every key under its path is one of its chunks."""
        cached = self._frames
        if cached is not None and key.startswith(cached[0]):
            return cached[1]
        found = self.overlay.array_meta(key)
        if found is None:
            return UNCHECKED
        meta, doc = found
        frame = chunk_frame(doc) or UNCHECKED
        self._frames = (meta[: -len("zarr.json")], frame)
        return frame

    def _change_for(
        self,
        item: tuple[str, bytes | memoryview],
        digest: bytes | None = None,
        stats: ChunkStats | None = None,
    ) -> Change:
        """The change of one checked write of a whole object, carrying `stats`: its bytes
        inline if small, else uploaded (to the object of `digest` if the caller hashed
        them)."""
        key, data = item
        if is_meta_key(key):
            check_node_change(self.overlay, key, check_metadata(key, data))
            return key, self.objects.inline(bytes(data))
        if len(data) <= self.inline_max:
            return key, self.objects.inline(bytes(data), stats)
        if digest is None and len(data) > MANIFEST_INLINE_MAX:  # the object's key
            digest = self.objects.digest(data)
        with self.buffer.lock:  # marked before uploading: gc then knows an upload may be ours
            phase = None
            born = None  # (phase, upload) of a new session's first upload, with its record
            if not self.buffer.current.markers:
                born = self._born_upload(key, data, digest)
                if born is None:
                    records = [] if digest is None else [(chunk_object_key(digest), len(data))]
                    phase = self._mark_first_upload(key, records)
                else:
                    phase = born[0]
            self.buffer.uploading += 1
        try:
            if phase is None:
                phase = self.guard.begin()
            if born is not None:
                ref, created = born[1]
            else:
                table = self._needs_table(key, len(data))
                retired = self.objects.purges_exist(phase.epoch)  # (a reuse checks its object)
                ref, created = self.uploads.store_chunk(data, table, digest, retired)
            with self.buffer.lock:  # a reused object may be deleted by gc: keep its bytes
                upload = (None if created else bytes(data), phase)
                self.buffer.pending.setdefault(ref.location or chunk_object_key(ref.digest), upload)
        finally:
            with self.buffer.lock:
                self.buffer.uploading -= 1
        crashpoints.reached("after_chunk_upload")
        return key, ref if stats is None else replace(ref, stats=stats)

    def _unstored(self) -> bool:
        """Whether this is a new session whose record is not stored yet (its first upload
        then goes out with the record's store: `_born_upload`)."""
        return self.birth is not None and not self.birth.stored and self.staging.meta.remote

    def _born_upload(
        self, key: str, data: bytes | memoryview, digest: bytes | None
    ) -> tuple[Phase, tuple[ChunkRef, bool]] | None:
        """A new session's first upload on a remote metastore (txn/birth.py), in two round
        trips: its record stored carrying the upload's record, beside the gc phase read;
        then the upload itself beside the batch's marker, the upload record's copy in the
        uploads partition and the base check, all waited for. (phase, (ref, created)); None
        where this does not apply: the record stored already, an embedded metastore, or at
        interpreter exit. The caller holds the buffer lock: the calls run on a pool of
        their own (see `_mark_first_upload`)."""
        birth = self.birth
        if (
            birth is None
            or birth.stored
            or digest is None
            or not self.staging.meta.remote
            or self.together is _in_turn
        ):
            return None
        records = [(chunk_object_key(digest), len(data))]
        stored, phase = _beside(lambda: birth.store_carrying(records), self.guard.begin)
        raise_first([stored, phase])
        if not stored:
            return None
        assert isinstance(phase, Phase)
        self.uploads.carried(records)
        table = self._needs_table(key, len(data))
        retired = self.objects.purges_exist(phase.epoch)  # (a reuse checks its object)
        batch, state = self.buffer.current, self.state
        try:
            mark, copy, upload = birth.beside(
                [
                    lambda: self._mark(batch, [key]),
                    lambda: self.uploads.copy(records),
                    lambda: self.uploads.store_carried(data, table, digest, retired),
                ],
                _beside,
            )
        except BaseException:
            if birth.refused is not None:  # the record and the marker are deleted: as after
                batch.markers.clear()  # a `_mark` refused, this writer holds nothing (the
                self.state = state  # batch had no marker), and its next write raises too
            raise
        birth.copied = not isinstance(copy, Exception)  # (else gc clears them, later)
        raise_first([mark, upload])
        return phase, cast(tuple[ChunkRef, bool], upload)

    def _needs_table(self, key: str, size: int) -> bool:
        """Whether the chunk object of `key` gets a block table (format/blocks.py): only a
        ranged read uses one, and zarr asks ranges of shards alone, so a chunk of an array
        without a sharding codec gets none; one whose array is not known keeps it."""
        if size < TABLE_MIN:
            return False
        doc = self.overlay.array_doc(key)
        return doc is None or b"sharding_indexed" in doc

    # staging ------------------------------------------------------------------------------

    def stage(self, changes: list[Change]) -> None:
        """Stage prepared writes: metadata documents durably now (concurrent callers share
        one metastore transaction), chunk changes into the buffer."""
        self._adopt()
        self.raise_background_error()
        if self.birth is not None and not self.birth.born:  # its base checked first
            self.birth.acknowledge()
        meta = [c for c in changes if is_meta_key(c[0])]
        if meta:
            self._meta.submit(meta)
            self.overlay.forget_docs()
            self._frames = None
            self._stats_docs.clear()
        chunks = [c for c in changes if not is_meta_key(c[0])]
        if chunks:
            self._buffer(chunks)

    def _stage_meta(self, items: list[Change]) -> None:
        entering = self._entering()
        try:
            self.staging.stage_meta(items, also=entering)
        except BaseException:
            if entering:
                self.state = None
            raise
        crashpoints.reached("after_staging")
        self.check_open()

    def _buffer(self, changes: list[Change]) -> None:
        with self.buffer.lock:
            if not self.buffer.current.markers:  # the first write since the last flush
                self._mark(self.buffer.current, [k for k, _ in changes])
            batch = self.buffer.add(changes)
            self._last_write = runtime.monotonic()
            full = self._full(batch)
            if not full:
                self._arm_timer()
        if full:
            self.flush()

    def _mark(self, batch: Batch, keys: list[str] | None = None) -> None:
        """Leave the marker saying this handle holds unflushed writes (before holding any),
        naming the chunk `keys` the batch begins with (None: it begins with a read).
        Whether the session still takes them is checked when they are flushed (and before,
        from the record this handle holds: `Transaction.require_writes`)."""
        generation = self._next_generation()
        batch.since = runtime.monotonic()
        entering = self._entering()
        try:
            self.staging.mark_unflushed(
                generation, self.clock(), self.tag, also=entering, keys=keys
            )
        except BaseException:
            if self.birth is not None and self.birth.landed_unchecked():
                batch.markers.append(generation)  # stored: the batch's flush drops it
            elif entering:
                self.state = None
            raise
        batch.markers.append(generation)

    def _next_generation(self) -> int:
        """A generation no marker of this writer has had yet (a marker's key names it).
        The caller holds the buffer's lock, or its thread does (`_mark_first_upload`)."""
        self.buffer.generation += 1
        return self.buffer.generation

    def _mark_first_upload(self, key: str, records: list[tuple[str, int]]) -> Phase | None:
        """Leave the marker of a batch's first upload (of chunk `key`). On a remote metastore
        the other calls that must precede the upload (the gc phase read, the upload records
        `records` of the objects about to be uploaded) run beside it, one round trip instead
        of three, and the phase is returned (None: nothing was recorded, record them now).
        They run on a pool of their own: this thread may be one of the I/O pool's, all of
        which can be waiting on the buffer lock held here."""
        if not self.staging.meta.remote or self.together is _in_turn:  # or at exit
            self._mark(self.buffer.current, [key])
            return None
        calls: list[Callable[[], object]] = [
            lambda: self._mark(self.buffer.current, [key]),
            self.guard.begin,
        ]
        if records:
            calls.append(lambda: self.uploads.record(records))
        outcomes = _beside(*calls)
        raise_first(outcomes)
        return outcomes[1]  # type: ignore[return-value]  # the phase

    def _full(self, batch: Batch) -> bool:
        p = self.policy
        return (
            len(batch.changes) >= p.max_entries
            or batch.data_bytes >= p.max_bytes
            or batch.held_bytes >= p.max_bytes
            or runtime.monotonic() - batch.since >= p.max_age
        )

    def record_reads(self, keys: list[str], prefixes: list[str] = ()) -> None:  # type: ignore[assignment]
        """Remember keys read and prefixes listed (serializable sessions); flushed with the
        writes."""
        self._adopt()
        with self.buffer.lock:
            batch = self.buffer.current
            if not batch.markers:
                self._mark(batch)
            batch.reads.update(keys)
            batch.listed.update(prefixes)

    def write_many(self, items: Sequence[tuple[str, bytes | memoryview]]) -> None:
        """Big chunks are uploaded in parallel, then everything is staged."""
        self.stage([c for changes in self.prepare_many(items) for c in changes])

    def prepare_many(
        self,
        items: Sequence[tuple[str, bytes | memoryview]],
        values: Sequence[ChunkValues | None] = (),
    ) -> list[list[Change]]:
        """`prepare` of each item: the big chunks recorded in one metastore write, hashed
        once, and uploaded in parallel; `values`, what each item's bytes encode, if known."""
        given = list(values) or [None] * len(items)
        checked = [(check_zarr_key(key), check_data(key, data)) for key, data in items]
        docs = {key: bytes(data) for key, data in checked if is_meta_key(key)}  # bytes already
        for key, data in docs.items():  # bad documents are refused before any upload
            check_metadata(key, data)
        known = (
            self._stats_together(checked, given, docs) if self.statistics else [None] * len(items)
        )
        big = [
            i
            for i, (key, data) in enumerate(checked)
            if len(data) > self.inline_max and not is_meta_key(key)
        ]
        digests = self.uploads.digests(  # (hashed as zarr encoded them, if it did)
            [checked[i][1] for i in big], [_digest_of(given[i]) for i in big]
        )
        records = [
            (chunk_object_key(d), len(checked[i][1]))
            for i, d in zip(big, digests, strict=True)
            if d is not None
        ]
        marked = False
        if len(records) == 1 and len(big) == 1 and self._unstored():
            marked = True  # a new session's first upload: `_born_upload` records it
        elif big:
            with self.buffer.lock:  # the batch's first upload: its records beside its marker
                if not self.buffer.current.markers:
                    marked = self._mark_first_upload(checked[big[0]][0], records) is not None
        if not marked:
            self.uploads.record(records)  # one write for them all
        prepared = self.objects.map(
            lambda pair: self._changes_for(
                checked[pair[0]], pair[1], docs, given[pair[0]], known[pair[0]]
            ),
            list(zip(big, digests, strict=True)),
        )
        uploaded = dict(zip(big, prepared, strict=True))
        return [
            uploaded[i]
            if i in uploaded
            else self._changes_for(item, None, docs, given[i], known[i])
            for i, item in enumerate(checked)
        ]

    def _stats_together(
        self,
        checked: list[tuple[str, bytes | memoryview]],
        given: list[ChunkValues | None],
        batch: dict[str, bytes],
    ) -> list[tuple | None]:
        """The fields of the statistics of the batch's chunks written without values (the
        bytes alone: `write_many`), taken per array together (`decoded_together`: decoded
        one by one, reduced as rows), not one chunk at a time as `_stats_for` would; None
        for the others (shards, inner chunks, bytes that do not decode: `_stats_for`'s)."""
        by_doc: dict[bytes, list[int]] = {}
        arrays: list[tuple[str, bytes]] = []  # (path + "/", document) of those met so far
        for i, (key, _) in enumerate(checked):
            if given[i] is not None or is_meta_key(key) or split_inner_key(key) is not None:
                continue
            if batch:  # (documents written with the chunks: each chunk's is looked for)
                doc = self._doc_now(key, batch)
            else:  # an array has no child nodes: a chunk under a path met is that array's
                doc = next((d for p, d in arrays if key.startswith(p)), None)
                if doc is None:
                    found = self._array_now(key)
                    doc = None if found is None else found[1]
                    if found is not None:
                        arrays.append(found)
            if doc is not None:
                by_doc.setdefault(doc, []).append(i)
        out: list[tuple | None] = [None] * len(checked)
        for doc, rows in by_doc.items():
            if len(rows) < 2 or b"sharding_indexed" in doc:  # (a shard's are its inner chunks')
                continue
            taken = decoded_together(doc, [checked[i][1] for i in rows])
            for i, fields in zip(rows, taken, strict=True):
                out[i] = fields
        return out

    def delete_many(self, keys: list[str]) -> None:
        """Delete the keys that exist; deleting a missing key is not an error."""
        present = [k for k in keys if self.overlay.lookup(k) is not None]
        gone = [g for k in present for g in self.shards.delete(k)]
        if gone:
            self.stage([(k, None) for k in gone])

    def start_writer(self, tag: str | None) -> str:
        """Finish, then stage what follows under a new writer id; with `tag`, its fragments
        count only once accepted (`Staging.accept`). Returns the new writer id."""
        self.finish()
        with self._flush_lock, self.buffer.lock:
            self.staging.writer = secrets.token_bytes(8)
            self.tag = tag
            self._seq = 0
            self._withdrawn = {}
            self.state = None
            return self.writer

    # flushing -----------------------------------------------------------------------------

    def flush(
        self, check: bool = True, final: bool = False, settle: bool = True, finish: bool = False
    ) -> list[FragmentRecord]:
        """Make every buffered write of this handle durable; returns the fragments written.
        `check=False` skips re-reading the session's status after registering (a commit's
        seal, which follows, does that); `final` (this handle commits) gives up uploads that
        were prepared but never staged; `settle=False` leaves checking that gc left the
        uploads alone to `settle_flushed` (a commit does it together with its seal);
        `finish` records the writer finished with its last fragment (see `finish`)."""
        self._adopt()
        self.raise_background_error()
        if self._unconfirmed and not (final or finish):  # (finishing never raised for it)
            self.check_open()
            self._unconfirmed = False
        with self._flush_lock:
            with self.buffer.lock:
                if final and not self.buffer.uploading:
                    self.buffer.pending.clear()
                current = self.buffer.current
                finished = self._finished() if finish else []
                if not current:
                    if (current.markers or finished) and not self.buffer.claims_uploads:
                        self.staging.drop_markers(current.markers, also=finished)
                        current.markers = []
                        self._finishing(finished)
                    return []
                batch = self.buffer.take()
            try:
                record = self._write_fragment(batch, finished)
                self._finishing(finished)
            except BaseException:
                # Not durable: a later flush tries again. Inside a metastore batch (the
                # commit's flush and seal) its write lock is let go before the buffer lock
                # is waited for: another thread of this handle may hold that lock while it
                # waits for the write lock (its first upload's marker).
                try:
                    self.staging.meta.commit_batch()
                finally:
                    self.buffer.restore(batch)
                raise
            if not settle:
                self._unsettled = (batch, record)
                self.flushed.append(record)
                return [record]
            try:
                self._settle(batch, record, check)
            finally:
                self.buffer.done(batch)
            self.flushed.append(record)
            return [record]

    def _finished(self) -> list[tuple[bytes, bytes]]:
        if self.state != WriterState.WRITING:
            return []
        return [self.staging.writer_record(WriterState.FINISHED, self.tag)]

    def _finishing(self, finished: list[tuple[bytes, bytes]]) -> None:
        if finished:
            self.state = WriterState.FINISHED
            writers.untrack(self)

    def stage_block(
        self,
        chunks: list[Change],
        carried: tuple[ManifestRange, np.ndarray],
        meta: list[Change],
        also: list[tuple[bytes, bytes]],
    ) -> None:
        """Stage, after this handle's buffered writes, chunk changes whose references the
        session holds already (a move's: `chunks`, and `carried`, columnar), metadata
        documents and more staging records (`also`) in one fragment and one metastore
        transaction: all of it takes effect, or none."""
        self.flush()
        with self._flush_lock:
            entering = self._entering()
            batch = Batch(self.buffer.generation)  # holds the fragment's upload, if any
            for key, ref in chunks:
                batch.add(key, ref)
            try:
                records = [*entering, *self.staging.meta_records(meta), *also]
                record = self._write_fragment(batch, records, carried)
            except BaseException:
                if entering:
                    self.state = None
                raise
            self.staging.own_meta.update(k for k, _ in meta)
            self.overlay.forget_docs()
            self._settle(batch, record, True)
            self.flushed.append(record)

    def _write_fragment(
        self,
        batch: Batch,
        also: list[tuple[bytes, bytes]] | None = None,
        carried: tuple[ManifestRange, np.ndarray] | None = None,
    ) -> FragmentRecord:
        location = f"{fragment.PREFIX}{secrets.token_hex(20)}"
        blob, index, index_id, offset = fragment.build(
            location, batch.changes, batch.reads, batch.listed, self.objects.algo, carried
        )
        small = len(blob) <= fragment.RECORD_MAX
        if not small:
            batch.hold(location, blob, self.guard.begin())  # put back if a sweep took it
            self.uploads.record([(location, len(blob))])
            self.objects.store.put_if_absent(location, blob)
            crashpoints.reached("after_fragment_upload")
        self._seq += 1
        record = FragmentRecord(
            location=location,
            index_offset=offset,
            index_length=len(blob) - offset,
            index_id=index_id,
            entries=len(index),
            data_bytes=offset,
            writer=self.writer,
            seq=self._seq,
            at=self.clock(),
            tag=self.tag,
            blob=blob if small else None,
        )
        rewritten = self._rewritten(batch)
        self.staging.register(record, [*batch.markers, *rewritten], also or ())
        for generation in rewritten:
            del self._withdrawn[generation]
        for keys in self._withdrawn.values():  # written again in part
            keys.difference_update(batch.changes)
        self.fragments.remember(record, index)
        crashpoints.reached("after_staging")
        return record

    def _rewritten(self, batch: Batch) -> list[int]:
        """The error markers of withdrawn writes (see `_settle`) whose every key `batch`
        writes again: registering it drops them, and the writes count as done."""
        return [g for g, keys in self._withdrawn.items() if keys <= batch.changes.keys()]

    def settle_flushed(self, keep: Callable[[], None] | None = None) -> bool:
        """Settle the uploads of the last flush made with `settle=False` (see `_settle`);
        False if it had none, so nothing read the gc phase. `keep` is called while it waits
        for a sweep (a committer renews its lease there)."""
        pending, self._unsettled = self._unsettled, None
        if pending is None:
            return False
        batch, record = pending
        try:
            self._settle(batch, record, False, keep)
        finally:
            self.buffer.done(batch)
        return bool(batch.uploads)

    def _settle(
        self,
        batch: Batch,
        record: FragmentRecord,
        check: bool,
        keep: Callable[[], None] | None = None,
    ) -> None:
        """Re-check the session is open and the uploads still exist (both read the
        metastore after registering, and neither needs the other's answer)."""
        by_phase: dict[object, list[tuple[str, bytes | None]]] = {}
        for key, (data, phase) in batch.uploads.items():
            by_phase.setdefault(phase, []).append((key, data))

        def settle() -> list[str]:
            extra = () if keep is None else (keep,)  # (the guard's two-argument form otherwise)
            return [k for p, ups in by_phase.items() for k in self.guard.settle(p, ups, *extra)]  # type: ignore[arg-type]

        opened, lost = self.together(self.check_open if check else lambda: None, settle)
        if isinstance(lost, list) and lost:
            error = (
                f"a garbage collection or a purge removed {len(lost)} chunk object(s) this "
                f"worker uploaded before staging them (the first: {lost[0]}); their writes "
                "were withdrawn: "
                "write those chunks again"
            )
            # Its own marker's place, or a new one (its marker went to the next batch, or
            # it never had one): an error marker must not replace another marker.
            with self.buffer.lock:
                generation = batch.markers[0] if batch.markers else self._next_generation()
            self.staging.unregister(record, generation, error)
            self._withdrawn.setdefault(generation, set()).update(batch.changes)
            raise ZarrLakeError(error)
        if isinstance(opened, Exception):
            self._unconfirmed = True
        raise_first([opened, lost])

    # flushing in the background -------------------------------------------------------------

    def _arm_timer(self) -> None:
        idle = self.policy.idle
        if idle is None or self._timer is not None:
            return
        self._timer = runtime.call_later(idle, self._on_idle)

    def _on_idle(self) -> None:
        idle = self.policy.idle
        assert idle is not None
        wait = self._last_write + idle - runtime.monotonic()
        if wait > 0:  # written to since: look again when it has been idle long enough
            self._timer = runtime.call_later(wait, self._on_idle)
            return
        self._timer = None
        try:
            self.flush()
        except BaseException as e:  # kept for the next call on this handle
            self._error = e

    def raise_background_error(self) -> None:
        """Raise (once) the error a background flush hit, if any. A session it found closed
        but open again now (a metastore copy closes open sessions while it copies them)
        holds that flush's writes, staged or back in the buffer: nothing to report then."""
        error, self._error = self._error, None
        if error is None:
            return
        if isinstance(error, SessionClosedError):
            try:
                self.check_open()
            except ZarrLakeError:
                raise error from None
            return
        raise error

    def stop(self) -> None:
        """Cancel the pending background flush, if any."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


def _problem(doc: bytes | None, data: bytes | memoryview) -> str | None:
    """Why `data` cannot be a chunk of the array whose document is `doc` (None: it may)."""
    frame = None if doc is None else chunk_frame(doc)
    return None if frame is None else frame.problem(data)


def _batch_doc(docs: dict[str, bytes], key: str) -> bytes | None:
    """The array document among `docs` (written in one batch) that chunk `key` is under."""
    found = (docs.get(meta) for meta in meta_keys_above(key))
    return next((doc for doc in found if doc is not None and is_array_doc(doc)), None)


def _in_turn(*calls: Callable[[], object]) -> list[object]:
    """`RepoContext.together` without threads: each call's result or exception, in turn."""
    return [outcome(call) for call in calls]


def _digest_of(values: ChunkValues | None) -> bytes | None:
    """The digest of a chunk's bytes its writer took as it encoded them (see ChunkValues)."""
    return None if values is None else values.digest
