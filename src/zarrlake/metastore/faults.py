"""Fault injection for metastore tests, after Materialize persist's "unreliable" consensus:
operations fail before running, or run and then lose their response, at seeded random.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Iterator

from zarrlake.errors import CASFailedError, InvalidInputError, TransientError
from zarrlake.metastore.base import Item, MetaStore

SCAN_FAULT_EVERY = 100
"""A scan may also fail after every this many items, as if a page fetch failed."""


class FaultyMetaStore(MetaStore):
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
        for name, rate in (("error_rate", error_rate), ("lost_response_rate", lost_response_rate)):
            if not 0.0 <= rate <= 1.0:
                raise InvalidInputError(f"{name} must be within [0, 1], not {rate!r}")
        if latency < 0:
            raise InvalidInputError(f"latency must be >= 0 seconds, not {latency!r}")
        self.inner = inner
        self.url = inner.url
        self.error_rate = error_rate
        self.lost_response_rate = lost_response_rate
        self.latency = latency
        self.errors_injected = 0
        self.responses_lost = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FaultyMetaStore({self.inner!r})"

    def _before(self, op: str) -> None:
        """Maybe fail without running the operation (and add the configured latency)."""
        if self.latency:
            time.sleep(self.latency)  # the injected fault itself, not synchronisation
        with self._lock:
            if self.error_rate and self._rng.random() < self.error_rate:
                self.errors_injected += 1
                raise TransientError(f"injected fault: {op} failed before it ran")

    def _lose_response(self, op: str) -> None:
        """Maybe pretend the response of an operation that ran was lost."""
        with self._lock:
            if self.lost_response_rate and self._rng.random() < self.lost_response_rate:
                self.responses_lost += 1
                raise TransientError(f"injected fault: {op} ran but its response was lost")

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
