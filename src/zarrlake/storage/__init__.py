"""Object storage, chosen by location with `open_storage`: a directory path or
file:///abs/path, memory://NAME or s3://bucket/prefix (the drivers are in `local` and `locations`).
Another backend registers itself with ``register(scheme, factory)``, or through the
``zarrlake.storages`` entry point group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zarrlake._util.registry import Registry
from zarrlake._util.retry import DEFAULT_POLICY, RetryPolicy
from zarrlake.errors import InvalidInputError
from zarrlake.storage.base import ByteRange, ObjectStore, ObjectStoreBackend, WrapperObjectStore

__all__ = [
    "ByteRange",
    "ObjectStore",
    "ObjectStoreBackend",
    "WrapperObjectStore",
    "open_storage",
    "register",
    "registry",
]

StorageFactory = Callable[[str, dict[str, Any]], ObjectStore]
"""Opens object storage from its location and its storage options."""

registry: Registry[StorageFactory, ObjectStore] = Registry(
    "storage",
    {
        "file": "zarrlake.storage.local",
        "memory": "zarrlake.storage.locations",
        "s3": "zarrlake.storage.locations",
    },
    entry_point_group="zarrlake.storages",
)


def register(scheme: str, factory: StorageFactory) -> None:
    """Open locations `scheme://...` with `factory(location, storage_options)`."""
    registry.register(scheme, factory)


def open_storage(
    location: str, *, retry_policy: RetryPolicy | None = DEFAULT_POLICY, **storage_options: Any
) -> ObjectStore:
    """Open object storage at `location`: a directory path or file:///abs/path (created if
    missing), memory://NAME (shared by name within this process) or s3://bucket/prefix.

    The store is wrapped in RetryingObjectStore with `retry_policy` (None: unwrapped), so
    transient failures are retried and lost put_if_absent responses are resolved.
    """
    if not isinstance(location, str) or not location:
        raise InvalidInputError(f"invalid storage location {location!r}: need a path or URL")
    scheme = location.split("://", 1)[0] if "://" in location else "file"
    store = registry.opened(registry.factory(scheme, location)(location, storage_options))
    if retry_policy is None:
        return store
    from zarrlake.storage.retrying import RetryingObjectStore

    return RetryingObjectStore(store, retry_policy)
