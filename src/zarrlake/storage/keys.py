"""Argument checks of the object-storage interface, applied once by ObjectStoreBackend so
every backend accepts the same keys: one repository can move between backends unchanged."""

from __future__ import annotations

import re
from typing import Any

from zarrlake.errors import InvalidInputError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PLAIN_KEY = re.compile(r"(?!\.\.?(?:/|$))[\w.-]+(?:/(?!\.\.?(?:/|$))[\w.-]+)*", re.ASCII)
"""Keys that pass every check below (the library's own keys), tested in one match."""
_LOCAL_TEMP_SUFFIX = re.compile(r"#\d+$")


def check_object_key(key: str) -> str:
    """Validate an object key; InvalidInputError naming the key if it is not portable.

    Keys are '/'-separated relative paths: non-empty, no leading '/', no empty, '.' or '..'
    segments, no control characters, and no final '#<digits>' (reserved by local directories
    for in-flight temporary files), so one repository can move between backends unchanged.
    """
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return key
    if not isinstance(key, str) or not key:
        raise InvalidInputError(f"invalid object key {key!r}: must be a non-empty string")
    _check_segments(key, key.split("/"), what="object key")
    if _LOCAL_TEMP_SUFFIX.search(key):
        raise InvalidInputError(f"invalid object key {key!r}: must not end with '#<digits>'")
    return key


def check_prefix(prefix: str) -> str:
    """Validate a listing prefix: like a key, but may be empty or end with '/' (or mid-name)."""
    if not isinstance(prefix, str):
        raise InvalidInputError(f"invalid list prefix {prefix!r}: must be a string")
    if prefix:
        segments = prefix.split("/")
        if segments[-1] == "":
            segments.pop()
        _check_segments(prefix, segments, what="list prefix")
    return prefix


def _check_segments(text: str, segments: list[str], *, what: str) -> None:
    if text.startswith("/"):
        raise InvalidInputError(f"invalid {what} {text!r}: must not start with '/'")
    if _CONTROL.search(text):
        raise InvalidInputError(f"invalid {what} {text!r}: contains a control character; remove it")
    for segment in segments:
        if segment == "":
            raise InvalidInputError(
                f"invalid {what} {text!r}: contains an empty path segment; remove the empty segment"
            )
        if segment in (".", ".."):
            raise InvalidInputError(
                f"invalid {what} {text!r}: contains a {segment!r} segment; remove that segment"
            )


def check_range(key: str, byte_range: Any) -> tuple[int, int]:
    """The (start, end) of a byte range; raises InvalidInputError unless 0 <= start <= end."""
    try:
        start, end = byte_range
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"invalid byte range {byte_range!r} for {key!r}; give 0 <= start <= end"
        ) from None
    if not (isinstance(start, int) and isinstance(end, int)) or start < 0 or end < start:
        raise InvalidInputError(
            f"invalid byte range {byte_range!r} for {key!r}: need 0 <= start <= end"
        )
    return start, end


def no_options(kind: str, options: dict[str, Any]) -> None:
    """InvalidInputError naming the storage options a backend that takes none was given."""
    if options:
        names = ", ".join(sorted(options))
        raise InvalidInputError(f"unknown storage option(s) for {kind}: {names}; remove them")
