"""A metastore wrapper that retries transient failures, including a compare-and-swap whose
response was lost after the write landed.

The lost-response rule for `set_if` assumes that callers write a value unique per attempt
(zarrlake's values carry commit ids, session ids or timestamps): finding our exact value
under a new version then means our write landed, not someone else's. A caller that writes
a value another client may also write should re-check after a CASFailedError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from zarrlake._util.retry import DEFAULT_POLICY, RetryPolicy, retry
from zarrlake.errors import TransientError
from zarrlake.metastore.base import Call, Item, MetaStore, T, WrapperMetaStore
from zarrlake.metastore.checks import check_checks, check_found, check_items, check_value


class RetryingMetaStore(WrapperMetaStore):
    """Retries TransientError from `inner` (zarrlake._util.retry), resolving lost CAS replies."""

    def __init__(self, inner: MetaStore, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        super().__init__(inner)
        self.policy = policy

    def __reduce__(self) -> tuple[Any, ...]:
        return (RetryingMetaStore, (self.inner, self.policy))

    def _around(self, call: Call, run: Callable[[], T]) -> T:
        """Run the call with retries on transient errors (scans, compare-and-swaps and
        compare-and-deletes have their own rules below)."""
        return retry(run, self.policy)

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        """A failed scan restarts just after the last key it yielded; each item has the
        policy's budget, so a long scan that keeps progressing completes."""
        items: Iterator[Item] | None = None
        produced = 0

        def next_item() -> Item | None:
            nonlocal items
            try:
                if items is None:
                    rest = None if limit is None else limit - produced
                    items = self.inner.scan(partition, start, prefix, rest)
                return next(items, None)
            except TransientError:
                items = None
                raise

        while limit is None or produced < limit:
            try:  # retry() only once an item fails: a scan yields many
                if items is None:
                    rest = None if limit is None else limit - produced
                    items = self.inner.scan(partition, start, prefix, rest)
                item = next(items, None)
            except TransientError as error:
                items = None
                item = retry(next_item, self.policy, failed=error)
            if item is None:
                return
            produced += 1
            start = item[0] + b"\x00"
            yield item

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        """Compare-and-swap with retries, telling a lost reply from a real conflict.

        After a transient failure the attempt may have landed: a retry first reads the key and
        returns its version when it holds our value, so a lost reply is not reported as a
        conflict."""
        value = check_value(value)
        uncertain = False  # True once a set_if may have landed without us hearing back

        def attempt() -> int:
            nonlocal uncertain
            if uncertain:
                current = self.inner.get(partition, key)
                if current is not None and current[0] == value and current[1] != expected:
                    return current[1]  # our earlier attempt landed; its reply was lost
                check_found(partition, key, None if current is None else current[1], expected)
            try:
                return self.inner.set_if(partition, key, value, expected)
            except TransientError:
                uncertain = True
                raise

        return retry(attempt, self.policy)

    def delete_if(self, partition: str, key: bytes, expected: int) -> None:
        """Compare-and-delete with retries; after a lost reply, the key being gone means
        ours landed, another version means someone else's write (CASFailedError)."""
        uncertain = False  # True once a delete_if may have landed without us hearing back

        def attempt() -> None:
            nonlocal uncertain
            if uncertain:
                current = self.inner.get(partition, key)
                if current is None:
                    return  # gone: our earlier attempt landed (or another delete did)
                check_found(partition, key, current[1], expected)
            try:
                self.inner.delete_if(partition, key, expected)
            except TransientError:
                uncertain = True
                raise

        retry(attempt, self.policy)

    def write_if(
        self,
        partition: str,
        writes: Iterable[tuple[bytes, bytes | None]],
        checks: Mapping[bytes, int | None],
    ) -> list[int]:
        """Guarded write with retries, telling a lost reply from a real conflict as
        `set_if` does: after a transient failure, a retry first reads the written keys; our
        values under them (and the deleted ones gone) mean the earlier attempt landed;
        otherwise the checks are read again and the write goes again only if they hold."""
        batch = list(writes)
        changes, guards = check_items(batch), check_checks(checks)
        uncertain = False  # True once an attempt may have landed without us hearing back

        def attempt() -> list[int]:
            nonlocal uncertain
            if uncertain:
                now = {k: self.inner.get(partition, k) for k in {*changes, *guards}}
                if any(v is not None for v in changes.values()) and all(
                    (now[k] is None) if v is None else (now[k] is not None and now[k][0] == v)
                    for k, v in changes.items()
                ):
                    return [0 if v is None else now[k][1] for k, v in batch]  # type: ignore[index]
                for key, expected in guards.items():
                    got = now[key]
                    check_found(partition, key, None if got is None else got[1], expected)
            try:
                return self.inner.write_if(partition, batch, guards)
            except TransientError:
                uncertain = True
                raise

        return retry(attempt, self.policy)
