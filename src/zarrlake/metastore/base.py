"""The metastore interface: a narrow key-value store with partitions and compare-and-swap.

Modelled on lakeFS's "metadata on KV" design. Keys and values are bytes; keys order by
byte value. Every write gives the key a new version token (an int that is never reused
for that store, and greater than any a write that returned before it began got: staging
takes the latest of several workers' records by it), which `set_if` and `write_if`
compare against. A store also has a clock
(`clock`): the one time every client of it shares, which leases and expiries are judged by.

Three classes: `MetaStore` is the interface callers and wrappers type against;
`MetaStoreBackend` checks every argument once and calls the few primitives a backend
writes (`_get`, `_scan`, `_write`, `_set_if`, `_drop_partition`); `WrapperMetaStore`
passes every call to an inner store through one hook (`_around`), so a wrapper overrides
that hook, or only the calls it changes.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

from zarrlake.errors import InvalidInputError
from zarrlake.metastore.checks import (
    check_checks,
    check_expected,
    check_items,
    check_limit,
    check_meta_key,
    check_partition,
    check_value,
    scan_range,
)

Item = tuple[bytes, bytes, int]
"""(key, value, version) as returned by `scan`."""

Reading = tuple[list[tuple[bytes, int] | None], list[list[Item]]]
"""What `read` returns: each key's (value, version) or None, and each prefix's items."""

T = TypeVar("T")

PAGE_SIZE = 1000
"""Rows fetched per round trip while a scan streams."""


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

    def read(
        self, partition: str, keys: Sequence[bytes] = (), prefixes: Sequence[bytes] = ()
    ) -> Reading:
        """Several keys and whole prefix scans of one partition at once: (each key as
        `get` gives it, each prefix's items in order). A backend that keeps a partition in
        one object answers from one read of it (one request, one view); by default, a
        call each."""
        return (
            [self.get(partition, k) for k in keys],
            [list(self.scan(partition, prefix=p)) for p in prefixes],
        )

    @abstractmethod
    def set(self, partition: str, key: bytes, value: bytes) -> int:
        """Write unconditionally; returns the new version (library code writes through
        set_many and set_if; this one sets up states in tests and tools)."""

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
    def delete_if(self, partition: str, key: bytes, expected: int) -> None:
        """Compare-and-delete: remove the key only if its version is `expected`; raises
        CASFailedError otherwise (also when it is absent). A retried plain delete could
        remove a key someone created anew after ours landed; this one cannot."""

    @abstractmethod
    def write_if(
        self,
        partition: str,
        writes: Iterable[tuple[bytes, bytes | None]],
        checks: Mapping[bytes, int | None],
    ) -> list[int]:
        """One atomic step on one partition: if every key of `checks` is at the version
        given (None: absent), apply `writes` (a None value deletes) and return the new
        version of each written key, in order (deletes give 0); CASFailedError otherwise,
        with nothing written. It takes effect entirely before or entirely after any other
        write of a key it names (a check of an absent key included), so a key it checks
        acts as a fence: whoever changes that key first makes every later `write_if`
        expecting the old version fail, however late it arrives."""

    @abstractmethod
    def drop_partition(self, partition: str) -> None:
        """Delete every key of the partition."""

    def clock(self) -> float:
        """The metastore's time, seconds since the epoch: one clock that every client of
        this store reads alike (a server's, or the host's for a store on one machine), so
        that a time one process writes (a lease, an expiry) is judged by another against
        the same clock, never against its own. By default this host's clock."""
        return time.time()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store is unusable afterwards."""

    remote = True
    """Whether each call is a round trip to a server (False: an embedded store, where
    handing calls to threads costs more than the calls)."""

    writes_after_reads = False
    """Whether a write to a partition is one round trip instead of more once its partition
    was read (the bucket metastore's conditional write names the head it last read): a
    caller about to write may read the partition beside an earlier round trip."""

    def holds(self, partition: str) -> bool:
        """Whether a write to `partition` is one round trip now without reading it first
        (writes_after_reads: this process holds a version of its head): a caller need not
        read it beforehand."""
        return False

    def batch(self) -> AbstractContextManager[None]:
        """Make the calling thread's writes inside the block one transaction where the
        backend can (SQLite: begun at the first write, committed when the block ends);
        elsewhere each write is its own, as outside a block. Each write that returned is
        kept even if the block ends with an error (a crash, or an interrupt, keeps none),
        so a batch only hides the states between its writes from other callers and from a
        crash: callers must be correct either way. The block holds the backend's write
        lock from its first write: it must not wait for another thread's or process's
        write, nor for a lock such a thread may hold while it waits (`commit_batch` first:
        the write lock is always taken after such locks, never before)."""
        return nullcontext()

    def commit_batch(self) -> None:  # noqa: B027 - optional hook
        """Make what the calling thread's batch wrote so far one transaction of its own,
        ending it and releasing the write lock (its later writes begin another); nothing
        outside a batch. Called inside a batch before waiting for a lock that another
        thread may hold while it waits for a write. Raises what committing raised (the
        batch's writes so far then undone), with the lock released either way."""

    def take_turns(self, name: str) -> AbstractContextManager[bool]:
        """Make cooperating callers naming the same `name` run one at a time. Advisory:
        correctness never rests on it (compare-and-swap does); it saves the work a lost
        swap wastes. Yields whether turns are really taken (by default they are not)."""
        return nullcontext(False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def paged_scan(
    fetch: Callable[[bytes, int], list[Item]], low: bytes, limit: int | None
) -> Iterator[Item]:
    """Stream a scan page by page (keyset pagination): `fetch(low, n)` returns up to n items
    with key >= low, in order. Each page is fetched whole before it is yielded, so no read
    transaction or lock is held while the caller works; a scan is therefore not one snapshot."""
    remaining = limit
    while remaining is None or remaining > 0:
        size = PAGE_SIZE if remaining is None else min(PAGE_SIZE, remaining)
        page = fetch(low, size)
        yield from page
        if len(page) < size:
            return
        if remaining is not None:
            remaining -= len(page)
        low = page[-1][0] + b"\x00"


class MetaStoreBackend(MetaStore):
    """A metastore backend: the public methods check their arguments (InvalidInputError for
    bad ones) and call the primitives below with clean values."""

    @abstractmethod
    def _get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        """(value, version) of the key, or None."""

    @abstractmethod
    def _scan(self, partition: str, low: bytes, high: bytes | None, size: int) -> list[Item]:
        """One page: up to `size` items with low <= key (< high, unless None), in order."""

    @abstractmethod
    def _write(
        self, partition: str, writes: list[tuple[bytes, bytes]], deletes: list[bytes]
    ) -> list[int]:
        """In one transaction, delete `deletes` and write `writes` (both sorted by key, no key
        twice); returns the new version of each write, in order."""

    @abstractmethod
    def _set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        """Compare-and-swap as `set_if`."""

    @abstractmethod
    def _delete_if(self, partition: str, key: bytes, expected: int) -> None:
        """Compare-and-delete as `delete_if`."""

    @abstractmethod
    def _write_if(
        self,
        partition: str,
        writes: list[tuple[bytes, bytes]],
        deletes: list[bytes],
        checks: dict[bytes, int | None],
    ) -> list[int]:
        """`write_if` with clean arguments: `writes` and `deletes` sorted by key, no key
        twice; returns the new version of each write, in order."""

    @abstractmethod
    def _drop_partition(self, partition: str) -> None:
        """Delete every key of the partition."""

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        """Check the arguments, then read the key through the backend's `_get`."""
        return self._get(check_partition(partition), check_meta_key(key))

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        """Check the arguments, then page through the backend's `_scan` up to `limit` items."""
        check_partition(partition)
        low, high = scan_range(start, prefix)
        limit = check_limit(limit)
        return paged_scan(lambda at, size: self._scan(partition, at, high, size), low, limit)

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        """Check the arguments, then write one key; returns its new version."""
        check_partition(partition)
        return self._write(partition, [(check_meta_key(key), check_value(value))], [])[0]

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Check the arguments, then write and delete the batch in one `_write` (a None value
        deletes)."""
        check_partition(partition)
        changes = check_items(items)
        if changes:
            writes = sorted((k, v) for k, v in changes.items() if v is not None)
            self._write(partition, writes, sorted(k for k, v in changes.items() if v is None))

    def delete(self, partition: str, key: bytes) -> None:
        """Check the arguments, then delete the key through `_write`."""
        self._write(check_partition(partition), [], [check_meta_key(key)])

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        """Check the arguments, then compare-and-swap through the backend's `_set_if`."""
        check_partition(partition)
        return self._set_if(
            partition, check_meta_key(key), check_value(value), check_expected(expected)
        )

    def delete_if(self, partition: str, key: bytes, expected: int) -> None:
        """Check the arguments, then compare-and-delete (see `MetaStore.delete_if`)."""
        check_partition(partition)
        if expected is None:
            raise InvalidInputError("delete_if needs the version to expect, not None")
        self._delete_if(partition, check_meta_key(key), check_expected(expected))  # type: ignore[arg-type]

    def write_if(
        self,
        partition: str,
        writes: Iterable[tuple[bytes, bytes | None]],
        checks: Mapping[bytes, int | None],
    ) -> list[int]:
        """Check the arguments, then run the guarded write through `_write_if` (see
        `MetaStore.write_if`)."""
        check_partition(partition)
        batch = list(writes)
        changes = check_items(batch)
        checked = check_checks(checks)
        puts = sorted((k, v) for k, v in changes.items() if v is not None)
        versions = dict(
            zip(
                [k for k, _ in puts],
                self._write_if(
                    partition, puts, sorted(k for k, v in changes.items() if v is None), checked
                ),
                strict=True,
            )
        )
        return [versions.get(k, 0) for k, _ in batch]

    def drop_partition(self, partition: str) -> None:
        """Check the partition name, then drop it through `_drop_partition`."""
        self._drop_partition(check_partition(partition))


@dataclass(frozen=True)
class Call:
    """One metastore call as a wrapper sees it: the operation, its partition, the keys it
    names (a scan: its prefix or start), and whether it writes."""

    op: str
    partition: str
    keys: tuple[bytes, ...]
    write: bool


class WrapperMetaStore(MetaStore):
    """Passes every call to `inner` (after zarr's WrapperStore) through one hook, `_around`,
    so a wrapper that treats every call alike (faults, retries, a scheduler) overrides that
    one method; `inner` may be swapped."""

    def __init__(self, inner: MetaStore) -> None:
        self.inner = inner
        self.url = inner.url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def _around(self, call: Call, run: Callable[[], T]) -> T:
        """Run `call` on the inner store (`run`); wrappers add their behaviour here."""
        return run()

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        """Pass to the inner store."""
        return self._around(
            Call("get", partition, (key,), False), lambda: self.inner.get(partition, key)
        )

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        """Pass to the inner store (the items stream after the hook returns)."""
        call = Call("scan", partition, (prefix if prefix is not None else start,), False)
        return self._around(call, lambda: self.inner.scan(partition, start, prefix, limit))

    def read(
        self, partition: str, keys: Sequence[bytes] = (), prefixes: Sequence[bytes] = ()
    ) -> Reading:
        """Pass to the inner store (one call: a hook sees the keys, then the prefixes)."""
        call = Call("read", partition, (*keys, *prefixes), False)
        return self._around(call, lambda: self.inner.read(partition, keys, prefixes))

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        """Pass to the inner store."""
        return self._around(
            Call("set", partition, (key,), True), lambda: self.inner.set(partition, key, value)
        )

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Pass to the inner store (the items are buffered, so a hook may run them again)."""
        batch = list(items)
        call = Call("set_many", partition, tuple(k for k, _ in batch), True)
        self._around(call, lambda: self.inner.set_many(partition, batch))

    def delete(self, partition: str, key: bytes) -> None:
        """Pass to the inner store."""
        self._around(
            Call("delete", partition, (key,), True), lambda: self.inner.delete(partition, key)
        )

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        """Pass to the inner store."""
        return self._around(
            Call("set_if", partition, (key,), True),
            lambda: self.inner.set_if(partition, key, value, expected),
        )

    def delete_if(self, partition: str, key: bytes, expected: int) -> None:
        """Pass to the inner store."""
        self._around(
            Call("delete_if", partition, (key,), True),
            lambda: self.inner.delete_if(partition, key, expected),
        )

    def write_if(
        self,
        partition: str,
        writes: Iterable[tuple[bytes, bytes | None]],
        checks: Mapping[bytes, int | None],
    ) -> list[int]:
        """Pass to the inner store (the writes are buffered, so a hook may run them again)."""
        batch, guards = list(writes), dict(checks)
        call = Call("write_if", partition, tuple(k for k, _ in batch) + tuple(guards), True)
        return self._around(call, lambda: self.inner.write_if(partition, batch, guards))

    def drop_partition(self, partition: str) -> None:
        """Pass to the inner store."""
        self._around(
            Call("drop_partition", partition, (), True),
            lambda: self.inner.drop_partition(partition),
        )

    def clock(self) -> float:
        """The inner store's clock."""
        return self.inner.clock()

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()

    @property
    def remote(self) -> bool:  # type: ignore[override]
        """Whether the inner store is remote."""
        return self.inner.remote

    @property
    def writes_after_reads(self) -> bool:  # type: ignore[override]
        """Whether the inner store's writes are cheaper after a read (see MetaStore)."""
        return self.inner.writes_after_reads

    def holds(self, partition: str) -> bool:
        """Whether the inner store holds `partition`'s head (see MetaStore)."""
        return self.inner.holds(partition)

    def batch(self) -> AbstractContextManager[None]:
        """The inner store's batch of writes (see MetaStore.batch)."""
        return self.inner.batch()

    def commit_batch(self) -> None:
        """The inner store's (see MetaStore.commit_batch)."""
        self.inner.commit_batch()

    def take_turns(self, name: str) -> AbstractContextManager[bool]:
        """The inner store's turn-taking lock for `name`."""
        return self.inner.take_turns(name)
