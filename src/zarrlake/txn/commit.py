"""Committing a session: seal its record with a lease, run the commit protocol, finish the
record; and recovery of a committer that died mid-way (from its lease)."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Protocol, cast

from zarrlake import crashpoints, runtime
from zarrlake.connection import RepoContext, raise_first
from zarrlake.errors import (
    CASFailedError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    SessionClosedError,
    UnfinishedWritersError,
    UnflushedWritesError,
    ZarrLakeError,
)
from zarrlake.session_records import SessionRecord, Status
from zarrlake.txn.staging import Staging
from zarrlake.vc.change_table import Gathered
from zarrlake.vc.commit_protocol import CommitProtocol, CommitRequest
from zarrlake.vc.gc_protocol import register_staged
from zarrlake.vc.protection import check_direct_commit
from zarrlake.vc.refs import BRANCH


class CommitHandle(Protocol):
    """What committing needs of a transaction handle (txn.transaction.Transaction)."""

    ctx: RepoContext
    record: SessionRecord | None
    staging: Staging | None

    version: int | None
    allow_empty: bool

    def load(self) -> tuple[SessionRecord, int]:
        """Re-read the session record and its version from the metastore."""

    def current(self) -> tuple[SessionRecord, int]:
        """The session record and version as this handle last saw them (read if never)."""

    def check_writable(self, rec: SessionRecord, version: int) -> None:
        """Raise unless the session of `rec` still accepts writes (open, not expired)."""

    def flush(
        self, check: bool = True, final: bool = False, settle: bool = True, finish: bool = False
    ) -> object:
        """Make this handle's buffered writes durable; `final` for the commit's own flush,
        `finish` to record its writer finished with them."""

    def settle_flushed(self) -> bool:
        """Settle the uploads of a `settle=False` flush; False if it had none."""

    def gather(self) -> Gathered:
        """Every worker's staged changes, merged into one change table."""


CONFLICT_POLICIES = ("fail", "ours", "theirs")
UNFLUSHED_POLICIES = ("wait", "discard")
POLL = 0.05
"""Seconds between looks at other workers' unflushed-writes markers."""
LEASE_MARGIN = 60.0
"""Seconds a committer's lease outlasts the commit timeout before others recover it."""


def check_metadata_dict(metadata: object) -> dict[str, str]:
    """The commit metadata as a new dict; {} for None, InvalidInputError unless str to str."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InvalidInputError(f"commit metadata must be a dict of str to str, not {metadata!r}")
    return dict(metadata)


def landed(ctx: RepoContext, rec: SessionRecord) -> str | None:
    """The commit this session made on its branch, if one landed (commits name their
    session, so no intent needs recording before the branch compare-and-swap)."""
    head = ctx.refs.get(BRANCH, rec.branch)
    if head is None:
        return None
    try:
        for cid, commit in ctx.objects.history(head[0]):
            if cid == rec.base:
                break
            if commit.session_id == rec.id:
                return cid
    except ZarrLakeError:
        return None
    return None


def load(ctx: RepoContext, session_id: str) -> tuple[SessionRecord, int]:
    """The session's record; a committer whose lease ran out is recovered first: the record
    is finished by whether its commit landed."""
    rec, version = ctx.records.get(session_id)
    if rec.status == Status.COMMITTING and rec.lease is not None and ctx.clock() > rec.lease:
        cid = landed(ctx, rec)
        status = Status.COMMITTED if cid else Status.OPEN
        new = replace(rec, status=status, commit=cid, lease=None)
        return new, ctx.records.swap(new, version)
    return rec, version


def commit(
    txn: CommitHandle,
    message: str | None,
    on_conflict: str,
    metadata: dict[str, str] | None = None,
    unflushed: str = "wait",
) -> str:
    """Make the session's staged changes one commit on its branch; returns the commit id.
    Live workers still holding unflushed writes are waited for (they flush when they finish,
    or within five seconds of their last write) up to Settings.flush_wait, then
    UnflushedWritesError names them (`unflushed="discard"` commits without them). Workers
    that failed or are gone: see txn/writers.py (UnfinishedWritersError)."""
    if on_conflict not in CONFLICT_POLICIES:
        raise InvalidInputError(
            f"on_conflict must be one of {', '.join(CONFLICT_POLICIES)}, not {on_conflict!r}"
        )
    if unflushed not in UNFLUSHED_POLICIES:
        raise InvalidInputError(
            f"unflushed must be one of {', '.join(UNFLUSHED_POLICIES)}, not {unflushed!r}"
        )
    props = check_metadata_dict(metadata)
    # This handle's writes are durable first; the seal checks the session is still open, and
    # its gc-phase read settles their uploads (one round trip less on a remote metastore).
    txn.flush(check=False, final=True, settle=False, finish=True)
    deadline = runtime.monotonic() + txn.ctx.settings.flush_wait
    while True:
        try:
            return _commit(txn, message, on_conflict, props)
        except UnfinishedWritersError:
            raise  # the caller chooses (see txn/writers.py); waiting changes nothing
        except UnflushedWritesError as e:  # live workers: they flush soon, or finish
            assert txn.staging is not None
            if unflushed == "discard":
                txn.staging.forget_unflushed({m.writer for m in e.markers})
            elif runtime.monotonic() > deadline:
                raise
            else:
                runtime.sleep(POLL)


def _commit(txn: CommitHandle, message: str | None, on_conflict: str, props: dict) -> str:
    """One attempt: seal, gather, run the protocol; the seal is undone if it fails."""
    ctx = txn.ctx
    rec, version = txn.current()
    txn.check_writable(rec, version)
    # The reads that need not wait for the seal go out with it: protection rules and the
    # branch head.
    protected, head, sealed = ctx.together(
        lambda: check_direct_commit(ctx.meta, ctx.refs.partition, rec.branch),
        lambda: ctx.refs.get(BRANCH, rec.branch),
        lambda: seal(txn, rec, version),
    )
    raise_first([sealed])  # nothing to undo
    rec, version = cast(tuple[SessionRecord, int], sealed)
    crashpoints.reached("after_seal")
    try:
        raise_first([protected, head])  # the seal is undone below
        # The gc phase is read only once the seal has landed: a sweep that begins later
        # sees this session committing and keeps what a commit may reuse, one that began
        # earlier is waited for (reading it alongside the seal let both miss each other).
        # The same read settles this handle's last uploads; the gather goes out with it.
        idle, gathered = ctx.together(
            lambda: txn.settle_flushed() or ctx.write_guard.wait_idle(), txn.gather
        )
        raise_first([idle, gathered])
        staged = cast(Gathered, gathered)
        request = CommitRequest(
            branch=rec.branch,
            base=rec.base,
            changes=staged.changes,
            blobs=staged.blobs,
            message=message if message is not None else (rec.message or ""),
            author=rec.author,
            session_id=rec.id,
            on_conflict=on_conflict,
            reads=(staged.reads, staged.listed) if rec.isolation == "serializable" else None,
            timeout=ctx.settings.commit_timeout,
            metadata=props,
            allow_empty=txn.allow_empty,
        )
        commit_id = CommitProtocol(ctx.objects, ctx.refs).run(
            request,
            lambda _: crashpoints.reached("before_branch_cas"),
            cast(tuple[str, int] | None, head),
        )
        crashpoints.reached("after_branch_cas")
    except BaseException:
        cid = None if isinstance(sys.exc_info()[1], ConflictError) else landed(ctx, rec)
        if cid is None:
            txn.record = replace(rec, status=Status.OPEN, lease=None)
            txn.version = ctx.records.swap(txn.record, version)
            if isinstance(sys.exc_info()[1], NotFoundError) and not ctx.refs.get(
                BRANCH, rec.branch
            ):
                raise NotFoundError(
                    f"branch {rec.branch!r} was deleted after this session started at "
                    f"{rec.base[:12]}; nothing was committed (the session stays open: create "
                    "the branch again to commit it there, or abandon it)"
                ) from None
            raise
        commit_id = cid  # the branch holds our commit; the error came after it landed
    txn.record = replace(rec, status=Status.COMMITTED, commit=commit_id, lease=None)
    txn.version = ctx.records.swap(txn.record, version)
    crashpoints.reached("after_session_committed")
    return commit_id


def seal(txn: CommitHandle, rec: SessionRecord, version: int) -> tuple[SessionRecord, int]:
    """Mark the session committing, with a lease, by compare-and-swap from the record as the
    handle last saw it (re-read once if it changed); writes staged after this fail."""
    lease = txn.ctx.clock() + txn.ctx.settings.commit_timeout + LEASE_MARGIN
    for fresh in (False, True):
        if fresh:
            rec, version = txn.load()
            txn.check_writable(rec, version)
        sealed = replace(rec, status=Status.COMMITTING, lease=lease)
        try:
            version = txn.ctx.records.swap(sealed, version)
        except CASFailedError:
            continue
        txn.record, txn.version = sealed, version
        return sealed, version
    txn.check_writable(*txn.load())
    raise SessionClosedError(f"session {rec.id} is being committed elsewhere")


def abandon(txn: CommitHandle) -> None:
    """Mark the session abandoned (idempotent) and drop its staged records."""

    def change(rec: SessionRecord) -> SessionRecord | None:
        if rec.status == Status.ABANDONED:
            return None
        if rec.status in (Status.COMMITTED, Status.COMMITTING):
            raise SessionClosedError(f"session {rec.id} is {rec.status}; cannot abandon it")
        return replace(rec, status=Status.ABANDONED)

    assert txn.record is not None and txn.staging is not None
    txn.record, _ = txn.ctx.records.update(txn.record.id, change)
    register_staged(txn.ctx, txn.record.id)  # its uploads become gc candidates
    txn.staging.clear()
