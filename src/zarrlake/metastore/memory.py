"""In-memory metastore for tests and ephemeral repositories.

``memory://NAME`` names a process-wide store: every open of the same name shares the data.
Versions come from one process-wide counter, so a version is never reused, even after a
key is deleted and recreated (no ABA for `set_if`).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from typing import Any

from zarrlake._util import runtime
from zarrlake._util.forksafe import PerProcess
from zarrlake.errors import ConfigurationError, InvalidInputError
from zarrlake.metastore import register
from zarrlake.metastore.base import Item, MetaStoreBackend
from zarrlake.metastore.checks import check_found

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
    """The shared contents behind every handle opened on one memory:// name. A forked child
    keeps a copy of the contents, with a lock of its own."""

    def __init__(self) -> None:
        self.lock = PerProcess(threading.Lock)
        self.partitions: dict[str, _Partition] = {}


_NAMED: dict[str, _Data] = {}
_NAMED_LOCK = PerProcess(threading.Lock)


def _parse(url: str) -> str:
    if not isinstance(url, str) or not url.lower().startswith("memory://"):
        raise InvalidInputError(f"not a memory metastore URL: {url!r}; write it as memory://NAME")
    name = url[len("memory://") :]
    if not name:
        raise InvalidInputError(f"memory metastore URL {url!r} needs a name: memory://NAME")
    return name


class MemoryMetaStore(MetaStoreBackend):
    """A handle on the process-wide in-memory store of one name; thread-safe."""

    remote = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = _parse(url)
        with _NAMED_LOCK.get():
            self._data: _Data | None = _NAMED.setdefault(self.name, _Data())

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickling reopens by name: the same data within this process.
        return (MemoryMetaStore, (self.url,))

    def _d(self) -> _Data:
        if self._data is None:
            raise ConfigurationError(f"metastore {self.url} is closed; open the repository again")
        return self._data

    def _get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        data = self._d()
        with data.lock.get():
            part = data.partitions.get(partition)
            return None if part is None else part.values.get(key)

    def _scan(self, partition: str, low: bytes, high: bytes | None, size: int) -> list[Item]:
        data = self._d()
        with data.lock.get():  # copied under the lock, yielded outside it
            part = data.partitions.get(partition)
            if part is None:
                return []
            i = bisect.bisect_left(part.keys, low)
            page_keys = part.keys[i : i + size]
            if high is not None:
                page_keys = page_keys[: bisect.bisect_left(page_keys, high)]
            return [(k, *part.values[k]) for k in page_keys]

    def _write(
        self, partition: str, writes: list[tuple[bytes, bytes]], deletes: list[bytes]
    ) -> list[int]:
        return self._write_if(partition, writes, deletes, {})

    def _set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        data = self._d()
        with data.lock.get():
            part = data.partitions.setdefault(partition, _Partition())
            current = part.values.get(key)
            check_found(partition, key, None if current is None else current[1], expected)
            return part.put(key, value)

    def _delete_if(self, partition: str, key: bytes, expected: int) -> None:
        data = self._d()
        with data.lock.get():
            part = data.partitions.setdefault(partition, _Partition())
            current = part.values.get(key)
            check_found(partition, key, None if current is None else current[1], expected)
            part.remove(key)

    def _write_if(
        self,
        partition: str,
        writes: list[tuple[bytes, bytes]],
        deletes: list[bytes],
        checks: dict[bytes, int | None],
    ) -> list[int]:
        data = self._d()
        with data.lock.get():
            part = data.partitions.setdefault(partition, _Partition())
            for key, expected in checks.items():
                current = part.values.get(key)
                check_found(partition, key, None if current is None else current[1], expected)
            for key in deletes:
                part.remove(key)
            return [part.put(key, value) for key, value in writes]

    def clock(self) -> float:
        """This process's clock (`runtime.now`): a memory store has no other client."""
        return runtime.now()

    def _drop_partition(self, partition: str) -> None:
        data = self._d()
        with data.lock.get():
            data.partitions.pop(partition, None)

    def close(self) -> None:
        """Detach this handle; the named data stays for other handles in the process."""
        self._data = None


register("memory", MemoryMetaStore)
