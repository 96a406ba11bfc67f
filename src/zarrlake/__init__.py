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

from zarrlake.diff import Diff
from zarrlake.repo import Commit, Repo
from zarrlake.session import Session
from zarrlake.store import SessionStore

__all__ += ["Commit", "Diff", "Repo", "Session", "SessionStore"]


def __getattr__(name: str):  # the Spark integration imports pyspark; load it on first use
    if name == "spark":
        import importlib

        return importlib.import_module("zarrlake.spark")
    raise AttributeError(f"module 'zarrlake' has no attribute {name!r}")
