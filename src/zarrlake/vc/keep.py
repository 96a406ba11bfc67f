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
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from zarrlake import runtime
from zarrlake.errors import ExpiredHistoryError, NotFoundError
from zarrlake.vc.gc_protocol import GcContext, WriteGuard, partition
from zarrlake.vc.reach import Reach, expired_commits

KEEP = b"k/"
KEEP_TTL = 3600.0
"""Seconds a record keeps its commits; one left by a crashed operation lapses then."""


def kept(ctx: GcContext) -> set[str]:
    """The commits that running history operations keep (records not yet lapsed)."""
    now = ctx.clock()
    out: set[str] = set()
    for _, value, _ in ctx.meta.scan(partition(ctx), prefix=KEEP):
        doc = json.loads(value)
        if doc["until"] > now:
            out.update(doc["commits"])
    return out


@contextmanager
def keeping(ctx: GcContext, commits: Iterable[str]) -> Iterator[None]:
    """Run the body with `commits` kept from gc and `expire`; refuse (ExpiredHistoryError
    or NotFoundError, nothing changed) if one was dropped or lost objects before the
    record could protect it."""
    wanted = sorted(set(commits))
    key = KEEP + secrets.token_hex(8).encode()
    guard = WriteGuard(ctx)
    before = guard.begin()  # a new guard reads the phase afresh
    doc = {"commits": wanted, "until": ctx.clock() + KEEP_TTL, "identity": runtime.identity()}
    part = partition(ctx)
    ctx.meta.set_many(part, [(key, json.dumps(doc).encode())])
    try:
        after = guard.current()
        overlapped = after != before or after.sweeping
        if overlapped:
            guard.wait_idle()
        for cid in wanted:
            when = ctx.objects.expired_at(cid)
            if when is not None:
                raise ExpiredHistoryError(
                    f"commit {cid[:12]} was dropped by expire; nothing was changed", cid, when
                )
        if overlapped:
            check_whole(ctx, wanted)
        yield
    finally:
        ctx.meta.set_many(part, [(key, None)])


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
