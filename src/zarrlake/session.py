"""Sessions: transactions on a branch. Reads see the base commit plus the session's staged
writes (those of every joined worker, once flushed). A thin façade over the transaction
engine in `zarrlake.txn`.

Durability: metadata documents are staged durably when written. Chunk writes are buffered
by each handle and become durable when it flushes: `flush()`, a `commit()` from the same
handle, the handle finishing (its `with` block ends, `close()`, pickling it, the handle
going away, its process ending normally, its Spark task committing), or on their own once
the handle has been idle for five seconds (or its buffer is full). A commit counts what
finished workers wrote and what live ones flushed, waits for live workers' unflushed
writes, and refuses, naming them, when a worker failed or died (txn/writers.py)."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from zarrlake._util.deprecation import deprecated_alias
from zarrlake.errors import InvalidInputError, ZarrLakeError
from zarrlake.txn.transaction import Transaction  # (every session wraps one)
from zarrlake.zarr_store import SessionStore

if TYPE_CHECKING:
    import zarr

    from zarrlake.connection import RepoContext, RepoSpec
    from zarrlake.format.chunk_ref import ChunkRef
    from zarrlake.format.shard import ShardRef
    from zarrlake.vc.commit_protocol import Change
    from zarrlake.vc.diff import Diff
    from zarrlake.vc.policies import ConflictPolicy, UnfinishedPolicy, UnflushedPolicy
    from zarrlake.vc.ranges import Span
    from zarrlake.vc.statistics import ChunkValues


class Session:
    """A transaction on a branch (writable), or a read-only view of one commit.

    Pickling sends a small handle; the copy re-joins the same session (cooperative writes
    from Spark or Dask workers, committed once by the driver)."""

    def __init__(self, txn: Transaction) -> None:
        self._txn = txn

    def __reduce__(self) -> tuple[object, ...]:
        return (Session, (self._txn,))

    def __enter__(self) -> Session:
        self._txn.within += 1
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, *rest: object
    ) -> None:
        """Leaving a `with` block normally finishes this handle's writer (`close`). Leaving
        it by an exception abandons the session if this handle began it; a worker that
        joined marks its writer failed instead, so the commit refuses to count its part
        without being told to. The block's own exception is what propagates."""
        self._txn.within -= 1
        if self.read_only or self.committed_as is not None:
            return
        if exc_type is None:
            self.close()
            return
        with suppress(ZarrLakeError):
            if self._txn.created:
                self.abandon()
            else:
                self._txn.fail(f"its with block raised {exc_type.__name__}: {exc}"[:300])

    def __repr__(self) -> str:
        if self.read_only:
            return f"<Session read-only at {self.base_commit[:12]}>"
        return f"<Session {self._txn.id} on {self.branch!r} base {self.base_commit[:12]}>"

    @property
    def _engine(self) -> SessionEngine:
        """The engine hooks (zarr store, Spark, virtual chunks, UI, CLI): not public API."""
        return SessionEngine(self)

    # identity -------------------------------------------------------------------------

    @property
    def spec(self) -> RepoSpec:
        """Where the repository is (to open it from another process)."""
        return self._txn.ctx.spec

    @property
    def id(self) -> str | None:
        """The session id (give it to `Repo.join_session` elsewhere); None when read-only.

        Reading it stores the session's record if it is not yet (a new session stores it
        at its first write, hand-over or commit), so the id can be joined elsewhere."""
        return self._txn.hand_over()

    @property
    def read_only(self) -> bool:
        """Whether this is a read-only view of a commit (writes raise ReadOnlyError)."""
        return self._txn.record is None

    @property
    def branch(self) -> str | None:
        """The branch the session commits to; None when read-only."""
        return self._txn.record.branch if self._txn.record else None

    @property
    def base_commit(self) -> str:
        """The commit the session reads from, fixed when it began."""
        return self._txn.base

    @property
    def committed_as(self) -> str | None:
        """The commit this session became (once committed through this handle)."""
        return self._txn.committed

    @property
    def message(self) -> str | None:
        """The commit message given when the session began, if any."""
        return self._txn.record.message if self._txn.record else None

    @property
    def author(self) -> str | None:
        """The commit author given when the session began, if any."""
        return self._txn.record.author if self._txn.record else None

    @property
    def isolation(self) -> str:
        """ "snapshot" (conflicts on written keys) or "serializable" (on read keys too)."""
        return self._txn.record.isolation if self._txn.record else "snapshot"

    @property
    def expires_at(self) -> datetime | None:
        """When the session expires unless committed or extended (UTC); None when read-only."""
        from zarrlake.session_records import as_datetime

        return as_datetime(self._txn.record.expires_at) if self._txn.record else None

    @property
    def state(self) -> str:
        """The session's state: open, committing, committed, aborted, abandoned or expired.

        Read from the metastore; aborted: a committer outlived its lease and may still land,
        see Session.commit. A read-only view of a commit has the state "read-only".
        """
        from zarrlake.session_records import Status

        return self._txn.state() if self._txn.record else Status.READ_ONLY

    status = deprecated_alias("state")

    # zarr access ------------------------------------------------------------------------

    @property
    def store(self) -> SessionStore:
        """A zarr v3 store over this session (read-only when the session is).

        Examples
        --------
        >>> import zarr
        >>> arr = zarr.create_array(session.store, name="t2m", shape=(24, 180), dtype="f4")
        """
        return SessionStore(self, read_only=self.read_only)

    @property
    def root_group(self) -> zarr.Group:
        """The root zarr group of this session, opened read-only or for appending."""
        import zarr

        return zarr.open_group(self.store, mode="r" if self.read_only else "a")

    # reads ------------------------------------------------------------------------------

    def read(
        self, key: str, byte_range: tuple[int, int | None] | None = None
    ) -> bytes | memoryview | None:
        """The bytes of `key` as this session sees it (staged over base), or None if absent.

        Parameters
        ----------
        key
            A store key, e.g. ``"t2m/c/0/0"`` or ``"t2m/zarr.json"``.
        byte_range
            (start, stop) to read part of the value; stop None reads to the end.
        """
        return self._txn.overlay.read(key, byte_range)

    def _read_ranges(self, key: str, spans: list[Span]) -> list[bytes] | None:
        """Byte ranges of `key` as this session sees it, verified; None if absent.

        Reads little more than the ranges need.
        """
        return self._txn.overlay.read_ranges(key, spans)

    def exists(self, key: str) -> bool:
        """Whether `key` exists as this session sees it."""
        return self._txn.overlay.exists(key)

    def list_prefix(self, prefix: str = "") -> list[str]:
        """Every key under `prefix` as this session sees it, sorted."""
        return self._txn.overlay.list_prefix(prefix)

    def list_dir(self, prefix: str = "") -> list[str]:
        """The names directly under `prefix` (keys and sub-directories), sorted."""
        return self._txn.overlay.list_dir(prefix)

    def metadata_documents(self) -> dict[str, bytes]:
        """Every group's and array's `zarr.json` (key -> document) as this session sees it."""
        return self._txn.overlay.metadata_documents()

    # writes -----------------------------------------------------------------------------

    def write(self, key: str, data: bytes) -> None:
        """Write `data` under `key`; chunks are buffered until flushed, metadata staged at once.

        Raises
        ------
        ReadOnlyError
            If the session is read-only.
        SessionClosedError
            If the session was committed or abandoned.
        InvalidInputError
            If the key is invalid or a metadata document is not valid zarr v3.
        """
        self._engine.stage(self._engine.prepare_all(key, data))

    def write_many(self, items: list[tuple[str, bytes]]) -> None:
        """Write several keys: big chunks upload in parallel, then one staging transaction."""
        self._txn.require_writes().write_many(items)

    def delete(self, key: str) -> None:
        """Delete `key` if it exists; deleting a missing key is not an error."""
        self.delete_many([key])

    def delete_many(self, keys: list[str]) -> None:
        """Delete the keys that exist; deleting a missing key is not an error."""
        self._txn.require_writes().delete_many(keys)

    def move(self, src: str, dst: str) -> None:
        """Move (rename) the group or array `src`, with everything below it, to `dst`.

        The move is part of the session's commit. No chunk is read, copied or rewritten: the
        chunks keep their bytes and the commit's manifests point at them under their new
        keys. Diffs, `log --follow`, blame and conflict reports know it as a move.

        Parameters
        ----------
        src
            The node to move, e.g. ``"raw/temperature"`` (a leading "/" is ignored).
        dst
            Its new path. Its parent must be an existing group; nothing may be there yet.

        Raises
        ------
        NotFoundError
            If there is no group or array at `src`, or no group to hold `dst`.
        AlreadyExistsError
            If a node (or any key) exists at `dst`: a move does not replace anything.
        InvalidInputError
            If `src` is the root, `dst` lies inside `src`, or `dst`'s parent is an array.
        ReadOnlyError, SessionClosedError
            If the session is read-only, committed or abandoned.

        Examples
        --------
        >>> session.move("temperature", "t2m")  # doctest: +SKIP
        >>> session.commit("Rename temperature to t2m")  # doctest: +SKIP
        """
        self._txn.move(src, dst)

    def flush(self) -> None:
        """Make this handle's buffered chunk writes durable.

        Once it returns, they are part of the session for every worker and its commit,
        whatever happens to this process.
        """
        self._txn.flush()

    def close(self) -> None:
        """Finish this handle's writer: flush, and record that its work is complete.

        A commit then counts it even after this process ends. Writing again reopens it.
        Leaving a `with` block, the handle going away and the process ending normally do the
        same.
        """
        self._txn.finish()

    def wait(self) -> None:
        """Wait for the background work of this handle.

        That work is the clean-up of staged records after its commit and, on a remote
        metastore, the session record's change to committed; wait for it e.g. before
        measuring the metastore.
        """
        self._txn.wait()

    # transaction ------------------------------------------------------------------------

    def _staged_changes(self) -> list[Change]:
        """Every staged change of every worker.

        ConflictError if two workers staged different bytes for one key.
        """
        return self._txn.staged_changes()

    read_ranges = deprecated_alias("_read_ranges")
    staged_changes = deprecated_alias("_staged_changes")

    def changes(self) -> Diff:
        """The uncommitted changes of this session (of all its workers)."""
        return self._txn.changes()

    def commit(
        self,
        message: str | None = None,
        *,
        on_conflict: ConflictPolicy = "fail",
        metadata: dict[str, str] | None = None,
        unflushed: UnflushedPolicy = "wait",
        unfinished: UnfinishedPolicy | None = None,
        allow_empty: bool = False,
    ) -> str:
        """Make the session's changes one commit on its branch; returns the commit id.

        Afterwards this session's store reads the commit it made.

        Parameters
        ----------
        message
            The commit message (default: the session's).
        on_conflict
            "fail" (raise `ConflictError`), or resolve chunk conflicts with a concurrent
            commit by keeping "ours" or "theirs".
        metadata
            Properties (str -> str) recorded on the commit.
        unflushed
            What to do about other workers of the session holding writes they have not
            flushed: "wait" for them (up to `Settings.flush_wait`, then
            `UnflushedWritesError` naming them, at once if a worker's process is gone), or
            "discard" them.
        unfinished
            What to do about workers that failed (their `with` block raised) or whose process
            died before finishing: None refuses with `UnfinishedWritersError` naming them;
            "discard" leaves out everything they staged; "include" keeps what they flushed.
        allow_empty
            Commit even if the session changes nothing (an idempotent re-run); otherwise
            `NoChangesError`, and the session stays open.

        Returns
        -------
        str
            The id of the new commit.

        Raises
        ------
        ConflictError
            If a commit that landed since the base conflicts and `on_conflict` is "fail";
            its `conflicts` say where. The session stays open.
        UnflushedWritesError
            If other workers still hold unflushed writes (see `unflushed`).
        UnfinishedWritersError
            If a worker failed or died before finishing (see `unfinished`).
        NoChangesError
            If the session changes nothing and `allow_empty` is False.
        SessionClosedError, SessionExpiredError
            If the session was already committed or abandoned, or has expired.
        ReadOnlyError
            If the session is read-only, or the branch is protected against direct commits.

        Examples
        --------
        >>> session = repo.create_session("main")
        >>> session.commit("add day 1")  # doctest: +SKIP
        """
        return self._txn.commit(message, on_conflict, metadata, unflushed, unfinished, allow_empty)

    def abandon(self) -> None:
        """Discard the session's staged changes; the branch is untouched.

        Raises
        ------
        SessionClosedError
            If the session was already committed or abandoned.
        """
        self._txn.abandon()

    def update_expiration(self, expires_in: timedelta) -> None:
        """Make the session expire `expires_in` from now (at most 7 days).

        Raises
        ------
        SessionClosedError
            If the session was committed or abandoned.
        SessionExpiredError
            If it has already expired.
        """
        self._txn.update_expiration(expires_in)


class SessionEngine:
    """The hooks of a session that zarrlake's own layers use (the zarr store, Spark, virtual
    chunks, the web UI, the command line, the test kit), kept off `Session`'s public API:
    they hand out internal references and staging steps. Reach it as `session._engine`."""

    __slots__ = ("_session", "_txn")

    def __init__(self, session: Session) -> None:
        self._session = session  # no cycle: the session makes an engine on each use
        self._txn = session._txn

    @property
    def context(self) -> RepoContext:
        """The repository connection the session runs on (`Repo.of(session)` wraps it)."""
        return self._txn.ctx

    @property
    def id(self) -> str | None:
        """The session id, without storing a new session's record (`Session.id` stores
        it, to hand the id over): for identity within this process."""
        return self._txn.id

    @property
    def writer(self) -> bytes:
        """This handle's writer id: each joined worker stages under its own."""
        return self._txn.writer

    @property
    def inline_max(self) -> int:
        """Chunks up to this many bytes are staged in the metastore instead of uploaded first."""
        return self._txn.inline_max

    @property
    def chunk_statistics(self) -> bool:
        """Whether the session's chunk writes carry their values' statistics."""
        return self._txn.chunk_statistics

    def digest(self, data: bytes | memoryview) -> bytes:
        """The repository's content hash of chunk bytes, on the calling thread alone (a
        writer hashing each chunk as it encodes it, many at once)."""
        return self._txn.ctx.objects.digest(data, spread=False)

    def lookup(self, key: str) -> ChunkRef | ShardRef | None:
        """The reference `key` resolves to in the session, or None (a ShardRef for a
        shard stored as inner chunks: format/shard.py)."""
        return self._txn.overlay.lookup(key)

    def peek(self, key: str) -> tuple[bool, bytes | None]:
        """(answered, bytes or None) when the answer needs no I/O (read-only sessions'
        metadata): the zarr store then skips its hop to a thread."""
        return self._txn.overlay.peek(key)

    def read_here(self, key: str) -> tuple[bool, bytes | memoryview | None]:
        """(answered, bytes or None) when the value is cheaper to read on the calling
        thread than on another: a read-only session on a local directory (see
        Overlay.reads_here); the zarr store then skips its hop to a thread. The read
        itself is `Session.read`'s, as on a thread."""
        if not self._txn.overlay.reads_here(key):
            return False, None
        return True, self._session.read(key)

    def read_ranges_here(self, key: str, spans: list[Span]) -> tuple[bool, list[bytes] | None]:
        """(answered, the spans' bytes or None) when they are cheaper to read on the
        calling thread (see `read_here`): a shard's index or an inner chunk on a local
        directory. The read is `Session._read_ranges`', as on a thread."""
        if not self._txn.overlay.reads_here(key, spans):
            return False, None
        return True, self._session._read_ranges(key, spans)

    def prepare(self, key: str, data: bytes) -> Change:
        """Check one write and upload its bytes if too big to stage inline (see `stage`).

        Raises
        ------
        InvalidInputError
            If the write stages as several changes (a shard of a sharded array is staged
            as its inner chunks): use `prepare_all`.
        """
        changes = self.prepare_all(key, data)
        if len(changes) != 1 or changes[0][0] != key:
            raise InvalidInputError(
                f"{key!r} is a shard staged as {len(changes)} inner-chunk changes: use prepare_all"
            )
        return changes[0]

    def prepare_all(
        self, key: str, data: bytes | bytearray | memoryview, values: ChunkValues | None = None
    ) -> list[Change]:
        """Check one write and upload what it stores: the changes to `stage` for it. A
        shard of a sharded array becomes the inner chunks that changed (possibly none).
        `values`: what the bytes encode, when the writer has them (for their statistics)."""
        return self._txn.writes_or_raise().prepare(key, data, values)

    def prepare_many(
        self, items: list[tuple[str, bytes | memoryview, ChunkValues | None]]
    ) -> list[Change]:
        """`prepare_all` of several (key, bytes, values) writes: the objects of the big
        chunks recorded in one metastore write before any upload, then uploaded in parallel;
        the changes of all, to `stage`."""
        writes = self._txn.writes_or_raise()
        prepared = writes.prepare_many([(k, d) for k, d, _ in items], [v for _, _, v in items])
        return [change for changes in prepared for change in changes]

    def stage(self, changes: list[Change]) -> None:
        """Stage prepared writes durably (concurrent callers share one transaction)."""
        self._txn.stage(changes)

    @property
    def finishes_after_writes(self) -> bool:
        """Whether this handle finishes after each array write: a copy of the session a
        Dask task received, outside a `with` block (see `Transaction.task_copy`)."""
        txn = self._txn
        return txn.task_copy and not txn.within and txn.committed is None

    def finish(self) -> None:
        """Flush this handle's writes and record its writer finished (`Session.close`)."""
        self._txn.finish()

    def start_writer(self, tag: str | None = None) -> str:
        """Flush this handle's writes, then stage what follows under a new writer id, which
        is returned. With `tag`, what the new writer stages counts (for reads by other
        handles and for the commit) only once `accept_writers(tag, ...)` names it: Spark
        tasks write this way, and the driver accepts the attempts Spark committed, so a
        failed or speculative attempt contributes nothing."""
        return self._txn.start_writer(tag)

    def accept_writers(self, tag: str, writers: Iterable[str]) -> None:
        """Make the writes of `writers` (ids from `start_writer(tag)`) count; other writers
        that staged under `tag` are ignored."""
        self._txn.accept_writers(tag, sorted(set(writers)))
