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
