"""Retrying TransientError around any ObjectStore, including lost put_if_absent responses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from zarrlake._util.retry import DEFAULT_POLICY, RetryPolicy, retry
from zarrlake.errors import NotFoundError, TransientError
from zarrlake.storage.base import ByteRange, ObjectStore, WrapperObjectStore


class RetryingObjectStore(WrapperObjectStore):
    """Retries every operation that raises TransientError (zarrlake._util.retry).

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
        super().__init__(inner)
        self.policy = policy

    def __reduce__(self) -> tuple[Any, ...]:
        return (RetryingObjectStore, (self.inner, self.policy))

    def _holds(self, key: str, data: bytes | memoryview) -> bool:
        try:
            return self.inner.get(key) == bytes(data)
        except NotFoundError:  # deleted again in between: somebody else's business
            return False

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Read with retries on transient errors."""
        return retry(lambda: self.inner.get(key, byte_range), self.policy)

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Write with retries on transient errors."""
        retry(lambda: self.inner.put(key, data), self.policy)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        """Create with retries, telling a lost reply from an existing object.

        After a transient failure the first attempt may have landed: when a retry finds the key
        taken, it counts as created if the stored bytes are ours."""
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
        """Delete with retries on transient errors."""
        retry(lambda: self.inner.delete(key), self.policy)

    def delete_many(self, keys: list[str]) -> None:
        """Delete the keys with retries on transient errors."""
        retry(lambda: self.inner.delete_many(keys), self.policy)

    def list(self, prefix: str = "") -> Iterator[str]:
        """The listing is collected in full per attempt, so a retry never yields duplicates."""
        return iter(retry(lambda: list(self.inner.list(prefix)), self.policy))

    def list_parallel(self, prefix: str = "", ways: int = 32) -> Iterator[str]:
        """As `list`: collected in full per attempt."""
        return iter(retry(lambda: list(self.inner.list_parallel(prefix, ways)), self.policy))

    def list_modified(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        """As `list`: collected in full per attempt."""
        return iter(retry(lambda: list(self.inner.list_modified(prefix)), self.policy))

    def exists(self, key: str) -> bool:
        """Ask with retries on transient errors."""
        return retry(lambda: self.inner.exists(key), self.policy)

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """Read with its version tag, with retries on transient errors."""
        return retry(lambda: self.inner.get_tagged(key), self.policy)

    # put_if is passed through untouched (WrapperObjectStore): after a lost reply only the
    # caller can tell whether its write landed, and a blind retry would report a false
    # "changed since read" for a write that did.

    def tag(self, key: str) -> str:
        """Read the entity tag with retries on transient errors."""
        return retry(lambda: self.inner.tag(key), self.policy)

    def retag(self, key: str) -> str:
        """Write the object again with retries (a repeat only changes its tag again)."""
        return retry(lambda: self.inner.retag(key), self.policy)
