"""Typed access to the immutable objects of a repository, verified on read and cached.

Format objects (manifests, snapshots, change sets, commits) are written once under their
content hash and never change, so every decoded object can be cached for the life of the
process. Chunk bytes are checked against the digest in their reference (the repository's
content hash, format/digest.py) before they are returned.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

from cachetools import LRUCache

from zarrlake._util import runtime
from zarrlake._util.forksafe import PerProcess
from zarrlake.errors import (
    CorruptionError,
    ExpiredHistoryError,
    NotFoundError,
    PurgedError,
    on_date,
)
from zarrlake.format.chunk_ref import ChunkRef, RefKind, chunk_object_key
from zarrlake.format.commit import CommitRecord
from zarrlake.format.digest import Hash, digest
from zarrlake.storage.base import ObjectStore

if TYPE_CHECKING:  # (the ranged-read machinery loads with the first chunk read)
    from concurrent.futures import Executor, ThreadPoolExecutor

    from zarrlake.format.blocks import BlockTable
    from zarrlake.format.changes import ChangeSet
    from zarrlake.format.manifest import ManifestRange
    from zarrlake.format.shard import ShardRef
    from zarrlake.format.snapshot import SnapshotRoot
    from zarrlake.format.statistics import ChunkStats
    from zarrlake.storage.sources import SourceReader
    from zarrlake.vc.ranges import Span

MANIFEST_INLINE_MAX = 64
"""Chunks at most this large are kept inside manifests rather than as objects."""

PARALLEL_WRITE_BYTES = 4 << 20
"""Local writes totalling more than this are spread over threads."""

Blob = tuple[str, bytes]
"""An object key and the bytes to store under it."""

PREFIXES = {
    "ManifestRange": "manifests",
    "SnapshotRoot": "snapshots",
    "ChangeSet": "changes",
    "CommitRecord": "commits",
}
"""The key prefix of each kind of format object, by class name: the columnar kinds (and
numpy) load with their first use, not with this module."""


def prefix_of(cls: type) -> str:
    """The key prefix of format objects of class `cls` ("commits", "snapshots", ...)."""
    return PREFIXES[cls.__name__]


READ_CONCURRENCY = 16
"""Ranged requests one repository handle runs at once (Settings.read_concurrency)."""
COALESCE_GAP = 256 << 10
"""Ranges of one object at most this far apart are fetched in one request
(Settings.read_coalesce_gap)."""
MAX_REQUEST = 16 << 20
"""Merged requests stop growing at this size, so long reads still run side by side."""


def _io_pool() -> ThreadPoolExecutor:
    return _pool(8, "zarrlake-io")


def _pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A thread pool (its module, with queue and threading's pool machinery, loads with the
    first: a process that only reads records needs none)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(workers, thread_name_prefix=name)


BLOCK_CACHE_BYTES = 8 << 20
"""Verified blocks kept per repository handle, from small ranged reads only: zarr reads a
shard's index again for every partial read of the shard."""
CACHED_REQUEST_BLOCKS = 2
"""Blocks of requests at most this long are kept (a whole-array read would only churn)."""

_NO_TABLE = object()
"""Cached for objects that have no block table (written before tables, or by older zarrlake)."""


class Objects:
    """Reads and writes a repository's immutable objects through one ObjectStore."""

    def __init__(
        self,
        store: ObjectStore,
        algo: Hash = Hash.SHA256,
        cache_entries: int = 512,
        source_options: Mapping[str, Any] | None = None,
        read_concurrency: int = READ_CONCURRENCY,
        coalesce_gap: int = COALESCE_GAP,
    ) -> None:
        self.store = store
        self.algo = algo
        self.read_concurrency = max(1, read_concurrency)
        self.coalesce_gap = max(0, coalesce_gap)
        self._tables: LRUCache[bytes, object] = LRUCache(cache_entries)  # digest -> table
        self._blocks: LRUCache[tuple[bytes, int, int], bytes] = LRUCache(
            BLOCK_CACHE_BYTES, getsizeof=len
        )  # (object digest, block size, block index) -> verified bytes
        self._reads = PerProcess(lambda: _pool(self.read_concurrency, "zarrlake-read"))
        self._slots = PerProcess(lambda: threading.BoundedSemaphore(self.read_concurrency))
        self._source_options = dict(source_options or {})
        self._sources: SourceReader | None = None
        self._cache: LRUCache[str, object] = LRUCache(cache_entries)  # decoded, by id
        self._snapshots: LRUCache[str, str] = LRUCache(4 * cache_entries)  # commit -> snapshot
        self._cache_lock = threading.Lock()  # cachetools caches are not thread-safe
        self._inflight: dict[str, Future[object]] = {}
        self._inflight_lock = threading.Lock()
        self._pool = PerProcess(_io_pool)  # made on first use, again after fork
        self.purged: Callable[[bytes], object | None] | None = None
        """Which purge removed a digest's bytes (`vc/purges.PurgeIndex.lookup`), asked only
        when a read fails, so it raises PurgedError naming the purge instead."""
        self.purges_exist: Callable[[int], bool] = lambda epoch: True
        """Whether the repository has purge records, as of sweep epoch `epoch`
        (`PurgeIndex.exist`): a write reusing an existing object checks it only then."""

    @property
    def sources(self) -> SourceReader:
        """Where virtual chunks are read from (made at the first virtual read)."""
        if self._sources is None:
            from zarrlake.storage.sources import SourceReader

            self._sources = SourceReader(self._source_options)
        return self._sources

    # format objects --------------------------------------------------------------------

    def encode[T: (ManifestRange, SnapshotRoot, ChangeSet, CommitRecord)](
        self, obj: T, cache: bool = True
    ) -> tuple[str, Blob]:
        """(object id, blob to write) for `obj`; the decoded object is cached under its id
        (unless `cache` is false: a commit of millions of entries would fill the cache)."""
        oid, data = obj.encode(self.algo)
        if cache:
            self._keep(oid, obj)
        return oid, (f"{prefix_of(type(obj))}/{oid}", data)

    def write[T: (ManifestRange, SnapshotRoot, ChangeSet, CommitRecord)](self, obj: T) -> str:
        """Store a format object under its content id (a no-op if it exists); returns the id."""
        oid, (key, data) = self.encode(obj)
        self.store.put_if_absent(key, data)
        return oid

    def put_all(self, blobs: list[Blob]) -> None:
        """Write independent, content-addressed blobs: in parallel on a remote store, where
        each request waits on the network; in turn on a local one, where small writes take
        less time than handing them to threads."""
        if self.store.remote or sum(len(data) for _, data in blobs) > PARALLEL_WRITE_BYTES:
            self.map(lambda blob: self.store.put_if_absent(*blob), blobs)
        else:
            for key, data in blobs:
                self.store.put_if_absent(key, data)

    def read[T: (ManifestRange, SnapshotRoot, ChangeSet, CommitRecord)](
        self, cls: type[T], oid: str
    ) -> T:
        """The format object of type `cls` stored under `oid`, through the cache.

        Concurrent readers of one object share a single fetch."""
        cached = self._cached(oid)
        if isinstance(cached, cls):
            return cached
        with self._inflight_lock:  # one fetch per object, however many threads want it
            cached = self._cached(oid)
            if isinstance(cached, cls):
                return cached
            pending = self._inflight.get(oid)
            if pending is None:
                mine = self._inflight[oid] = Future()
        if pending is not None:  # ids name one kind of object (the frame holds the kind)
            return cast(T, pending.result())
        try:
            obj = self._fetch(cls, oid)
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._inflight_lock:
                del self._inflight[oid]
        mine.set_result(obj)
        return obj

    def _fetch[T: (ManifestRange, SnapshotRoot, ChangeSet, CommitRecord)](
        self, cls: type[T], oid: str
    ) -> T:
        prefix = prefix_of(cls)
        key = f"{prefix}/{oid}"
        try:
            data = self.store.get(key)
        except NotFoundError:
            raise missing(f"{prefix[:-1]} object {oid} is missing ({key})") from None
        obj = cls.decode(oid, data)
        self._keep(oid, obj)
        return obj

    def _cached(self, oid: str) -> object | None:
        with self._cache_lock:
            return self._cache.get(oid)

    def _keep(self, oid: str, obj: object) -> None:
        with self._cache_lock:
            self._cache[oid] = obj

    def read_commit(self, oid: str) -> CommitRecord:
        """The record of commit `oid`; ExpiredHistoryError if `expire` dropped it."""
        try:
            return self.read(CommitRecord, oid)
        except NotFoundError:
            expired = self.expired(oid)
            if expired is None:
                raise
            raise expired from None

    def expired(self, oid: str) -> ExpiredHistoryError | None:
        """The error to raise for a commit `expire` dropped; None if it was not expired."""
        when = self.expired_at(oid)
        if when is None:
            return None
        return ExpiredHistoryError(
            f"commit {oid[:12]} was expired on {on_date(when)} (zarrlake expire)", oid, when
        )

    def parent(self, child: str, parent: str) -> CommitRecord:
        """The record of `parent`, reached from `child`: ExpiredHistoryError "history before
        <child> was expired on <date>" if `expire` dropped it."""
        try:
            return self.read_commit(parent)
        except ExpiredHistoryError as e:
            raise ExpiredHistoryError.before(child, parent, e.expired_at) from None

    def snapshot_of(self, commit_id: str) -> str:
        """The snapshot id of a commit: as a ref read taught it, else from its record."""
        return self.known_snapshot(commit_id) or self.read_commit(commit_id).snapshot

    def known_snapshot(self, commit_id: str) -> str | None:
        """The snapshot id of a commit if known without reading anything."""
        with self._cache_lock:
            known = self._snapshots.get(commit_id)
        if known is not None:
            return known
        rec = self._cached(commit_id)
        return rec.snapshot if isinstance(rec, CommitRecord) else None

    def remember_snapshot(self, commit_id: str, snapshot_id: str) -> None:
        """Note that `commit_id` has snapshot `snapshot_id` (an immutable fact; refs carry
        it so opening a branch need not read the commit record first)."""
        with self._cache_lock:
            self._snapshots[commit_id] = snapshot_id

    def history(self, head: str, until: str | None = None) -> Iterator[tuple[str, CommitRecord]]:
        """(id, record) of `head` and its first-parent ancestors, newest first; a walk down
        to `until` ends before it, its record not read."""
        cid: str | None = head
        while cid is not None and cid != until:
            try:
                rec = self.read_commit(cid)
            except ExpiredHistoryError:
                if cid != head:
                    return  # the history before this point was expired
                raise
            yield cid, rec
            cid = rec.parents[0] if rec.parents else None

    def is_expired(self, oid: str) -> bool:
        """Whether `oid` names a commit whose history was expired (`zarrlake expire`)."""
        return self.store.exists(f"expired/{oid}")

    def expired_at(self, oid: str) -> float | None:
        """When `expire` dropped commit `oid` (POSIX seconds), or None if it was not."""
        key = f"expired/{oid}"
        try:
            marker = self.store.get(key)
        except NotFoundError:
            return None
        try:
            return float(json.loads(marker)["expired_at"])
        except (ValueError, TypeError, KeyError):
            raise CorruptionError(
                f"{key}: the expiry marker does not decode; run `zarrlake fsck`"
            ) from None

    def forget_tables(self) -> None:
        """Drop the block tables and verified blocks kept in memory (a purge replaced
        objects they describe)."""
        with self._cache_lock:
            self._tables.clear()
            self._blocks.clear()

    def forget(self, oid: str) -> None:
        """Drop `oid` from the decoded-object cache (its object was expired)."""
        with self._cache_lock:
            self._cache.pop(oid, None)

    def commit_ids(self, prefix: str) -> list[str]:
        """The ids of the commits whose id starts with `prefix`."""
        return [k.rsplit("/", 1)[1] for k in self.store.list(f"commits/{prefix}")]

    def has_commit(self, oid: str) -> bool:
        """Whether commit `oid` is cached or its record is still stored (not expired)."""
        return self._cached(oid) is not None or self.store.exists(f"commits/{oid}")

    # chunk data ------------------------------------------------------------------------

    def digest(self, data: bytes | memoryview, *, spread: bool = True) -> bytes:
        """The repository's content hash of `data` (`spread`: see format.digest)."""
        return digest(self.algo, data, spread=spread)

    def inline(self, data: bytes, stats: ChunkStats | None = None) -> ChunkRef:
        """A reference holding `data` itself (and its values' `stats`, if known)."""
        return ChunkRef.inline(data, self.digest(data), stats)

    def put_chunk(self, data: bytes) -> ChunkRef:
        """Store chunk bytes under their digest (deduplicated) and return the reference."""
        return self.store_chunk(data)[0]

    def store_chunk(
        self,
        data: bytes | memoryview,
        digest: bytes | None = None,
        table: bool = True,
        record: Callable[[str, int], None] | None = None,
        retired: bool = True,
    ) -> tuple[ChunkRef, bool]:
        """(reference, whether this call created the object): an object that existed may
        be garbage a collector is about to delete (gc_protocol.WriteGuard). `digest`, if
        the caller computed it already, saves hashing the bytes twice. `table=False` skips
        the block table of a large object nobody reads by range (a chunk of an unsharded
        array): a second hash pass and a second object; a ranged read of it, if any, reads
        the whole object and checks it against its digest, as for objects without one.
        An object found already there is checked not to be one a purge retired (its bytes
        then go to a key of their own), unless `retired` is False: the caller knows no
        purge record exists (`purges_exist`)."""
        from zarrlake.format.blocks import TABLE_MIN, BlockTable, table_key

        if len(data) <= MANIFEST_INLINE_MAX:
            return self.inline(bytes(data)), True  # kept: never a view of the caller's buffer
        key = digest if digest is not None else self.digest(data)
        created = self.store.put_if_absent(chunk_object_key(key), data)
        if not created and retired and self.retired(chunk_object_key(key), len(data)):
            return self._store_again(data, key, record), True
        if table and len(data) >= TABLE_MIN:  # after the object: never names a missing one
            blocks = BlockTable.build(self.algo, data, key)
            self.store.put_if_absent(table_key(key), blocks.encode())
            with self._cache_lock:
                self._tables[key] = blocks
        return ChunkRef.object(key, len(data)), created

    def retired(self, key: str, size: int) -> bool:
        """Whether the object at `key`, which should hold `size` bytes, was retired by a
        purge (a tombstone is shorter, a shared object a purge zeroed ranges of is longer):
        one small ranged read, made only when a write finds its object already there."""
        try:
            tail = self.store.get(key, (size - 1, size + 1))
        except NotFoundError:
            return False
        return len(tail) != 1

    def _store_again(
        self, data: bytes | memoryview, digest: bytes, record: Callable[[str, int], None] | None
    ) -> ChunkRef:
        """Store bytes a purge removed, written again: under a key of their own (a one-entry
        pack), never at the retired address, so versions from before the purge stay
        purged and this one reads normally."""
        import secrets

        location = f"packs/{secrets.token_hex(20)}"
        if record is not None:
            record(location, len(data))  # the collector knows of it before it exists
        self.store.put_if_absent(location, data)
        return ChunkRef(RefKind.LOCATION, digest, len(data), 0, location)

    def _purge_of(self, ref: ChunkRef | ShardRef, what: str) -> None:
        """Raise PurgedError if a purge removed `ref`'s bytes (a read of them just failed)."""
        from zarrlake.format.shard import ShardRef

        if self.purged is None or isinstance(ref, ShardRef):
            return
        record = self.purged(ref.digest)
        if record is not None:
            raise PurgedError(
                f"{what}: its bytes were removed by {record.describe()}"  # type: ignore[attr-defined]
                "; run `zarrlake purge --list` for who and why",
                record.id,  # type: ignore[attr-defined]
            )

    def read_ref(
        self, ref: ChunkRef | ShardRef, what: str, *, spread: bool = True
    ) -> bytes | memoryview:
        """The referenced bytes, verified against the reference's checksum (a virtual
        chunk's against its source's identity at import: StaleVirtualChunkError; an
        assembled shard's part by part). `spread=False` hashes a large object on this thread
        only, for callers reading many side by side."""
        from zarrlake.format.shard import ShardRef

        if isinstance(ref, ShardRef):
            return self._shard_ranges(ref, what, [(0, ref.length)])[0]
        if ref.kind == RefKind.VIRTUAL:
            assert ref.location is not None
            return self.sources.read(ref.location, ref.offset, ref.length, ref.identity)
        if ref.kind == RefKind.INLINE:
            data = ref.data or b""
        else:
            key = ref.location if ref.kind == RefKind.LOCATION else chunk_object_key(ref.digest)
            assert key is not None
            span = (ref.offset, ref.offset + ref.length) if ref.kind == RefKind.LOCATION else None
            try:
                data = self.store.get(key, span)
            except NotFoundError:
                self._purge_of(ref, what)
                raise missing_data(what, key) from None
        if len(data) != ref.length or self.digest(data, spread=spread) != ref.digest:
            self._purge_of(ref, what)
            raise mismatch(what, ref)
        return data

    def read_ranges(self, ref: ChunkRef | ShardRef, what: str, spans: list[Span]) -> list[bytes]:
        """The bytes of each span of the referenced value, verified, fetching little more
        than the spans: a large chunk object's covering blocks (checked against its block
        table), a pack entry's own bytes, an assembled shard's inner chunks (each checked
        against its own digest), a virtual chunk's spans; nearby ranges share a
        request and requests run side by side (at most `read_concurrency`)."""
        try:
            return self._read_ranges(ref, what, spans)
        except (CorruptionError, NotFoundError) as e:
            if isinstance(e, PurgedError):
                raise
            self._purge_of(ref, what)
            raise

    def _read_ranges(self, ref: ChunkRef | ShardRef, what: str, spans: list[Span]) -> list[bytes]:
        from zarrlake.format.shard import ShardRef

        wanted = [s.resolve(ref.length) for s in spans]
        if isinstance(ref, ShardRef):  # (its inner chunks: no block table)
            return self._shard_ranges(ref, what, wanted)
        from zarrlake.format.blocks import TABLE_MIN

        if all(end <= start for start, end in wanted):
            if ref.kind == RefKind.OBJECT:  # nothing to read, but the object must exist
                self._check_exists(chunk_object_key(ref.digest), what)
            elif ref.kind == RefKind.LOCATION:
                assert ref.location is not None
                self._check_exists(ref.location, what)
            return [b""] * len(spans)
        if ref.kind == RefKind.VIRTUAL:
            return self._virtual_ranges(ref, wanted)
        if ref.kind == RefKind.OBJECT and ref.length >= TABLE_MIN:
            got = self._block_ranges(ref, what, wanted)
            if got is not None:
                return got
        data = memoryview(self.read_ref(ref, what))  # small, packed, or without a table
        return [bytes(data[start:end]) for start, end in wanted]

    def _shard_ranges(self, ref: ShardRef, what: str, wanted: list[tuple[int, int]]) -> list[bytes]:
        """Spans of an assembled shard. The whole shard, when it is still one stored
        object, is that object read whole. Other spans read the inner chunks they touch,
        each whole and checked against its own digest (the manifest entry's), nothing
        else: no block table, no block around it; parts in one object near each other
        share a request. Spans of the index (zarr reads it before each inner chunk) come
        from the index assembled from the entries: no read."""
        from zarrlake.vc.ranges import Span

        lo, hi = ref.index_at, ref.index_at + len(ref.index)
        if all(lo <= start and end <= hi for start, end in wanted):
            return [ref.index[start - lo : end - lo] for start, end in wanted]
        if ref.whole is not None and wanted == [(0, ref.length)]:
            try:
                return [bytes(self.read_ref(ref.whole, what))]
            except (CorruptionError, NotFoundError):
                if self.purged is None or not any(self.purged(p.digest) for p in ref.parts):
                    raise
                # a purge zeroed some of its inner chunks: read the others part by part
        pieces = [ref.pieces(start, end) for start, end in wanted]
        asked: dict[int, list[Span]] = {}
        for found in pieces:
            for part, lo, hi in found:
                if part >= 0:
                    asked.setdefault(part, []).append(Span(lo, hi))
        refs = {p: ref.parts[p] for p in asked}  # (each built once, from the columns)
        located = {p: r for p, r in refs.items() if r.kind == RefKind.LOCATION}
        got = self._located_parts(ref, what, located)
        others = sorted(asked.keys() - got.keys())

        def one(part: int) -> bytes | memoryview:
            return self.read_ref(refs[part], f"{what} (inner chunk {ref.name(part)})")

        if self.store.remote and len(others) > 1:
            got.update(zip(others, self.pool.map(one, others), strict=True))
        else:
            got.update((p, one(p)) for p in others)
        out = []
        for found in pieces:
            out.append(
                b"".join(
                    ref.index[lo:hi] if part < 0 else bytes(memoryview(got[part])[lo:hi])
                    for part, lo, hi in found
                )
            )
        return out

    def _located_parts(
        self, ref: ShardRef, what: str, located: dict[int, ChunkRef]
    ) -> dict[int, bytes | memoryview]:
        """The whole bytes of inner chunks stored as ranges of other objects (`located`:
        part -> its reference), each checked against its digest; ranges of one object near
        each other share a request."""
        from zarrlake.vc.ranges import coalesce

        by_object: dict[str, list[int]] = {}
        for p, part in located.items():
            assert part.location is not None
            by_object.setdefault(part.location, []).append(p)
        out: dict[int, bytes | memoryview] = {}
        for location, parts in by_object.items():
            spans = [(located[p].offset, located[p].offset + located[p].length) for p in parts]
            requests = coalesce(spans, self.coalesce_gap, MAX_REQUEST)
            data = self._fetch_ranges(location, requests, what)
            for p, cut in zip(parts, _assemble(requests, data, spans), strict=True):
                part = located[p]
                if len(cut) != part.length or self.digest(cut) != part.digest:
                    self._purge_of(part, f"{what} (inner chunk {ref.name(p)})")
                    raise mismatch(f"{what} (inner chunk {ref.name(p)})", part)
                out[p] = cut
        return out

    def _check_exists(self, key: str, what: str) -> None:
        if not self.store.exists(key):
            raise missing_data(what, key)

    def _fetch_ranges(self, key: str, requests: list[tuple[int, int]], what: str) -> list[bytes]:
        """The byte ranges `requests` of object `key`: side by side on the read pool from a
        remote store, in turn from a local one (a read there costs less than a thread hop)."""

        def one(span: tuple[int, int]) -> bytes:
            try:
                with self._slots.get():  # the bound holds across threads and keys
                    return self.store.get(key, span)
            except NotFoundError:
                raise missing_data(what, key) from None

        if len(requests) <= 1 or not self.store.remote:
            return [one(r) for r in requests]
        return list(self._reads.get().map(one, requests))

    def _virtual_ranges(self, ref: ChunkRef, wanted: list[tuple[int, int]]) -> list[bytes]:
        """Spans of a virtual chunk, each request checked against the source's identity."""
        from zarrlake.vc.ranges import coalesce

        assert ref.location is not None
        location = ref.location
        requests = coalesce(wanted, self.coalesce_gap, MAX_REQUEST)

        def one(span: tuple[int, int]) -> memoryview:
            start, end = span
            with self._slots.get():
                return self.sources.read(location, ref.offset + start, end - start, ref.identity)

        if len(requests) <= 1:
            got = [one(r) for r in requests]
        else:
            got = list(self._reads.get().map(one, requests))
        return _assemble(requests, got, wanted)

    def _block_ranges(
        self, ref: ChunkRef, what: str, wanted: list[tuple[int, int]]
    ) -> list[bytes] | None:
        """Spans of a large chunk object read block by block; None if it has no table.
        Spans whose blocks were verified lately (a shard's index) are served from memory."""
        from zarrlake.format.blocks import BlockTable, block_size, table_key

        key = chunk_object_key(ref.digest)
        with self._cache_lock:
            table = self._tables.get(ref.digest)
        if table is _NO_TABLE:
            return None
        size = table.block_size if isinstance(table, BlockTable) else block_size(ref.length)
        out = self._cached_spans(ref.digest, size, wanted)
        missing = [w if o is None else (0, 0) for w, o in zip(wanted, out, strict=True)]
        requests = _block_requests(missing, size, ref.length, self.coalesce_gap)
        if not requests:
            return [b"" if o is None else o for o in out]
        if isinstance(table, BlockTable):
            data = self._fetch_ranges(key, requests, what)
        elif not self.store.remote:
            table = self._table(table_key(ref.digest), ref, what)
            if table is None:
                return None
            data = self._fetch_ranges(key, requests, what)
        else:  # fetch the table along with the blocks: one round trip, not two
            pending = self._reads.get().submit(self._table, table_key(ref.digest), ref, what)
            data = self._fetch_ranges(key, requests, what)
            table = pending.result()
            if table is None:
                return None
        if table.block_size != size:  # a table made with other rules: fetch its blocks
            size, missing = table.block_size, wanted
            requests = _block_requests(wanted, size, ref.length, 0)
            data = self._fetch_ranges(key, requests, what)
        for (start, end), got in zip(requests, data, strict=True):
            table.verify(start, end, got, what)
            if end - start <= CACHED_REQUEST_BLOCKS * size:
                with self._cache_lock:
                    for at in range(start, end, size):
                        block = bytes(memoryview(got)[at - start : at - start + size])
                        self._blocks[(ref.digest, size, at // size)] = block
        fetched = _assemble(requests, data, missing)
        return [f if o is None else o for f, o in zip(fetched, out, strict=True)]

    def _cached_spans(
        self, object_digest: bytes, size: int, wanted: list[tuple[int, int]]
    ) -> list[bytes | None]:
        """Each wanted span cut from verified blocks in memory, or None if one is missing."""
        out: list[bytes | None] = []
        with self._cache_lock:
            for start, end in wanted:
                if end <= start:
                    out.append(b"")
                    continue
                first = start // size
                blocks = [
                    self._blocks.get((object_digest, size, b))
                    for b in range(first, -(-end // size))
                ]
                if any(b is None for b in blocks):
                    out.append(None)
                    continue
                joined = b"".join(blocks)  # type: ignore[arg-type]
                out.append(joined[start - first * size : end - first * size])
        return out

    def _table(self, tkey: str, ref: ChunkRef, what: str) -> BlockTable | None:
        """The block table of `ref`'s object (cached), or None if it has none."""
        from zarrlake.format.blocks import BlockTable

        try:
            with self._slots.get():
                raw = self.store.get(tkey)
        except NotFoundError:
            with self._cache_lock:
                self._tables[ref.digest] = _NO_TABLE
            return None
        table = BlockTable.decode(raw, ref.digest, ref.length, what)
        with self._cache_lock:
            self._tables[ref.digest] = table
        return table

    @property
    def pool(self) -> Executor:
        """Where parallel work runs: the runtime's executor if it brings one, else this
        repository's own threads."""
        injected = runtime.current().executor
        if injected is not None:
            return injected
        return self._pool.get()

    def close(self) -> None:
        """Wait for background work (a committed session's staged-record cleanup) to end, so
        the backends are never closed under a thread still using them."""
        pool = self._pool.take()
        if pool is not None:
            pool.shutdown(wait=True)
        reads = self._reads.take()
        if reads is not None:
            reads.shutdown(wait=True)

    def prefetch(self, read: Callable[[], object]) -> None:
        """Start `read` on the shared I/O pool and return: what it reads lands in the cache,
        where the read that needs it finds it (or joins it in flight); its errors are left
        to that read to raise. Nothing on a local store: a read there costs less than the
        hand-off to a thread (and the woken thread takes the caller's core or the GIL), and
        the read that needs it makes it."""
        if self.store.remote:
            self.pool.submit(read)

    def read_each[T: (ManifestRange, SnapshotRoot, ChangeSet, CommitRecord)](
        self, cls: type[T], oids: list[str]
    ) -> list[T]:
        """The objects `oids` of type `cls`, in order: at once from a remote store, in turn
        from a local one (see `prefetch`)."""
        if self.store.remote:
            return self.map(lambda oid: self.read(cls, oid), oids)
        return [self.read(cls, oid) for oid in oids]

    def map[A, R](self, fn: Callable[[A], R], items: list[A]) -> list[R]:
        """`fn` over `items`, in order: the first on the calling thread, which would only
        wait otherwise, the rest on the shared I/O pool at the same time (a hand-off to a
        thread fewer per call). The first failure in order is raised; calls already sent
        run to their end. The rest go by the pool's `map`, not one `submit` each: the
        simulator's executor runs a submitted call as another actor of the same process,
        which waits for the caller to yield the process while the caller waits for it."""
        if len(items) <= 1:
            return [fn(i) for i in items]
        rest = self.pool.map(fn, items[1:])  # all sent now (the simulator's: run inline now)
        first = fn(items[0])
        return [first, *rest]


def _block_requests(
    wanted: list[tuple[int, int]], size: int, length: int, gap: int
) -> list[tuple[int, int]]:
    """Block-aligned requests covering the non-empty `wanted` spans (gaps under `gap` bridged
    by whole blocks, so every request is still whole blocks)."""
    from zarrlake.vc.ranges import coalesce

    covering = [
        (start // size * size, min(-(-end // size) * size, length))
        for start, end in wanted
        if end > start
    ]
    return coalesce(covering, gap // size * size, max(MAX_REQUEST, size))


def _assemble(
    requests: list[tuple[int, int]],
    data: list[bytes] | list[memoryview],
    wanted: list[tuple[int, int]],
) -> list[bytes]:
    """Each wanted span cut out of the fetched request that holds it."""
    from zarrlake.vc.ranges import within

    out = []
    for start, end in wanted:
        if end <= start:
            out.append(b"")
            continue
        i = within(requests, start, end)
        base = requests[i][0]
        out.append(bytes(memoryview(data[i])[start - base : end - base]))
    return out


def missing(problem: str) -> NotFoundError:
    """The error of an object a read needs that is not there (`problem` names it)."""
    return NotFoundError(f"{problem}; run `zarrlake fsck` to find every missing object")


def missing_data(what: str, key: str) -> NotFoundError:
    """The error of a read of `what` whose data object `key` is not there."""
    return missing(f"{what}: its data object {key} is missing")


def mismatch(what: str, ref: ChunkRef) -> CorruptionError:
    """The error of `what`'s bytes (at `ref`) that do not match their checksum."""
    return CorruptionError(
        f"{what}: checksum mismatch in its data ({describe(ref)})"
        "; run `zarrlake fsck` to find every damaged object"
    )


def describe(ref: ChunkRef) -> str:
    """Where a reference's bytes live, in words (for error messages and `zarrlake` output)."""
    if ref.kind == RefKind.INLINE:
        return "inline"
    if ref.kind == RefKind.OBJECT:
        return chunk_object_key(ref.digest)
    if ref.kind == RefKind.VIRTUAL:
        return f"{ref.location}[{ref.offset}:{ref.offset + ref.length}] ({ref.identity})"
    return f"{ref.location}[{ref.offset}:{ref.offset + ref.length}]"
