"""zarrlake: a transactional, version-controlled database for Zarr v3 arrays."""

from __future__ import annotations

from zarrlake.errors import (
    AlreadyExistsError,
    BackendError,
    BranchMovedError,
    CASFailedError,
    CheckExistsError,
    ChecksFailedError,
    CommitTimeoutError,
    ConfigurationError,
    Conflict,
    ConflictError,
    ConflictKind,
    CorruptionError,
    ExpiredHistoryError,
    FastForwardError,
    GcBusyError,
    InvalidInputError,
    NoChangesError,
    NotABranchError,
    NotFoundError,
    ProtectedBranchError,
    PullRequestBlockedError,
    PullRequestChecksFailedError,
    PullRequestError,
    PullRequestExistsError,
    PullRequestNotFoundError,
    PullRequestNotOpenError,
    PurgedError,
    ReadOnlyError,
    ReadOnlySessionError,
    RefNotFoundError,
    RepositoryNotFoundError,
    SessionClosedError,
    SessionError,
    SessionExpiredError,
    SessionNotFoundError,
    StaleVirtualChunkError,
    StorageError,
    TransientError,
    UndecodableChunkError,
    UnfinishedWritersError,
    UnflushedWritesError,
    ZarrLakeError,
)

__version__ = "0.1.0"

_LAZY = {
    "Commit": "zarrlake.vc.commit_info",
    "Repo": "zarrlake.repo",
    "RepoStats": "zarrlake.vc.stats",
    "SessionInfo": "zarrlake.session_records",
    "Session": "zarrlake.session",
    "Diff": "zarrlake.vc.diff",
    "PullRequest": "zarrlake.pulls",
    "SessionStore": "zarrlake.zarr_store",
    "Settings": "zarrlake.connection",
    "FlushPolicy": "zarrlake.connection",
    "GcReport": "zarrlake.lifecycle.gc",
    "ExpireReport": "zarrlake.lifecycle.expire",
    "CopyReport": "zarrlake.admin.metastore_copy",
    "ExportReport": "zarrlake.admin.export",
    "PullReport": "zarrlake.admin.clone",
    "PurgeRecord": "zarrlake.vc.purges",
    "WriterInfo": "zarrlake.txn.writers",
    "Problem": "zarrlake.vc.fsck",
    "ExpiredHistory": "zarrlake.vc.fsck",
    "select": "zarrlake.query",
    "BackfillReport": "zarrlake.vc.backfill",
}
"""Public names and the modules defining them, loaded on first use (`_util/lazy.py`): a
command line that needs none of them (`zarrlake --help`) starts fast, and `Repo.open` loads
only what opening needs."""

TYPE_CHECKING = False
"""True for type checkers only (as `typing.TYPE_CHECKING`, without importing `typing`)."""

if TYPE_CHECKING:  # what type checkers see of the lazy names; nothing is imported at run time
    from zarrlake import checks as checks
    from zarrlake import spark as spark
    from zarrlake import virtual as virtual
    from zarrlake.admin.clone import PullReport as PullReport
    from zarrlake.admin.export import ExportReport as ExportReport
    from zarrlake.admin.metastore_copy import CopyReport as CopyReport
    from zarrlake.connection import FlushPolicy as FlushPolicy
    from zarrlake.connection import Settings as Settings
    from zarrlake.lifecycle.expire import ExpireReport as ExpireReport
    from zarrlake.lifecycle.gc import GcReport as GcReport
    from zarrlake.pulls import PullRequest as PullRequest
    from zarrlake.query import select as select
    from zarrlake.repo import Repo as Repo
    from zarrlake.session import Session as Session
    from zarrlake.session_records import SessionInfo as SessionInfo
    from zarrlake.txn.writers import WriterInfo as WriterInfo
    from zarrlake.vc.backfill import BackfillReport as BackfillReport
    from zarrlake.vc.commit_info import Commit as Commit
    from zarrlake.vc.diff import Diff as Diff
    from zarrlake.vc.fsck import ExpiredHistory as ExpiredHistory
    from zarrlake.vc.fsck import Problem as Problem
    from zarrlake.vc.purges import PurgeRecord as PurgeRecord
    from zarrlake.vc.stats import RepoStats as RepoStats
    from zarrlake.zarr_store import SessionStore as SessionStore

__all__ = [
    "AlreadyExistsError",
    "BackendError",
    "BranchMovedError",
    "CASFailedError",
    "CheckExistsError",
    "ChecksFailedError",
    "CommitTimeoutError",
    "ConfigurationError",
    "Conflict",
    "ConflictError",
    "ConflictKind",
    "CorruptionError",
    "ExpiredHistoryError",
    "FastForwardError",
    "GcBusyError",
    "InvalidInputError",
    "NoChangesError",
    "NotABranchError",
    "NotFoundError",
    "ProtectedBranchError",
    "PurgedError",
    "PullRequestBlockedError",
    "PullRequestChecksFailedError",
    "PullRequestError",
    "PullRequestExistsError",
    "PullRequestNotFoundError",
    "PullRequestNotOpenError",
    "ReadOnlyError",
    "ReadOnlySessionError",
    "RefNotFoundError",
    "RepositoryNotFoundError",
    "SessionClosedError",
    "SessionError",
    "SessionExpiredError",
    "SessionNotFoundError",
    "StaleVirtualChunkError",
    "StorageError",
    "TransientError",
    "UndecodableChunkError",
    "UnfinishedWritersError",
    "UnflushedWritesError",
    "ZarrLakeError",
    *_LAZY,
]

_SUBMODULES = ("checks", "spark", "virtual")
"""Public submodules loaded on first use: the check kinds, pyspark's and virtualizarr's."""

if not TYPE_CHECKING:  # at run time only: type checkers see the names above, so a typo in
    # `zl.Rpeo` is an error for them rather than `Any`
    from zarrlake._util.lazy import lazy_exports

    __getattr__ = lazy_exports(__name__, _LAZY, _SUBMODULES)
    del lazy_exports


def __dir__() -> list[str]:
    """The public names (not the submodules imported so far, nor `importlib`)."""
    return sorted({*__all__, "__version__", *_SUBMODULES})
