"""Metastore backends, chosen by URL with `open_metastore`, and the input checks they share.

URLs: ``memory://NAME`` (process-wide, by name), ``sqlite:///relative.db`` or
``sqlite:////absolute/path.db`` (SQLAlchemy's convention: the path is what follows the
third slash; ``?synchronous=full`` for FULL durability), ``postgresql://user:pw@host:port/db``
(also ``postgres://``; libpq parameters such as ``connect_timeout`` go in the query).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from zarrlake.errors import CASFailedError, InvalidInputError
from zarrlake.metastore.base import Item, MetaStore

__all__ = ["CASFailedError", "Item", "MetaStore", "open_metastore"]

MAX_KEY_BYTES = 2048
"""Longest key accepted by every backend (PostgreSQL's B-tree entries must stay < 2.7 kB)."""
MAX_PARTITION_BYTES = 256
"""Longest partition name (UTF-8) accepted by every backend."""
PAGE_SIZE = 1000
"""Rows fetched per round trip while a scan streams."""


def paged_scan(
    fetch: Callable[[bytes, int], list[Item]], low: bytes, limit: int | None
) -> Iterator[Item]:
    """Stream a scan page by page (keyset pagination): `fetch(low, n)` returns up to n items
    with key >= low, in order. Each page is fetched whole before it is yielded, so no read
    transaction or lock is held while the caller works; a scan is therefore not one snapshot."""
    remaining = limit
    while remaining is None or remaining > 0:
        size = PAGE_SIZE if remaining is None else min(PAGE_SIZE, remaining)
        page = fetch(low, size)
        yield from page
        if len(page) < size:
            return
        if remaining is not None:
            remaining -= len(page)
        low = page[-1][0] + b"\x00"


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
    scheme = scheme.lower()
    if scheme == "memory":
        from zarrlake.metastore.memory import MemoryMetaStore

        return MemoryMetaStore(url)
    if scheme == "sqlite":
        from zarrlake.metastore.sqlite import SqliteMetaStore

        return SqliteMetaStore(url)
    if scheme in ("postgresql", "postgres"):
        from zarrlake.metastore.postgres import PostgresMetaStore

        return PostgresMetaStore(url)
    raise InvalidInputError(
        f"unsupported metastore URL scheme {scheme!r} in {url!r}; "
        "use memory://, sqlite:// or postgresql://"
    )


# Input checks shared by every backend, so all of them reject the same things the same way.


def check_partition(partition: Any) -> str:
    """The partition name, or InvalidInputError: a str without NUL, at most 256 UTF-8 bytes."""
    if not isinstance(partition, str):
        raise InvalidInputError(f"partition must be a str, not {type(partition).__name__}")
    try:
        size = len(partition.encode())
    except UnicodeEncodeError:
        raise InvalidInputError(f"partition {partition!r} is not valid UTF-8 text") from None
    if "\x00" in partition or size > MAX_PARTITION_BYTES:
        raise InvalidInputError(
            f"partition {partition[:80]!r} must have no NUL and at most {MAX_PARTITION_BYTES} bytes"
        )
    return partition


def check_key(key: Any, what: str = "key") -> bytes:
    """The key, or InvalidInputError: keys are bytes (not str), at most MAX_KEY_BYTES long."""
    if not isinstance(key, bytes):
        raise InvalidInputError(f"metastore {what} must be bytes, not {type(key).__name__}")
    if len(key) > MAX_KEY_BYTES:
        raise InvalidInputError(
            f"metastore {what} is {len(key)} bytes long; the limit is {MAX_KEY_BYTES}"
        )
    return key


def check_value(value: Any) -> bytes:
    """The value as bytes (bytearray and memoryview are copied), or InvalidInputError."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidInputError(f"metastore value must be bytes, not {type(value).__name__}")


def check_expected(expected: Any) -> int | None:
    """A version token (int) or None, or InvalidInputError."""
    if expected is None or (isinstance(expected, int) and not isinstance(expected, bool)):
        return expected
    raise InvalidInputError(f"expected version must be an int or None, not {expected!r}")


def check_limit(limit: Any) -> int | None:
    """None or a non-negative int, or InvalidInputError."""
    if limit is None:
        return None
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    raise InvalidInputError(f"scan limit must be a non-negative int or None, not {limit!r}")


def check_items(items: Any) -> dict[bytes, bytes | None]:
    """`set_many` input as {key: value or None}; a key given twice keeps its last value."""
    out: dict[bytes, bytes | None] = {}
    try:
        pairs = list(items)
    except TypeError:
        raise InvalidInputError("set_many needs an iterable of (key, value) pairs") from None
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidInputError(f"set_many items must be (key, value) pairs, not {pair!r}")
        key, value = pair
        out[check_key(key)] = None if value is None else check_value(value)
    return out


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def scan_range(start: Any, prefix: Any) -> tuple[bytes, bytes | None]:
    """Checked scan arguments as a half-open key range [low, high); high None = unbounded."""
    start = check_key(start, "scan start")
    if prefix is None:
        return start, None
    prefix = check_key(prefix, "scan prefix")
    return max(start, prefix), prefix_upper_bound(prefix)
