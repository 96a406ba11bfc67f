"""Counting wrappers for the object store and the metastore: every call passes through to
the real backend underneath and is counted by method name, so tests can assert on the number
of operations an action costs (not on seconds)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import zarrlake as zl
from zarrlake.connection import RepoContext
from zarrlake.metastore.base import Item, MetaStore
from zarrlake.storage.base import ByteRange, ObjectStore


class CountingObjectStore(ObjectStore):
    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.remote = inner.remote
        self.calls: Counter[str] = Counter()

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        self.calls["get"] += 1
        return self.inner.get(key, byte_range)

    def put(self, key: str, data: bytes) -> None:
        self.calls["put"] += 1
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.calls["put_if_absent"] += 1
        return self.inner.put_if_absent(key, data)

    def delete(self, key: str) -> None:
        self.calls["delete"] += 1
        self.inner.delete(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        self.calls["list"] += 1
        return self.inner.list(prefix)

    def exists(self, key: str) -> bool:
        self.calls["exists"] += 1
        return self.inner.exists(key)

    def close(self) -> None:
        self.inner.close()


class CountingMetaStore(MetaStore):
    def __init__(self, inner: MetaStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.remote = inner.remote
        self.writes_after_reads = inner.writes_after_reads
        self.calls: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()  # write calls by partition

    def holds(self, partition: str) -> bool:
        return self.inner.holds(partition)

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        self.calls["get"] += 1
        return self.inner.get(partition, key)

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        self.calls["scan"] += 1
        return self.inner.scan(partition, start, prefix, limit)

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        self.calls["set"] += 1
        self.writes[partition] += 1
        return self.inner.set(partition, key, value)

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        self.calls["set_many"] += 1
        self.writes[partition] += 1
        self.inner.set_many(partition, items)

    def delete(self, partition: str, key: bytes) -> None:
        self.calls["delete"] += 1
        self.writes[partition] += 1
        self.inner.delete(partition, key)

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        self.calls["set_if"] += 1
        self.writes[partition] += 1
        return self.inner.set_if(partition, key, value, expected)

    def delete_if(self, partition: str, key: bytes, expected: int) -> None:
        self.calls["delete_if"] += 1
        self.writes[partition] += 1
        self.inner.delete_if(partition, key, expected)

    def write_if(self, partition: str, writes, checks) -> list[int]:
        self.calls["write_if"] += 1
        self.writes[partition] += 1
        return self.inner.write_if(partition, writes, checks)

    def clock(self) -> float:
        return self.inner.clock()

    def drop_partition(self, partition: str) -> None:
        self.calls["drop_partition"] += 1
        self.inner.drop_partition(partition)

    def close(self) -> None:
        self.inner.close()


def counted(repo: zl.Repo) -> tuple[zl.Repo, CountingObjectStore, CountingMetaStore]:
    """The same repository through counting wrappers, with cold caches (a fresh Repo)."""
    blobs = CountingObjectStore(repo._context.object_store)
    meta = CountingMetaStore(repo._context.meta)
    ctx = RepoContext(
        repo.spec,
        repo.repo_id,
        blobs,
        meta,
        hash=repo._context.hash,
        format=repo._context.format,
        session_shards=repo._context.session_shards,
    )
    return zl.Repo(ctx), blobs, meta
