"""Argument checks of the metastore interface, applied once by MetaStoreBackend so every
backend rejects the same input the same way."""

from __future__ import annotations

from typing import Any

from zarrlake.errors import CASFailedError, InvalidInputError

MAX_KEY_BYTES = 2048
"""Longest key accepted by every backend (PostgreSQL's B-tree entries must stay < 2.7 kB)."""
MAX_PARTITION_BYTES = 256
"""Longest partition name (UTF-8) accepted by every backend."""


def check_partition(partition: Any) -> str:
    """The partition name, or InvalidInputError: a str without NUL, at most 256 UTF-8 bytes."""
    if not isinstance(partition, str):
        raise InvalidInputError(f"partition must be a str, not {type(partition).__name__}")
    try:
        size = len(partition.encode())
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"partition {partition!r} is not valid UTF-8 text; use UTF-8 text"
        ) from None
    if "\x00" in partition or size > MAX_PARTITION_BYTES:
        raise InvalidInputError(
            f"partition {partition[:80]!r} must have no NUL and at most {MAX_PARTITION_BYTES} bytes"
        )
    return partition


def check_meta_key(key: Any, what: str = "key") -> bytes:
    """The key, or InvalidInputError: keys are bytes (not str), at most MAX_KEY_BYTES long."""
    if not isinstance(key, bytes):
        raise InvalidInputError(f"metastore {what} must be bytes, not {type(key).__name__}")
    if len(key) > MAX_KEY_BYTES:
        raise InvalidInputError(
            f"metastore {what} is {len(key)} bytes long; the limit is {MAX_KEY_BYTES}"
            "; use a shorter name"
        )
    return key


def check_found(partition: str, key: bytes, found: int | None, expected: int | None) -> None:
    """CASFailedError unless the key's version (`found`; None: absent) is the one expected."""
    if found != expected:
        raise CASFailedError(f"{partition}/{key!r}: expected version {expected}, found {found}")


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


def check_checks(checks: Any) -> dict[bytes, int | None]:
    """`write_if` checks as {key: expected version or None}, or InvalidInputError."""
    try:
        pairs = dict(checks).items()
    except (TypeError, ValueError):
        raise InvalidInputError("write_if checks must map keys to versions") from None
    return {check_meta_key(k): check_expected(v) for k, v in pairs}


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
        out[check_meta_key(key)] = None if value is None else check_value(value)
    return out


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def scan_range(start: Any, prefix: Any) -> tuple[bytes, bytes | None]:
    """Checked scan arguments as a half-open key range [low, high); high None = unbounded."""
    start = check_meta_key(start, "scan start")
    if prefix is None:
        return start, None
    prefix = check_meta_key(prefix, "scan prefix")
    return max(start, prefix), prefix_upper_bound(prefix)
