"""zarrlake: a transactional, version-controlled database for Zarr v3 arrays."""

from __future__ import annotations

import importlib as _importlib

from zarrlake.errors import (
    AlreadyExistsError,
    BackendError,
    BranchMovedError,
    CASFailedError,
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
    PullRequestError,
    PullRequestNotOpenError,
    ReadOnlyError,
    ReadOnlySessionError,
    SessionClosedError,
    SessionError,
    SessionExpiredError,
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
    "Commit": "zarrlake.repo",
    "Repo": "zarrlake.repo",
    "RepoStats": "zarrlake.repo",
    "SessionInfo": "zarrlake.repo",
    "Session": "zarrlake.session",
    "Diff": "zarrlake.vc.diff",
    "PullRequest": "zarrlake.pulls",
    "SessionStore": "zarrlake.zarr_store",
    "Settings": "zarrlake.connection",
    "FlushPolicy": "zarrlake.connection",
}
"""Public names whose modules import zarr and numpy: loaded on first use, so a command line
that needs none of them (`zarrlake --help`) starts fast."""

TYPE_CHECKING = False
"""True for type checkers only (as `typing.TYPE_CHECKING`, without importing `typing`)."""

if TYPE_CHECKING:  # what type checkers see of the lazy names; nothing is imported at run time
    from typing import Any

    from zarrlake import spark as spark
    from zarrlake import virtual as virtual
    from zarrlake.connection import FlushPolicy as FlushPolicy
    from zarrlake.connection import Settings as Settings
    from zarrlake.pulls import PullRequest as PullRequest
    from zarrlake.repo import Commit as Commit
    from zarrlake.repo import Repo as Repo
    from zarrlake.repo import RepoStats as RepoStats
    from zarrlake.repo import SessionInfo as SessionInfo
    from zarrlake.session import Session as Session
    from zarrlake.vc.diff import Diff as Diff
    from zarrlake.zarr_store import SessionStore as SessionStore

__all__ = [
    "AlreadyExistsError",
    "BackendError",
    "BranchMovedError",
    "CASFailedError",
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
    "PullRequestBlockedError",
    "PullRequestError",
    "PullRequestNotOpenError",
    "ReadOnlyError",
    "ReadOnlySessionError",
    "SessionClosedError",
    "SessionError",
    "SessionExpiredError",
    "StaleVirtualChunkError",
    "StorageError",
    "TransientError",
    "UndecodableChunkError",
    "UnfinishedWritersError",
    "UnflushedWritesError",
    "ZarrLakeError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name == "checks":  # the check kinds (zarrlake.checks), loaded on first use
        return _importlib.import_module("zarrlake.checks")
    if name in ("spark", "virtual"):  # imports pyspark / virtualizarr
        return _importlib.import_module(f"zarrlake.{name}")
    raise AttributeError(f"module 'zarrlake' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names (not the submodules imported so far, nor `importlib`)."""
    return sorted({*__all__, "__version__", "spark", "virtual"})
