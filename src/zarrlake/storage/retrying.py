"""Retrying TransientError around any ObjectStore, including lost put_if_absent responses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

from zarrlake.errors import NotFoundError, TransientError
from zarrlake.retry import DEFAULT_POLICY, RetryPolicy, retry
from zarrlake.storage.base import ByteRange, ObjectStore


class RetryingObjectStore(ObjectStore):
    """Retries every operation that raises TransientError, with the policy's jittered backoff.

    put, delete and get are idempotent, so retrying them is always safe. put_if_absent is
    not: an attempt may write the object and then lose its response (timeout, dropped
    connection), so the retry finds the object present. When a retry after a transient
    failure reports "already exists", the object is read back; if its bytes equal ours the
    call returns True, because the outcome is exactly as if this call had written it. The
    one case this cannot tell apart is another writer storing identical bytes in the window;
    callers that need a unique winner must make each writer's bytes unique (e.g. include a
    writer id), which content-addressed objects need not.
    """

    def __init__(self, inner: ObjectStore, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self.inner = inner
        self.policy = policy
        self.url = inner.url

    async def _retry_async[T](self, fn: Callable[[], Awaitable[T]]) -> T:
        """Like zarrlake.retry.retry, sleeping with asyncio so the event loop keeps running."""
        delays = self.policy.delays()
        for attempt in range(len(delays) + 1):
            try:
                return await fn()
            except TransientError:
                if attempt == len(delays):
                    raise
                await asyncio.sleep(delays[attempt])
        raise AssertionError("unreachable")

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self.inner.get(key) == bytes(data)
        except NotFoundError:  # deleted again in between: somebody else's business
            return False

    async def _holds_async(self, key: str, data: bytes) -> bool:
        try:
            return await self.inner.get_async(key) == bytes(data)
        except NotFoundError:
            return False

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return retry(lambda: self.inner.get(key, byte_range), self.policy)

    def put(self, key: str, data: bytes) -> None:
        retry(lambda: self.inner.put(key, data), self.policy)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        failed_before = False

        def attempt() -> bool:
            nonlocal failed_before
            try:
                if self.inner.put_if_absent(key, data):
                    return True
                return failed_before and self._holds(key, data)
            except TransientError:
                failed_before = True
                raise

        return retry(attempt, self.policy)

    def delete(self, key: str) -> None:
        retry(lambda: self.inner.delete(key), self.policy)

    def list(self, prefix: str = "") -> Iterator[str]:
        """The listing is collected in full per attempt, so a retry never yields duplicates."""
        return iter(retry(lambda: list(self.inner.list(prefix)), self.policy))

    def exists(self, key: str) -> bool:
        return retry(lambda: self.inner.exists(key), self.policy)

    def close(self) -> None:
        self.inner.close()

    async def get_async(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return await self._retry_async(lambda: self.inner.get_async(key, byte_range))

    async def put_async(self, key: str, data: bytes) -> None:
        await self._retry_async(lambda: self.inner.put_async(key, data))

    async def put_if_absent_async(self, key: str, data: bytes) -> bool:
        failed_before = False

        async def attempt() -> bool:
            nonlocal failed_before
            try:
                if await self.inner.put_if_absent_async(key, data):
                    return True
                return failed_before and await self._holds_async(key, data)
            except TransientError:
                failed_before = True
                raise

        return await self._retry_async(attempt)

    async def delete_async(self, key: str) -> None:
        await self._retry_async(lambda: self.inner.delete_async(key))

    async def exists_async(self, key: str) -> bool:
        return await self._retry_async(lambda: self.inner.exists_async(key))
