"""The metastore interface: a narrow key-value store with partitions and compare-and-swap.

Modelled on lakeFS's "metadata on KV" design. Keys and values are bytes; keys order by
byte value. Every write gives the key a new version token (an int that is never reused
for that store), which `set_if` compares against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator

Item = tuple[bytes, bytes, int]
"""(key, value, version) as returned by `scan`."""


class MetaStore(ABC):
    """Partitioned, ordered key-value store with atomic compare-and-swap."""

    url: str

    @abstractmethod
    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        """(value, version) of the key, or None when absent."""

    @abstractmethod
    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        """Items with key >= start (and starting with prefix, if given), in byte order."""

    @abstractmethod
    def set(self, partition: str, key: bytes, value: bytes) -> int:
        """Write unconditionally; returns the new version."""

    @abstractmethod
    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write (value) or delete (None) several keys in one transaction."""

    @abstractmethod
    def delete(self, partition: str, key: bytes) -> None:
        """Remove the key; removing a missing key is not an error."""

    @abstractmethod
    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        """Compare-and-swap: write only if the key's version is `expected` (None: the key
        must not exist). Returns the new version; raises CASFailedError otherwise."""

    @abstractmethod
    def drop_partition(self, partition: str) -> None:
        """Delete every key of the partition."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store is unusable afterwards."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
