"""The zarr v3 store of a session: zarr, xarray and friends read and write through it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from zarrlake.errors import (
    ReadOnlySessionError,
    StaleVirtualChunkError,
    UndecodableChunkError,
    ZarrLakeError,
)
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.vc.chunk_keys import KeyNamer
from zarrlake.vc.ranges import Span
from zarrlake.zarr_store import write_scope
from zarrlake.zarr_store.pipeline import handed
from zarrlake.zarr_store.pipeline import install as install_pipeline

if TYPE_CHECKING:
    from zarrlake.format.shard import ShardRef
    from zarrlake.vc.commit_protocol import Change
    from zarrlake.vc.statistics import ChunkValues

_READ_ONLY = "store was opened in read-only mode and does not support writing"


def _span(byte_range: ByteRequest) -> Span:
    """zarr's byte request as a Span (zarr's own argument checks: a bad one raises)."""
    match byte_range:
        case RangeByteRequest(start, end):
            return Span(start, end)
        case OffsetByteRequest(offset):
            return Span(offset)
        case SuffixByteRequest(suffix):
            return Span(suffix=suffix)
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


class StoreEngine(Protocol):
    """The engine hooks the store needs of a session (`Session._engine` provides them). An
    engine that can say a read is cheaper on the calling thread also has `read_here` and
    `read_ranges_here`."""

    @property
    def id(self) -> str | None:
        """The session id, without storing a new session's record (None: read-only)."""

    @property
    def inline_max(self) -> int:
        """Chunks up to this many bytes are staged inline."""

    def lookup(self, key: str) -> ChunkRef | ShardRef | None:
        """The chunk reference of `key` as the session sees it, or None."""

    def peek(self, key: str) -> tuple[bool, bytes | None]:
        """(answered, bytes or None) when the answer needs no I/O; else (False, None)."""

    def prepare_all(
        self, key: str, data: bytes | bytearray | memoryview, values: ChunkValues | None = None
    ) -> list[Change]:
        """Check, hash and (if big) upload `data`; the changes to stage for `key` (a
        shard's are its changed inner chunks). `values`: what the bytes encode, when the
        writer has them (their statistics need no decoding then)."""

    def prepare_many(
        self, items: list[tuple[str, bytes | memoryview, ChunkValues | None]]
    ) -> list[Change]:
        """`prepare_all` of several large chunks: their objects recorded in one metastore
        write before any is uploaded, then uploaded in parallel; their changes together."""

    def stage(self, changes: list[Change]) -> None:
        """Stage prepared changes."""

    def digest(self, data: bytes | memoryview) -> bytes:
        """The repository's content hash of chunk bytes, on the calling thread."""

    @property
    def finishes_after_writes(self) -> bool:
        """Whether this handle finishes after each array write (a Dask task's copy)."""

    def finish(self) -> None:
        """Flush this handle's writes and record its writer finished."""


class StoreSession(Protocol):
    """What the store needs of a session (zarrlake.Session provides it)."""

    @property
    def _engine(self) -> StoreEngine:
        """The engine hooks (not public API)."""

    @property
    def id(self) -> str | None:
        """The session id; None for a read-only session."""

    @property
    def base_commit(self) -> str:
        """The commit the session reads from."""

    @property
    def read_only(self) -> bool:
        """Whether the session refuses writes."""

    @property
    def spec(self) -> object:
        """The repository spec, which makes the store picklable."""

    def read(self, key: str) -> bytes | memoryview | None:
        """The bytes of `key` as the session sees it, or None."""

    def _read_ranges(self, key: str, spans: list[Span]) -> list[bytes] | None:
        """Byte ranges of `key` as the session sees it (verified), or None if absent."""

    def exists(self, key: str) -> bool:
        """Whether `key` exists as the session sees it."""

    def list_prefix(self, prefix: str) -> list[str]:
        """Every key under `prefix`, sorted."""

    def list_dir(self, prefix: str) -> list[str]:
        """The names directly under `prefix`."""

    def write(self, key: str, data: bytes) -> None:
        """Stage `data` under `key`."""

    def write_many(self, items: list[tuple[str, bytes]]) -> None:
        """Stage several writes at once."""

    def delete(self, key: str) -> None:
        """Stage the deletion of `key`."""

    def delete_many(self, keys: list[str]) -> None:
        """Stage the deletion of several keys."""


def stale_virtual_chunk(key: str, ref: ChunkRef, error: Exception) -> StaleVirtualChunkError:
    """The error for virtual chunk `key` whose bytes at `ref` do not decode."""
    span = f"[{ref.offset}:{ref.offset + ref.length}]"
    return StaleVirtualChunkError(
        f"virtual source {ref.location} changed since it was imported, though its "
        f"{ref.identity} did not: chunk {key!r} (bytes {span} of it) does not decode "
        f"({type(error).__module__}.{type(error).__name__}: {error})"
    )


def _is_metadata(key: str) -> bool:
    return key == "zarr.json" or key.endswith("/zarr.json")


class _StageBatcher:
    """Stages the writes zarr issues concurrently on one event loop in one metastore
    transaction; each `set` returns only once its batch is staged."""

    def __init__(self, session: StoreSession) -> None:
        self.session = session
        self.pending: list[tuple[list[Change], asyncio.Future[None]]] = []
        self.flushing = False

    async def stage(self, changes: list[Change]) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((changes, future))
        if not self.flushing:
            self.flushing = True
            loop.call_soon(self._flush)
        await future

    def _flush(self) -> None:
        """Runs on the loop: one short metastore transaction costs less than a thread hop."""
        batch, self.pending, self.flushing = self.pending, [], False
        try:
            self.session._engine.stage([change for changes, _ in batch for change in changes])
        except Exception as e:
            for _, f in batch:
                f.set_exception(e)
        else:
            for _, f in batch:
                f.set_result(None)


class _ReadBatcher:
    """Gathers the ranged reads zarr issues concurrently on one event loop (a shard's index
    and inner chunks) and reads those of one key together, so nearby ranges share requests
    (Objects.read_ranges); each key's batch runs on a thread, or on the loop itself where
    that is cheaper (`here`: a small read from a local directory, `read_ranges_here`)."""

    def __init__(self, session: StoreSession, here: bool = False) -> None:
        self.session = session
        self.here = here
        self.pending: dict[str, list[tuple[Span, asyncio.Future[bytes | None]]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def read(self, key: str, span: Span) -> bytes | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes | None] = loop.create_future()
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.setdefault(key, []).append((span, future))
        return await future

    def _flush(self) -> None:
        batch, self.pending = self.pending, {}
        for key, items in batch.items():
            if self.here and self._read_here(key, items):
                continue
            task = asyncio.get_running_loop().create_task(self._read(key, items))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _read_here(self, key: str, items: list[tuple[Span, asyncio.Future[bytes | None]]]) -> bool:
        """Read the batch on the loop if that is cheaper; whether it was."""
        engine = self.session._engine
        try:
            answered, got = engine.read_ranges_here(key, [span for span, _ in items])  # type: ignore[attr-defined]
        except Exception as e:
            _settle(items, None, e)
            return True
        if answered:
            _settle(items, got)
        return answered

    async def _read(self, key: str, items: list[tuple[Span, asyncio.Future[bytes | None]]]) -> None:
        spans = [span for span, _ in items]
        try:
            got = await asyncio.to_thread(self.session._read_ranges, key, spans)
        except BaseException as e:
            _settle(items, None, e)
            if not isinstance(e, Exception):
                raise
            return
        _settle(items, got)


def _settle(
    items: list[tuple[Span, asyncio.Future[bytes | None]]],
    got: list[bytes] | None,
    error: BaseException | None = None,
) -> None:
    """Hand each waiting read its range of `got` (None: the key is absent), or `error`."""
    for i, (_, f) in enumerate(items):
        if f.done():
            continue
        if error is not None:
            f.set_exception(error)
        else:
            f.set_result(None if got is None else got[i])


class SessionStore(Store):
    """A zarr store over one zarrlake session.

    Blocking work runs in threads, so zarr's concurrent requests overlap.
    """

    supports_writes = True
    supports_deletes = True
    supports_listing = True
    supports_partial_writes = False
    takes_values = True
    """zarr's codec pipeline (zarr_store/pipeline.py) hands this store the values of the
    chunks it writes: their statistics are computed from them."""
    holds_chunks = True
    """zarr's codec pipeline has this store hold an array write's large chunks until the
    write's end, then send them together (zarr_store/write_scope.py)."""

    @property
    def computes_statistics(self) -> bool:
        """Whether chunks written here get statistics (Settings.chunk_statistics): zarr's
        codec pipeline then takes those of a write's small chunks together."""
        return bool(getattr(self.session._engine, "chunk_statistics", False))

    @property
    def chunk_digest(self) -> Callable[[Any], bytes] | None:
        """The repository's content hash, which zarr's codec pipeline applies to a large
        chunk's bytes as it encodes them (they are then not hashed again); None for a
        read-only store, or a session that hashes its own."""
        return None if self.read_only else getattr(self.session._engine, "digest", None)

    @property
    def supports_consolidated_metadata(self) -> bool:
        """False: listings of a session are consistent by themselves.

        So zarr and xarray neither write consolidated metadata (a hot spot every writer would
        conflict on) nor trust one written earlier (it would hide arrays added later).
        """
        return False

    def __init__(self, session: StoreSession, read_only: bool = False) -> None:
        install_pipeline()  # undecodable chunks named; Dask task copies finish per write
        super().__init__(read_only=read_only or session.read_only)
        self.session = session
        self._batchers: dict[asyncio.AbstractEventLoop, _StageBatcher] = {}
        self._readers: dict[asyncio.AbstractEventLoop, _ReadBatcher] = {}
        # Sessions that can say a read is cheaper here than on a thread (read_here).
        self._reads_here = self.read_only and hasattr(session._engine, "read_here")

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SessionStore)
            and self.session.spec == other.session.spec
            and self.session._engine.id == other.session._engine.id
            and self.session.base_commit == other.session.base_commit
            and self.read_only == other.read_only
        )

    def __hash__(self) -> int:
        return hash((self.session._engine.id, self.session.base_commit, self.read_only))

    def __repr__(self) -> str:
        return f"SessionStore({self.session!r}, read_only={self.read_only})"

    def __getstate__(self) -> dict[str, Any]:
        return {"session": self.session, "read_only": self.read_only}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["session"], read_only=state["read_only"])  # type: ignore[misc]

    def with_read_only(self, read_only: bool = False) -> SessionStore:
        """A store over the same session, read-only or not (zarr's Store API).

        Raises
        ------
        ReadOnlySessionError
            If a writable store is asked of a read-only session.
        """
        if not read_only and self.session.read_only:
            raise ReadOnlySessionError(
                f"{_READ_ONLY}: the session is pinned to a commit"
                "; open a writable one with repo.create_session(branch)"
            )
        return SessionStore(self.session, read_only=read_only)

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlySessionError(_READ_ONLY)

    # reads ------------------------------------------------------------------------------

    def _get(self, key: str, byte_range: ByteRequest | None) -> bytes | memoryview | None:
        if byte_range is None:
            return self.session.read(key)
        got = self.session._read_ranges(key, [_span(byte_range)])
        return None if got is None else got[0]

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """The value of `key` (or a byte range of it) without an event loop; None if absent."""
        data = self._get(key, byte_range)
        if data is None:
            return None
        return (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The value of `key` (or a byte range of it); None if absent.

        Answers that need no I/O return at once, and so do reads that are cheaper on the
        loop (`read_here`; ranged ones once batched, `_ReadBatcher`); others run on a
        thread, off the event loop.
        Byte ranges read only the bytes they need (verified), and concurrent ranged reads
        of one key share requests."""
        span = None if byte_range is None else _span(byte_range)  # malformed: fails here
        engine = self.session._engine
        data: bytes | memoryview | None
        answered, data = engine.peek(key)
        if not answered and span is None and self._reads_here:
            answered, data = engine.read_here(key)  # type: ignore[attr-defined]
        if answered:
            if data is not None and span is not None:
                start, end = span.resolve(len(data))
                data = data[start:end]
        elif span is None:
            data = await asyncio.to_thread(self.session.read, key)
        else:
            loop = asyncio.get_running_loop()
            reader = self._readers.get(loop)
            if reader is None:
                reader = self._readers[loop] = _ReadBatcher(self.session, self._reads_here)
            data = await reader.read(key, span)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """The byte ranges of several keys, read concurrently (ranges of one key together)."""
        return await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges))

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        max_concurrency: int = 10,
        max_gap_bytes: int = 1 << 20,
        max_coalesced_bytes: int = 16 << 20,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        """Many byte ranges of `key` (a shard's inner chunks), read together in one batch.

        The repository coalesces them by block and bounds the requests in flight
        (Settings.read_coalesce_gap, read_concurrency; zarr's own limits are not used).

        Raises
        ------
        ExceptionGroup
            Holding FileNotFoundError if the key is absent (as zarr's default does).
        """
        spans = [Span() if r is None else _span(r) for r in byte_ranges]
        answered, got = False, None
        if self._reads_here:
            answered, got = self.session._engine.read_ranges_here(key, spans)  # type: ignore[attr-defined]
        if not answered:
            got = await asyncio.to_thread(self.session._read_ranges, key, spans)
        if got is None:
            raise ExceptionGroup(f"{key} is absent", [FileNotFoundError(key)])
        yield [(i, prototype.buffer.from_bytes(data)) for i, data in enumerate(got)]

    def get_ranges_sync(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        max_gap_bytes: int = 1 << 20,
        max_coalesced_bytes: int = 16 << 20,
    ) -> Sequence[tuple[int, Buffer | None]]:
        """`get_ranges` without an event loop."""
        spans = [Span() if r is None else _span(r) for r in byte_ranges]
        got = self.session._read_ranges(key, spans)
        if got is None:
            raise ExceptionGroup(f"{key} is absent", [FileNotFoundError(key)])
        return [(i, prototype.buffer.from_bytes(data)) for i, data in enumerate(got)]

    async def exists(self, key: str) -> bool:
        """Whether `key` exists as the session sees it."""
        return await asyncio.to_thread(self.session.exists, key)

    async def getsize(self, key: str) -> int:
        """The size of the value of `key` in bytes, from its reference (no read).

        Raises
        ------
        FileNotFoundError
            If the key does not exist.
        """
        ref = await asyncio.to_thread(self.session._engine.lookup, key)
        if ref is None:
            raise FileNotFoundError(key)
        return ref.length

    # writes -----------------------------------------------------------------------------

    def set_sync(self, key: str, value: Buffer) -> None:
        """Write `value` under `key` without an event loop.

        An unchanged metadata document is skipped.
        """
        self._check_writable()
        data = value.to_bytes()
        if _is_metadata(key) and self.session.read(key) == data:
            return
        self.session.write(key, data)

    async def _unchanged(self, key: str, value: Buffer) -> bool:
        """Whether `key` already holds these bytes. zarr and xarray rewrite metadata they
        did not change (to_zarr(mode="a") rewrites the root group); staging such a rewrite
        would make two writers adding different arrays conflict on the root."""
        return await asyncio.to_thread(self.session.read, key) == value.to_bytes()

    def delete_sync(self, key: str) -> None:
        """Delete `key` without an event loop."""
        self._check_writable()
        self.session.delete(key)

    async def set(self, key: str, value: Buffer) -> None:
        """Write `value` under `key` in the session (an unchanged metadata document is skipped).

        Large values are hashed and uploaded on a thread, off the event loop.

        Raises
        ------
        ReadOnlySessionError
            If the store or its session is read-only.
        """
        self._check_writable()
        if not isinstance(value, Buffer):
            raise TypeError(f"SessionStore.set(): expected a zarr Buffer, not {type(value)}")
        if _is_metadata(key) and await self._unchanged(key, value):
            return
        engine = self.session._engine
        loop = asyncio.get_running_loop()
        values = None if _is_metadata(key) else handed(value, key)
        scope = write_scope.current()
        if (
            scope is not None
            and len(value) > engine.inline_max
            and not _is_metadata(key)
            and scope.hold(self, self._send, (key, value.as_buffer_like(), values))
        ):  # recorded, uploaded and staged with the write's other chunks (write_scope.py)
            await scope.settle()
            return
        if len(value) > engine.inline_max:  # hashing, uploading: off the event loop
            # zarr's buffer itself, not a copy: a large chunk is hashed and uploaded before
            # this returns, and what is kept of it past that (inline bytes, inner chunks of
            # a shard, a reused object's bytes) is copied out (txn/writes.py)
            data = value.as_buffer_like()
            changes = await asyncio.to_thread(lambda: engine.prepare_all(key, data, values))
        else:
            changes = engine.prepare_all(key, value.to_bytes(), values)
        if not changes:  # a shard rewritten with the inner chunks it held
            return
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = _StageBatcher(self.session)
        await batcher.stage(changes)

    async def _send(self, held: list[write_scope.Held]) -> None:
        """Record the objects of an array write's held chunks in one metastore write, then
        upload them in parallel and stage them, off the event loop."""
        self._check_writable()
        engine = self.session._engine

        def run() -> None:
            changes = engine.prepare_many(held)
            if changes:
                engine.stage(changes)

        await asyncio.to_thread(run)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Write `value` under `key` unless the key exists."""
        self._check_writable()
        if not await self.exists(key):
            await self.set(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        self._check_writable()
        items = [(k, v.to_bytes()) for k, v in values]
        await asyncio.to_thread(self.session.write_many, items)

    async def delete(self, key: str) -> None:
        """Delete `key` from the session; a missing key is not an error."""
        self._check_writable()
        await asyncio.to_thread(self.session.delete, key)

    async def delete_dir(self, prefix: str) -> None:
        """Delete every key under `prefix` (a group or array and all it holds)."""
        self._check_writable()
        prefix = prefix.rstrip("/")
        keys = await asyncio.to_thread(self.session.list_prefix, prefix + "/" if prefix else "")
        await asyncio.to_thread(self.session.delete_many, keys)

    async def array_written(self) -> None:
        """zarr finished writing an array's chunks through this store (the codec pipeline
        says so): a Dask task's copy of a session finishes here, off the event loop, so the
        task's writes are durable and counted before it returns."""
        engine = self.session._engine
        if not self.read_only and engine.finishes_after_writes:
            await asyncio.to_thread(engine.finish)

    # chunks that do not decode --------------------------------------------------------------

    async def undecodable(self, key: str, error: Exception, more: int = 0) -> ZarrLakeError:
        """The error of a read that met chunk `key`, whose bytes the array's codecs could
        not decode (`error`, the codec's exception; `more` other chunks of the read failed
        too): UndecodableChunkError, or StaleVirtualChunkError for a virtual chunk (its
        source file was rewritten keeping its size and mtime)."""
        return await asyncio.to_thread(self._undecodable, key, error, more)

    def _undecodable(self, key: str, error: Exception, more: int) -> ZarrLakeError:
        ref = self.session._engine.lookup(key)
        if isinstance(ref, ChunkRef) and ref.kind == RefKind.VIRTUAL:  # its file changed
            return stale_virtual_chunk(key, ref, error)
        parts = key.split("/")
        docs = {}
        for n in range(len(parts)):
            meta = "/".join([*parts[:n], "zarr.json"])
            doc = self.session.read(meta)
            if doc is not None:
                docs[meta] = bytes(doc)  # (a document is bytes already: not copied)
        node, coords = KeyNamer(docs).name(key)
        text = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
        where = f"chunk {coords} of array {node!r}" if coords is not None else f"key {key!r}"
        also = f"; {more} more chunk(s) of this read do not decode either" if more else ""
        return UndecodableChunkError(
            f"{where} does not decode with the array's codecs ({reason}){also}. Its bytes are "
            f"stored as they were written (key {key!r}, checksum intact): the writer stored "
            "bytes zarr cannot read. `zarrlake fsck --decode` lists every such chunk; write "
            "the chunk again (or delete it) in a new session to repair it",
            node,
            coords,
            key,
            reason,
        )

    # listing ----------------------------------------------------------------------------

    async def list(self) -> AsyncIterator[str]:
        """Every key of the session, sorted."""
        for key in await asyncio.to_thread(self.session.list_prefix, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key under `prefix`, sorted."""
        for key in await asyncio.to_thread(self.session.list_prefix, prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The names directly under `prefix` (keys and sub-directories)."""
        for key in await asyncio.to_thread(self.session.list_dir, prefix):
            yield key
