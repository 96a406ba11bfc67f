"""A metastore wrapper that retries transient failures, including a compare-and-swap whose
response was lost after the write landed.

The lost-response rule for `set_if` assumes that callers write a value unique per attempt
(zarrlake's values carry commit ids, session ids or timestamps): finding our exact value
under a new version then means our write landed, not someone else's. A caller that writes
a value another client may also write should re-check after a CASFailedError.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from zarrlake.errors import CASFailedError, TransientError
from zarrlake.metastore import check_value
from zarrlake.metastore.base import Item, MetaStore
from zarrlake.retry import DEFAULT_POLICY, RetryPolicy, retry


class RetryingMetaStore(MetaStore):
    """Retries TransientError from `inner` with jittered backoff (zarrlake.retry)."""

    def __init__(self, inner: MetaStore, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self.inner = inner
        self.policy = policy
        self.url = inner.url

    def __repr__(self) -> str:
        return f"RetryingMetaStore({self.inner!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (RetryingMetaStore, (self.inner, self.policy))

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        return retry(lambda: self.inner.get(partition, key), self.policy)

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        # A failed scan restarts just after the last key it yielded; the retry budget
        # counts consecutive failures, so a long scan that keeps progressing completes.
        delays = self.policy.delays()
        failures = 0
        produced = 0
        while True:
            remaining = None if limit is None else limit - produced
            if remaining is not None and remaining <= 0:
                return
            items: Iterator[Item] | None = None
            while True:
                try:
                    if items is None:
                        items = self.inner.scan(partition, start, prefix, remaining)
                    item = next(items)
                except StopIteration:
                    return
                except TransientError:
                    if failures >= len(delays):
                        raise
                    time.sleep(delays[failures])
                    failures += 1
                    break
                failures = 0
                produced += 1
                start = item[0] + b"\x00"
                yield item

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        return retry(lambda: self.inner.set(partition, key, value), self.policy)

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        batch = list(items)  # an iterator could only be consumed once
        retry(lambda: self.inner.set_many(partition, batch), self.policy)

    def delete(self, partition: str, key: bytes) -> None:
        retry(lambda: self.inner.delete(partition, key), self.policy)

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        value = check_value(value)
        delays = self.policy.delays()
        attempt = 0
        uncertain = False  # True once a set_if may have landed without us hearing back
        while True:
            try:
                if uncertain:
                    current = self.inner.get(partition, key)
                    if current is not None and current[0] == value and current[1] != expected:
                        return current[1]  # our earlier attempt landed; its reply was lost
                    found = None if current is None else current[1]
                    if found != expected:
                        raise CASFailedError(
                            f"{partition}/{key!r}: expected version {expected}, found {found}"
                        )
                return self.inner.set_if(partition, key, value, expected)
            except TransientError:
                if attempt >= len(delays):
                    raise
                time.sleep(delays[attempt])
                attempt += 1
                uncertain = True

    def drop_partition(self, partition: str) -> None:
        retry(lambda: self.inner.drop_partition(partition), self.policy)

    def close(self) -> None:
        self.inner.close()
