"""Squash: a branch's first-parent history after a commit, replaced by one commit of the
same tree.

The new commit reuses the head's snapshot (nothing of the tree is written again); its
change set is what the squashed commits changed together against the commit kept, moves
included. It lands by compare-and-swap from the head that was squashed: a commit that
landed meanwhile makes it fail, and nothing changes. The squashed commits stay readable
while another ref reaches them; gc reclaims what only they held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from zarrlake._util import runtime
from zarrlake.errors import (
    BranchMovedError,
    CASFailedError,
    Conflict,
    ConflictKind,
    InvalidInputError,
    TransientError,
)
from zarrlake.format import columns
from zarrlake.format.changes import DELETE, WRITE, ChangeSet
from zarrlake.format.commit import CommitRecord
from zarrlake.format.snapshot import SnapshotRoot, node_path
from zarrlake.vc.commit_protocol import classify
from zarrlake.vc.moves import meta_nodes, valid_on
from zarrlake.vc.objects import Objects
from zarrlake.vc.refs import BRANCH, Refs
from zarrlake.vc.threeway import data_changes


@dataclass(frozen=True)
class Squashed:
    """The commits a squash replaces: after `since` up to `head`, newest first."""

    since: str
    head: str
    commits: list[tuple[str, CommitRecord]]

    def merges(self) -> list[str]:
        """Ids of the merge commits among them."""
        return [cid for cid, rec in self.commits if len(rec.parents) > 1]

    def default_message(self) -> str:
        """ "Squash N commits", then their messages, oldest first."""
        lines = [
            f"* {(rec.message.splitlines() or ['(no message)'])[0]}"
            for _, rec in reversed(self.commits)
        ]
        return f"Squash {len(self.commits)} commits\n\n" + "\n".join(lines)


def squashed(objects: Objects, branch: str, head: str, since: str) -> Squashed:
    """The commits after `since` on `head`'s first-parent history; InvalidInputError if
    `since` is the head or not on that history."""
    if since == head:
        raise InvalidInputError(
            f"nothing to squash: {since[:12]} is the head of {branch!r}"
            "; give a commit before the head"
        )
    commits = []
    for cid, rec in objects.history(head):
        if cid == since:
            return Squashed(since, head, commits)
        commits.append((cid, rec))
    raise InvalidInputError(
        f"commit {since[:12]} is not in the first-parent history of branch {branch!r} (at "
        f"{head[:12]}): a squash keeps it and replaces what came after it there"
    )


def squash_change_set(objects: Objects, plan: Squashed) -> ChangeSet:
    """What the squashed commits changed together against the commit kept: keys written
    and deleted, node changes, and their moves that the kept commit's tree bears out."""
    old = objects.read(SnapshotRoot, objects.snapshot_of(plan.since))
    new = objects.read(SnapshotRoot, objects.snapshot_of(plan.head))
    data = data_changes(objects, old, new)
    meta = sorted(
        k for k in old.meta.keys() | new.meta.keys() if old.meta.get(k) != new.meta.get(k)
    )
    nodes = {}
    for key in meta:
        change = classify(old.meta.get(key), new.meta.get(key))
        if change is not None:
            nodes[node_path(key)] = change
    keys = np.concatenate([columns.keys_array([k.encode() for k in meta]), data.keys])
    ops = np.concatenate(
        [
            np.array([WRITE if k in new.meta else DELETE for k in meta], np.uint8),
            np.where(data.deleted, DELETE, WRITE).astype(np.uint8),
        ]
    )
    order = np.argsort(keys, kind="stable")
    sets = objects.map(lambda c: objects.read(ChangeSet, c[1].changes), plan.commits[::-1])
    moves = valid_on((m for cs in sets for m in cs.moves), meta_nodes(old.meta))
    return ChangeSet(keys[order], ops[order], nodes, moves)


def squash(
    objects: Objects,
    refs: Refs,
    branch: str,
    plan: Squashed,
    version: int,
    message: str,
    author: str | None,
    before: Callable[[str], None],
) -> str:
    """Write the squash commit of `plan` and swap `branch` to it from its head (at
    `version`); `before(new)` runs before the swap (the branch's checks, settling
    sessions). BranchMovedError if the branch moved meanwhile: nothing is changed."""
    changes_id, changes_blob = objects.encode(squash_change_set(objects, plan))
    snapshot = objects.snapshot_of(plan.head)
    record = CommitRecord((plan.since,), snapshot, changes_id, message, author, runtime.now(), None)
    commit_id, record_blob = objects.encode(record)
    objects.put_all([changes_blob, record_blob])
    before(commit_id)
    try:
        refs.move(branch, commit_id, version)
    except (CASFailedError, TransientError) as e:
        now = refs.require(BRANCH, branch)[0]
        if now == commit_id:  # our swap landed; its reply was lost
            pass
        elif isinstance(e, TransientError):
            raise
        else:
            raise BranchMovedError(
                [Conflict("", ConflictKind.MOVED, None, f"{branch!r} is at {now[:12]}")],
                f"branch {branch!r} moved to {now[:12]} while it was being squashed (a commit "
                f"landed on {plan.head[:12]}); nothing was changed: squash again to include it",
            ) from None
    refs.dropped(plan.head)
    return commit_id
