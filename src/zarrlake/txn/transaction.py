"""The transaction engine behind a Session: its record, reads over staging, writes, commit.

A transaction pickles as a small handle (spec, session id, base commit) that re-opens
through the per-process `connect(spec)`: no data and no connections travel."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import weakref
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, cast

from zarrlake.connection import RepoContext, RepoSpec, connect, raise_first
from zarrlake.errors import (
    CASFailedError,
    Conflict,
    ConflictError,
    ConflictKind,
    ReadOnlySessionError,
    ZarrLakeError,
)
from zarrlake.format.shard import shown, split_inner_key
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.txn.fragments import StagedFragments
from zarrlake.txn.overlay import Overlay
from zarrlake.vc.refs import BRANCH, Look
from zarrlake.vc.snapshot_view import SnapshotView

if TYPE_CHECKING:  # the write path's modules load with a writable handle (see __init__)
    from zarrlake.format.fragment import FragmentRecord
    from zarrlake.session_records import SessionRecord
    from zarrlake.txn import unsettled, writers
    from zarrlake.txn.birth import Birth
    from zarrlake.txn.cleanup import Pending
    from zarrlake.txn.staging import Staging
    from zarrlake.txn.writes import Writes
    from zarrlake.vc.change_table import Change, Gathered
    from zarrlake.vc.diff import Diff


class Transaction:
    """One handle on a session (writable) or on one commit (read-only, `record` None).

    A read-only handle loads none of the write path: staging, writes, the commit, diffs,
    checks and gc's protocol are imported where a writable handle first uses them."""

    def __init__(
        self,
        ctx: RepoContext,
        record: SessionRecord | None,
        base: str,
        version: int | None = None,
        birth: bool = False,
    ) -> None:
        """`birth`: `record` is a new session's, not stored yet (see txn/birth.py)."""
        self.ctx = ctx
        self.record = record
        self.version = version  # of `record` as last read or written here (None: unknown)
        self.base = base
        self.committed: str | None = None
        self.created = False  # this handle began the session (others joined it)
        self.unfinished: writers.Unfinished | None = None  # the commit's choice, see writers
        self.unsettled: unsettled.Unsettled | None = None  # what the last gather included
        self.allow_empty = True
        self.task_copy = False  # a copy a Dask task received: it finishes after each write
        self.within = 0  # `with session:` blocks this handle is in (they finish it instead)
        self.cleanup: Pending | None = None  # dropping the staged records after commit
        self.writer = secrets.token_bytes(8)
        self.birth = None
        self.staging = None
        if record is not None:
            from zarrlake.txn.birth import Birth, Unborn
            from zarrlake.txn.staging import Staging

            self.birth = Birth(ctx, record) if birth else None
            partition = ctx.stage_partition(record.id)
            meta = ctx.meta if self.birth is None else Unborn(ctx.meta, self.birth, partition)
            check = _OpenCheck(ctx, record.id, self.birth)
            self.staging = Staging(meta, partition, self.writer, check, ctx.clock)
        self.fragments = StagedFragments(ctx.objects)
        self.view = self._view_of(base)
        serializable = record is not None and record.isolation == "serializable"
        self.overlay = Overlay(ctx.objects, self.view, self.staging, self.fragments, serializable)
        self.writes: Writes | None = None
        if self.staging is not None:
            from zarrlake.txn import writers
            from zarrlake.txn.writes import Writes

            self.writes = Writes(
                ctx.objects,
                ctx.write_guard,
                self.staging,
                self.fragments,
                self.overlay,
                self.staging.check_open or (lambda: None),
                self.inline_max,
                ctx.together,
                ctx.clock,
                ctx.settings.flush,
                ctx.settings.check_chunks,
                ctx.settings.chunk_statistics,
            )
            ctx.handles.add(self.writes)  # finished by Repo.close
            self.writes.repository_gone = _Gone(ctx.spec)
            self.writes.birth = self.birth
            self.overlay.record_reads = self.writes.record_reads
            # The handle going away (a task returning, a worker dropping its copy) finishes
            # its writer; the write path holds no reference back to this handle.
            self.release = weakref.finalize(self, writers.release_later, self.writes)

    def _view_of(self, commit_id: str) -> SnapshotView:
        objects = self.ctx.objects
        snapshot = objects.snapshot_of(commit_id)
        return SnapshotView(objects, objects.read(SnapshotRoot, snapshot), snapshot)

    # opening ----------------------------------------------------------------------------

    @classmethod
    def begin(
        cls,
        ctx: RepoContext,
        branch: str,
        *,
        message: str | None,
        author: str | None,
        expires_in: timedelta,
        isolation: str,
    ) -> Transaction:
        """A new session on `branch`, based on its current head. Its record is stored
        when first needed (txn/birth.py): its first write, hand-over or commit. The
        clean-ups this process's earlier commits left run first (txn/cleanup.py)."""
        from zarrlake.session_records import PENDING
        from zarrlake.txn import cleanup

        cleanup.run_pending()

        rec = ctx.records.draft(branch, PENDING, message, author, expires_in, isolation)
        calls: list[Callable[[], object]] = [lambda: ctx.refs.look(branch)]  # (and `moved`)
        shard = ctx.records.partition_of(rec.id)
        if ctx.meta.writes_after_reads and not ctx.meta.holds(shard):  # the record's store
            calls.append(lambda: ctx.meta.get(shard, rec.id.encode()))  # is then one write
        look, *_ = ctx.together(*calls)
        raise_first([look])
        head = cast(Look, look).head or ctx.refs.require(BRANCH, branch)  # (its error)
        base = head[0]
        txn = cls(ctx, replace(rec, base=base), base, birth=True)
        txn.created = True
        return txn

    @classmethod
    def join(cls, ctx: RepoContext, session_id: str) -> Transaction:
        """The same session from another handle or process: staged writes are shared."""
        from zarrlake.txn import cleanup

        cleanup.run_pending()
        rec = ctx.records.find(session_id)
        txn = cls(ctx, rec, rec.base)
        txn.check_writable(*txn.load())
        return txn

    @classmethod
    def reopen(cls, spec: RepoSpec, session_id: str | None, base: str) -> Transaction:
        """Unpickling: the session `session_id` (or the read-only view of `base`). In a
        Dask worker the copy is a task's own (Dask sends each task its arguments): it
        finishes after each array write (zarr_store), so the task's writes are durable and
        counted by the time it returns, not when its copy is collected."""
        ctx = connect(spec)
        if session_id is None:
            return cls(ctx, None, base)
        txn = cls.join(ctx, session_id)
        txn.task_copy = _in_dask_worker()
        return txn

    def __reduce__(self) -> tuple[object, ...]:
        """A handle pickles after finishing its writer (sending a session to or back from a
        worker makes what it wrote durable and counted) and storing its record."""
        self.finish()
        self.born()
        return (Transaction.reopen, (self.ctx.spec, self.id, self.base))

    # state ------------------------------------------------------------------------------

    @property
    def id(self) -> str | None:
        """The session id, or None for a read-only handle."""
        return self.record.id if self.record else None

    def hand_over(self) -> str | None:
        """The session id, to give to another handle: its record is stored first."""
        self.born()
        return self.id

    @property
    def unborn(self) -> bool:
        """Whether this new session's record is not stored yet, or its base not yet checked
        (see txn/birth.py)."""
        return self.birth is not None and not self.birth.born

    def _unstored(self) -> bool:
        """Whether this new session's record is not stored (a base check under way is
        waited for: a base found gone deleted the record)."""
        if self.birth is None:
            return False
        with contextlib.suppress(ZarrLakeError):
            self.birth.settle()
        return not self.birth.stored

    def uploads_copied(self, rec: SessionRecord) -> bool:
        """Whether the uploads `rec` carries are in the uploads partition too: this handle's
        first write carried them in the record and copied them there (txn/birth.py)."""
        if not rec.uploads:
            return True
        birth = self.birth
        return birth is not None and birth.copied and rec.uploads == birth.record.uploads

    def born(self) -> None:
        """Store this new session's record if it is not yet (see txn/birth.py)."""
        if self.birth is not None:
            self.birth.ensure()

    def state(self) -> str:
        """The session's state: read from the metastore once its record is stored."""
        from zarrlake.session_records import Status

        assert self.record is not None
        if self.unborn:
            rec = self.record
            late = rec.status == Status.OPEN and self.ctx.clock() > rec.expires_at
            return Status.EXPIRED if late else rec.status
        return self.load()[0].status

    @property
    def inline_max(self) -> int:
        """Chunks up to this many bytes are staged inline instead of uploaded."""
        return self.ctx.settings.stage_inline_max

    @property
    def chunk_statistics(self) -> bool:
        """Whether this session's chunk writes carry their values' statistics."""
        return self.writes is not None and self.writes.statistics

    def load(self) -> tuple[SessionRecord, int]:
        """Re-read the session record and its version from the metastore."""
        from zarrlake.txn import commit as committing

        assert self.record is not None
        self.record, self.version = committing.load(self.ctx, self.record.id)
        return self.record, self.version

    def current(self) -> tuple[SessionRecord, int]:
        """The record as this handle last saw it, read only if it never did: a
        compare-and-swap against it fails if it changed since."""
        if self.version is None and self.birth is not None and self.birth.stored:
            # stored as this handle holds it (with the first write's uploads, if it carries them)
            self.record, self.version = self.birth.record, self.birth.version
        if self.record is None or self.version is None:
            return self.load()
        return self.record, self.version

    def check_writable(self, rec: SessionRecord, version: int) -> None:
        """Raise unless the session accepts writes; an open session past its expiry is
        marked expired on the way."""
        from zarrlake.session_records import Status

        if rec.status == Status.OPEN and self.ctx.clock() > rec.expires_at:
            with contextlib.suppress(CASFailedError):
                self.record = replace(rec, status=Status.EXPIRED)
                self.version = self.ctx.records.swap(self.record, version)
        rec.check_writable(self.ctx.clock())

    def check_open(self) -> None:
        """Raise unless the session still accepts writes."""
        if self.unborn:
            assert self.record is not None
            self.record.check_writable(self.ctx.clock())
            return
        self.check_writable(*self.load())

    def finish(self) -> None:
        """Flush and record this handle's writer finished (a no-op if it never wrote)."""
        if self.writes is not None and self.committed is None:
            self.writes.finish()

    def fail(self, error: str) -> None:
        """Drop this handle's unflushed writes and record its writer failed."""
        if self.writes is not None and self.committed is None:
            self.writes.fail(error)

    def writes_or_raise(self) -> Writes:
        """The write path; ReadOnlySessionError for a read-only handle."""
        if self.writes is None:
            raise ReadOnlySessionError(
                "store was opened in read-only mode and does not support writing "
                f"(session at commit {self.base[:12]} is read-only)"
                "; create a session on a branch (repo.create_session) to write"
            )
        return self.writes

    def require_writes(self) -> Writes:
        """The write path of a session still open for writes."""
        from zarrlake.session_records import Status

        writes = self.writes_or_raise()
        assert self.record is not None
        if self.record.status != Status.OPEN or self.ctx.clock() > self.record.expires_at:
            self.check_open()
        return writes

    # writes and commit ------------------------------------------------------------------

    def stage(self, changes: list[Change]) -> None:
        """Buffer `changes` through this handle's writes (refused when read-only)."""
        self.require_writes().stage(changes)

    def flush(
        self, check: bool = True, final: bool = False, settle: bool = True, finish: bool = False
    ) -> list[FragmentRecord]:
        """Make this handle's buffered writes durable (a no-op for read-only handles and
        after a commit); `finish` records its writer finished with them."""
        if self.writes is None or self.committed is not None:
            return []
        return self.writes.flush(check, final, settle, finish)

    def settle_flushed(self, keep: Callable[[], None] | None = None) -> bool:
        """Check that gc left the uploads of a `settle=False` flush alone; False if there
        were none (see Writes.settle_flushed). `keep` is called while it waits for a sweep."""
        return self.writes is not None and self.writes.settle_flushed(keep)

    def wait(self) -> None:
        """Wait for this handle's background work: its record's finish and the clean-up
        after its commit."""
        self.ctx.records.settle()
        if self.cleanup is not None:
            self.cleanup.result()

    def move(self, src: str, dst: str) -> tuple[str, str]:
        """Move node `src` to `dst` in this session (see Session.move); returns the two
        paths as recorded."""
        from zarrlake.txn import moves

        writes = self.require_writes()
        assert self.staging is not None
        writes.flush()  # the plan then finds this handle's writes in its fragments
        plan = moves.plan(self.overlay, src, dst)
        record = self.staging.move_record(plan.src, plan.dst)
        writes.stage_block(plan.staged, plan.carried, plan.meta, [record])
        return plan.src, plan.dst

    def start_writer(self, tag: str | None) -> str:
        """Stage what follows under a new writer id (see Session.start_writer)."""
        writer = self.require_writes().start_writer(tag)
        self.writer = bytes.fromhex(writer)
        return writer

    def accept_writers(self, tag: str, writers: list[str]) -> None:
        """Record which writers' fragments the Spark task commit `tag` accepts."""
        self.require_writes()
        assert self.staging is not None
        self.staging.accept(tag, writers)

    def gather(self, strict: bool = True) -> Gathered:
        """Every worker's staged changes as one table, with the keys read and prefixes
        listed (serializable sessions) and the fragments a commit writes out; ConflictError
        if two workers staged different bytes for one key. If `strict`, the writers' rule
        (txn/writers.py) applies: UnfinishedWritersError if a worker failed or is gone and
        its part was not written again (unless `self.unfinished` chose),
        UnflushedWritesError if a live one holds writes it has not flushed."""
        from zarrlake.txn import moves, refusals, unsettled, writers
        from zarrlake.txn.staging import counts
        from zarrlake.vc.change_table import ChangeTable, Gathered
        from zarrlake.vc.chunk_keys import KeyNamer

        assert self.staging is not None and self.record is not None
        state = self.staging.state()
        if strict:
            self.unsettled = None
            verdict = writers.judge(state, self.staging.writer_id, self.unfinished)
            if verdict.unfinished_ids:  # leave out those whose part was written again
                namer = KeyNamer(self.view.root.meta, {k: d for k, d in state.meta.items() if d})
                verdict = refusals.settle(
                    verdict, state, self.unfinished, self.fragments.read_index, namer
                )
            if verdict.withdrawn and self.unfinished is None:
                raise refusals.refuse_withdrawn(self.record.id, verdict.withdrawn)
            if verdict.unfinished and self.unfinished is None:
                raise refusals.refuse(self.record.id, verdict)
            if verdict.waiting:
                raise writers.waiting_error(self.record.id, verdict.waiting)
            if verdict.excluded:
                state = self.staging.state(verdict.excluded)
            included = verdict.unfinished_ids - verdict.excluded  # never settled their uploads
            if included:
                self.unsettled = unsettled.Unsettled(
                    [r for r in state.fragments if r.writer in included],
                    verdict.described,
                    namer,
                )
        used = [r for r in state.fragments if counts(r.writer, r.tag, state.accepted)]
        got = self.fragments.gather(used)
        clashes = state.clashes + got.clashes
        if clashes:
            raise self._clash_error(state.meta, clashes)
        table = ChangeTable(state.meta, got.writes, got.deletes)
        if strict and state.moves:
            final = {**self.view.root.meta, **state.meta}
            moves.check_moved(state.moves, table, {k: d for k, d in final.items() if d})
        return Gathered(table, got.reads, got.listed, got.blobs, state.moves, _merged(used))

    def own_gathered(self) -> Gathered | None:
        """What `gather` returns if the session holds only this handle's flushed chunk
        changes (no documents, moves or tags), read from nothing; None when it cannot."""
        from zarrlake.vc.change_table import ChangeTable, Gathered

        w = self.writes
        if w is None or w.tag is not None or self.staging is None or self.staging.own_meta:
            return None
        got = self.fragments.gather(list(w.flushed))
        table = ChangeTable({}, got.writes, got.deletes)
        return Gathered(table, got.reads, got.listed, got.blobs, (), _merged(w.flushed))

    def check_unsettled(self, gathered: Gathered) -> None:
        """Refuse if a chunk object that an included unfinished writer staged, and the
        last gather kept, is gone (txn/unsettled.py); call once no sweep can delete any more."""
        from zarrlake.txn import unsettled

        assert self.record is not None
        unsettled.check(
            self.record.id,
            self.unsettled,
            self.ctx.objects,
            self.fragments.read_index,
            gathered.changes.writes,
        )

    def _clash_error(self, meta: dict[str, bytes | None], clashes: list[str]) -> ConflictError:
        from zarrlake.vc.chunk_keys import KeyNamer

        namer = KeyNamer(self.view.root.meta, {k: d for k, d in meta.items() if d})
        conflicts = []
        for key in clashes:
            node, coords = namer.name(key)
            inner = split_inner_key(key)
            what = (
                f"inner chunk {coords} of array {node!r} (in shard {inner[0]!r})"
                if inner is not None and coords is not None
                else repr(shown(key))
            )
            conflicts.append(
                Conflict(
                    node,
                    ConflictKind.WRITERS,
                    [coords] if coords is not None else None,
                    f"two workers of this session staged different bytes for {what}",
                )
            )
        return ConflictError(conflicts)

    def staged_changes(self) -> list[Change]:
        """Every worker's flushed changes (this handle's buffered ones included)."""
        self.writes_or_raise()
        self.flush()
        return self.gather(strict=False).changes.to_list(self.ctx.objects.inline)

    def changes(self) -> Diff:
        """The uncommitted changes of this session (of all its workers)."""
        from zarrlake.vc.diff import diff_staged

        self.writes_or_raise()
        self.flush()
        gathered = self.gather(strict=False)
        staged = gathered.changes.to_list(self.ctx.objects.inline)
        return diff_staged(self.view.root.meta, self.view.get, staged, gathered.moves)

    def commit(
        self,
        message: str | None,
        on_conflict: str,
        metadata: dict[str, str] | None,
        unflushed: str = "wait",
        unfinished: str | None = None,
        allow_empty: bool = False,
    ) -> str:
        """Commit the session, then read the new commit; its staged records are dropped in
        the background or at the process's next call (txn/cleanup.py). `unfinished` is
        what to do with writers that failed or are gone (see txn/writers.py);
        `unflushed="discard"` implies "include", as it always did."""
        from zarrlake.txn import cleanup, writers
        from zarrlake.txn import commit as committing

        self.writes_or_raise()
        policy = writers.check_unfinished(unfinished)
        if policy is None and unflushed == "discard":
            policy = writers.Unfinished.INCLUDE
        self.unfinished = policy
        self.allow_empty = allow_empty
        self.born()
        commit_id = committing.commit(self, message, on_conflict, metadata, unflushed)
        # From now on this handle reads the commit it made; its staged records are dead
        # (the session refuses writes), so dropping them need not delay the caller.
        self.committed = commit_id
        assert self.writes is not None and self.staging is not None
        self.writes.stop()
        self.writes.committed()
        self.release.detach()  # its writer has nothing left to finish
        self.view = self._view_of(commit_id)
        self.overlay = Overlay(self.ctx.objects, self.view, None)
        self.cleanup = cleanup.leave(self.ctx, self._drop_staged, self.staging)
        return commit_id

    def _drop_staged(self, staging: Staging) -> None:
        """Tell gc which chunk objects the session named and its commit did not keep, then
        drop its staged records."""
        from zarrlake.vc.gc_protocol import register_staged

        assert self.record is not None
        with self.ctx.meta.batch():  # one write transaction on an embedded metastore
            register_staged(self.ctx, self.record.id, committed=self.committed)
            staging.clear()

    def abandon(self) -> None:
        """Stop background flushing and abandon the session (its staged writes are dropped)."""
        from zarrlake.session_records import Status
        from zarrlake.txn import commit as committing

        self.writes_or_raise()
        assert self.writes is not None and self.record is not None
        self.writes.stop()
        if self._unstored():  # nothing stored: nothing to drop
            assert self.birth is not None
            self.record = self.birth.record = replace(self.record, status=Status.ABANDONED)
            return
        committing.abandon(self)

    def update_expiration(self, expires_in: timedelta) -> None:
        """Move the session's expiry to `expires_in` from now."""
        from zarrlake.session_records import check_expiry

        self.writes_or_raise()
        check_expiry(expires_in)

        def change(rec: SessionRecord) -> SessionRecord:
            rec.check_writable(self.ctx.clock())
            return replace(rec, expires_at=self.ctx.clock() + expires_in.total_seconds())

        assert self.record is not None
        if self._unstored():  # the record is stored with it
            assert self.birth is not None
            self.record = self.birth.record = change(self.record)
            return
        self.record, self.version = self.ctx.records.update(self.record.id, change)


class _OpenCheck:
    """`Transaction.check_open` for the write path, holding no reference to the handle (so
    the handle can be collected, and its writer finished, while the write path lives on)."""

    __slots__ = ("birth", "ctx", "session_id")

    def __init__(self, ctx: RepoContext, session_id: str, birth: Birth | None = None) -> None:
        self.ctx, self.session_id, self.birth = ctx, session_id, birth

    def __call__(self) -> None:
        if self.birth is not None and not self.birth.born:
            self.birth.record.check_writable(self.ctx.clock())
            return
        from zarrlake.session_records import Status
        from zarrlake.txn import commit as committing

        rec, version = committing.load(self.ctx, self.session_id)
        if rec.status == Status.OPEN and self.ctx.clock() > rec.expires_at:
            with contextlib.suppress(CASFailedError):
                self.ctx.records.swap(replace(rec, status=Status.EXPIRED), version)
        rec.check_writable(self.ctx.clock())


class _Gone:
    """Whether the repository a handle writes to was removed (a local directory deleted,
    a temporary repository at process exit): nothing is left to finish for."""

    __slots__ = ("location",)

    def __init__(self, spec: RepoSpec) -> None:
        self.location = spec.location if spec.is_local else None

    def __call__(self) -> bool:
        return self.location is not None and not os.path.isdir(self.location)


def _in_dask_worker() -> bool:
    """Whether this process runs a Dask distributed worker (whose tasks get their own copy
    of each argument)."""
    worker = sys.modules.get("distributed.worker")
    return bool(worker is not None and getattr(worker.Worker, "_instances", None))


def _merged(records: list[FragmentRecord]) -> tuple[str, ...]:
    """The locations of fragments `records` in the order a gather merges them."""
    return tuple(r.location for r in sorted(records, key=lambda r: (r.writer, r.seq)))
