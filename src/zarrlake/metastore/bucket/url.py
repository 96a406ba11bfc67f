"""bucket+ metastore URLs: ``bucket+s3://BUCKET/PREFIX?endpoint_url=...&region=...`` (the
storage options of an s3:// location as query parameters, credentials included) and
``bucket+memory://NAME`` (tests). Importing this module registers both schemes."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from zarrlake.errors import InvalidInputError
from zarrlake.metastore import register
from zarrlake.metastore.bucket.store import BucketMetaStore

_SECRET = ("secret_access_key",)


def parse_url(url: str) -> tuple[str, dict[str, Any], str]:
    """(storage location, storage options, URL with secrets masked) of a bucket+ URL."""
    from zarrlake.storage.locations import S3_OPTIONS

    scheme, sep, rest = url.partition("://")
    inner = scheme.lower().removeprefix("bucket+")
    if not sep or inner not in ("s3", "memory") or not rest:
        raise InvalidInputError(
            f"not a bucket metastore URL: {url!r} (use bucket+s3://BUCKET/PREFIX?... or "
            "bucket+memory://NAME)"
        )
    parts = urlsplit(f"{inner}://{rest}")
    location = f"{inner}://{parts.netloc}{parts.path}".rstrip("/")
    options: dict[str, Any] = {}
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        kind = S3_OPTIONS.get(name)
        if kind is None or inner != "s3":
            raise InvalidInputError(f"unknown option {name!r} in bucket metastore URL; remove it")
        options[name] = _typed(name, text, kind)
    shown = [f"{n}={'***' if n in _SECRET else t}" for n, t in parse_qsl(parts.query)]
    masked = f"bucket+{location}" + ("?" + "&".join(shown) if shown else "")
    return location, options, masked


def _typed(name: str, text: str, kind: Any) -> Any:
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if kind is int:
            return int(text)
        if kind == (int, float):
            return float(text)
    except ValueError:
        raise InvalidInputError(
            f"bucket metastore URL option {name}={text!r} is malformed; fix its value"
        ) from (None)
    return text


def open_url(url: str) -> BucketMetaStore:
    """Open a bucket+s3:// or bucket+memory:// metastore URL."""
    location, options, masked = parse_url(url)
    return BucketMetaStore.open(location, options, masked)


register("bucket+s3", open_url)
register("bucket+memory", open_url)
