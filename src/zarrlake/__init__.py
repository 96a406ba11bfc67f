"""zarrlake: a transactional, version-controlled database for Zarr v3 arrays."""

import importlib

from zarrlake.errors import (
    AlreadyExistsError,
    BackendError,
    CASFailedError,
    CommitTimeoutError,
    ConfigurationError,
    Conflict,
    ConflictError,
    ConflictKind,
    CorruptionError,
    ExpiredHistoryError,
    GcBusyError,
    InvalidInputError,
    NoChangesError,
    NotFoundError,
    ProtectedBranchError,
    ReadOnlyError,
    SessionClosedError,
    SessionError,
    SessionExpiredError,
    StaleVirtualChunkError,
    StorageError,
    TransientError,
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
    "SessionStore": "zarrlake.zarr_store",
}
"""Public names whose modules import zarr and numpy: loaded on first use, so a command line
that needs none of them (`zarrlake --help`) starts fast."""

__all__ = [
    "AlreadyExistsError",
    "BackendError",
    "CASFailedError",
    "CommitTimeoutError",
    "ConfigurationError",
    "Conflict",
    "ConflictError",
    "ConflictKind",
    "CorruptionError",
    "ExpiredHistoryError",
    "GcBusyError",
    "InvalidInputError",
    "NoChangesError",
    "NotFoundError",
    "ProtectedBranchError",
    "ReadOnlyError",
    "SessionClosedError",
    "SessionError",
    "SessionExpiredError",
    "StaleVirtualChunkError",
    "StorageError",
    "TransientError",
    "UnfinishedWritersError",
    "UnflushedWritesError",
    "ZarrLakeError",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in ("spark", "virtual"):  # imports pyspark / virtualizarr
        return importlib.import_module(f"zarrlake.{name}")
    raise AttributeError(f"module 'zarrlake' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"spark", "virtual"})
