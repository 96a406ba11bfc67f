"""ObjectStore over any obstore store (local directory, memory, S3): one backend for all three.

obstore does the I/O (atomic temp-file+rename writes locally, conditional If-None-Match writes
on S3); this module adds key validation, zarr-style byte-range clamping and the mapping of
obstore's exceptions onto zarrlake's, with one-line messages that name the key and the store.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from zarrlake._util.forksafe import PerProcess
from zarrlake.errors import (
    CASFailedError,
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    StorageError,
    TransientError,
    ZarrLakeError,
)
from zarrlake.storage.base import ByteRange, ObjectStoreBackend
from zarrlake.storage.keys import check_prefix

if TYPE_CHECKING:
    from types import ModuleType

    from obstore.store import S3Config

    from zarrlake.storage.forked import Recipe

MULTIPART_THRESHOLD = 64 * 1024 * 1024
"""Objects larger than this are uploaded in parts; smaller ones in one request (no orphaned
parts can be left behind by an aborted upload)."""

SIGNED_FOR = 60.0
"""Seconds a conditional delete's signed request stays valid: S3 refuses it afterwards, so a
request held up in the network cannot land later than that."""
DELETE_TIMEOUT = 30.0
"""Seconds a conditional delete waits for its reply."""
LIST_CHUNK = 1000
"""How many listed keys obstore hands over per batch."""
LIST_WAYS = 32
"""Key ranges a large listing of a remote store runs at once (`list_parallel`)."""

_STATUS = r"status(?: code)?: (\d{3})"
_XML_CODE = r"<Code>([^<]*)</Code>"
_XML_MESSAGE = r"<Message>([^<]*)</Message>"
_TRANSIENT_WORDS = ("http error", "error sending request", "timed out", "timeout", "connection")
_TRANSIENT_KIND = r"kind: (Connect|Timeout|Request|Body|Decode|Interrupted)\b"
_RETRIES = r"\bafter (\d+) retries\b"  # obstore's own, in its error message
_PATH_CLASH = r"\(os error (20|21)\)"  # ENOTDIR / EISDIR on a local directory
_AUTH_CODES = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken")
_CREDENTIAL_LOOKUP = r"/latest/(?:api/token|meta-data/iam/)"
"""The instance-metadata (IMDS) paths obstore asks when it was given no credentials: a
failure there means none were found, not that the bucket refused them."""


def _retried(text: str) -> bool:
    """Whether obstore retried the request itself before failing ("after 3 retries"): its
    retries are then the only ones (a layer above retrying each attempt multiplies them)."""
    found = re.search(_RETRIES, text)
    return found is not None and int(found.group(1)) > 0


def summarise(exc: BaseException) -> str:
    """obstore's message cut to its first line, with any S3 XML error body reduced to
    'Code: Message' (its messages carry a multi-line Rust 'Debug source' dump)."""
    text = str(exc).split("\n\nDebug source:", 1)[0].strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    if "<?xml" in line or "<Error>" in line:
        code, message = re.search(_XML_CODE, text), re.search(_XML_MESSAGE, text)
        cut = line.find("<?xml") if "<?xml" in line else line.find("<Error>")
        line = line[:cut].rstrip(" :")
        if code:
            line += f": {code.group(1)}"
            if message:
                line += f": {message.group(1)}"
    return line if len(line) <= 400 else line[:397] + "..."


def no_credentials(bucket: str | None, url: str) -> str:
    """What to say when obstore found no S3 credentials (it fell back to the instance-metadata
    endpoint, 169.254.169.254, and that failed): where credentials come from."""
    return (
        f"no S3 credentials found for bucket {bucket!r} ({url}): set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones) in the environment, "
        "or pass the storage options access_key_id and secret_access_key (on the command "
        "line: --storage-option access_key_id=...). AWS profiles are not read: export one's "
        "keys with 'eval \"$(aws configure export-credentials --profile NAME --format env)\"'"
    )


def credentials_missing(exc: BaseException) -> bool:
    """Whether an obstore error is its failed fallback to the instance-metadata endpoint:
    it was given no S3 credentials and found none (see `no_credentials`)."""
    return re.search(_CREDENTIAL_LOOKUP, str(exc)) is not None


def _is_path_clash(exc: BaseException) -> bool:
    """Whether a local-directory error comes from 'a' being a file where 'a/b' is wanted,
    or a directory where an object 'a' is wanted (object stores allow both, filesystems not)."""
    return re.search(_PATH_CLASH, str(exc)) is not None


def obstore_api() -> ModuleType:
    """obstore, imported at the first request that needs it: a local repository reads and
    writes plain keys without it (storage/local.py), and opens without loading it."""
    import obstore

    return obstore


@functools.cache
def _failures() -> tuple[type[BaseException], ...]:
    """What an obstore call raises when it fails (caught and mapped by `_error`)."""
    from obstore.exceptions import BaseError

    return (BaseError, OSError, ValueError)


@functools.cache
def _refusals() -> tuple[type[BaseException], ...]:
    """What obstore raises when a conditional write is refused."""
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    return (AlreadyExistsError, PreconditionError)


def _status(text: str) -> int | None:
    match = re.search(_STATUS, text)
    return int(match.group(1)) if match else None


_runtime_pid: int | None = None
"""The process whose obstore runtime is running (set at the first call)."""


def _forksafe[F: Callable[..., Any]](primitive: F) -> F:
    """Run the primitive in this process, or, in a process forked after obstore's runtime
    started, in the store's helper process (storage/forked.py)."""
    name = primitive.__name__

    @functools.wraps(primitive)
    def run(self: ObstoreObjectStore, *args: Any) -> Any:
        global _runtime_pid
        pid = os.getpid()
        if _runtime_pid is None:
            _runtime_pid = pid
        if _runtime_pid == pid or self._helper is None:
            return primitive(self, *args)
        helper = self._helper.get()
        if helper.dead:
            self._helper.take()
            helper = self._helper.get()
        value = helper.call(name, *args)
        return iter(value) if name in ("_list", "_list_modified") else value

    return run  # type: ignore[return-value]


def s3_config(options: dict[str, Any]) -> S3Config:
    """obstore's S3 config (region, keys, endpoint) from zarrlake's S3 storage options."""
    config: S3Config = {"region": options.get("region", "us-east-1")}
    if "access_key_id" in options:
        config["access_key_id"] = options["access_key_id"]
    if "secret_access_key" in options:
        config["secret_access_key"] = options["secret_access_key"]
    if "endpoint_url" in options:
        config["endpoint"] = options["endpoint_url"]
        config["virtual_hosted_style_request"] = False
    return config


def _helper(recipe: Recipe) -> Any:
    """The helper process serving this store's calls in a forked child (storage/forked.py)."""
    from zarrlake.storage.forked import Helper

    return Helper(recipe)


class ObstoreObjectStore(ObjectStoreBackend):
    """An ObjectStore backed by an obstore store (LocalStore, MemoryStore, S3Store, ...).

    `create_store` (a store, or a function making one when first needed), if given, serves
    conditional writes instead of `store`; open_storage passes an
    S3 client without HTTP-level retries there, so a conditional write whose response was
    lost surfaces as TransientError (which RetryingObjectStore resolves) instead of being
    retried blindly into a misleading "already exists".
    """

    def __init__(
        self,
        store: Any,
        url: str,
        *,
        create_store: Any = None,
        recipe: Recipe | None = None,
        remote: bool = True,
    ) -> None:
        if store is not None:  # None: a subclass makes it when first needed (local.py)
            self.store = store
        self.url = url
        self.remote = remote
        # How a forked child reaches the same store (None: in-memory, usable after fork).
        self._helper = None if recipe is None else PerProcess(lambda: _helper(recipe))
        self._creator = create_store
        self._made: Any = None if callable(create_store) else (create_store or store)
        self._bucket = url[5:].split("/", 1)[0] if url.startswith("s3://") else None
        self._bucket_ok = self._bucket is None
        self._local = url.startswith("file://")

    def _create_store(self) -> Any:
        """The store conditional writes go to (made on first use: most readers never write)."""
        if self._made is None:
            self._made = self._creator() if self._creator is not None else self.store
        return self._made

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
        if credentials_missing(exc):
            return ConfigurationError(no_credentials(self._bucket, self.url))
        from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

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
            and (any(w in first_line for w in _TRANSIENT_WORDS) or re.search(_TRANSIENT_KIND, text))
        ):
            problem = "cannot reach the server" if status is None else f"HTTP {status}"
            error = TransientError(f"{where} failed ({problem}): {summarise(exc)}")
            error.retried = _retried(text)  # type: ignore[attr-defined]  # (_util/retry.py)
            return error
        return StorageError(f"{where} failed: {summarise(exc)}")

    def _raise(self, exc: BaseException, op: str, key: str | None) -> NoReturn:
        raise self._error(exc, op, key) from exc

    def _call[T](self, op: str, key: str | None, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except _failures() as exc:
            self._raise(exc, op, key)

    def _missing(self, exc: BaseException, op: str, key: str) -> NoReturn:
        """Raise for a 404 from HEAD, which (having no body) cannot say whether the object or
        the whole bucket is missing: check the bucket once per store, then NotFoundError."""
        if not self._bucket_ok:
            self._call("LIST", None, lambda: obstore_api().list_with_delimiter(self.store))
            self._bucket_ok = True
        self._raise(exc, op, key)

    # -- primitives -----------------------------------------------------------------------

    def _head(self, key: str) -> dict[str, Any]:
        try:
            return dict(obstore_api().head(self.store, key))
        except FileNotFoundError as exc:
            self._missing(exc, "HEAD", key)
        except _failures() as exc:
            self._raise(exc, "HEAD", key)

    @_forksafe
    def _get(self, key: str, byte_range: ByteRange | None) -> bytes:
        if byte_range is None:
            return bytes(self._call("GET", key, lambda: obstore_api().get(self.store, key).bytes()))
        start, end = byte_range
        if start == end:
            self._head(key)
            return b""
        try:
            return bytes(obstore_api().get_range(self.store, key, start=start, end=end))
        except FileNotFoundError as exc:
            self._raise(exc, "GET", key)
        except _failures() as exc:
            # Backends refuse a range that starts at or past the end; zarr wants b"".
            if start >= self._head(key)["size"]:
                return b""
            self._raise(exc, "GET", key)

    @_forksafe
    def _put(self, key: str, data: bytes | memoryview) -> None:
        multipart = len(data) > MULTIPART_THRESHOLD
        self._call(
            "PUT", key, lambda: obstore_api().put(self.store, key, data, use_multipart=multipart)
        )

    @_forksafe
    def _put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        try:
            obstore_api().put(self._create_store(), key, data, mode="create", use_multipart=False)
        except _refusals() as exc:
            if self._local and not self._exists(key):  # a directory of other objects
                self._raise(OSError(f"(os error 21) {exc}"), "PUT", key)
            return False
        except _failures() as exc:
            if _status(str(exc)) == 412 or "PreconditionFailed" in str(exc):
                return False
            self._raise(exc, "PUT", key)
        return True

    @_forksafe
    def _get_tagged(self, key: str) -> tuple[bytes, str]:
        def read() -> tuple[bytes, str]:
            result = obstore_api().get(self.store, key)
            return bytes(result.bytes()), result.meta.get("e_tag") or ""

        data, tag = self._call("GET", key, read)
        if not tag:
            raise StorageError(
                f"GET {key!r} on {self.url} returned no entity tag (ETag)"
                "; use an S3 service that returns ETags"
            )
        return data, tag

    @_forksafe
    def _put_if(self, key: str, data: bytes, tag: str | None) -> str:
        mode: Any = "create" if tag is None else {"e_tag": tag}
        refused = f"conditional write of {key!r} on {self.url} refused: " + (
            "it exists" if tag is None else "it changed (or is gone) since it was read"
        )
        try:
            result = obstore_api().put(
                self._create_store(), key, data, mode=mode, use_multipart=False
            )
        except _refusals():
            raise CASFailedError(refused) from None
        except NotImplementedError:
            raise ConfigurationError(
                f"{self.url} does not support conditional updates (replace-if-unchanged)"
                "; use a store that supports conditional writes, or a SQL metastore"
            ) from None
        except _failures() as exc:
            if _status(str(exc)) == 412 or "PreconditionFailed" in str(exc):
                raise CASFailedError(refused) from None
            self._raise(exc, "PUT", key)
        new = result.get("e_tag")
        if not new:
            raise StorageError(f"PUT {key!r} on {self.url} returned no entity tag (ETag)")
        return new

    @_forksafe
    def _tag(self, key: str) -> str:
        tag = self._head(key).get("e_tag")
        if not tag:
            raise StorageError(
                f"HEAD {key!r} on {self.url} returned no entity tag (ETag); use an "
                "S3-compatible store that returns ETags (garbage collection needs them)"
            )
        return tag

    @_forksafe
    def _delete_if(self, key: str, tag: str) -> bool:
        """On S3 one DeleteObject with If-Match, sent as a request obstore signs (its own
        delete takes no condition); on a memory store (one process) a look and a delete."""
        if self._bucket is None:
            try:
                if self._tag(key) != tag:
                    return False
            except NotFoundError:
                return False
            self._delete(key)
            return True
        import urllib.error  # (http.client and ssl load with the first conditional delete)
        import urllib.request

        url = self._call(
            "SIGN",
            key,
            lambda: obstore_api().sign(self.store, "DELETE", key, timedelta(seconds=SIGNED_FOR)),
        )
        request = urllib.request.Request(url, method="DELETE", headers={"If-Match": tag})
        try:
            with urllib.request.urlopen(request, timeout=DELETE_TIMEOUT):
                return True
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 412):  # gone, or written again since its tag was read
                return False
            text = f"status: {exc.code}: {exc.read()[:300].decode(errors='replace')}"
            if exc.code == 501:
                raise ConfigurationError(
                    f"{self.url} does not support conditional deletes (DeleteObject with "
                    "If-Match), which a garbage collector's fence needs"
                ) from None
            self._raise(OSError(text), "DELETE", key)
        except (urllib.error.URLError, OSError) as exc:  # the reply is lost: it may have run
            raise TransientError(f"DELETE {key!r} on {self.url} failed: {exc}") from None

    @_forksafe
    def _retag(self, key: str) -> str:
        data, tag = self._get_tagged(key)
        parts = self._bucket is not None and "-" not in tag.strip('"')
        result = self._call(
            "PUT", key, lambda: obstore_api().put(self.store, key, data, use_multipart=parts)
        )
        new = result.get("e_tag")
        if not new or new == tag:
            raise StorageError(f"PUT {key!r} on {self.url} kept its entity tag {tag}")
        return new

    @_forksafe
    def _delete(self, key: str) -> None:
        try:
            obstore_api().delete(self.store, key)
        except FileNotFoundError as exc:
            if "NoSuchBucket" in str(exc):
                self._raise(exc, "DELETE", key)
        except _failures() as exc:
            if not _is_path_clash(exc):  # no object can exist there: nothing to delete
                self._raise(exc, "DELETE", key)

    @_forksafe
    def _delete_many(self, keys: list[str]) -> None:
        """One bulk request per thousand keys on S3 (DeleteObjects); a missing key stops
        obstore's batch, so the rest go one by one."""
        for i in range(0, len(keys), 1000):
            batch = keys[i : i + 1000]
            try:
                obstore_api().delete(self.store, batch)
            except FileNotFoundError as exc:
                if "NoSuchBucket" in str(exc):
                    self._raise(exc, "DELETE", batch[0])
                for key in batch:
                    self._delete(key)
            except _failures() as exc:
                self._raise(exc, "DELETE", batch[0])

    @_forksafe
    def _list(self, prefix: str) -> Iterator[str]:
        return (meta["path"] for meta in self._metas(prefix))

    def list_parallel(self, prefix: str = "", ways: int = LIST_WAYS) -> Iterator[str]:
        """The keys under `prefix`; on a remote store holding more than a page of them, the
        rest is listed as `ways` key ranges at once (each a listing that starts after its
        lower bound and stops past its upper one), as Icechunk's gc lists 32 ways."""
        check_prefix(prefix)
        if not self.remote or ways <= 1:
            return self._list(prefix)
        return iter(self._list_ranges(prefix, ways))

    @_forksafe
    def _list_ranges(self, prefix: str, ways: int) -> list[str]:
        parent = prefix.rstrip("/") if prefix.endswith("/") else prefix.rpartition("/")[0]
        try:  # one batch first: most prefixes hold fewer keys, listed in one request
            paths = [
                m["path"]
                for m in next(
                    iter(obstore_api().list(self.store, parent or None, chunk_size=LIST_CHUNK)), []
                )
            ]
        except _failures() as exc:
            self._raise(exc, "LIST", prefix)
        head = [p for p in paths if p.startswith(prefix)]
        if len(paths) < LIST_CHUNK:
            return head
        # The rest in key ranges after the last key listed: bounds are `parent/` and two hex
        # digits, evenly spaced (content hashes spread evenly over them).
        base = f"{parent}/" if parent else ""
        ways = min(ways, 256)
        bounds = {f"{base}{i * 256 // ways:02x}" for i in range(1, ways)}
        lows = [paths[-1], *sorted(b for b in bounds if b > paths[-1])]
        spans = list(zip(lows, [*lows[1:], None], strict=True))
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(spans)) as pool:
            parts = list(pool.map(lambda span: self._range(prefix, parent, *span), spans))
        return head + [k for part in parts for k in part]

    def _range(self, prefix: str, parent: str, after: str, upto: str | None) -> list[str]:
        """The keys under `prefix` greater than `after` and not greater than `upto`."""
        keys: list[str] = []
        try:
            for chunk in obstore_api().list(
                self.store, parent or None, offset=after, chunk_size=LIST_CHUNK
            ):
                for meta in chunk:
                    path = meta["path"]
                    if upto is not None and path > upto:
                        return keys
                    if path.startswith(prefix):
                        keys.append(path)
        except _failures() as exc:
            self._raise(exc, "LIST", prefix)
        return keys

    @_forksafe
    def _list_modified(self, prefix: str) -> Iterator[tuple[str, float]]:
        return ((m["path"], m["last_modified"].timestamp()) for m in self._metas(prefix))

    def _metas(self, prefix: str) -> Iterator[Any]:
        # obstore matches whole segments only, so list the enclosing "directory" and filter.
        parent = prefix.rstrip("/") if prefix.endswith("/") else prefix.rpartition("/")[0]
        try:
            for chunk in obstore_api().list(self.store, parent or None, chunk_size=LIST_CHUNK):
                for meta in chunk:
                    if meta["path"].startswith(prefix):
                        yield meta
        except _failures() as exc:
            self._raise(exc, "LIST", prefix)

    @_forksafe
    def _exists(self, key: str) -> bool:
        try:
            self._head(key)
        except NotFoundError:
            return False
        return True
