"""The object-storage interface: immutable and mutable blobs addressed by string keys.

Three classes, as for the metastore: `ObjectStore` is the interface callers and wrappers type
against; `ObjectStoreBackend` checks every argument once and calls the primitives a backend
writes (`_get`, `_put`, `_put_if_absent`, `_delete`, `_list`, `_exists`, for stores with
conditional updates `_get_tagged`, `_put_if`, and for stores with conditional deletes `_tag`,
`_delete_if`, `_retag`); `WrapperObjectStore` passes every call to an inner store, so a
wrapper overrides only what it changes.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Iterator

from zarrlake.errors import ConfigurationError, NotFoundError
from zarrlake.storage.keys import check_object_key, check_prefix, check_range

ByteRange = tuple[int, int]
"""A half-open byte range (start, end) within one object."""


class ObjectStore(ABC):
    """A flat namespace of blobs. Keys are '/'-separated relative paths."""

    url: str
    remote: bool = True
    """Whether each call is a round trip to a server (False: a local directory or memory,
    where handing small calls to threads costs more than the calls)."""

    @abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """The object's bytes (or the given half-open range of them, clamped to the object's
        end); NotFoundError if absent."""

    @abstractmethod
    def put(self, key: str, data: bytes | memoryview) -> None:
        """Write the object atomically: readers see the old bytes or the new, never a mix."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        """Create the object unless it exists, atomically; True if this call wrote it."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys that start with `prefix` (as a string, not only whole segments), any order."""

    def list_parallel(self, prefix: str = "", ways: int = 32) -> Iterator[str]:
        """The keys `list` gives, listed up to `ways` key ranges at once where that saves
        time (a remote store holding many); by default simply `list`."""
        return self.list(prefix)

    def list_modified(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        """(key, last-modified time as the storage service reports it, POSIX seconds) for
        the keys `list` gives: ages judged on one clock, the service's. ConfigurationError
        where the backend cannot tell."""
        raise ConfigurationError(
            f"{self!r} does not report modification times; use a store that does"
        )

    def delete_many(self, keys: builtins.list[str]) -> None:  # (`list` is a method)
        """Remove several objects (missing ones are no error); a backend with a bulk delete
        (S3's DeleteObjects) sends them together."""
        for key in keys:
            self.delete(key)

    def exists(self, key: str) -> bool:
        """Whether the object exists (default: a zero-length read)."""
        try:
            self.get(key, (0, 0))
        except NotFoundError:
            return False
        return True

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """The object's bytes and its entity tag (ETag); NotFoundError if absent. A write of
        other bytes changes the tag (on S3 it is the bytes' MD5, so bytes that must be told
        apart must differ). ConfigurationError on a store without conditional updates."""
        raise _no_conditional_updates(self)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Conditional write: create the object only if it is absent (`tag` None), or replace
        it only while its entity tag is still `tag`; returns the new tag. CASFailedError if the
        condition does not hold (also when a tagged object is gone).

        A lost reply surfaces as TransientError: the write may or may not have landed, and
        only the caller can tell (by reading back something it wrote), so no wrapper retries
        this call. ConfigurationError on a store without conditional updates."""
        raise _no_conditional_updates(self)

    def tag(self, key: str) -> str:
        """The object's entity tag now; NotFoundError if absent. ConfigurationError on a
        store without conditional deletes (a local directory: see `storage/local.py`)."""
        raise _no_conditional_deletes(self)

    def delete_if(self, key: str, tag: str) -> bool:
        """Delete the object only while its entity tag is still `tag` (S3's DeleteObject with
        If-Match): True if this call deleted it, False if it changed or is gone. No wrapper
        retries it: a garbage collector sends each once, since a second request for the
        same object, delayed in the network, could remove it after it was written again.
        ConfigurationError on a store without conditional deletes."""
        raise _no_conditional_deletes(self)

    def retag(self, key: str) -> str:
        """Write the object again with its own bytes so that its entity tag changes, and
        return the new tag: a `delete_if` still holding the old one can no longer remove it.
        (On S3 a plain upload's tag is the bytes' MD5 and an upload in parts' ends in -N, so
        bytes written again the same way keep their tag: this switches between the two.)
        NotFoundError if absent; ConfigurationError on a store without conditional deletes."""
        raise _no_conditional_deletes(self)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store is unusable afterwards."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class ObjectStoreBackend(ObjectStore):
    """An object-storage backend: the public methods check keys, ranges and prefixes
    (InvalidInputError naming the key) and call the primitives below with clean values."""

    @abstractmethod
    def _get(self, key: str, byte_range: ByteRange | None) -> bytes:
        """The object's bytes or a checked range of them (start <= end)."""

    @abstractmethod
    def _put(self, key: str, data: bytes | memoryview) -> None:
        """Write atomically."""

    @abstractmethod
    def _put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        """Create unless it exists; True if this call wrote it."""

    @abstractmethod
    def _delete(self, key: str) -> None:
        """Remove; a missing key is not an error."""

    @abstractmethod
    def _list(self, prefix: str) -> Iterator[str]:
        """Keys starting with `prefix`."""

    @abstractmethod
    def _exists(self, key: str) -> bool:
        """Whether the object exists."""

    def _get_tagged(self, key: str) -> tuple[bytes, str]:
        """(bytes, entity tag); by default conditional updates are not supported."""
        raise _no_conditional_updates(self)

    def _put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Conditional write as `put_if`; by default not supported."""
        raise _no_conditional_updates(self)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Check the key and byte range, then read through the backend's `_get`."""
        check_object_key(key)
        return self._get(key, None if byte_range is None else check_range(key, byte_range))

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Check the key, then write through the backend's `_put`."""
        self._put(check_object_key(key), data)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        """Check the key, then create through `_put_if_absent`; False if it exists."""
        return self._put_if_absent(check_object_key(key), data)

    def delete(self, key: str) -> None:
        """Check the key, then delete through the backend's `_delete`."""
        self._delete(check_object_key(key))

    def delete_many(self, keys: list[str]) -> None:
        """Check the keys, then delete them through `_delete_many`."""
        self._delete_many([check_object_key(k) for k in keys])

    def _delete_many(self, keys: list[str]) -> None:
        """Remove several; by default one at a time."""
        for key in keys:
            self._delete(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        """Check the prefix, then list through the backend's `_list`."""
        check_prefix(prefix)
        return self._list(prefix)

    def list_modified(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        """Check the prefix, then list through the backend's `_list_modified`."""
        check_prefix(prefix)
        return self._list_modified(prefix)

    def _list_modified(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, service's last-modified time); by default not supported."""
        return super().list_modified(prefix)

    def exists(self, key: str) -> bool:
        """Check the key, then ask the backend's `_exists`."""
        return self._exists(check_object_key(key))

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """Check the key, then read it with its version tag through `_get_tagged`."""
        return self._get_tagged(check_object_key(key))

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Check the key, then update it conditionally on `tag` through `_put_if`."""
        return self._put_if(check_object_key(key), data, tag)

    def _tag(self, key: str) -> str:
        """The entity tag; by default conditional deletes are not supported."""
        raise _no_conditional_deletes(self)

    def _delete_if(self, key: str, tag: str) -> bool:
        """Conditional delete as `delete_if`; by default not supported."""
        raise _no_conditional_deletes(self)

    def _retag(self, key: str) -> str:
        """Rewrite as `retag`; by default not supported."""
        raise _no_conditional_deletes(self)

    def tag(self, key: str) -> str:
        """Check the key, then read its entity tag through `_tag`."""
        return self._tag(check_object_key(key))

    def delete_if(self, key: str, tag: str) -> bool:
        """Check the key, then delete it conditionally on `tag` through `_delete_if`."""
        return self._delete_if(check_object_key(key), tag)

    def retag(self, key: str) -> str:
        """Check the key, then write it again under a new tag through `_retag`."""
        return self._retag(check_object_key(key))


class WrapperObjectStore(ObjectStore):
    """Passes every call to `inner` (after zarr's WrapperStore); `inner` may be swapped."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url

    @property
    def remote(self) -> bool:  # type: ignore[override]
        """Whether the wrapped store is remote."""
        return self.inner.remote

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Pass to the inner store."""
        return self.inner.get(key, byte_range)

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Pass to the inner store."""
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        """Pass to the inner store."""
        return self.inner.put_if_absent(key, data)

    def delete(self, key: str) -> None:
        """Pass to the inner store."""
        self.inner.delete(key)

    def delete_many(self, keys: list[str]) -> None:
        """Pass to the inner store."""
        self.inner.delete_many(keys)

    def list(self, prefix: str = "") -> Iterator[str]:
        """Pass to the inner store."""
        return self.inner.list(prefix)

    def list_parallel(self, prefix: str = "", ways: int = 32) -> Iterator[str]:
        """Pass to the inner store; a wrapper with a `list` of its own (faults, the
        simulator's steps) lists through it instead, so nothing goes around it."""
        if type(self).list is not WrapperObjectStore.list:
            return self.list(prefix)
        return self.inner.list_parallel(prefix, ways)

    def list_modified(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        """Pass to the inner store."""
        return self.inner.list_modified(prefix)

    def exists(self, key: str) -> bool:
        """Pass to the inner store."""
        return self.inner.exists(key)

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """Pass to the inner store."""
        return self.inner.get_tagged(key)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Pass to the inner store."""
        return self.inner.put_if(key, data, tag)

    def tag(self, key: str) -> str:
        """Pass to the inner store."""
        return self.inner.tag(key)

    def delete_if(self, key: str, tag: str) -> bool:
        """Pass to the inner store."""
        return self.inner.delete_if(key, tag)

    def retag(self, key: str) -> str:
        """Pass to the inner store."""
        return self.inner.retag(key)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()


def _no_conditional_deletes(store: ObjectStore) -> ConfigurationError:
    return ConfigurationError(
        f"{store.url} does not support conditional deletes (delete-if-unchanged), which a "
        "garbage collector's fence needs there"
    )


def _no_conditional_updates(store: ObjectStore) -> ConfigurationError:
    return ConfigurationError(
        f"{store.url} does not support conditional updates (replace-if-unchanged), which a "
        "metastore in the repository's own storage needs: use S3 (or memory:// in tests)"
    )
