"""Metastore backends, chosen by URL scheme with `open_metastore`.

URLs: ``memory://NAME`` (process-wide, by name), ``sqlite:///relative.db`` or
``sqlite:////absolute/path.db`` (SQLAlchemy's convention: the path is what follows the
third slash; ``?synchronous=full`` for FULL durability), ``postgresql://user:pw@host:port/db``
(also ``postgres://``; libpq parameters such as ``connect_timeout`` go in the query),
``bucket+s3://BUCKET/PREFIX?endpoint_url=...`` (in object storage, on conditional writes; the
options of an s3:// location go in the query) and ``bucket+memory://NAME``.
Another backend registers itself with ``register(scheme, factory)``, or through the
``zarrlake.metastores`` entry point group.
"""

from __future__ import annotations

from collections.abc import Callable

from zarrlake._util.registry import Registry
from zarrlake.errors import CASFailedError, InvalidInputError
from zarrlake.metastore.base import (
    PAGE_SIZE,
    Item,
    MetaStore,
    MetaStoreBackend,
    WrapperMetaStore,
    paged_scan,
)
from zarrlake.metastore.checks import MAX_KEY_BYTES, MAX_PARTITION_BYTES, prefix_upper_bound

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_PARTITION_BYTES",
    "PAGE_SIZE",
    "CASFailedError",
    "Item",
    "MetaStore",
    "MetaStoreBackend",
    "WrapperMetaStore",
    "open_metastore",
    "paged_scan",
    "prefix_upper_bound",
    "register",
    "registry",
]

MetaStoreFactory = Callable[[str], MetaStore]
"""Opens a metastore from its full URL."""

registry: Registry[MetaStoreFactory, MetaStore] = Registry(
    "metastore",
    {
        "memory": "zarrlake.metastore.memory",
        "sqlite": "zarrlake.metastore.sqlite",
        "postgresql": "zarrlake.metastore.postgres",
        "postgres": "zarrlake.metastore.postgres",
        "bucket+s3": "zarrlake.metastore.bucket.url",
        "bucket+memory": "zarrlake.metastore.bucket.url",
    },
    entry_point_group="zarrlake.metastores",
)


def register(scheme: str, factory: MetaStoreFactory) -> None:
    """Open metastore URLs `scheme://...` with `factory(url)`."""
    registry.register(scheme, factory)


def open_metastore(url: str) -> MetaStore:
    """Open the metastore named by `url`; raises InvalidInputError for a malformed URL and
    ConfigurationError when the backend cannot be reached or opened."""
    if not isinstance(url, str):
        raise InvalidInputError(f"metastore URL must be a string, not {type(url).__name__}")
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise InvalidInputError(
            f"metastore URL {url!r} has no scheme; use memory://NAME, sqlite:///PATH "
            "or postgresql://USER@HOST:PORT/DB"
        )
    return registry.opened(registry.factory(scheme, url)(url))
