"""The exceptions zarrlake raises; every one derives from ZarrLakeError."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

REPORT_BUG = "this is a bug in zarrlake; please report it with the traceback"
"""The end of a message of an error that only a bug in zarrlake raises: what to do is report it."""


class ZarrLakeError(Exception):
    """Base class of every error zarrlake raises on purpose.

    Every subclass pickles whole (message and attributes), so an error raised in a worker
    process (Spark, Dask, a process pool) reaches the driver as itself, whatever its
    `__init__` takes."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(
    cls: type[ZarrLakeError], args: tuple[Any, ...], state: dict[str, Any]
) -> ZarrLakeError:
    """Unpickle an error without calling its `__init__` (whose signature may differ from
    `args`): the arguments and attributes come back as they were."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class NotFoundError(ZarrLakeError, KeyError):
    """A repository, ref, session, object or key does not exist."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain.
        return str(self.args[0]) if self.args else ""


class RepositoryNotFoundError(NotFoundError):
    """No zarrlake repository is at the location (or its metastore holds none): check the
    path or URL and the metastore, or create one with `Repo.create`."""


class RefNotFoundError(NotFoundError):
    """No branch, tag or commit has the name or id given (or a ref expression such as
    `main~9` reaches past the history)."""


class SessionNotFoundError(NotFoundError):
    """No session has the id given (it never existed, or gc removed its record after it
    ended)."""


class PullRequestNotFoundError(NotFoundError):
    """No pull request has the number given."""


class ExpiredHistoryError(NotFoundError):
    """A commit, or history a walk needs, was dropped by `expire`.

    `commit` is the expired commit, `expired_at` when it was expired (a timezone-aware
    datetime, as `Repo.expired_at` returns; given as POSIX seconds it is converted)."""

    def __init__(self, message: str, commit: str, expired_at: float | datetime) -> None:
        super().__init__(message)
        self.commit = commit
        self.expired_at = (
            expired_at
            if isinstance(expired_at, datetime)
            else datetime.fromtimestamp(expired_at, UTC)
        )

    @classmethod
    def before(cls, child: str, parent: str, expired_at: float | datetime) -> ExpiredHistoryError:
        """The error of a walk from `child` that found its parent `parent` expired."""
        return cls(
            f"history before {child[:12]} was expired on {on_date(expired_at)}", parent, expired_at
        )


def on_date(when: float | datetime) -> str:
    """A time (POSIX seconds or a datetime) as the messages show it (UTC, to the second)."""
    at = when if isinstance(when, datetime) else datetime.fromtimestamp(when, UTC)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class AlreadyExistsError(ZarrLakeError):
    """Something that must be new (repository, branch, tag) already exists."""


class CorruptionError(ZarrLakeError):
    """Stored bytes failed their checksum or do not decode; never silently returned."""


class UndecodableChunkError(CorruptionError):
    """A chunk's bytes are stored intact but its array's codecs cannot decode them (they
    were written so: `Settings.check_chunks` refuses such writes, `zarrlake fsck --decode`
    finds those already committed). `array`, `coords` (None if the key is no chunk key of
    the array), `key` and `reason` (the codec's own message) say which and why."""

    def __init__(
        self, message: str, array: str, coords: tuple[int, ...] | None, key: str, reason: str
    ) -> None:
        super().__init__(message)
        self.array = array
        self.coords = coords
        self.key = key
        self.reason = reason


class InvalidInputError(ZarrLakeError, ValueError):
    """A name, ref, URL, option or document given by the caller is malformed."""


class CheckExistsError(AlreadyExistsError, InvalidInputError):
    """A check of that name is declared already. An InvalidInputError too, as it was before
    it was an AlreadyExistsError."""


class StaleVirtualChunkError(ZarrLakeError):
    """A virtual chunk's source file changed or vanished since it was imported.

    Its size, mtime or ETag differs, or it is gone; its bytes are never returned."""


class PurgedError(ZarrLakeError):
    """The bytes of a chunk were removed from every version by `Repo.purge`.

    Never fill values instead: a purged chunk raises this at every version that holds it.
    `purge` is the id of the purge record (`Repo.purges()` shows who, when and why)."""

    def __init__(self, message: str, purge: str) -> None:
        super().__init__(message)
        self.purge = purge


class ConfigurationError(ZarrLakeError):
    """A backend could not be reached or configured (bad URL, server down, credentials)."""


class BackendError(ZarrLakeError):
    """A backend failed in a way a retry will not fix.

    Disk full, an I/O error, a damaged database file, an unexpected server error: as
    opposed to ConfigurationError's "cannot reach or open it" and TransientError's "try
    again"."""


class StorageError(BackendError):
    """Object storage failed in a way a retry will not fix."""


class TransientError(ZarrLakeError):
    """A failure that may succeed when retried (timeouts, 5xx, busy databases)."""


class CASFailedError(ZarrLakeError):
    """A compare-and-swap found a different version than expected."""

    found: dict[bytes, tuple[bytes, int] | None] | None = None
    """For a refused `write_if`: each checked key's (value, version) or None, as the store
    held them when it refused, where the backend had them at hand (the bucket metastore
    reads the partition to tell a refusal); None where it did not."""


class ReadOnlyError(ZarrLakeError):
    """A write was refused: the session is read-only, or a protection rule guards the branch.

    See ReadOnlySessionError and ProtectedBranchError."""


class ReadOnlySessionError(ReadOnlyError, ValueError):
    """A write was attempted on a read-only session or store.

    A ValueError too, as zarr's own read-only stores raise."""


class ProtectedBranchError(ReadOnlyError):
    """A protection rule forbids this change to a branch.

    A direct commit, a merge or reset outside a pull request, or a delete. Not a
    ValueError: nothing given was malformed."""


class CommitTimeoutError(ZarrLakeError):
    """The branch kept moving and the commit could not land before its timeout."""


class GcBusyError(ZarrLakeError):
    """Another garbage collection is running on this repository."""


class SessionError(ZarrLakeError):
    """Base class for session state errors."""


class SessionExpiredError(SessionError):
    """The session passed its expiry time; it can no longer write or commit."""


class SessionClosedError(SessionError):
    """The session was committed or abandoned (or is being committed right now)."""


class UnflushedWritesError(SessionError):
    """A worker of the session holds writes it has not flushed; the commit was refused.

    Committing now would leave them out. `workers` describes each (writer id, host, pid,
    since when)."""

    def __init__(self, message: str, workers: list[str]) -> None:
        super().__init__(message)
        self.workers = workers
        self.markers: list[Any] = []  # the staging markers behind `workers`


class NoChangesError(SessionError):
    """The session changes nothing, so committing it was refused; it stays open.

    Ask for an empty commit with `commit(allow_empty=True)` (idempotent re-runs)."""


class UnfinishedWritersError(SessionError):
    """A worker of the session failed or died before it finished; the commit was refused.

    What it staged may be a part of its work, and no finished worker wrote that part again
    (a worker whose part was rewritten is left out without asking). The commit refuses
    rather than choose for the caller:
    `commit(unfinished="discard")` leaves out everything those workers staged,
    `unfinished="include"` keeps what they flushed. `workers` describes each, with what is
    still missing; `choice` is the one that fits ("include": they had flushed all they
    held; "discard": their part looks rewritten; "rewrite": chunks are still missing,
    named in the message), or None when the workers differ.

    Not an UnflushedWritesError: `unflushed="discard"` does not answer it, so a handler that
    retries with that does not swallow it."""

    choice: str | None = None

    def __init__(self, message: str, workers: list[str]) -> None:
        super().__init__(message)
        self.workers = workers
        self.markers: list[Any] = []  # the staging markers behind `workers`


class ConflictKind(StrEnum):
    """What a Conflict is about; a str, so JSON and command-line output show its value."""

    CHUNK = "chunk"
    """The same chunk was changed on both sides."""
    METADATA = "metadata"
    """A node's metadata changed on both sides, or its structure changed on one side under
    the other side's chunks."""
    RESIZED = "resized"
    """An array was resized on one side under chunks the other side wrote."""
    DELETED = "deleted"
    """A node was deleted on one side under what the other side changed."""
    RENAMED = "renamed"
    """A node was moved (renamed) on one side under what the other side changed."""
    CREATED = "created"
    """Both sides created the same node."""
    READ = "read"
    """A serializable session read something the other side changed."""
    WRITERS = "writers"
    """Two writers of one session (workers, or Spark tasks) wrote different bytes to a key."""
    RESET = "reset"
    """The branch no longer descends from the session's base (it was reset)."""
    UNRELATED = "unrelated"
    """A merge of two histories that share no commit."""
    DIVERGED = "diverged"
    """A fast-forward-only merge into a branch with commits the source lacks."""
    MOVED = "moved"
    """A branch was not at the commit the caller expected."""


@dataclass(frozen=True)
class Conflict:
    """One conflict between a session's changes and a commit that landed after its base.

    `path` is the node (array or group) path without a leading slash; `kind` says what
    clashed (ConflictKind); `chunks` lists the chunk coordinates involved, or is None for
    node-level conflicts.
    """

    path: str
    kind: ConflictKind
    chunks: list[tuple[int, ...]] | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = self.path or "/"
        text = f"{self.kind} conflict at {where!r}"
        if self.chunks:
            shown = ", ".join(str(c) for c in self.chunks[:10])
            more = f" (+{len(self.chunks) - 10} more)" if len(self.chunks) > 10 else ""
            text += f" chunks {shown}{more}"
        if self.detail:
            text += f": {self.detail}"
        return text


class ConflictError(ZarrLakeError):
    """The commit conflicts with commits that landed after the session's base."""

    def __init__(self, conflicts: list[Conflict], message: str | None = None) -> None:
        self.conflicts = list(conflicts)
        lines = "; ".join(str(c) for c in self.conflicts)
        super().__init__(message or f"commit conflicts with concurrent changes: {lines}")


class BranchMovedError(ConflictError):
    """A branch was not at the commit the caller expected; nothing was moved.

    Raised by `reset_branch(..., expected=)`. Its one conflict is of kind MOVED."""


class FastForwardError(ConflictError):
    """A fast-forward-only merge was refused: the target has commits the source lacks.

    Raised by `merge(..., fast_forward="only")`. Its one conflict is of kind DIVERGED."""


class NotABranchError(RefNotFoundError, InvalidInputError):
    """A branch operation (a session, merge or reset) was given a tag or a commit id.

    The message says which, and what to do instead. A NotFoundError (no branch has that
    name) and an InvalidInputError (the name is the wrong kind of ref)."""


class ChecksFailedError(ZarrLakeError):
    """A check guarding a branch failed on the proposed commit, which was refused.

    The commit, merge, revert or reset left the branch untouched (a session stays open,
    to fix and commit again). `results` holds the failing CheckResults
    (zarrlake.checks)."""

    def __init__(self, message: str, results: list[Any] | None = None) -> None:
        super().__init__(message)
        self.results = list(results or [])


class PullRequestError(ZarrLakeError):
    """A pull request action was refused.

    The pull request is not open, or its merge is blocked (see the subclasses), or it
    names branches that cannot be used."""


class PullRequestExistsError(AlreadyExistsError, PullRequestError):
    """An open pull request of the same source and target exists already (one pair, one
    open pull request). A PullRequestError too, as it was before it was an
    AlreadyExistsError."""


class PullRequestNotOpenError(PullRequestError):
    """The pull request is merged, closed or being merged, so this action cannot run now."""


class PullRequestBlockedError(PullRequestError):
    """A pull request's merge was refused by its checks or reviews.

    A required check fails, approvals are missing or a reviewer's "request changes"
    stands. `reasons` lists each, one line apiece."""

    def __init__(self, message: str, reasons: list[str]) -> None:
        super().__init__(message)
        self.reasons = list(reasons)


class PullRequestChecksFailedError(PullRequestBlockedError, ChecksFailedError):
    """A pull request's merge was refused because a check guarding its target failed.

    A ChecksFailedError too, so one handler covers a direct merge onto a guarded branch
    and a pull request's merge. `results` holds the failing CheckResults, `reasons` every
    reason the merge was refused (approvals too)."""

    def __init__(self, message: str, reasons: list[str], results: list[Any]) -> None:
        ZarrLakeError.__init__(self, message)
        self.reasons = list(reasons)
        self.results = list(results)
