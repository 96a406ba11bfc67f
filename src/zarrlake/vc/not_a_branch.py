"""The error for a branch operation given a tag or a commit id: it says what the ref is and
what to do instead, rather than only that no branch has that name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from zarrlake.errors import NotABranchError, NotFoundError, ZarrLakeError
from zarrlake.vc.objects import Objects
from zarrlake.vc.refexpr import resolve_ref
from zarrlake.vc.refs import BRANCH, TAG, Refs

Doing = Literal["session", "merge", "reset", "squash"]
"""The branch operation: a writable session on it, a merge into it, a reset or a squash of
it."""

_TAG_ADVICE: dict[str, str] = {
    "session": "no session can write to one. Read it with readonly_session({name!r}), or write "
    "on a new branch made at it (create_branch(name, at={name!r}))",
    "merge": "nothing can be merged into one. Merge into a branch (create_branch(name, "
    "at={name!r}) makes one at the tag)",
    "reset": "reset_branch moves branches only. To point the tag elsewhere, delete_tag({name!r}) "
    "and create_tag({name!r}, at=...)",
    "squash": "a tag never moves, so its history cannot be squashed. Squash a branch (create_"
    "branch(name, at={name!r}) makes one at the tag)",
}
_COMMIT_ADVICE: dict[str, str] = {
    "session": "sessions commit to branches. Read it with readonly_session({name!r}), or write "
    "on a new branch made at it (create_branch(name, at={short!r}))",
    "merge": "a merge moves a branch. Merge into a branch (create_branch(name, at={short!r}) "
    "makes one at the commit)",
    "reset": "reset_branch moves a branch. Give the branch to move, and this commit as where "
    "to (reset_branch(branch, {short!r}))",
    "squash": "a squash rewrites a branch's history. Give the branch, and this commit as "
    "`since` (squash(branch, since={short!r}))",
}


def not_a_branch(refs: Refs, objects: Objects, name: str, doing: Doing) -> NotABranchError | None:
    """The error for `doing` on `name` when `name` is a tag or a commit id and no branch;
    None when a branch has that name or it names nothing at all."""
    if refs.get(BRANCH, name) is not None:
        return None
    if refs.get(TAG, name) is not None:
        advice = _TAG_ADVICE[doing].format(name=name)
        return NotABranchError(f"{name!r} is a tag, and tags never move: {advice}")
    try:
        commit = resolve_ref(refs, objects, name)
    except (ZarrLakeError, ValueError):
        return None
    what = f"{name!r} looks like a commit id, and this needs a branch (commit {commit[:12]})"
    advice = _COMMIT_ADVICE[doing].format(name=name, short=commit[:12])
    return NotABranchError(f"{what}: {advice}")


@contextmanager
def needs_branch(refs: Refs, objects: Objects, name: str, doing: Doing) -> Iterator[None]:
    """Re-raise a NotFoundError of the block as `not_a_branch`'s error when `name` is a tag
    or a commit id (checked only after the failure: the common path costs nothing)."""
    try:
        yield
    except NotABranchError:
        raise
    except NotFoundError:
        better = not_a_branch(refs, objects, name, doing)
        if better is None:
            raise
        raise better from None
