"""Branches and tags: names pointing at commit ids, held in the metastore.

Branches move only by compare-and-swap; tags are created once (must-not-exist CAS) and
never move. A branch and a tag never share a name, so a name always means one thing. In
format 2 repositories a ref's value also names its commit's snapshot ("<commit> <snapshot>"),
so opening a branch reads the snapshot at once instead of the commit record first.

Two fences live beside the refs, in the same partition, so that a ref write checks them in
the same atomic step (`MetaStore.write_if`) on every metastore:

- `moved`: written into the old metastore when the repository moves to another
  (`admin/metastore_copy.py`); no ref is created, moved or deleted there afterwards.
- `land/<session id>`: a session's landing fence. It is absent until a process makes an
  attempt of that session's commit impossible (`revoke_landing`: recovery, before it
  reopens or aborts the session, or the committer itself after an uncertain failure). A
  committer reads it once its seal has landed and moves the branch only if it is still
  at that version, so a commit whose landing was revoked never lands, however late its
  request arrives.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from zarrlake._util.validate import check_ref_name
from zarrlake.errors import (
    AlreadyExistsError,
    CASFailedError,
    ConfigurationError,
    RefNotFoundError,
    SessionClosedError,
)
from zarrlake.metastore.base import Item, MetaStore
from zarrlake.vc.objects import Objects

BRANCH = "branch"
TAG = "tag"
MOVED = b"moved"
"""The old metastore's marker once the repository moved to another (its value: whereto)."""
LAND = "land/"
"""Prefix of the sessions' landing fences (`land/<session id>`)."""
BEFORE_MOVE: ContextVar[Callable[[str], None] | None] = ContextVar(
    "zarrlake_before_ref_move", default=None
)
"""A fence called with the commit a ref is about to be created at or moved to, if set: a
history operation's keep record (vc/keep.py) renews itself there, or refuses if it lapsed
and a commit it lands went."""


def _fence(commit_id: str) -> None:
    fence = BEFORE_MOVE.get()
    if fence is not None:
        fence(commit_id)


class RepositoryMovedError(ConfigurationError):
    """The repository moved to another metastore; this one takes no more changes."""


class LandingRevokedError(SessionClosedError):
    """A commit's landing fence was revoked (its session recovered, or the repository
    moved): it never moves the branch."""


Landing = tuple[bytes, int | None]
"""A session's landing fence as its committer read it: (key, version; None: absent)."""


class RefMovedError(CASFailedError):
    """A ref's compare-and-swap found the ref elsewhere: `head` is where (None: absent),
    as the refusal found it, so the caller builds on it without reading it again."""

    def __init__(self, message: str, head: tuple[str, int] | None) -> None:
        super().__init__(message)
        self.head = head


@dataclass(frozen=True)
class Look:
    """What a commit reads of the refs partition, from one read of it (`Refs.look`)."""

    head: tuple[str, int] | None
    """The branch's (commit id, version), None when it does not exist."""
    landing: tuple[str | None, Landing] | None
    """The session's landing fence as `Refs.landing` gives it (None: no session given)."""
    items: list[list[Item]]
    """The items under each prefix asked for."""


class Refs:
    """Branches and tags of one repository: names to commit ids in the metastore, moved by
    compare-and-swap."""

    def __init__(
        self,
        meta: MetaStore,
        partition: str,
        on_drop: Callable[[str], None] | None = None,
        snapshots: Objects | None = None,
        empty_hint: str = "",
    ) -> None:
        self.meta = meta
        self.partition = partition
        self.on_drop = on_drop
        self.snapshots = snapshots  # None: values name only the commit (format 1)
        self.empty_hint = empty_hint  # said when a ref is missing because none exists at all
        self._seen: dict[str, str] = {}  # branch -> the head this process last read or wrote

    def seen(self, branch: str) -> str | None:
        """The head of `branch` this process last read or moved it to (None: never)."""
        return self._seen.get(branch)

    def _value(self, commit_id: str) -> bytes:
        known = self.snapshots.known_snapshot(commit_id) if self.snapshots else None
        return f"{commit_id} {known}".encode() if known else commit_id.encode()

    def _commit(self, value: bytes) -> str:
        commit_id, _, snapshot = value.decode().partition(" ")
        if snapshot and self.snapshots is not None:
            self.snapshots.remember_snapshot(commit_id, snapshot)
        return commit_id

    def dropped(self, commit_id: str) -> None:
        """A ref stopped pointing at `commit_id` other than by moving to a descendant
        (deleted, reset): its history may have become garbage (tell the collector)."""
        if self.on_drop is not None:
            self.on_drop(commit_id)

    def _key(self, kind: str, name: str) -> bytes:
        return f"{kind}/{name}".encode()

    def get(self, kind: str, name: str) -> tuple[str, int] | None:
        """(commit id, version) or None."""
        got = self.meta.get(self.partition, self._key(kind, name))
        if kind == BRANCH:
            return self._branch(name, got)
        return None if got is None else (self._commit(got[0]), got[1])

    def named(self, ref: str) -> str | None:
        """The commit a branch, else a tag, named `ref` points at; None if `ref` is no
        such name (an expression like main~3, a commit id, nothing): ref resolution's
        first look, cheap enough for a new process's first read."""
        if len(ref) > 255 or "~" in ref or "^" in ref:
            return None
        for kind in (BRANCH, TAG):
            got = self.get(kind, ref)
            if got is not None:
                return got[0]
        return None

    def look(
        self,
        branch: str,
        session_id: str | None = None,
        prefixes: Sequence[bytes] = (),
        moved: bool = True,
    ) -> Look:
        """The branch's head, a session's landing fence and the items under `prefixes`, in
        one read of the partition (one request on the bucket metastore); with `moved`,
        RepositoryMovedError if the repository moved to another metastore (a branch swap
        checks that itself)."""
        keys = [self._key(BRANCH, branch)]
        if session_id is not None:
            keys.append((LAND + session_id).encode())
        if moved:
            keys.append(MOVED)
        got, items = self.meta.read(self.partition, keys, prefixes)
        if moved:
            self._raise_moved(got[-1])
        head = self._branch(branch, got[0])
        landing = None
        if session_id is not None:
            fence = got[1]
            landing = (
                (None, (keys[1], None))
                if fence is None
                else (fence[0].decode(), (keys[1], fence[1]))
            )
        return Look(head, landing, items)

    def _branch(self, name: str, got: tuple[bytes, int] | None) -> tuple[str, int] | None:
        """A branch's (commit id, version) from its stored (value, version), noted as seen."""
        if got is None:
            return None
        commit_id = self._commit(got[0])
        self._seen[name] = commit_id
        return commit_id, got[1]

    def require(self, kind: str, name: str) -> tuple[str, int]:
        """(commit id, version) of a branch or tag; raises the missing-ref error when absent."""
        got = self.get(kind, name)
        if got is None:
            raise self.missing(f"{kind} {name!r} does not exist{self._instead(kind, name)}")
        return got

    def _instead(self, kind: str, name: str) -> str:
        """What `name` is instead of a branch, when a branch was needed: a tag, or a
        commit id (which no branch operation takes)."""
        if kind != BRANCH:
            return ""
        if self.get(TAG, name) is not None:
            return f": {name!r} is a tag, and tags never move (give a branch)"
        if re.fullmatch(r"[0-9a-f]{7,64}", name):
            return (
                f": {name!r} looks like a commit id, and this needs a branch (make one at it "
                f"with create_branch(name, at={name[:12]!r}))"
            )
        return ""

    def missing(self, message: str) -> RefNotFoundError:
        """The error for a ref that is not there, which names a wrong metastore if this one
        holds no refs at all (a repository always has at least one)."""
        if self.empty_hint and not any(self.meta.scan(self.partition, limit=1)):
            return RefNotFoundError(self.empty_hint)
        return RefNotFoundError(message)

    def create(self, kind: str, name: str, commit_id: str) -> None:
        """Create a branch or tag at `commit_id`; AlreadyExistsError if the name is taken by either
        kind."""
        check_ref_name(name, kind)
        other = TAG if kind == BRANCH else BRANCH
        if self.get(other, name) is not None:
            raise AlreadyExistsError(
                f"a {other} named {name!r} already exists; choose another name, or delete it first"
            )
        key = self._key(kind, name)
        _fence(commit_id)
        try:
            version = self._write(key, self._value(commit_id), None)
        except CASFailedError:
            raise AlreadyExistsError(
                f"{kind} {name!r} already exists; choose another name, or delete it first"
            ) from None
        if self.get(other, name) is not None:  # both created at once: whichever sees the
            with contextlib.suppress(CASFailedError):  # other after its swap steps back
                self.meta.delete_if(self.partition, key, version)
            raise AlreadyExistsError(
                f"a {other} named {name!r} already exists; choose another name, or delete it first"
            )

    def move(
        self, name: str, commit_id: str, expected_version: int, landing: Landing | None = None
    ) -> int:
        """Compare-and-swap a branch; raises CASFailedError if it moved meanwhile. With
        `landing`, also only while that session's landing fence is where its committer
        read it (LandingRevokedError otherwise)."""
        _fence(commit_id)
        version = self._write(
            self._key(BRANCH, name), self._value(commit_id), expected_version, landing
        )
        self._seen[name] = commit_id
        return version

    def _write(
        self, key: bytes, value: bytes | None, expected: int | None, landing: Landing | None = None
    ) -> int:
        """Write (or delete) one ref by compare-and-swap, in the same atomic step as the
        checks of the fences (`moved`, and `landing` if given); a refusal that the ref
        itself does not explain raises the fence's error."""
        checks = {key: expected, MOVED: None}
        if landing is not None:
            checks[landing[0]] = landing[1]
        try:
            return self.meta.write_if(self.partition, [(key, value)], checks)[0]
        except CASFailedError as refused:
            # What refused it: as the refusal found it (the bucket metastore tells), else
            # read, the fences with the ref in one read.
            found = refused.found
            if found is None or any(k not in found for k in checks):
                found = dict(
                    zip(checks, self.meta.read(self.partition, list(checks))[0], strict=True)
                )
            got = found[key]
            if (None if got is None else got[1]) != expected:
                kind, _, name = key.decode().partition("/")
                head = self._branch(name, got) if kind == BRANCH else None
                raise RefMovedError(str(refused), head) from None
            self._raise_moved(found[MOVED])
            if landing is not None:
                raise LandingRevokedError(
                    "this commit's landing was revoked (its session was recovered by another "
                    "process); the branch was not moved by it: see the session's state with "
                    "`zarrlake sessions show`"
                ) from None
            raise

    def check_moved(self) -> None:
        """RepositoryMovedError if the repository moved to another metastore."""
        self._raise_moved(self.meta.get(self.partition, MOVED))

    @staticmethod
    def _raise_moved(moved: tuple[bytes, int] | None) -> None:
        """RepositoryMovedError if the `moved` marker (as read) is there."""
        if moved is not None:
            raise RepositoryMovedError(
                f"this repository moved to another metastore ({moved[0].decode()}): open it "
                "again (its config names the new one); nothing was changed here"
            )

    def landing(self, session_id: str) -> tuple[str | None, Landing]:
        """Session `session_id`'s landing fence: (its value, or None when absent; the
        (key, version) to move the branch against)."""
        key = (LAND + session_id).encode()
        got = self.meta.get(self.partition, key)
        return (None, (key, None)) if got is None else (got[0].decode(), (key, got[1]))

    def revoke_landing(self, session_id: str, seal: str | None) -> None:
        """Make every branch move of session `session_id`'s seal `seal` (and of seals
        before it) fail from now on, wherever its request is: the fence changes, in the
        same atomic step as any such move's check of it. Repeating it changes nothing."""
        mark = f"revoked {seal}"
        while True:
            value, (key, version) = self.landing(session_id)
            if value == mark:
                return
            try:
                self.meta.write_if(self.partition, [(key, mark.encode())], {key: version})
                return
            except CASFailedError:
                continue  # revoked at the same time by another process: look again

    def delete(self, kind: str, name: str) -> None:
        """Delete a branch (unless protected) or tag, registering its head for garbage
        collection."""
        check_ref_name(name, kind)
        head, version = self.require(kind, name)
        if kind == BRANCH:
            from zarrlake.vc.protection import Protection

            Protection(self.meta, self.partition).check_delete(name)
        try:  # only the ref read above: a retry after a lost reply keeps one made anew since
            self._write(self._key(kind, name), None, version)
        except CASFailedError:
            if self.get(kind, name) is not None:
                raise CASFailedError(
                    f"{kind} {name!r} changed while it was being deleted; it was kept; try again"
                ) from None
        self.dropped(head)

    def list(self, kind: str) -> dict[str, str]:
        """Every ref of `kind`, name to commit id."""
        prefix = f"{kind}/".encode()
        return {
            k[len(prefix) :].decode(): self._commit(v)
            for k, v, _ in self.meta.scan(self.partition, prefix=prefix)
        }
