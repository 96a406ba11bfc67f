"""Committing a session: seal its record with a lease, run the commit protocol, finish the
record; and recovery of a committer that died mid-way or outlived its lease.

Two fences keep a committer that others gave up on from landing:

- The record: the seal stores a random token, the process identity and a lease (on the
  metastore's clock); the lease is renewed, and each commit id recorded, by
  compare-and-swap on that record before the branch compare-and-swap. Recovery changes
  the record, so a committer it gave up on fails its next renewal.
- The session's landing fence (`vc/refs.py`), beside the branch: every branch swap of the
  commit checks it in the same atomic step. Recovery revokes it before it reopens or
  aborts a session whose committer recorded an attempt, so an attempt already on its way
  (a paused committer's, or a dead one's request held up in the network) can never land
  afterwards; what recovery then finds on the branch is final.

A committer known to be alive (on this host: `runtime.identity_alive`) is never given up
on, whatever its lease says: it may be paused, and it still lands with its data. Its lease
matters where its liveness cannot be told (another host).

On a remote metastore the commit call takes three round trips when the session holds only
the committing handle's chunk changes and the branch is still at the base: the seal (with
the final flush); the gather, the gc phase and the branch's look, with the objects of the
commit made from the handle's own changes and its fence (`Premade`, where the ordering
argument is); the branch swap. Otherwise the objects and the fence of the commit built
from the gather follow it, one round trip more.
"""

from __future__ import annotations

import contextlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Protocol, cast

from zarrlake._util import crashpoints, runtime
from zarrlake.connection import RepoContext, raise_first
from zarrlake.errors import (
    CASFailedError,
    ExpiredHistoryError,
    InvalidInputError,
    NotFoundError,
    SessionClosedError,
    TransientError,
    UnflushedWritesError,
    ZarrLakeError,
)
from zarrlake.session_records import SessionRecord, SessionRecords, Status, as_datetime
from zarrlake.txn.staging import Staging
from zarrlake.vc.change_table import Gathered
from zarrlake.vc.checks.rules import GUARDS, CheckRule, commit_guards, guards_of
from zarrlake.vc.commit_protocol import (
    CommitBuilder,
    CommitProtocol,
    CommitRequest,
    SessionLanded,
)
from zarrlake.vc.gc_protocol import Phase, register_staged
from zarrlake.vc.objects import Blob
from zarrlake.vc.policies import CONFLICT_POLICIES, UNFLUSHED_POLICIES
from zarrlake.vc.refs import BRANCH, Landing, LandingRevokedError, Look


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

    def check_unsettled(self, gathered: Gathered) -> None:
        """Refuse if an included unfinished writer's chunk object is gone (txn/unsettled.py)."""

    def flush(
        self, check: bool = True, final: bool = False, settle: bool = True, finish: bool = False
    ) -> object:
        """Make this handle's buffered writes durable; `final` for the commit's own flush,
        `finish` to record its writer finished with them."""

    def settle_flushed(self, keep: Callable[[], None] | None = None) -> bool:
        """Settle the uploads of a `settle=False` flush; False if it had none (`keep` is
        called while it waits for a sweep)."""

    def gather(self) -> Gathered:
        """Every worker's staged changes, merged into one change table."""

    def own_gathered(self) -> Gathered | None:
        """What `gather` returns if the session holds only this handle's chunk changes."""

    def uploads_copied(self, rec: SessionRecord) -> bool:
        """Whether the uploads `rec` carries (`SessionRecord.uploads`) are known to be in the
        session's uploads partition too (this handle's first write copied them there)."""


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


class UndecidedError(ZarrLakeError):
    """Whether a commit landed cannot be decided from the branch: it is gone, or its history
    no longer reaches the session's base (reset past it)."""


def landed(ctx: RepoContext, rec: SessionRecord) -> str | None:
    """The commit this session made on its branch, or None when a complete search of the
    branch's history down to the session's base proves none did. A seal records each
    commit id it may move the branch to (`attempts`) before that branch compare-and-swap, so
    a seal with none recorded never moved it (no read needed). Raises on any read error and
    UndecidedError when the search cannot be completed: never a guess."""
    targets = set(rec.attempts)
    if rec.committer is not None and not targets:
        return None
    head = ctx.refs.get(BRANCH, rec.branch)
    if head is None:
        raise UndecidedError(f"branch {rec.branch!r} no longer exists")
    return reached(ctx, head[0], rec, targets)


def reached(ctx: RepoContext, head: str, rec: SessionRecord, targets: set[str]) -> str | None:
    """The first commit found from `head` that is one of `targets` or names session
    `rec`, searching every parent (a merge may have brought it in) but not below the
    session's base; None when the search ends having met the base. A commit found proves
    it landed wherever the search met it, so expired history on one path does not stop the
    others (a merge may bring in a line expired long ago); only a search that finds nothing
    and could not read everything, or never met the base, raises UndecidedError. Without
    merges above the base this is one walk down the first parents; with them it may read
    the history below the base that they bring in."""
    seen = {head}
    todo = deque([head])
    met_base = False
    expired_at: str | None = None
    while todo:
        cid = todo.popleft()
        if cid == rec.base:
            met_base = True
            continue
        try:
            commit = ctx.objects.read_commit(cid)
        except ExpiredHistoryError:
            if cid in targets:  # met through a parent: it landed, expired or not
                return cid
            expired_at = expired_at or cid
            continue
        if cid in targets or commit.session_id == rec.id:
            return cid
        for parent in commit.parents:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    if expired_at is not None:
        raise UndecidedError(
            f"the history of branch {rec.branch!r} was expired at {expired_at[:12]}"
        )
    if not met_base:
        raise UndecidedError(
            f"branch {rec.branch!r} no longer descends from the session's base {rec.base[:12]}"
        )
    return None


RELEASED = ""
"""The committer identity of a seal its process gave up on without settling it (see
`Hold.release`): recovery treats it as a dead committer's."""
_HELD: set[str] = set()
"""Seal tokens of the commits running in this process (`_settle_own`)."""


def _alive(rec: SessionRecord) -> bool | None:
    """Whether the process that sealed `rec` still runs (None: cannot be told from here)."""
    if rec.committer == RELEASED:
        return False
    return runtime.identity_alive(rec.committer) if rec.committer else None


def recovered(ctx: RepoContext, rec: SessionRecord, gone: bool = False) -> SessionRecord | None:
    """What a committing or aborted record becomes now, or None to leave it as it is.

    - A committer known alive (same host) is waited for, whatever its lease says (it may be
      paused); a landed commit of it makes the record committed.
    - A committer known dead, or one whose lease passed (by the metastore's clock) and whose
      liveness cannot be told from here: its landing is revoked first (if it recorded an
      attempt), so that nothing it sent can land later; then the branch tells exactly. A
      commit found makes the record committed; otherwise the session is open again if the
      committer is known dead, and aborted (final) if not.
    - An aborted record still naming attempts (aborted by an earlier version) is settled
      the same way: committed if its commit is there, else its attempts dropped.
    `gone`: the committer is known to run no more (this process, settling a seal of its
    own that no commit of it holds). Read errors propagate with the record untouched;
    only a complete walk says "not landed" (see `landed`)."""
    now = ctx.clock()
    if rec.status == Status.ABORTED:
        if not rec.attempts:
            return None  # nothing was ever tried on the branch, or it was settled already
        ctx.refs.revoke_landing(rec.id, rec.seal)
        try:
            cid = landed(ctx, rec)
        except UndecidedError:
            return None  # looked for again at the next read: it may turn up (a merge)
        return _finished(rec, cid, now) if cid is not None else replace(rec, attempts=())
    if rec.status != Status.COMMITTING:
        return None
    alive = False if gone else _alive(rec)
    lease_over = rec.lease is None or now > rec.lease
    if alive or (alive is None and not lease_over):
        return _landed_meanwhile(ctx, rec, now)
    if rec.attempts:  # a branch swap may be on its way: make it fail, wherever it is
        ctx.refs.revoke_landing(rec.id, rec.seal)
    try:
        cid = landed(ctx, rec)
    except UndecidedError as e:  # its attempts stay: one may turn up on the branch yet
        return _aborted(rec, now, f"{rec.committer_text()} stopped, and {e}.", rec.attempts)
    if cid is not None:
        return _finished(rec, cid, now)
    if alive is False:
        return replace(
            rec,
            status=Status.OPEN,
            lease=None,
            since=now,
            seal=None,
            attempts=(),
            note=f"reopened: {rec.committer_text()} died while committing, without landing",
        )
    return _aborted(
        rec,
        now,
        f"{rec.committer_text()}, committing since {rec.since_text()}, did not finish "
        f"within its lease (ended {as_datetime(rec.lease)}) and cannot be checked from here.",
    )


def _landed_meanwhile(ctx: RepoContext, rec: SessionRecord, now: float) -> SessionRecord | None:
    """A running committer's record, committed if one of its attempts is on the branch
    already (its commit returned, the record's finish still on its way); None otherwise,
    or when that cannot be read now (the committer finishes it)."""
    if not rec.attempts:
        return None
    try:
        cid = landed(ctx, rec)
    except ZarrLakeError:
        return None
    return _finished(rec, cid, now) if cid is not None else None


def _finished(rec: SessionRecord, cid: str, now: float) -> SessionRecord:
    return replace(rec, status=Status.COMMITTED, commit=cid, lease=None, since=now)


def _aborted(
    rec: SessionRecord, now: float, note: str, attempts: tuple[str, ...] = ()
) -> SessionRecord:
    """Aborted, final: its landing was revoked (or it never tried), so none of its attempts
    can land any more; those kept are ones that may have landed already, to look for."""
    return replace(rec, status=Status.ABORTED, lease=None, since=now, attempts=attempts, note=note)


def load(ctx: RepoContext, session_id: str) -> tuple[SessionRecord, int]:
    """The session's record, recovered first if its committer is gone or past its lease
    (see `recovered`); read errors propagate and leave the record as it is."""
    return ctx.records.update(session_id, lambda rec: recovered(ctx, rec))


def current_record(ctx: RepoContext, rec: SessionRecord) -> SessionRecord:
    """What a stored record stands for now: a committing or aborted one read through
    recovery (its committer may have died, or its commit turned up); one that cannot be
    checked now (a read error) as stored."""
    if rec.status in (Status.COMMITTING, Status.ABORTED):
        with contextlib.suppress(ZarrLakeError):
            rec, _ = load(ctx, rec.id)
    return rec


def settle_before_reset(ctx: RepoContext, branch: str, head: str) -> None:
    """Before `branch` is reset away from `head`: every session recorded as committing (or
    aborted with attempts) on it whose commit `head` holds is recorded committed now, while
    the branch still shows it. Afterwards its commit may no longer be on the branch, and
    recovery would take it for "not landed" and reopen the session (a second commit of it).
    A commit landing after `head` was read moves the branch: the reset's compare-and-swap
    then fails and it reads again."""
    for rec in ctx.records.scan():
        if rec.branch != branch or not (
            rec.status == Status.COMMITTING or (rec.status == Status.ABORTED and rec.attempts)
        ):
            continue
        if rec.committer is not None and not rec.attempts:
            continue  # no branch swap was tried
        try:
            cid = reached(ctx, head, rec, set(rec.attempts))
        except UndecidedError:
            continue
        if cid is None:
            continue

        def change(cur: SessionRecord, cid: str = cid, seal: str | None = rec.seal):
            if cur.status not in (Status.COMMITTING, Status.ABORTED) or cur.seal != seal:
                return None
            return _finished(cur, cid, ctx.clock())

        ctx.records.update(rec.id, change)


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
    deadline = runtime.monotonic() + txn.ctx.settings.flush_wait
    final_flush: Callable[[], object] | None = partial(
        txn.flush, check=False, final=True, settle=False, finish=True
    )
    while True:
        try:
            return _commit(txn, message, on_conflict, props, final_flush)
        except UnflushedWritesError as e:  # live workers: they flush soon, or finish
            assert txn.staging is not None
            if unflushed == "discard":
                txn.staging.forget_unflushed({m.writer for m in e.markers})
            elif runtime.monotonic() > deadline:
                raise
            else:
                runtime.sleep(POLL)
        finally:
            final_flush = None  # once: later attempts find this handle's writes staged


class Hold:
    """A committer's hold on the record it sealed: its lease, renewed by compare-and-swap on
    that record, and the commit ids it may move the branch to, recorded the same way before
    each branch compare-and-swap. Every change checks the record still carries this seal
    (`seal` token, status committing): once recovery aborted or reopened it, the hold is
    lost and the committer gives up before it touches the branch (the fence)."""

    def __init__(self, txn: CommitHandle, rec: SessionRecord, version: int) -> None:
        self.txn = txn
        self.rec = rec
        self.version = version

    @property
    def span(self) -> float:
        """Seconds a lease runs from its last renewal."""
        return self.txn.ctx.settings.commit_timeout + LEASE_MARGIN

    def keep(self) -> None:
        """Renew the lease once half of it has passed (no metastore call before); raises
        SessionClosedError if the record is no longer this seal's."""
        assert self.rec.lease is not None
        if self.txn.ctx.clock() > self.rec.lease - self.span / 2:
            self.renew()

    def renew(self, attempt: str | None = None) -> None:
        """Extend the lease, recording `attempt` (a commit id about to be swapped onto the
        branch) among the seal's attempts; SessionClosedError if the hold is lost."""
        ctx = self.txn.ctx

        def change(cur: SessionRecord) -> SessionRecord:
            if cur.status != Status.COMMITTING or cur.seal != self.rec.seal:
                raise self.lost(cur)
            attempts = cur.attempts
            if attempt is not None and attempt not in attempts:
                attempts = (*attempts, attempt)
            return replace(cur, lease=ctx.clock() + self.span, attempts=attempts)

        new = change(self.rec)
        try:  # one round trip when nobody touched the record (the usual case)
            self.version = ctx.records.swap(new, self.version)
            self.rec = new
        except CASFailedError:
            self.rec, self.version = ctx.records.update(self.rec.id, change)
        self.txn.record, self.txn.version = self.rec, self.version

    def heartbeat(self) -> Heartbeat:
        """Renew the lease in the background too (every quarter of it), so a step slower
        than the lease between two `keep` calls (a slow store, a long sweep's wait) does not
        let it lapse while this process runs; stopped when the commit ends."""
        return Heartbeat(self)

    def release(self) -> None:
        """Give the seal up without settling it (whether its commit landed could not be
        read): the record names no live committer any more (RELEASED), so the next reader
        settles it as a dead committer's, revoking its landing first."""

        def change(cur: SessionRecord) -> SessionRecord | None:
            if cur.status != Status.COMMITTING or cur.seal != self.rec.seal:
                return None
            return replace(cur, committer=RELEASED, lease=0.0)

        self.rec, self.version = self.txn.ctx.records.update(self.rec.id, change)

    def lost(self, cur: SessionRecord) -> SessionClosedError:
        """The error of a committer whose record was taken from it."""
        return SessionClosedError(
            f"session {cur.id}: this commit stopped before moving the branch: its record was "
            f"changed by another process (now {cur.status}"
            + (f": {cur.note}" if cur.note else "")
            + "). The branch was not moved by this attempt"
        )

    def finish(self, commit: str | None, records: SessionRecords | None = None) -> None:
        """Leave the record committed (with `commit`) or open again, if this seal still holds
        it; a record recovery aborted meanwhile stays aborted (committed if `commit`), with
        no attempts left to look for once this committer is done. `records`: those to
        write through (a background write's own, see `SessionRecords.later`)."""
        ctx = self.txn.ctx
        records = records or ctx.records
        seal = self.rec.seal

        def change(cur: SessionRecord) -> SessionRecord | None:
            now = ctx.clock()
            if cur.seal != seal or cur.status not in (Status.COMMITTING, Status.ABORTED):
                if commit is not None and cur.commit != commit:
                    raise SessionClosedError(
                        f"session {cur.id}: its commit {commit[:12]} landed, but the record "
                        f"was changed meanwhile to {cur.status}"
                        "; run `zarrlake sessions show ID` to see its state"
                    )
                return None
            if commit is not None:
                return _finished(cur, commit, now)
            if cur.status == Status.ABORTED:
                return replace(cur, attempts=()) if cur.attempts else None
            return replace(
                cur, status=Status.OPEN, lease=None, since=now, seal=None, attempts=(), note=None
            )

        new = change(self.rec)
        try:
            if new is not None:
                self.version = records.swap(new, self.version)
                self.rec = new
        except CASFailedError:
            self.rec, self.version = records.update(self.rec.id, change)
        self.txn.record, self.txn.version = self.rec, self.version


def _settle_own(txn: CommitHandle, fresh: bool = False) -> tuple[SessionRecord, int]:
    """The record as the handle last saw it (`fresh`: as read now), after settling a seal
    of this process that no commit of it holds any more (a commit that could not undo its
    seal: a lost reply, a read that failed): recovered as a dead committer's, so a retry
    is never refused by this very process."""
    rec, version = txn.load() if fresh else txn.current()
    if (
        rec.status == Status.COMMITTING
        and rec.committer == runtime.identity()
        and rec.seal not in _HELD
    ):
        rec, version = txn.ctx.records.update(
            rec.id, lambda cur: recovered(txn.ctx, cur, gone=cur.seal == rec.seal)
        )
        txn.record, txn.version = rec, version
    return rec, version


class Heartbeat:
    """A committer's lease renewal in the background (a `runtime` timer, every quarter of
    the lease). It only ever compare-and-swaps the record, from a fresh read, and stops
    once the record is no longer its seal's: it may run beside the commit's own calls
    (`concurrent`, which the simulator honours)."""

    concurrent = True

    def __init__(self, hold: Hold) -> None:
        self.ctx = hold.txn.ctx
        self.session = hold.rec.id
        self.seal = hold.rec.seal
        self.span = hold.span
        self._stopped = False
        self._timer = runtime.call_later(self.span / 4, self)

    def __call__(self) -> None:
        """One beat: renew, and schedule the next unless stopped or given up on."""
        if self._stopped:
            return

        def change(cur: SessionRecord) -> SessionRecord:
            if cur.status != Status.COMMITTING or cur.seal != self.seal:
                raise SessionClosedError(
                    f"session {cur.id} is no longer this commit's; see its state with "
                    f"`zarrlake sessions show {cur.id}`"
                )
            return replace(cur, lease=self.ctx.clock() + self.span)

        try:
            self.ctx.records.update(self.session, change)
        except SessionClosedError:
            return  # given up on, or finished: the commit finds out at its next step
        except ZarrLakeError:
            pass  # a missed beat: the next one, or the commit's own renewal, renews
        if not self._stopped:
            self._timer = runtime.call_later(self.span / 4, self)

    def stop(self) -> None:
        """Renew no more."""
        self._stopped = True
        self._timer.cancel()


def _commit(
    txn: CommitHandle,
    message: str | None,
    on_conflict: str,
    props: dict,
    final_flush: Callable[[], object] | None = None,
) -> str:
    """One attempt: seal, gather, run the protocol; the seal is undone if it fails.
    `final_flush` (the first attempt's) makes this handle's buffered writes durable."""
    ctx = txn.ctx
    rec, version = _settle_own(txn)
    txn.check_writable(rec, version)
    before = ctx.write_guard.last_read()  # a gc phase read sent before the seal (`_unswept`)
    # What need not wait for the seal goes out with it (one round trip on a remote
    # metastore; first, in turn, on an embedded one): this handle's last writes, which the
    # gather below reads and the gc-phase read settles.
    # On an embedded metastore both are one write transaction (`MetaStore.batch`): the
    # flush's records and the seal reach the file, and hold its write lock, once. (A flush
    # that fails lets the write lock go before it takes the handle's buffer lock back.)
    with ctx.meta.batch():
        flushed, sealed = ctx.together(
            final_flush or (lambda: None),
            lambda: seal(txn, rec, version),
        )
    if isinstance(sealed, Exception):
        raise_first([flushed, sealed])  # nothing to undo
    hold = Hold(txn, *cast(tuple[SessionRecord, int], sealed))
    rec = hold.rec
    beat = hold.heartbeat()
    try:
        first = final_flush is not None  # (a retry waits for other workers: no premade)
        return _run(txn, hold, message, on_conflict, props, flushed, before, first)
    finally:
        beat.stop()
        _HELD.discard(rec.seal or "")


def _run(
    txn: CommitHandle,
    hold: Hold,
    message: str | None,
    on_conflict: str,
    props: dict,
    flushed: object,
    before: tuple[float, Phase] | None = None,
    first: bool = False,
) -> str:
    """The commit under the seal `hold` holds (see `_commit`; `before`: the gc phase as
    read before the seal was sent)."""
    ctx = txn.ctx
    rec = hold.rec
    crashpoints.reached("after_seal")

    def before_cas(commit_id: str) -> None:
        hold.renew(attempt=commit_id)  # the fence: no branch swap unless this still holds
        crashpoints.reached("before_branch_cas")

    # The record's finish needs nothing the caller waits for: on a remote metastore it goes
    # out in the background (this process's later record calls wait for it); on an
    # embedded one, in the branch swap's transaction (`CommitProtocol.land`). If it fails,
    # the record stays committing with this commit among its attempts, which any reader
    # finds on the branch and records as committed (see `recovered`).
    finishing: list[object] = []

    def finish(records: SessionRecords, commit_id: str) -> None:
        with contextlib.suppress(ZarrLakeError):
            hold.finish(commit_id, records)
        if records.meta.remote:  # (embedded: reached once the swap's transaction ended)
            crashpoints.reached("after_session_committed")

    def after_cas(commit_id: str) -> None:
        crashpoints.reached("after_branch_cas")
        finishing.append(ctx.records.later(partial(finish, commit_id=commit_id)))

    rules: list[CheckRule] = []

    def check(commit_id: str, head: str) -> None:  # each commit built, before its swap
        if rules:
            from zarrlake.txn.checks import enforce

            hold.keep()  # the checks may read for a while
            enforce(ctx, rules, rec.branch, commit_id, head, "commit")
            hold.keep()

    protocol = CommitProtocol(ctx.objects, ctx.refs)
    try:
        raise_first([flushed])  # the seal is undone below

        # The gc phase is read only once the seal has landed: a sweep that begins later
        # sees this session committing and keeps what a commit may reuse, one that began
        # earlier is waited for (reading it alongside the seal let both miss each other),
        # the lease renewed meanwhile. The same read settles this handle's last uploads;
        # the gather goes out with it.
        def settle_and_wait() -> None:  # a settle that read the phase spares the wait
            if not txn.settle_flushed(hold.keep):
                ctx.write_guard.wait_idle(hold.keep)

        def request_of(staged: Gathered) -> CommitRequest:
            return CommitRequest(
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
                keep=hold.keep,
                moves=staged.moves,
            )

        # On a remote metastore the commit of this handle's own changes on the base is made
        # now, and its objects and its fence go out with the gather (see `Premade`).
        premade = Premade.of(txn, request_of) if ctx.meta.remote and first else None
        sent = runtime.monotonic()  # (after the seal landed)
        # The session's landing fence is read now that the seal has landed: every revocation
        # of an earlier seal came before it, and one of this seal changes it (vc/refs.py).
        # The same read of the refs gives the branch head and the protection and check rules.
        idle, gathered, look, *wrote = ctx.together(
            settle_and_wait,
            txn.gather,
            lambda: ctx.refs.look(rec.branch, rec.id, (GUARDS,), moved=False),
            *(premade.calls(before_cas) if premade is not None else ()),
        )
        raise_first([idle, gathered, look, *wrote])
        refs = cast(Look, look)
        rules.extend(commit_guards(guards_of(refs.items[0]), rec.branch))
        mark, landing = cast(tuple[str | None, Landing], refs.landing)
        if mark == f"revoked {rec.seal}":
            raise hold.lost(hold.rec)
        hold.keep()
        staged = cast(Gathered, gathered)
        txn.check_unsettled(staged)  # no sweep deletes any more: what is there now stays
        builder = None
        if premade is not None and premade.holds(staged):
            if not _unswept(ctx, before, sent):  # a sweep may have deleted one meanwhile
                ctx.objects.put_all(premade.blobs)
            builder = premade.builder
            builder.made(premade.blobs)
            request = builder.req
        else:
            request = request_of(staged)
        commit_id = protocol.run(
            request,
            before_cas,
            refs.head,
            check,
            ctx.together if ctx.meta.remote else None,  # (embedded: the fence in the batch)
            landing,
            after_cas,
            builder,
        )
    except SessionLanded as e:  # an earlier seal's commit landed late: this one cannot
        hold.finish(e.commit)
        raise SessionClosedError(
            f"session {rec.id} was already committed as {e.commit[:12]} (by an earlier commit "
            "of it whose branch update arrived late); this commit was not made, and writes "
            "flushed since that commit are not in it: write them in a new session"
        ) from None
    except BaseException as error:
        try:
            if protocol.uncertain:  # a swap of ours may still be on its way: it never lands now
                ctx.refs.revoke_landing(rec.id, rec.seal)
            cid = landed(ctx, hold.rec) if hold.rec.attempts else None
        except ZarrLakeError as unknown:  # cannot tell: the record stays committing
            error.add_note(
                f"whether this commit landed could not be checked ({unknown}); session "
                f"{rec.id} stays committing until that is known (its next reader decides, "
                "or this process's next commit of it)"
            )
            with contextlib.suppress(ZarrLakeError):
                hold.release()
            raise error from None  # (a bare raise would raise the check's error, unnoted)
        if cid is None:
            hold.finish(None)
            if isinstance(error, LandingRevokedError):  # say what recovery made of it
                raise hold.lost(ctx.records.get(rec.id)[0]) from None
            if isinstance(error, NotFoundError) and not ctx.refs.get(BRANCH, rec.branch):
                raise NotFoundError(
                    f"branch {rec.branch!r} was deleted after this session started at "
                    f"{rec.base[:12]}; nothing was committed (the session stays open: create "
                    "the branch again to commit it there, or abandon it)"
                ) from None
            raise
        commit_id = cid  # the branch holds our commit; the error came after it landed
    # The commit landed: raising now would report a failure that happened.
    if not finishing:  # (found after a lost reply or an error, or nothing to move)
        crashpoints.reached("after_branch_cas")
        ctx.records.later(partial(finish, commit_id=commit_id))
    if not ctx.meta.remote:
        crashpoints.reached("after_session_committed")
    return commit_id


PREMADE_MAX = 10_000
"""Changes up to which a commit is premade (its manifest ranges are then held at once)."""


class Premade:
    """The commit of the committing handle's own chunk changes on the session's base, made
    once the seal landed and before the gather has read what the session staged, so that
    its objects and its fence (the seal's attempt recorded) go out with the gather, the
    gc phase read and the branch's look: the commit call then waits one round trip less
    when the gather finds only those changes and the branch still at the base.

    Why it is safe, step by step against the usual order (gather, then objects and fence):

    - A branch head names these objects only after the swap, which follows their round.
    - The fence is the usual one (`Hold.renew` recording the id before any swap of it);
      recovery looks for every recorded attempt, swapped or not.
    - gc: the objects are sent after the seal landed, so a sweep whose re-check began
      later sees the session committing and keeps every kind a commit writes. A sweep
      that began earlier may have judged one of them dead (a content-addressed key it had
      as a candidate) and delete it after its PUT found it present. The usual path waits
      such a sweep out before writing; here the objects go out at once, and are put again
      (if absent) before the swap unless the gc phase read in the gather's round is the same
      idle phase as one read before the seal was sent (`_unswept`): then no sweep ran
      between the two, and none that ended before can delete anything afterwards.
    - A gather that finds more (another worker's fragments, documents, moves) or a branch
      that moved: the premade commit is not swapped; the usual build follows, fenced with
      its own objects. Its objects are then never named by any head: a full gc's listing
      reclaims them, as it does a lost swap's attempt."""

    def __init__(
        self, predicted: Gathered, builder: CommitBuilder, commit_id: str, blobs: list[Blob]
    ) -> None:
        self.predicted = predicted
        self.builder = builder
        self.commit_id = commit_id
        self.blobs = blobs

    @classmethod
    def of(
        cls, txn: CommitHandle, request_of: Callable[[Gathered], CommitRequest]
    ) -> Premade | None:
        """The premade commit of `txn`'s own changes (None: it staged documents or moves,
        nothing or too much, or building failed; the usual path decides)."""
        predicted = txn.own_gathered()
        if predicted is None or not predicted.fragments or len(predicted.changes) > PREMADE_MAX:
            return None
        try:
            builder = CommitBuilder(txn.ctx.objects, request_of(predicted))
            commit_id, blobs = builder.premade()
        except ZarrLakeError:  # (no changes, a read that failed: the usual path says so)
            return None
        return cls(predicted, builder, commit_id, blobs)

    def calls(self, fence: Callable[[str], None]) -> tuple[Callable[[], None], ...]:
        """The writes that go out with the gather: the objects, and the fence of the id."""
        objects = self.builder.objects

        def put() -> None:
            objects.put_all(self.blobs)
            crashpoints.reached("after_objects_written")

        return put, lambda: fence(self.commit_id)

    def holds(self, staged: Gathered) -> bool:
        """Whether the gather found exactly the changes this commit was made of."""
        return (
            staged.fragments == self.predicted.fragments
            and not staged.changes.meta
            and not staged.moves
        )


def _unswept(ctx: RepoContext, before: tuple[float, Phase] | None, sent: float) -> bool:
    """Whether no sweep ran between the gc phase read `before` (sent before the seal) and
    the latest read, if that was sent after `sent` (the seal landed): the same idle phase
    both times (its epoch moves when a sweep begins)."""
    after = ctx.write_guard.last_read()
    return (
        before is not None
        and after is not None
        and after[0] >= sent
        and not before[1].sweeping
        and after[1] == before[1]
    )


def seal(txn: CommitHandle, rec: SessionRecord, version: int) -> tuple[SessionRecord, int]:
    """Mark the session committing, with a lease, this process's identity and a fresh seal
    token, by compare-and-swap from the record as the handle last saw it (re-read once if
    it changed); writes staged after this fail. A seal whose reply was lost is read back:
    one that landed is undone, and the TransientError says the session is open again."""
    now = txn.ctx.clock()
    lease = now + txn.ctx.settings.commit_timeout + LEASE_MARGIN
    token = f"{random.getrandbits(64):016x}"  # unique, not secret: no kernel entropy read
    for fresh in (False, True):
        if fresh:
            rec, version = _settle_own(txn, fresh=True)
            txn.check_writable(rec, version)
        sealed = replace(
            rec,
            status=Status.COMMITTING,
            lease=lease,
            since=now,
            committer=runtime.identity(),
            seal=token,
            attempts=(),
            note=None,
            uploads=() if txn.uploads_copied(rec) else rec.uploads,
        )
        try:
            version = txn.ctx.records.swap(sealed, version)
        except CASFailedError:
            continue
        except TransientError as error:
            _unseal(txn, rec, version, token, error)
            raise
        _HELD.add(token)
        txn.record, txn.version = sealed, version
        return sealed, version
    txn.check_writable(*txn.load())
    raise SessionClosedError(
        f"session {rec.id} is being committed elsewhere"
        "; run `zarrlake sessions show ID` to follow it"
    )


def _unseal(
    txn: CommitHandle, before: SessionRecord, version: int, token: str, error: Exception
) -> None:
    """After a seal whose reply was lost: read the record back and leave it open. Our seal
    there is undone; an unchanged record is written again (its version moves on, so the
    seal, if still on its way, can never land); another change means it never will. A
    failure here leaves it to `_settle_own` at this process's next commit."""

    def change(cur: SessionRecord) -> SessionRecord | None:
        if cur.seal == token and cur.status == Status.COMMITTING:
            return replace(cur, status=Status.OPEN, lease=None, seal=None, attempts=())
        return None

    try:
        got, now_at = txn.ctx.records.get(before.id)
        if got.seal != token and now_at == version:
            got, now_at = got, txn.ctx.records.swap(got, version)  # fences the lost seal
        else:
            got, now_at = txn.ctx.records.update(before.id, change)
        txn.record, txn.version = got, now_at
        error.add_note(
            f"The commit's first step (sealing session {before.id}) lost its reply; nothing "
            f"was committed and the session is {got.status}: commit again"
        )
    except ZarrLakeError as again:
        error.add_note(
            f"The commit's first step lost its reply and could not be undone ({again}); "
            "nothing was committed: commit again from this process once the metastore answers"
        )


def abandon(txn: CommitHandle) -> None:
    """Mark the session abandoned (idempotent) and drop its staged records."""

    def change(rec: SessionRecord) -> SessionRecord | None:
        if rec.status == Status.ABANDONED:
            return None
        if rec.status in (Status.COMMITTED, Status.COMMITTING):
            raise SessionClosedError(
                f"session {rec.id} is {rec.status}; cannot abandon it"
                "; run `zarrlake sessions show ID` to see its state"
            )
        return replace(rec, status=Status.ABANDONED)

    assert txn.record is not None and txn.staging is not None
    txn.record, _ = txn.ctx.records.update(txn.record.id, change)
    register_staged(txn.ctx, txn.record.id, born=txn.record.uploads)  # gc candidates now
    txn.staging.clear()
