"""Keep records: a history operation's promise to the collector and to `expire`.

A merge, revert or reset, and a new branch or tag, point at a commit that need not be a
branch head (an id copied from `log`, a deleted branch restored, a merge's source), and may
reuse any content-addressed object. While one runs, a record `k/<token>` in the gc
partition names its commits: a sweep that begins later marks them live (with their history)
and defers metadata objects, as it does for a committing session; `expire` neither drops
them nor deletes one it dropped meanwhile (it re-reads the records after its markers).

A sweep that began before the record cannot see it. The operation notices by the phase it
reads before and after writing the record: if they differ, or a sweep is under way, it
waits for that sweep to end and checks that each commit is still whole before it moves
anything. It refuses a commit `expire` dropped (ExpiredHistoryError), so a ref never points
at a commit whose objects are gone.

A record lasts `KEEP_TTL` unless renewed: gc and `expire` count a lapsed record while it
exists (deleting it), and before each ref move the operation renews its record by
compare-and-swap, or, if it was deleted meanwhile, writes it again and re-checks as on
entry. An operation paused past its record therefore never lands on a commit dropped
while it was paused.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from zarrlake._util import runtime
from zarrlake.errors import CASFailedError, ExpiredHistoryError, NotFoundError, TransientError
from zarrlake.vc.gc_protocol import GcContext, WriteGuard, partition
from zarrlake.vc.reach import Reach, expired_commits
from zarrlake.vc.refs import BEFORE_MOVE

KEEP = b"k/"
KEEP_TTL = 3600.0
"""Seconds a record lasts unless renewed; one left by a crashed operation lapses then, and
the next gc or `expire` deletes it (keeping its commits that run)."""


def kept(ctx: GcContext) -> set[str]:
    """The commits that history operations keep: those of every keep record present,
    lapsed or not. A record past its time (`until`, by this process's clock) is deleted by
    compare-and-delete, but still counted by this run: its operation may be paused, not
    dead, and a live one notices the deletion at its fence before it moves a ref
    (`keeping`), so a record is never ignored while it exists."""
    now = ctx.clock()
    out: set[str] = set()
    part = partition(ctx)
    lapsed: list[tuple[bytes, int]] = []
    for key, value, version in ctx.meta.scan(part, prefix=KEEP):
        doc = json.loads(value)
        out.update(doc["commits"])
        if doc["until"] <= now:
            lapsed.append((key, version))
    for key, version in lapsed:  # clean-up only: a failure leaves it for the next run
        with contextlib.suppress(CASFailedError, TransientError):
            ctx.meta.delete_if(part, key, version)
    return out


class _Keeper:
    """One operation's keep record: written and checked on entry, renewed (or written and
    checked again) at the fence before each ref move, deleted at the end."""

    def __init__(self, ctx: GcContext, wanted: list[str]) -> None:
        self.ctx = ctx
        self.wanted = wanted
        self.part = partition(ctx)
        self.key: bytes | None = None
        self.doc: dict = {}
        self.version: int | None = None

    def admit(self, landing: str | None = None) -> None:
        """Write a new record, then refuse (nothing changed) if a commit was dropped or lost
        objects before the record could protect it. `landing`: a commit this operation
        wrote and is about to land, after its record lapsed (see `fence`): any sweep since
        may have deleted what it reuses, so it and the record's commits are checked whole."""
        ctx = self.ctx
        guard = WriteGuard(ctx)
        before = guard.begin()  # a new guard reads the phase afresh
        self.key = KEEP + secrets.token_hex(8).encode()
        self.doc = {
            "commits": self.wanted,
            "until": ctx.clock() + KEEP_TTL,
            "identity": runtime.identity(),
        }
        self.version = None
        self.version = ctx.meta.set_if(self.part, self.key, json.dumps(self.doc).encode(), None)
        after = guard.current()
        overlapped = after != before or after.sweeping
        if overlapped:
            guard.wait_idle()
        for cid in self.wanted:
            when = ctx.objects.expired_at(cid)
            if when is not None:
                raise ExpiredHistoryError(
                    f"commit {cid[:12]} was dropped by expire; nothing was changed", cid, when
                )
        if landing is not None:
            check_whole(ctx, [*self.wanted, landing])
        elif overlapped:
            check_whole(ctx, self.wanted)

    def fence(self, landing: str) -> None:
        """Before a ref moves to `landing`: renew the record by compare-and-swap; if it is
        gone (it lapsed while the operation was paused, and gc or `expire` deleted it) or
        changed, admit again, which refuses a commit dropped or broken meanwhile (the one
        landing included: a sweep in the lapse may have deleted an object it reused)."""
        ctx = self.ctx
        got = ctx.meta.get(self.part, self.key) if self.key is not None else None
        if got is not None and self.key is not None and got[1] == self.version:
            doc = {**self.doc, "until": ctx.clock() + KEEP_TTL}
            try:
                self.version = ctx.meta.set_if(
                    self.part, self.key, json.dumps(doc).encode(), got[1]
                )
                self.doc = doc
                return
            except CASFailedError:
                pass
        self.admit(landing)

    def release(self) -> None:
        """Delete the record (whatever its version: it is this operation's own)."""
        if self.key is not None:
            self.ctx.meta.set_many(self.part, [(self.key, None)])


@contextmanager
def keeping(ctx: GcContext, commits: Iterable[str]) -> Iterator[None]:
    """Run the body with `commits` kept from gc and `expire`; refuse (ExpiredHistoryError
    or NotFoundError, nothing changed) if one was dropped or lost objects before the
    record could protect it. Every ref move inside the body first passes the record's
    fence (`refs.BEFORE_MOVE`), so a paused operation whose record lapsed cannot land."""
    keeper = _Keeper(ctx, sorted(set(commits)))
    try:
        keeper.admit()
        token = BEFORE_MOVE.set(keeper.fence)
        try:
            yield
        finally:
            BEFORE_MOVE.reset(token)
    finally:
        keeper.release()


def check_whole(ctx: GcContext, commits: list[str]) -> None:
    """NotFoundError unless every object `commits` reach (their history included) exists."""
    reach = Reach(ctx.objects, expired_commits(ctx.objects))
    try:
        reach.add_commits(commits)
    except NotFoundError as e:
        raise NotFoundError(_lost(commits, str(e))) from None
    keys = sorted(reach.live)
    exists = ctx.objects.map(ctx.object_store.exists, keys)
    missing = [k for k, ok in zip(keys, exists, strict=True) if not ok]
    if missing:
        raise NotFoundError(_lost(commits, f"{len(missing)} objects missing, e.g. {missing[0]}"))


def _lost(commits: list[str], detail: str) -> str:
    names = ", ".join(c[:12] for c in commits)
    return (
        f"garbage collection deleted objects of commit {names} while this operation waited "
        f"for its sweep ({detail}); nothing was changed"
    )
