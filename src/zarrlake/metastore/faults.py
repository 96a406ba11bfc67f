"""Fault injection for metastore tests, after Materialize persist's "unreliable" consensus:
operations fail before running, or run and then lose their response, at seeded random.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from zarrlake.errors import CASFailedError
from zarrlake.faults import CountsFaults, FaultDice
from zarrlake.metastore.base import Item, MetaStore

SCAN_FAULT_EVERY = 100
"""A scan may also fail after every this many items, as if a page fetch failed."""


class FaultyMetaStore(CountsFaults, MetaStore):
    """Wraps `inner`; counts the faults it injects in `errors_injected` and `responses_lost`."""

    def __init__(
        self,
        inner: MetaStore,
        *,
        seed: int,
        error_rate: float = 0.0,
        lost_response_rate: float = 0.0,
        latency: float = 0.0,
    ) -> None:
        self.dice = FaultDice(
            seed=seed,
            error_rate=error_rate,
            lost_response_rate=lost_response_rate,
            latency=latency,
        )
        self.inner = inner
        self.url = inner.url

    def __repr__(self) -> str:
        return f"FaultyMetaStore({self.inner!r})"

    def _before(self, op: str) -> None:
        delay = self.dice.before(op)
        if delay:
            time.sleep(delay)  # the injected fault itself, not synchronisation

    def _lose_response(self, op: str) -> None:
        self.dice.after_write(op)

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        self._before("get")
        return self.inner.get(partition, key)

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        self._before("scan")
        items = self.inner.scan(partition, start, prefix, limit)
        return self._scan(items)

    def _scan(self, items: Iterator[Item]) -> Iterator[Item]:
        for n, item in enumerate(items, 1):
            yield item
            if n % SCAN_FAULT_EVERY == 0:
                self._before("scan page")

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        self._before("set")
        version = self.inner.set(partition, key, value)
        self._lose_response("set")
        return version

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        self._before("set_many")
        self.inner.set_many(partition, items)
        self._lose_response("set_many")

    def delete(self, partition: str, key: bytes) -> None:
        self._before("delete")
        self.inner.delete(partition, key)
        self._lose_response("delete")

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        self._before("set_if")
        try:
            version = self.inner.set_if(partition, key, value, expected)
        except CASFailedError:
            self._lose_response("set_if")  # the "failed" answer can be lost too
            raise
        self._lose_response("set_if")
        return version

    def drop_partition(self, partition: str) -> None:
        self._before("drop_partition")
        self.inner.drop_partition(partition)

    def close(self) -> None:
        self.inner.close()
