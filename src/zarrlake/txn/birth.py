"""A new session's record, stored when the session first needs it: its first write to the
metastore (a flush, a metadata document, an upload's record, a writer's state), its first
hand-over to another worker (its id read, the session pickled), or its commit, whichever
comes first. A session that does none of these leaves no record; errors storing it
surface there.

Until then no other handle can know of the session, so its staging partitions are empty:
their reads are answered here without I/O (`Unborn`). The record is stored before anything
the session writes: only it names the session's partitions to anyone (gc, expire and
joining handles all start from the session records), so a process that dies between the
two leaves nothing nobody can find.

The base. `create_session` reads the branch head before any record names it, so `expire`
may drop that commit meanwhile. The record is stored naming the base, and the base's
expiry marker is read after it: `expire` writes its markers and then reads the session
records again, taking back the markers of the commits they protect. Either that re-read
sees this record and the base stays, or the marker was written before this record was, and
the session refuses (ExpiredHistoryError) and deletes its record.

A branch reset (or deletion) may also leave the base unreachable, and `gc` delete it once its grace
period has passed (a sweep re-reads the session records first, so one stored before that
keeps it). The base's commit record is looked for with its marker (at once): a session
whose base is gone refuses (NotFoundError naming the reset and gc, and for good) and
deletes its record, instead of failing at its commit on a missing manifest. (A sweep
that deletes the base between its re-read and this look is not seen: the commit then fails
as before; it could never land, its branch no longer descending from its base.)

The look comes after the record is stored and the first write made, and the write returns
only once it is done: a write, a hand-over and a commit all wait for it, so no commit is
sealed and no branch moves on an unchecked base. On an embedded metastore the record and
the first write are one transaction (`MetaStore.batch`: one turn at the write lock, and no
moment with one stored but not the other), the look following it; on a remote one the look
goes out beside the write (one round trip, not two). A session refused had its first
write's records stored: its uploads are registered with gc and its staged records dropped
before its record is deleted.

A look that fails (the store did not answer) is raised by the write beside it. On an
embedded metastore the record and the write are undone with it; on a remote one they stay
(a marker the write stored stays its writer's, dropped by its next flush:
`landed_unchecked`), and the base is looked at again by the next call that needs it, on
that call's thread: a write (a chunk write buffered behind the marker included:
`acknowledge`), a flush, a hand-over, a commit. What the look meets is raised there, so
no write is acknowledged on a session whose base was never checked. Nothing is looked at
again in the background: at interpreter exit, the writer's finish runs after `threading`
shut every thread pool, so a look left to a pool could only fail ("cannot schedule new
futures after shutdown") instead of meeting the base; the finish hands nothing to a pool
(`in_turn`).

A first write that uploads a chunk, on a remote metastore (`store_carrying`, `beside`):
the record is born carrying the chunk's upload record (`SessionRecord.uploads`), beside
the gc phase read; then the chunk's PUT goes out with the batch's unflushed-writes marker
(and writer state), the upload record's copy in the uploads partition, and the base check,
all waited for before the write returns (begin + write: 3 round trips, not 4). What each
party sees at every step:

- Before the record is stored: nothing exists of the session. A kill leaves nothing.
- Record stored, nothing else yet: gc counts the record's uploads with the uploads
  partition's (live while the session is open or committing; registered as candidates
  once it is finished), so the chunk, whenever its PUT lands, is known to gc from a record
  stored before it: a sweep either sees it live, or began before the PUT was sent and
  the write's phase read (taken before the PUT, as for every upload: `WriteGuard`) makes
  the writer wait it out and put back what it deleted. A kill here leaves an open record
  naming an upload that may never land: it expires, gc registers the upload (a missing
  object is a candidate that deletes nothing) and clears the record's copy.
- Marker, copy and chunk on their way, in any order: no other handle can know the
  session (hand-overs and commits wait for `ensure`, that is for the base check, which a
  concurrent call of this handle may see end first: a write racing a commit of its own
  handle was never promised to be in it, and its flush then fails). `expire` is answered
  by the base check, which follows the record as before. A kill leaves at most an open
  record with its marker, its copy or its chunk: the session expires and gc registers
  what either place names.
- All done: as before, plus the record's copy of the upload records, which the
  creator's seal clears when this handle's copy landed (else gc clears it once it has
  registered them for the finished session). A refusal for a gone base registers the
  record's uploads with the partition's, after every call beside the check has
  returned, before the record is deleted.
- Recovery after a committer's death reads nothing of this: the record's uploads ride
  along in every later record write (seal, fence, finish) until cleared."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from zarrlake._util import forksafe, runtime
from zarrlake.errors import ExpiredHistoryError, NotFoundError, ZarrLakeError
from zarrlake.metastore.base import Call, MetaStore, WrapperMetaStore
from zarrlake.vc.gc_protocol import register_staged, uploads_of

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext
    from zarrlake.session_records import SessionRecord

T = TypeVar("T")

_POOL = forksafe.PerProcess(lambda: ThreadPoolExecutor(4, thread_name_prefix="zarrlake-birth"))
"""Runs a record's base check beside its first write. A pool of its own: the first write
may run on a thread of the I/O pool, all of which may be waiting for it."""


def _start[R](fn: Callable[[], R], threads: bool = True) -> Future[R]:
    """`fn` on a thread of its own; where it is first waited for (on the waiting thread,
    the latest it may run, after all the caller did meanwhile) if not `threads` (at
    interpreter exit: `Birth.in_turn`) or under the simulator (a runtime that brings an
    executor, whose processes run library code in one actor at a time)."""
    if threads and runtime.current().executor is None:
        return _POOL.get().submit(fn)
    return _WhenAwaited(fn)


class _WhenAwaited(Future):
    """A task run by the first `result()` call (see `_start`); other callers wait for it."""

    def __init__(self, fn: Callable[[], object]) -> None:
        super().__init__()
        self._fn: Callable[[], object] | None = fn
        self._taking = threading.Lock()

    def result(self, timeout: float | None = None) -> object:
        """Run the task if nobody did yet; its result, or raise what it raised."""
        with self._taking:
            fn, self._fn = self._fn, None
        if fn is not None:
            try:
                self.set_result(fn())
            except BaseException as e:  # (re-raised below, a simulated crash included)
                self.set_exception(e)
        return super().result(timeout)


class Birth:
    """Stores a session's record once, on first need, and checks its base; thread-safe (a
    background flush may be the first writer). `write` for the first writes, `ensure`
    where the record must be stored and its base checked, `settle` to wait for the check,
    `acknowledge` before a write that stores nothing (a buffered one) returns."""

    __slots__ = (
        "_beside",
        "_checking",
        "_lock",
        "_refused",
        "_threads",
        "_wrote",
        "copied",
        "ctx",
        "record",
        "version",
    )

    def __init__(self, ctx: RepoContext, record: SessionRecord) -> None:
        self.ctx = ctx
        self.record = record  # as drafted; after `ensure`, the handle's own copy moves on
        self.version: int | None = None  # of the stored record, once stored
        self._checking: Future[Exception | None] | None = None  # its base check, once stored
        self._refused: Exception | None = None  # the base was gone: refused for good
        self._wrote = False  # a write went out beside the base check (rows to drop if refused)
        self._lock = threading.Lock()
        self._beside = threading.local()  # `on`: a call of `beside`, settled after them all
        self.copied = False  # the uploads the record carries are in the uploads partition too
        self._threads = True  # checks may use threads (not at interpreter exit: `in_turn`)

    @property
    def stored(self) -> bool:
        """Whether the record is stored (its base check may still be under way)."""
        return self.version is not None

    @property
    def born(self) -> bool:
        """Whether the record is stored and its base checked."""
        return self.version is not None and self._checking is None

    @property
    def refused(self) -> Exception | None:
        """The error the session was refused with for good (its base gone), if it was."""
        return self._refused

    def in_turn(self) -> None:
        """From now on hand nothing to a thread pool: checks run on the thread that waits
        for them, their looks one after the other. For the writer's finish at interpreter
        exit, which `atexit` runs after `threading` shut every pool (concurrent.futures'
        `_python_exit`, a `threading._register_atexit` hook, runs before any `atexit` one:
        a pool there refuses work, "cannot schedule new futures after shutdown")."""
        self._threads = False

    def acknowledge(self) -> None:
        """Before a write that stores nothing itself (a chunk write buffered behind the
        batch's marker) returns: wait for the base check under way, or look again if the
        last look failed, raising its error (see `settle`). A write is acknowledged only on
        a session whose base check succeeded; a record not stored yet is stored, and its
        base checked, by the write's own marker."""
        if self.version is not None or self._refused is not None:
            self.settle()

    def ensure(self) -> int:
        """Store the record if it is not yet (refused if the session expired or was
        abandoned before it was stored) and check its base; returns the version stored."""
        if not self.born:
            self.write(_nothing)
        assert self.version is not None
        return self.version

    def write(self, run: Callable[[], T]) -> T:
        """Run `run`, a write to the session's partitions, once the record is stored: on an
        embedded metastore in the record's transaction, the base checked after it; on a
        remote one beside the check (waited for before this returns)."""
        self._beside.landed = False
        if self.born or (self.version is not None and getattr(self._beside, "on", False)):
            return run()
        if not self.ctx.meta.remote:
            return self._store_with(run)
        self._store()
        if run is not _nothing:
            self._wrote = True
        try:
            result = run()
            self._beside.landed = True
        finally:
            self.settle()
        return result

    def landed_unchecked(self) -> bool:
        """After a `write` of this thread raised: whether its write was stored all the same,
        the base check beside it having failed without a refusal. The record stays, the
        base is looked at again by the next call that needs it, and what the write stored
        is the session's (its writer drops the marker it left with its next flush)."""
        landed: bool = self._beside.__dict__.pop("landed", False)  # (asked once per write)
        return landed and self.version is not None and not self.born

    def store_carrying(self, uploads: list[tuple[str, int]]) -> bool:
        """Remote metastore: store the record carrying `uploads` (the first write's objects,
        about to be uploaded: gc counts them from the record) and start its base check,
        not waited for (`beside` runs the write's other calls beside it). False if the
        record was stored already (by another thread): record them as usual then."""
        if self.version is not None:
            return False
        with self._lock:
            if self.version is not None:
                return False
            self._refuse_again()
            self.record.check_writable(self.ctx.clock())
            rec = replace(self.record, uploads=tuple(uploads))
            version = self.ctx.records.store(rec)
            self.record, self._wrote = rec, True
            self.version, self._checking = version, _start(self._base_gone_now, self._threads)
        return True

    def beside(self, calls: list[Callable[[], object]], run: Callable[..., list]) -> list[object]:
        """After `store_carrying`: the first write's `calls` (its marker, the copy of its
        upload records, its uploads), run by `run` (`together`) beside the base check
        without each waiting for it; then the check is waited for, so a refusal registers
        and drops what they all stored (`settle`). Their outcomes, in order."""

        def marked(fn: Callable[[], object]) -> Callable[[], object]:
            def call() -> object:
                self._beside.on = True
                try:
                    return fn()
                finally:
                    self._beside.on = False

            return call

        outcomes = run(*(marked(fn) for fn in calls))
        self.settle()
        return outcomes

    def _store(self) -> None:
        """Store the record unless it is; then start checking its base in the background."""
        if self.version is not None:
            return
        with self._lock:
            if self.version is not None:
                return
            self._refuse_again()
            self.record.check_writable(self.ctx.clock())
            version = self.ctx.records.store(self.record)
            self.version, self._checking = version, _start(self._base_gone_now, self._threads)

    def _store_with(self, run: Callable[[], T]) -> T:
        """Embedded metastore: store the record and make the first write `run` in one
        transaction, then check the base (refused: what both stored is undone); `run`
        alone once the record is stored. Other threads' writes wait for the check."""
        with self._lock:
            if self.version is None:
                self._refuse_again()
                self.record.check_writable(self.ctx.clock())
                failed: Exception | None = None
                with self.ctx.meta.batch():
                    version = self.ctx.records.store(self.record)
                    try:
                        result = run()
                    except Exception as e:  # the record stays (a batch keeps what returned)
                        failed = e
                # Stored before the base is looked at, even inside a caller's batch.
                self.ctx.meta.commit_batch()
                self._wrote = run is not _nothing
                self._check(version)
                if failed is not None:
                    raise failed
                return result
        return run()

    def _check(self, version: int) -> None:
        """Check the base of the record just stored at `version`: born if it is there;
        otherwise (or if it could not be looked at) the record and what the first write
        stored are undone, and the error raised."""
        try:
            error = self._base_gone_now()
        except BaseException:
            self._forget()
            raise
        if error is not None:
            self._refused = error
            self._forget()
            raise error
        self.version = version

    def settle(self) -> None:
        """Wait for the base check under way, if any: raise if it failed (the next settle
        looks again, on its own thread: a look started here in the background could outlive
        the process's last call, and meet its thread pools shut at exit), refuse for good if
        the base is gone (the record deleted, and what the session's first write stored
        registered with gc and dropped)."""
        checking = self._checking
        if checking is None:
            self._refuse_again()
            return
        try:
            error = checking.result()
        except BaseException:
            with self._lock:
                if self._checking is checking and self.version is not None:
                    self._checking = _WhenAwaited(self._base_gone_now)  # look again, later
            raise
        with self._lock:
            if self._checking is not checking:  # another thread settled it
                mine = False
            else:
                mine, self._checking = True, None
                if error is not None:
                    self._refused, self.version = error, None
        if error is None:
            return
        if mine:
            self._forget()
        raise error

    def _refuse_again(self) -> None:
        if self._refused is not None:
            raise self._refused

    def _forget(self) -> None:
        """Delete the record of a session refused for its base, after registering what its
        first write uploaded with gc and dropping what it staged (best effort: a record
        left behind is an open session that expires)."""
        ctx, sid = self.ctx, self.record.id
        with contextlib.suppress(ZarrLakeError):
            if self._wrote:
                register_staged(ctx, sid, born=self.record.uploads)
                ctx.meta.drop_partition(ctx.stage_partition(sid))
            ctx.records.forget(sid)

    def _base_gone_now(self) -> Exception | None:
        return self._base_gone(self.record.base)

    def _base_gone(self, base: str) -> NotFoundError | None:
        """The error to refuse with if `base` was expired or deleted (its marker and its
        commit record, looked for at once); None if it is there."""
        objects = self.ctx.objects
        looks = [lambda: objects.is_expired(base), lambda: objects.store.exists(f"commits/{base}")]
        if objects.store.remote and self._threads:  # at once: each waits on the network
            marked, present = objects.map(lambda look: look(), looks)
        else:  # in turn: two file lookups take less than handing them to threads
            marked, present = (look() for look in looks)
        branch = self.record.branch
        if marked:
            when = objects.expired_at(base)
            return ExpiredHistoryError(
                f"the base of this session, commit {base[:12]}, was expired (`zarrlake "
                f"expire`) before the session's first write stored its record; "
                f"start a new session on {branch!r}",
                base,
                when if when is not None else self.ctx.clock(),
            )
        if not present:
            return NotFoundError(
                f"the base of this session, commit {base[:12]}, no longer exists: branch "
                f"{branch!r} moved off it (a reset, or the branch deleted) and `gc` deleted "
                "it before the session's first write stored its record; start a new session "
                f"on {branch!r}"
            )
        return None


def _nothing() -> None:
    """The write of an `ensure`, which has none of its own."""


class Unborn(WrapperMetaStore):
    """The metastore as a session's staging sees it: the session's record is stored before
    its first write, and reads of its own partitions before then find them empty."""

    def __init__(self, inner: MetaStore, birth: Birth, partition: str) -> None:
        super().__init__(inner)
        self.birth = birth
        self.own = frozenset((partition, uploads_of(partition)))

    def _around(self, call: Call, run: Callable[[], T]) -> T:
        if self.birth.born:
            return run()
        if call.write:
            return self.birth.write(run)
        if call.partition in self.own and not self.birth.stored:
            return iter(()) if call.op == "scan" else None  # type: ignore[return-value]
        return run()
