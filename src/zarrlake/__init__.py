"""zarrlake: a transactional, version-controlled database for Zarr v3 arrays."""

from zarrlake.errors import (
    AlreadyExistsError,
    Conflict,
    ConflictError,
    CorruptionError,
    NotFoundError,
    ReadOnlyError,
    SessionClosedError,
    SessionExpiredError,
    ZarrLakeError,
)

__all__ = [
    "AlreadyExistsError",
    "Conflict",
    "ConflictError",
    "CorruptionError",
    "NotFoundError",
    "ReadOnlyError",
    "SessionClosedError",
    "SessionExpiredError",
    "ZarrLakeError",
]
__version__ = "0.1.0"

from zarrlake.repo import Commit, Repo, RepoStats, SessionInfo
from zarrlake.session import Session
from zarrlake.vc.diff import Diff
from zarrlake.zarr_store import SessionStore

__all__ += ["Commit", "Diff", "Repo", "RepoStats", "Session", "SessionInfo", "SessionStore"]


def __getattr__(name: str):  # the Spark integration imports pyspark; load it on first use
    if name == "spark":
        import importlib

        return importlib.import_module("zarrlake.spark")
    raise AttributeError(f"module 'zarrlake' has no attribute {name!r}")
