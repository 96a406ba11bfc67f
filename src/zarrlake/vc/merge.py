"""Merge, revert and reset: history operations that move a branch without a session.

Each lands like a commit: read the branch head, build the new commit on it (writing every
object first), compare-and-swap the branch; if it moved meanwhile, build again on the new
head, with the same lost-reply check and backoff as commit_protocol.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from zarrlake._util import runtime
from zarrlake.errors import (
    BranchMovedError,
    CASFailedError,
    Conflict,
    ConflictError,
    ConflictKind,
    ExpiredHistoryError,
    FastForwardError,
    InvalidInputError,
    RefNotFoundError,
)
from zarrlake.format.changes import Move
from zarrlake.format.commit import CommitRecord
from zarrlake.format.manifest import ManifestRange, take_from
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.commit_protocol import (
    Change,
    ChangeTable,
    CommitProtocol,
    apply_changes,
    change_set,
)
from zarrlake.vc.moves import may_move, relating
from zarrlake.vc.objects import Objects
from zarrlake.vc.policies import CONFLICT_POLICIES, FAST_FORWARD
from zarrlake.vc.refexpr import merge_base
from zarrlake.vc.refs import BRANCH, Refs
from zarrlake.vc.threeway import three_way


class History:
    """Merges, reverts and resets on one repository's objects and refs."""

    def __init__(
        self,
        objects: Objects,
        refs: Refs,
        timeout: float = 60.0,
        before_reset: Callable[[str, str], None] | None = None,
        check: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.objects = objects
        self.refs = refs
        self.timeout = timeout
        self.before_reset = before_reset
        """Called with (branch, head) before a reset moves `branch` away from `head` (the
        session records settle any commit of theirs that `head` holds, while it still
        does: the reset's compare-and-swap fails if the branch moved since)."""
        self.check = check
        """Called with (branch, new head, head it replaces) before every move of a branch
        (the branch's checks: it raises to refuse the move)."""

    def root(self, commit_id: str) -> SnapshotRoot:
        """The snapshot root of commit `commit_id`."""
        return self.objects.read(SnapshotRoot, self.objects.read_commit(commit_id).snapshot)

    # landing ----------------------------------------------------------------------------

    def land(self, branch: str, build: Callable[[str], str]) -> str:
        """Move `branch` to `build(head)` as a commit lands (CommitProtocol.land)."""
        gate = self.check
        check = None if gate is None else (lambda new, head: gate(branch, new, head))
        return CommitProtocol(self.objects, self.refs).land(
            branch, build, self.timeout, check=check
        )

    def write_commit(
        self,
        parent_root: SnapshotRoot,
        changes: list[Change],
        parents: tuple[str, ...],
        message: str,
        author: str | None,
        moves: tuple[Move, ...] = (),
        gains: ManifestRange | None = None,
    ) -> str:
        """Write the snapshot, change set (against the first parent, with the nodes the
        changes move) and record. `gains`: entries of unchanged chunks that bring their
        statistics (written to the manifests, not part of the change)."""
        table = ChangeTable.from_list(changes)
        applied = table
        if gains is not None and len(gains):
            keys = np.concatenate([table.writes.keys, gains.keys])
            both = take_from([table.writes.take(slice(None)), gains], np.argsort(keys))
            applied = ChangeTable(table.meta, both, table.deletes)
        root, range_blobs = apply_changes(self.objects, parent_root, applied)
        snapshot_id, root_blob = self.objects.encode(root)
        cs = change_set(table, parent_root.meta, moves)
        changes_id, changes_blob = self.objects.encode(cs)
        now = runtime.now()
        record = CommitRecord(parents, snapshot_id, changes_id, message, author, now, None)
        commit_id, record_blob = self.objects.encode(record)
        self.objects.put_all([*range_blobs, root_blob, changes_blob, record_blob])
        return commit_id

    def _combine(
        self, base: str, head: str, other: str, on_conflict: str, what: str
    ) -> tuple[SnapshotRoot, list[Change], tuple[Move, ...], ManifestRange]:
        """The changes taking `other`'s side (against `base`) onto `head`, the nodes they
        move, and the statistics `other` knows of chunks `head` holds too."""
        head_root, base_root, other_root = self.root(head), self.root(base), self.root(other)
        moves = (self._moves(base, head, base_root, head_root),)
        moves += (self._moves(base, other, base_root, other_root),)
        result = three_way(self.objects, base_root, head_root, other_root, moves)
        changes = result.changes
        if result.conflicts:
            if on_conflict == "fail" or any(c.kind != "chunk" for c in result.conflicts):
                shown = "; ".join(str(c) for c in result.conflicts)
                raise ConflictError(
                    result.conflicts,
                    f"{what} conflicts: {shown}"
                    "; settle chunk conflicts with on_conflict='ours' or 'theirs', "
                    "others in a session",
                )
            if on_conflict == "theirs":
                changes = changes + list(result.chunk_keys.items())
        return head_root, changes, result.moves, result.gains

    def _moves(self, a: str, b: str, a_root: SnapshotRoot, b_root: SnapshotRoot) -> tuple:
        """The moves leading from commit `a` to `b` (looked up only when the two differ by
        a node taken away and another made)."""
        if not may_move(a_root.meta, b_root.meta):
            return ()
        return relating(self.objects, a, b) or ()

    # operations -------------------------------------------------------------------------

    def merge(
        self,
        source: str,
        into: str,
        *,
        message: str,
        author: str | None,
        on_conflict: str = "fail",
        fast_forward: str = "allow",
    ) -> str:
        """Merge commit `source` into branch `into`; returns into's new head."""
        if on_conflict not in CONFLICT_POLICIES:
            raise InvalidInputError(
                f"on_conflict must be one of {', '.join(CONFLICT_POLICIES)}, not {on_conflict!r}"
            )
        if fast_forward not in FAST_FORWARD:
            raise InvalidInputError(
                f"fast_forward must be one of {', '.join(FAST_FORWARD)}, not {fast_forward!r}"
            )

        def build(head: str) -> str:
            try:
                base = merge_base(self.objects, head, source)
            except ExpiredHistoryError as e:
                raise ExpiredHistoryError(
                    f"cannot merge {source[:12]} into {into!r}: {common_history_expired(e)}",
                    e.commit,
                    e.expired_at,
                ) from None
            if base is None:
                raise ConflictError(
                    [
                        Conflict(
                            "", ConflictKind.UNRELATED, None, "the two histories share no commit"
                        )
                    ],
                    f"cannot merge {source[:12]} into {into!r}: no common history"
                    "; copy what you need in a session on the other branch, "
                    "or reset one to the other",
                )
            if base == source:
                return head  # already merged
            if base == head and fast_forward != "never":
                return source
            if fast_forward == "only":
                raise FastForwardError(
                    [
                        Conflict(
                            "",
                            ConflictKind.DIVERGED,
                            None,
                            f"{into!r} has commits {source[:12]} lacks",
                        )
                    ],
                    f"cannot fast-forward {into!r} to {source[:12]}: the branches diverged"
                    "; merge with fast_forward='allow' to make a merge commit",
                )
            root, changes, moves, gains = self._combine(
                base, head, source, on_conflict, f"merge of {source[:12]} into {into!r}"
            )
            return self.write_commit(root, changes, (head, source), message, author, moves, gains)

        return self.land(into, build)

    def revert(
        self,
        commit: str,
        branch: str,
        *,
        message: str | None,
        author: str | None = None,
        allow_empty: bool = False,
    ) -> str:
        """A new commit on `branch` undoing `commit`'s changes (against its first parent);
        InvalidInputError if that would change nothing, unless `allow_empty`."""
        rec = self.objects.read_commit(commit)
        if not rec.parents:
            raise InvalidInputError(f"commit {commit[:12]} has no parent: nothing to revert to")
        try:
            self.objects.parent(commit, rec.parents[0])
        except ExpiredHistoryError as e:
            raise ExpiredHistoryError(
                f"cannot revert {commit[:12]}: {e}; a revert needs the commit before it",
                e.commit,
                e.expired_at,
            ) from None
        text = (
            message if message is not None else f'Revert "{rec.message}"\n\nThis reverts {commit}.'
        )
        what = f"revert of {commit[:12]} on {branch!r}"

        def build(head: str) -> str:
            root, changes, moves, _ = self._combine(commit, head, rec.parents[0], "fail", what)
            if not changes and not allow_empty:
                raise InvalidInputError(
                    f"{what} changes nothing (what it changed is undone there already); no "
                    "commit made; pass allow_empty=True (zarrlake revert --allow-empty) to make one"
                )
            return self.write_commit(root, changes, (head,), text, author, moves)

        return self.land(branch, build)

    def reset(self, branch: str, to: str, expected: str | None) -> str:
        """Move `branch` to commit `to`; with `expected`, only if the branch is there now."""
        if not self.objects.has_commit(to):
            raise RefNotFoundError(f"no commit {to!r}; run `zarrlake log` to see the commits")
        while True:
            head, version = self.refs.require(BRANCH, branch)
            if expected is not None and head != expected:
                raise BranchMovedError(
                    [
                        Conflict(
                            "", ConflictKind.MOVED, None, f"{branch!r} is at {head}, not {expected}"
                        )
                    ],
                    f"branch {branch!r} is at {head[:12]}, not the expected {expected[:12]}; "
                    "nothing was moved",
                )
            if head == to:
                return to
            if self.check is not None:
                self.check(branch, to, head)
            if self.before_reset is not None:
                self.before_reset(branch, head)
            try:
                self.refs.move(branch, to, version)
                self.refs.dropped(head)
                return to
            except CASFailedError:
                if self.refs.require(BRANCH, branch)[0] == to:
                    return to


def common_history_expired(e: ExpiredHistoryError) -> str:
    """Why a merge base cannot be found after `expire`, and what to do about it."""
    return (
        f"their common history was expired ({e}), so what each side changed since cannot be "
        "told. Copy what you need from one into a session on the other (zarrlake diff shows "
        "the differences), or reset one to the other; expire keeps the whole history of the "
        "branches it is not given (zarrlake expire --branch NAME)"
    )
