"""Fault injection for tests, modelled on Materialize persist's "unreliable" blob wrapper.

Each operation may fail with TransientError before it runs (error_rate); each write may run
and then fail as if its response were lost (lost_response_rate), which is the case that makes
retrying a conditional write subtle; and each operation may be delayed (latency).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator

from zarrlake.errors import InvalidInputError, TransientError
from zarrlake.storage.base import ByteRange, ObjectStore


class FaultyObjectStore(ObjectStore):
    """Wraps a store and injects seeded, reproducible-per-sequence faults (thread-safe).

    `latency` delays each operation by a random time in [0, latency) seconds; here the sleep
    is the fault being injected, not a way to synchronise anything. The counters
    `errors_injected` and `responses_lost` let tests assert that faults really happened.
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        seed: int,
        error_rate: float = 0.0,
        lost_response_rate: float = 0.0,
        latency: float = 0.0,
    ) -> None:
        for name, rate in (("error_rate", error_rate), ("lost_response_rate", lost_response_rate)):
            if not 0.0 <= rate <= 1.0:
                raise InvalidInputError(f"{name} must be within [0, 1], got {rate!r}")
        if latency < 0:
            raise InvalidInputError(f"latency must be >= 0 seconds, got {latency!r}")
        self.inner = inner
        self.url = inner.url
        self.error_rate = error_rate
        self.lost_response_rate = lost_response_rate
        self.latency = latency
        self.errors_injected = 0
        self.responses_lost = 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    # -- the dice ---------------------------------------------------------------------------

    def _before(self, op: str, key: str) -> float:
        """Maybe raise an injected error; return the delay to apply before the operation."""
        with self._lock:
            delay = self._random.uniform(0, self.latency) if self.latency else 0.0
            if self._random.random() < self.error_rate:
                self.errors_injected += 1
                raise TransientError(f"injected fault: {op} {key!r} on {self.url}")
        return delay

    def _after_write(self, op: str, key: str) -> None:
        """Maybe pretend the response of a completed write was lost."""
        with self._lock:
            if self._random.random() < self.lost_response_rate:
                self.responses_lost += 1
                raise TransientError(f"injected fault: response lost: {op} {key!r} on {self.url}")

    def _enter(self, op: str, key: str) -> None:
        delay = self._before(op, key)
        if delay:
            time.sleep(delay)

    async def _enter_async(self, op: str, key: str) -> None:
        delay = self._before(op, key)
        if delay:
            await asyncio.sleep(delay)

    # -- sync -------------------------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        self._enter("GET", key)
        return self.inner.get(key, byte_range)

    def put(self, key: str, data: bytes) -> None:
        self._enter("PUT", key)
        self.inner.put(key, data)
        self._after_write("PUT", key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._enter("PUT-IF-ABSENT", key)
        written = self.inner.put_if_absent(key, data)
        self._after_write("PUT-IF-ABSENT", key)
        return written

    def delete(self, key: str) -> None:
        self._enter("DELETE", key)
        self.inner.delete(key)
        self._after_write("DELETE", key)

    def list(self, prefix: str = "") -> Iterator[str]:
        self._enter("LIST", prefix)
        return self.inner.list(prefix)

    def exists(self, key: str) -> bool:
        self._enter("HEAD", key)
        return self.inner.exists(key)

    def close(self) -> None:
        self.inner.close()

    # -- async ------------------------------------------------------------------------------

    async def get_async(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        await self._enter_async("GET", key)
        return await self.inner.get_async(key, byte_range)

    async def put_async(self, key: str, data: bytes) -> None:
        await self._enter_async("PUT", key)
        await self.inner.put_async(key, data)
        self._after_write("PUT", key)

    async def put_if_absent_async(self, key: str, data: bytes) -> bool:
        await self._enter_async("PUT-IF-ABSENT", key)
        written = await self.inner.put_if_absent_async(key, data)
        self._after_write("PUT-IF-ABSENT", key)
        return written

    async def delete_async(self, key: str) -> None:
        await self._enter_async("DELETE", key)
        await self.inner.delete_async(key)
        self._after_write("DELETE", key)

    async def exists_async(self, key: str) -> bool:
        await self._enter_async("HEAD", key)
        return await self.inner.exists_async(key)
