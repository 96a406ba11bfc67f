"""The object-storage interface: immutable and mutable blobs addressed by string keys."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterator

ByteRange = tuple[int, int]
"""A half-open byte range (start, end) within one object."""


class ObjectStore(ABC):
    """A flat namespace of blobs. Keys are '/'-separated relative paths.

    Sync methods are the primitive; the async variants run them off the event loop so
    zarr's async store API can overlap many requests. Backends with native async I/O
    override the async variants.
    """

    url: str

    @abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """The object's bytes (or the given range of them); NotFoundError if absent."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write the object atomically: readers see the old bytes or the new, never a mix."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object unless it exists, atomically; True if this call wrote it."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys that start with `prefix`, in no particular order."""

    def exists(self, key: str) -> bool:
        """Whether the object exists."""
        from zarrlake.errors import NotFoundError

        try:
            self.get(key, (0, 0))
        except NotFoundError:
            return False
        return True

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store is unusable afterwards."""

    async def get_async(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return await asyncio.to_thread(self.get, key, byte_range)

    async def put_async(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self.put, key, data)

    async def put_if_absent_async(self, key: str, data: bytes) -> bool:
        return await asyncio.to_thread(self.put_if_absent, key, data)

    async def delete_async(self, key: str) -> None:
        await asyncio.to_thread(self.delete, key)

    async def exists_async(self, key: str) -> bool:
        return await asyncio.to_thread(self.exists, key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
