"""Bulk clean-up of open sessions: abandon every one older than an age (what a failed job
or a crashed start-up leaves behind), instead of one at a time."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from zarrlake._util.validate import check_ref_name
from zarrlake.errors import SessionError
from zarrlake.lifecycle.gc import check_older_than
from zarrlake.txn.transaction import Transaction

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext


def abandon_sessions(
    ctx: RepoContext, older_than: timedelta, branch: str | None = None
) -> list[str]:
    """Abandon the open sessions created at least `older_than` ago (of `branch`, or of every
    branch); returns their ids, oldest first. A session committed, abandoned or expired in
    the meantime is left as it is."""
    cutoff = ctx.clock() - check_older_than(older_than).total_seconds()
    if branch is not None:
        check_ref_name(branch, "branch")
    done = []
    for rec in ctx.records.list_open(branch):
        if rec.created > cutoff:
            continue
        try:
            Transaction.join(ctx, rec.id).abandon()
        except SessionError:
            continue
        done.append(rec.id)
    return done
