"""Fault injection for tests, modelled on Materialize persist's "unreliable" blob wrapper.

Each operation may fail with TransientError before it runs (error_rate); each write may run
and then fail as if its response were lost (lost_response_rate), which is the case that makes
retrying a conditional write subtle; and each operation may be delayed (latency).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from zarrlake.faults import CountsFaults, FaultDice
from zarrlake.storage.base import ByteRange, ObjectStore


class FaultyObjectStore(CountsFaults, ObjectStore):
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
        self.dice = FaultDice(
            seed=seed,
            error_rate=error_rate,
            lost_response_rate=lost_response_rate,
            latency=latency,
        )
        self.inner = inner
        self.url = inner.url

    def _before(self, op: str, key: str) -> float:
        return self.dice.before(f"{op} {key!r} on {self.url}")

    def _after_write(self, op: str, key: str) -> None:
        self.dice.after_write(f"{op} {key!r} on {self.url}")

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
