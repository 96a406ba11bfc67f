"""In-memory metastore for tests and ephemeral repositories.

``memory://NAME`` names a process-wide store: every open of the same name shares the data.
Versions come from one process-wide counter, so a version is never reused, even after a
key is deleted and recreated (no ABA for `set_if`).
"""

from __future__ import annotations

import bisect
import itertools
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from zarrlake.errors import CASFailedError, ConfigurationError, InvalidInputError
from zarrlake.metastore import (
    check_expected,
    check_items,
    check_key,
    check_limit,
    check_partition,
    check_value,
    paged_scan,
    scan_range,
)
from zarrlake.metastore.base import Item, MetaStore

_VERSIONS = itertools.count(1)


class _Partition:
    """One partition: sorted keys for range scans plus a dict for point lookups."""

    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: dict[bytes, tuple[bytes, int]] = {}

    def put(self, key: bytes, value: bytes) -> int:
        version = next(_VERSIONS)
        if key not in self.values:
            bisect.insort(self.keys, key)
        self.values[key] = (value, version)
        return version

    def remove(self, key: bytes) -> None:
        if self.values.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]


class _Data:
    """The shared contents behind every handle opened on one memory:// name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.partitions: dict[str, _Partition] = {}


_REGISTRY: dict[str, _Data] = {}
_REGISTRY_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # A thread that held a lock at the fork does not exist in the child: fresh locks.
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for data in _REGISTRY.values():
        data.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _parse(url: str) -> str:
    if not isinstance(url, str) or not url.lower().startswith("memory://"):
        raise InvalidInputError(f"not a memory metastore URL: {url!r}")
    name = url[len("memory://") :]
    if not name:
        raise InvalidInputError(f"memory metastore URL {url!r} needs a name: memory://NAME")
    return name


class MemoryMetaStore(MetaStore):
    """A handle on the process-wide in-memory store of one name; thread-safe."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = _parse(url)
        with _REGISTRY_LOCK:
            self._data: _Data | None = _REGISTRY.setdefault(self.name, _Data())

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickling reopens by name: the same data within this process.
        return (MemoryMetaStore, (self.url,))

    def _d(self) -> _Data:
        if self._data is None:
            raise ConfigurationError(f"metastore {self.url} is closed")
        return self._data

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        check_partition(partition)
        check_key(key)
        data = self._d()
        with data.lock:
            part = data.partitions.get(partition)
            return None if part is None else part.values.get(key)

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        check_partition(partition)
        low, high = scan_range(start, prefix)
        limit = check_limit(limit)
        data = self._d()
        return self._scan(data, partition, low, high, limit)

    def _scan(
        self, data: _Data, partition: str, low: bytes, high: bytes | None, limit: int | None
    ) -> Iterator[Item]:
        def fetch(start: bytes, size: int) -> list[Item]:
            with data.lock:  # copied under the lock, yielded outside it
                part = data.partitions.get(partition)
                if part is None:
                    return []
                i = bisect.bisect_left(part.keys, start)
                page_keys = part.keys[i : i + size]
                if high is not None:
                    page_keys = page_keys[: bisect.bisect_left(page_keys, high)]
                return [(k, *part.values[k]) for k in page_keys]

        return paged_scan(fetch, low, limit)

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        check_partition(partition)
        check_key(key)
        value = check_value(value)
        data = self._d()
        with data.lock:
            return data.partitions.setdefault(partition, _Partition()).put(key, value)

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        check_partition(partition)
        changes = check_items(items)
        data = self._d()
        with data.lock:
            part = data.partitions.setdefault(partition, _Partition())
            for key, value in changes.items():
                if value is None:
                    part.remove(key)
                else:
                    part.put(key, value)

    def delete(self, partition: str, key: bytes) -> None:
        check_partition(partition)
        check_key(key)
        data = self._d()
        with data.lock:
            part = data.partitions.get(partition)
            if part is not None:
                part.remove(key)

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        check_partition(partition)
        check_key(key)
        value = check_value(value)
        expected = check_expected(expected)
        data = self._d()
        with data.lock:
            part = data.partitions.setdefault(partition, _Partition())
            current = part.values.get(key)
            found = None if current is None else current[1]
            if found != expected:
                raise CASFailedError(
                    f"{partition}/{key!r}: expected version {expected}, found {found}"
                )
            return part.put(key, value)

    def drop_partition(self, partition: str) -> None:
        check_partition(partition)
        data = self._d()
        with data.lock:
            data.partitions.pop(partition, None)

    def close(self) -> None:
        """Detach this handle; the named data stays for other handles in the process."""
        self._data = None
