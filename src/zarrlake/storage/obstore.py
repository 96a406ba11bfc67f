"""ObjectStore over any obstore store (local directory, memory, S3): one backend for all three.

obstore does the I/O (atomic temp-file+rename writes locally, conditional If-None-Match writes
on S3); this module adds key validation, zarr-style byte-range clamping and the mapping of
obstore's exceptions onto zarrlake's, with one-line messages that name the key and the store.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import obstore as obs
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from zarrlake.errors import (
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    StorageError,
    TransientError,
    ZarrLakeError,
)
from zarrlake.storage.base import ByteRange, ObjectStore

MULTIPART_THRESHOLD = 64 * 1024 * 1024
"""Objects larger than this are uploaded in parts; smaller ones in one request (no orphaned
parts can be left behind by an aborted upload)."""

LIST_CHUNK = 1000
"""How many listed keys obstore hands over per batch."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_LOCAL_TEMP_SUFFIX = re.compile(r"#\d+$")
_STATUS = re.compile(r"status(?: code)?: (\d{3})")
_XML_CODE = re.compile(r"<Code>([^<]*)</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")
_TRANSIENT_WORDS = ("http error", "error sending request", "timed out", "timeout", "connection")
_TRANSIENT_KIND = re.compile(r"kind: (Connect|Timeout|Request|Body|Decode|Interrupted)\b")
_PATH_CLASH = re.compile(r"\(os error (20|21)\)")  # ENOTDIR / EISDIR on a local directory
_AUTH_CODES = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken")


def check_key(key: str) -> str:
    """Validate an object key; InvalidInputError naming the key if it is not portable.

    Keys are '/'-separated relative paths: non-empty, no leading '/', no empty, '.' or '..'
    segments, no control characters, and no final '#<digits>' (reserved by local directories
    for in-flight temporary files), so one repository can move between backends unchanged.
    """
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
        raise InvalidInputError(f"invalid {what} {text!r}: contains a control character")
    for segment in segments:
        if segment == "":
            raise InvalidInputError(f"invalid {what} {text!r}: contains an empty path segment")
        if segment in (".", ".."):
            raise InvalidInputError(f"invalid {what} {text!r}: contains a {segment!r} segment")


def _check_range(key: str, byte_range: ByteRange) -> tuple[int, int]:
    try:
        start, end = byte_range
    except (TypeError, ValueError):
        raise InvalidInputError(f"invalid byte range {byte_range!r} for {key!r}") from None
    if not (isinstance(start, int) and isinstance(end, int)) or start < 0 or end < start:
        raise InvalidInputError(
            f"invalid byte range {byte_range!r} for {key!r}: need 0 <= start <= end"
        )
    return start, end


def summarise(exc: BaseException) -> str:
    """obstore's message cut to its first line, with any S3 XML error body reduced to
    'Code: Message' (its messages carry a multi-line Rust 'Debug source' dump)."""
    text = str(exc).split("\n\nDebug source:", 1)[0].strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    if "<?xml" in line or "<Error>" in line:
        code, message = _XML_CODE.search(text), _XML_MESSAGE.search(text)
        cut = line.find("<?xml") if "<?xml" in line else line.find("<Error>")
        line = line[:cut].rstrip(" :")
        if code:
            line += f": {code.group(1)}"
            if message:
                line += f": {message.group(1)}"
    return line if len(line) <= 400 else line[:397] + "..."


def _is_path_clash(exc: BaseException) -> bool:
    """Whether a local-directory error comes from 'a' being a file where 'a/b' is wanted,
    or a directory where an object 'a' is wanted (object stores allow both, filesystems not)."""
    return _PATH_CLASH.search(str(exc)) is not None


def _status(text: str) -> int | None:
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


class ObstoreObjectStore(ObjectStore):
    """An ObjectStore backed by an obstore store (LocalStore, MemoryStore, S3Store, ...).

    `create_store`, if given, serves put_if_absent instead of `store`; open_storage passes an
    S3 client without HTTP-level retries there, so a conditional write whose response was
    lost surfaces as TransientError (which RetryingObjectStore resolves) instead of being
    retried blindly into a misleading "already exists".
    """

    def __init__(self, store: Any, url: str, *, create_store: Any = None) -> None:
        self.store = store
        self.url = url
        self._create_store = store if create_store is None else create_store
        self._bucket = url[5:].split("/", 1)[0] if url.startswith("s3://") else None
        self._bucket_ok = self._bucket is None
        self._local = url.startswith("file://")

    # -- errors ---------------------------------------------------------------------------

    def _error(self, exc: BaseException, op: str, key: str | None) -> ZarrLakeError:
        """The zarrlake exception for an obstore failure of `op` on `key`."""
        text = str(exc)
        where = f"{op} {key!r} on {self.url}" if key is not None else f"{op} on {self.url}"
        status = _status(text)
        if "NoSuchBucket" in text:
            return ConfigurationError(f"bucket {self._bucket!r} does not exist ({self.url})")
        if (
            isinstance(exc, FileNotFoundError)
            or type(exc).__name__ == "NotFoundError"
            or (op in ("GET", "HEAD") and _is_path_clash(exc))
        ):
            return NotFoundError(f"object {key!r} not found in {self.url}")
        if _is_path_clash(exc):
            return StorageError(
                f"{where} failed: a local directory cannot hold both an object and objects "
                "below it under the same name"
            )
        if (
            isinstance(exc, PermissionDeniedError | UnauthenticatedError | PermissionError)
            or status in (401, 403)
            or any(code in text for code in _AUTH_CODES)
        ):
            return ConfigurationError(f"permission denied: {where}: {summarise(exc)}")
        if isinstance(exc, ValueError) and "path" in text.lower():
            return InvalidInputError(f"invalid object key {key!r}: {summarise(exc)}")
        if "Filenames containing trailing" in text:
            return InvalidInputError(f"invalid object key {key!r}: {summarise(exc)}")
        first_line = summarise(exc).lower()
        if (status is not None and (status >= 500 or status in (408, 409, 429))) or (
            status is None
            and (any(w in first_line for w in _TRANSIENT_WORDS) or _TRANSIENT_KIND.search(text))
        ):
            problem = "cannot reach the server" if status is None else f"HTTP {status}"
            return TransientError(f"{where} failed ({problem}): {summarise(exc)}")
        return StorageError(f"{where} failed: {summarise(exc)}")

    def _raise(self, exc: BaseException, op: str, key: str | None) -> NoReturn:
        raise self._error(exc, op, key) from exc

    def _call[T](self, op: str, key: str | None, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (BaseError, OSError, ValueError) as exc:
            self._raise(exc, op, key)

    def _missing(self, exc: BaseException, op: str, key: str) -> NoReturn:
        """Raise for a 404 from HEAD, which (having no body) cannot say whether the object or
        the whole bucket is missing: check the bucket once per store, then NotFoundError."""
        if not self._bucket_ok:
            self._call("LIST", None, lambda: obs.list_with_delimiter(self.store))
            self._bucket_ok = True
        self._raise(exc, op, key)

    async def _missing_async(self, exc: BaseException, op: str, key: str) -> NoReturn:
        if not self._bucket_ok:
            try:
                await obs.list_with_delimiter_async(self.store)
            except (BaseError, OSError, ValueError) as list_exc:
                self._raise(list_exc, "LIST", None)
            self._bucket_ok = True
        self._raise(exc, op, key)

    # -- sync -----------------------------------------------------------------------------

    def _head(self, key: str) -> dict[str, Any]:
        try:
            return dict(obs.head(self.store, key))
        except FileNotFoundError as exc:
            self._missing(exc, "HEAD", key)
        except (BaseError, OSError, ValueError) as exc:
            self._raise(exc, "HEAD", key)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """The object's bytes; a range is half-open and clamped to the object's end."""
        check_key(key)
        if byte_range is None:
            return bytes(self._call("GET", key, lambda: obs.get(self.store, key).bytes()))
        start, end = _check_range(key, byte_range)
        if start == end:
            self._head(key)
            return b""
        try:
            return bytes(obs.get_range(self.store, key, start=start, end=end))
        except FileNotFoundError as exc:
            self._raise(exc, "GET", key)
        except (BaseError, OSError, ValueError) as exc:
            # Backends refuse a range that starts at or past the end; zarr wants b"".
            if start >= self._head(key)["size"]:
                return b""
            self._raise(exc, "GET", key)

    def put(self, key: str, data: bytes) -> None:
        check_key(key)
        multipart = len(data) > MULTIPART_THRESHOLD
        self._call("PUT", key, lambda: obs.put(self.store, key, data, use_multipart=multipart))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        try:
            obs.put(self._create_store, key, data, mode="create", use_multipart=False)
        except (AlreadyExistsError, PreconditionError) as exc:
            if self._local and not self.exists(key):  # a directory of other objects
                self._raise(OSError(f"(os error 21) {exc}"), "PUT", key)
            return False
        except (BaseError, OSError, ValueError) as exc:
            if _status(str(exc)) == 412 or "PreconditionFailed" in str(exc):
                return False
            self._raise(exc, "PUT", key)
        return True

    def delete(self, key: str) -> None:
        check_key(key)
        try:
            obs.delete(self.store, key)
        except FileNotFoundError as exc:
            if "NoSuchBucket" in str(exc):
                self._raise(exc, "DELETE", key)
        except (BaseError, OSError, ValueError) as exc:
            if not _is_path_clash(exc):  # no object can exist there: nothing to delete
                self._raise(exc, "DELETE", key)

    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys starting with `prefix` (plain string prefix, not only whole path segments)."""
        check_prefix(prefix)
        # obstore matches whole segments only, so list the enclosing "directory" and filter.
        parent = prefix.rstrip("/") if prefix.endswith("/") else prefix.rpartition("/")[0]
        try:
            for chunk in obs.list(self.store, parent or None, chunk_size=LIST_CHUNK):
                for meta in chunk:
                    path = meta["path"]
                    if path.startswith(prefix):
                        yield path
        except (BaseError, OSError, ValueError) as exc:
            self._raise(exc, "LIST", prefix)

    def exists(self, key: str) -> bool:
        check_key(key)
        try:
            self._head(key)
        except NotFoundError:
            return False
        return True

    # -- async (native: obstore's own event-loop-friendly futures) -------------------------

    async def _head_async(self, key: str) -> dict[str, Any]:
        try:
            return dict(await obs.head_async(self.store, key))
        except FileNotFoundError as exc:
            await self._missing_async(exc, "HEAD", key)
        except (BaseError, OSError, ValueError) as exc:
            self._raise(exc, "HEAD", key)

    async def get_async(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        check_key(key)
        if byte_range is None:
            try:
                result = await obs.get_async(self.store, key)
                return bytes(await result.bytes_async())
            except (BaseError, OSError, ValueError) as exc:
                self._raise(exc, "GET", key)
        start, end = _check_range(key, byte_range)
        if start == end:
            await self._head_async(key)
            return b""
        try:
            return bytes(await obs.get_range_async(self.store, key, start=start, end=end))
        except FileNotFoundError as exc:
            self._raise(exc, "GET", key)
        except (BaseError, OSError, ValueError) as exc:
            if start >= (await self._head_async(key))["size"]:
                return b""
            self._raise(exc, "GET", key)

    async def put_async(self, key: str, data: bytes) -> None:
        check_key(key)
        try:
            await obs.put_async(
                self.store, key, data, use_multipart=len(data) > MULTIPART_THRESHOLD
            )
        except (BaseError, OSError, ValueError) as exc:
            self._raise(exc, "PUT", key)

    async def put_if_absent_async(self, key: str, data: bytes) -> bool:
        check_key(key)
        try:
            await obs.put_async(self._create_store, key, data, mode="create", use_multipart=False)
        except (AlreadyExistsError, PreconditionError) as exc:
            if self._local and not await self.exists_async(key):
                self._raise(OSError(f"(os error 21) {exc}"), "PUT", key)
            return False
        except (BaseError, OSError, ValueError) as exc:
            if _status(str(exc)) == 412 or "PreconditionFailed" in str(exc):
                return False
            self._raise(exc, "PUT", key)
        return True

    async def delete_async(self, key: str) -> None:
        check_key(key)
        try:
            await obs.delete_async(self.store, key)
        except FileNotFoundError as exc:
            if "NoSuchBucket" in str(exc):
                self._raise(exc, "DELETE", key)
        except (BaseError, OSError, ValueError) as exc:
            if not _is_path_clash(exc):  # no object can exist there: nothing to delete
                self._raise(exc, "DELETE", key)

    async def exists_async(self, key: str) -> bool:
        check_key(key)
        try:
            await self._head_async(key)
        except NotFoundError:
            return False
        return True
