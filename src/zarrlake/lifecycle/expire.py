"""History expiry: commits older than a cutoff stop being part of the history.

A commit is expired when it is older than the cutoff, on the first-parent history of a
selected branch, and nothing still needs it: not a branch head or a tag, not in the history
of a branch that was not selected, not between an open session's base and its branch head.
Expiry writes a marker `expired/<commit id>` first, registers the commit's objects as
garbage candidates, then deletes the commit record; a history walk that meets a missing
commit with a marker ends there. Everything only the expired commits reached is left for
`gc`. Each step can be repeated, so an interrupted expiry finishes when run again.

A commit kept only for a while (a deleted tag's, an open session's base) below an expired
one is noted as an island (`lifecycle/islands.py`); later expiries walk down from it too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from zarrlake._util import crashpoints, runtime
from zarrlake._util.deprecation import deprecated_alias
from zarrlake.errors import ExpiredHistoryError, InvalidInputError, NotFoundError, RefNotFoundError
from zarrlake.lifecycle.expire_reasons import summary, why_kept
from zarrlake.lifecycle.gc import check_older_than, drop_check_results
from zarrlake.lifecycle.islands import forget, islands, note
from zarrlake.vc.gc_protocol import Candidate, GcState
from zarrlake.vc.keep import kept
from zarrlake.vc.reach import EXPIRED_PREFIX, expired_commits
from zarrlake.vc.refs import BRANCH, TAG

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext
    from zarrlake.format.commit import CommitRecord
    from zarrlake.vc.objects import Objects


@dataclass
class ExpireReport:
    """What an expiry did.

    How many commits left the history, and where each branch's history now ends.
    """

    commits_expired: int = 0
    oldest_retained: dict[str, str] = field(default_factory=dict)
    cutoff: str = ""
    seconds: float = 0.0
    kept: dict[str, list[str]] = field(default_factory=dict)
    """Commits older than the cutoff on the selected branches that were kept, each with
    why: "head of branch 'main'", "tagged 'v1'", "shared with branch 'dev'", "needed by
    open session <id> on 'main'", or a history operation under way."""

    def to_json(self) -> dict:
        """The report as a plain dict, for `--json` output."""
        return dict(self.__dict__)

    to_dict = deprecated_alias("to_json")

    def reasons(self) -> list[tuple[str, int]]:
        """(reason, how many of the kept commits it keeps), most first."""
        return summary(self.kept)


def cutoff_of(older_than: object, now: float) -> float:
    """The cutoff timestamp for `older_than`: a datetime, or a timedelta before `now`.
    Commit timestamps are history's time, taken by the committing process's clock, so the
    cutoff is too (this process's), not the metastore's, which judges leases."""
    if isinstance(older_than, datetime):
        when = older_than if older_than.tzinfo else older_than.replace(tzinfo=UTC)
        if when.timestamp() > now:
            raise InvalidInputError(f"older_than must not be in the future, not {when}")
        return when.timestamp()
    if isinstance(older_than, timedelta):
        return now - check_older_than(older_than).total_seconds()
    raise InvalidInputError(
        f"older_than must be a datetime.datetime or datetime.timedelta, not {older_than!r}"
    )


def check_branches(ctx: RepoContext, branches: object) -> dict[str, str]:
    """The selected branches and their heads (every branch for None)."""
    heads = ctx.refs.list(BRANCH)
    if branches is None:
        return heads
    if isinstance(branches, str) or not all(isinstance(b, str) for b in branches):  # type: ignore[union-attr]
        raise InvalidInputError(f"branches must be a list of branch names, not {branches!r}")
    tags = ctx.refs.list(TAG)
    for name in branches:  # type: ignore[union-attr]
        if name in tags and name not in heads:
            raise InvalidInputError(f"{name!r} is a tag; tags never expire (give a branch)")
        if name not in heads:
            raise RefNotFoundError(f"branch {name!r} does not exist")
    return {b: heads[b] for b in branches}  # type: ignore[union-attr]


def protected(ctx: RepoContext, selected: dict[str, str]) -> set[str]:
    """Commits that must stay: every head and tag, what running history operations keep
    (vc/keep.py), the whole history of branches not selected, and each open session's
    commits from its branch head down to its base: all of them while its base is not
    known yet (a session being created reads its branch's head after writing its record,
    so whatever head it reads, a read of the records that follows sees it)."""
    objects = ctx.objects
    # Keep records and sessions are read before the refs: an operation moves its ref and then
    # drops its record, a commit moves its branch and then ends its session, so whichever
    # moment the reads fall in, one of the two reads sees the commit.
    held = kept(ctx)
    now = ctx.clock()
    live = [
        rec
        for rec in ctx.records.scan()
        if rec.status == "committing" or (rec.status == "open" and rec.expires_at > now)
    ]
    heads = ctx.refs.list(BRANCH)
    keep = set(heads.values()) | set(ctx.refs.list(TAG).values()) | held
    gone = expired_commits(objects)
    seen: set[str] = set()
    stack = [cid for name, cid in heads.items() if name not in selected]
    while stack:
        cid = stack.pop()
        if cid in seen or cid in gone:
            continue
        seen.add(cid)
        stack.extend(objects.read_commit(cid).parents)
    keep |= seen
    for rec in live:
        if rec.branch in heads:
            keep.add(rec.base)
            for cid, _ in objects.history(heads[rec.branch]):
                keep.add(cid)
                if cid == rec.base:
                    break
    return keep


def restore(ctx: RepoContext, commits: list[str], marker: bytes) -> None:
    """Write the expiry markers of `commits` again: their records are gone, so a history
    walk must end there (another expiry took back a marker it shared)."""
    if commits:
        ctx.objects.put_all([(f"{EXPIRED_PREFIX}{cid}", marker) for cid in commits])


def _history(objects: Objects, head: str) -> Iterator[tuple[str, CommitRecord]]:
    """`objects.history(head)`, empty when `head` (a noted island) was expired or is gone."""
    try:
        yield from objects.history(head)
    except (ExpiredHistoryError, NotFoundError):
        return


def expire(
    ctx: RepoContext, older_than: datetime | timedelta, branches: list[str] | None = None
) -> ExpireReport:
    """Expire the history older than `older_than` on `branches` (None: every branch)."""
    start = time.monotonic()
    ctx.refs.check_moved()  # a process that opened the repository before it moved
    now = ctx.clock()
    cutoff = cutoff_of(older_than, runtime.now())
    selected = check_branches(ctx, branches)
    keep = protected(ctx, selected)
    objects = ctx.objects
    report = ExpireReport(cutoff=datetime.fromtimestamp(cutoff, UTC).isoformat())
    doomed: dict[str, tuple[str, str]] = {}
    below: dict[str, str | None] = {}  # a doomed commit's first parent
    reached: set[str] = set()  # retained above every doomed commit of a branch
    noted = islands(ctx)
    old_kept: set[str] = set()  # older than the cutoff on a selected branch, yet kept
    for name, head in [*selected.items(), *((None, cid) for cid in noted)]:
        retained = True  # the branch's log ends before its first expired commit
        for cid, rec in _history(objects, head):
            if cid in doomed or (rec.timestamp < cutoff and cid not in keep):
                doomed[cid] = (rec.snapshot, rec.changes)
                below[cid] = rec.parents[0] if rec.parents else None
                retained = False
            else:
                if rec.timestamp < cutoff and name is not None:
                    old_kept.add(cid)
                if retained and name is not None:
                    report.oldest_retained[name] = cid
                    reached.add(cid)
    gone = [cid for cid in noted if cid in reached or not ctx.object_store.exists(f"commits/{cid}")]
    if not doomed:
        forget(ctx, gone)
        report.kept = why_kept(ctx, selected, sorted(old_kept))
        report.seconds = time.monotonic() - start
        return report
    state = GcState(ctx)
    found: list[tuple[str, int | None]] = []
    for cid, (snapshot, changes) in doomed.items():
        found += [(f"commits/{cid}", None), (f"snapshots/{snapshot}", None)]
        found.append((f"changes/{changes}", None))
    # which of them are candidates already: a scan bounded within each kind (reading every
    # candidate, one per chunk uploaded since the last gc, took 2 s after 100,000)
    known: dict[str, Candidate] = {}
    for kind in ("commits/", "snapshots/", "changes/"):
        known.update(state.known([k for k, _ in found if k.startswith(kind)]))
    state.add(known, found)
    marker = json.dumps({"expired_at": now, "cutoff": cutoff}).encode()
    objects.put_all([(f"{EXPIRED_PREFIX}{cid}", marker) for cid in doomed])
    crashpoints.reached("expire_after_markers")
    # A ref created, or a history operation begun, since `keep` was read may point at a
    # doomed commit: read again now that the markers are written (one that starts later
    # sees its marker and refuses), and take those back.
    back = [cid for cid in protected(ctx, selected) if cid in doomed]
    objects.map(lambda cid: ctx.object_store.delete(f"{EXPIRED_PREFIX}{cid}"), back)
    for cid in back:
        del doomed[cid]
    # Another expiry that doomed one of them too may have deleted its record meanwhile
    # (its re-read came before the ref or keep record ours saw): its marker stays.
    restore(ctx, [cid for cid in back if not ctx.object_store.exists(f"commits/{cid}")], marker)
    kept_below = {p for d, p in below.items() if d in doomed and p and p not in doomed}
    note(ctx, [p for p in kept_below if p not in reached and not objects.is_expired(p)])
    drop_check_results(ctx, list(doomed))  # their check results go first
    objects.map(lambda cid: ctx.object_store.delete(f"commits/{cid}"), list(doomed))
    for cid in doomed:
        objects.forget(cid)
    # ...and the other expiry may have taken the marker back before that: the deleting one
    # puts it back. Each of the two looks after its own change, so one of them sees the
    # other's (soak seed 1000050: a record gone with no marker, a parent missing).
    present = expired_commits(objects)
    restore(ctx, [cid for cid in doomed if cid not in present], marker)
    forget(ctx, [*gone, *(cid for cid in noted if cid in doomed)])
    report.commits_expired = len(doomed)
    report.kept = why_kept(ctx, selected, sorted(old_kept | set(back)))
    report.seconds = time.monotonic() - start
    return report
