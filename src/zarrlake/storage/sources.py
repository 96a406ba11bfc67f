"""Virtual sources: files outside the repository (`file://` or `s3://` URLs) that virtual
chunk references point into, read through obstore one byte range at a time.

A source's identity (size and modification time for files, size and ETag for objects) is
taken when its references are imported; every ranged read compares it with the metadata that
came back with the bytes, so a changed source raises instead of returning other bytes.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from zarrlake.errors import (
    ConfigurationError,
    InvalidInputError,
    StaleVirtualChunkError,
    StorageError,
)
from zarrlake.storage.obstore import (
    credentials_missing,
    no_credentials,
    obstore_api,
    s3_config,
    summarise,
)

if TYPE_CHECKING:
    from obstore.store import ClientConfig, S3Config

SCHEMES = ("file", "s3")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def split_url(url: str) -> tuple[str, str, str]:
    """(scheme, bucket or '', path inside it) of a source URL; InvalidInputError if it is
    not an absolute file:// or an s3://bucket/key URL."""
    if not isinstance(url, str) or "\0" in url:
        raise InvalidInputError(f"a virtual source must be a URL string, not {url!r}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or parts.query or parts.fragment:
        raise InvalidInputError(
            f"virtual source {url!r} must be a file:///absolute/path or s3://bucket/key URL"
        )
    path = unquote(parts.path)
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise InvalidInputError(f"virtual source {url!r}: use file:///absolute/path")
        bucket = ""
    else:
        bucket = parts.netloc
        if not bucket:
            raise InvalidInputError(
                f"virtual source {url!r} names no bucket (s3://BUCKET/KEY)"
                "; write it as s3://BUCKET/KEY"
            )
    if ".." in PurePosixPath(path).parts:
        raise InvalidInputError(f"virtual source {url!r} must not contain '..'")
    return scheme, bucket, path.lstrip("/")


def identity_of(scheme: str, meta: Any) -> str:
    """What identifies one version of a source, from obstore's ObjectMeta (the same for the
    import's HEAD and every read's GET, whose reply carries it)."""
    if scheme == "file":
        mtime = (meta["last_modified"] - _EPOCH) // timedelta(microseconds=1)
        return f"size={meta['size']};mtime={mtime}"
    return f"size={meta['size']};etag={meta['e_tag']}"


def _not_found() -> type[BaseException]:
    """obstore's error for a missing source (imported with the first read of one)."""
    from obstore.exceptions import NotFoundError

    return NotFoundError


def _s3_config(options: dict[str, Any]) -> tuple[S3Config, ClientConfig]:
    """obstore config and client options from zarrlake's S3 storage options."""
    config = s3_config(options)
    client: ClientConfig = {"allow_http": True} if options.get("allow_http") else {}
    return config, client


class SourceReader:
    """Reads byte ranges of virtual sources. `s3_options` are zarrlake's S3 storage options
    (the repository's own when it is on S3); without them obstore reads the usual AWS_*
    environment variables."""

    def __init__(self, s3_options: dict[str, Any] | None = None) -> None:
        self.s3_options = dict(s3_options or {})
        self._stores: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def store(self, scheme: str, bucket: str) -> Any:
        """The obstore store for a scheme and bucket, opened once and shared by threads."""
        with self._lock:
            store = self._stores.get((scheme, bucket))
            if store is None:
                store = self._stores[(scheme, bucket)] = self._open(scheme, bucket)
            return store

    def _open(self, scheme: str, bucket: str) -> Any:
        from obstore.store import LocalStore, S3Store

        try:
            if scheme == "file":
                return LocalStore("/")
            config, client = _s3_config(self.s3_options)
            return S3Store(bucket, config=config, client_options=client)
        except Exception as exc:  # obstore raises its own types and ValueError
            raise ConfigurationError(
                f"cannot open virtual sources at {scheme}://{bucket}: {summarise(exc)}"
            ) from exc

    def identity(self, url: str) -> str:
        """The identity of the source at `url` now; InvalidInputError if it is missing."""
        scheme, bucket, path = split_url(url)
        try:
            return identity_of(scheme, obstore_api().head(self.store(scheme, bucket), path))
        except (_not_found(), FileNotFoundError, NotADirectoryError):
            raise InvalidInputError(f"virtual source {url} does not exist; check the URL") from None
        except Exception as exc:
            if credentials_missing(exc):
                raise ConfigurationError(no_credentials(bucket, url)) from exc
            raise ConfigurationError(f"cannot read virtual source {url}: {summarise(exc)}") from exc

    def read(self, url: str, offset: int, length: int, identity: str | None) -> memoryview:
        """Bytes [offset, offset + length) of `url`, in one ranged read, provided the source
        still has `identity`; StaleVirtualChunkError otherwise. A view of obstore's buffer:
        chunks go to the codecs without a copy."""
        scheme, bucket, path = split_url(url)
        data = self._read(url, scheme, self.store(scheme, bucket), path, offset, length, identity)
        if len(data) != length:
            raise StaleVirtualChunkError(
                f"virtual source {url} has {len(data)} bytes at [{offset}:"
                f"{offset + length}], expected {length}"
            )
        return data

    def _read(
        self,
        url: str,
        scheme: str,
        store: Any,
        path: str,
        offset: int,
        length: int,
        identity: str | None,
    ) -> memoryview:
        """One ranged GET; the identity that comes back with the bytes must match."""
        try:
            got = obstore_api().get(store, path, options={"range": (offset, offset + length)})
            now: str | None = identity_of(scheme, got.meta)
            data = memoryview(got.bytes()) if now == identity else memoryview(b"")
        except (_not_found(), FileNotFoundError):
            raise StaleVirtualChunkError(
                f"virtual source {url} is gone (imported as {identity})"
                "; restore it, or import again from where it is now"
            ) from None
        except Exception as exc:  # e.g. a range past the end of an object that shrank
            if credentials_missing(exc):
                raise ConfigurationError(no_credentials(split_url(url)[1], url)) from exc
            try:
                now = identity_of(scheme, obstore_api().head(store, path))
            except Exception:
                now = identity
            if now == identity:
                raise StorageError(
                    f"cannot read virtual source {url} at [{offset}:{offset + length}]: "
                    f"{summarise(exc)}"
                ) from exc
        if now != identity:
            raise StaleVirtualChunkError(
                f"virtual source {url} changed since it was imported ({identity}, now {now})"
                "; import it again"
            )
        return data
