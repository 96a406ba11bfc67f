"""Retrying with capped, jittered exponential backoff, shared by the storage layers."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zarrlake.errors import TransientError


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a transient failure."""

    attempts: int = 8
    base_delay: float = 0.005
    max_delay: float = 0.5

    def delays(self) -> Delays:
        """Sleep before each retry: full jitter over a doubling cap ("exponential backoff
        and jitter"), so many clients retrying at once spread out."""
        return Delays(self)


class Delays(Sequence[float]):
    """The retry delays of one call, drawn only when a retry happens (the common case of
    no failure costs nothing)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __len__(self) -> int:
        return self.policy.attempts - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        p = self.policy
        return random.uniform(0, min(p.max_delay, p.base_delay * 2**i))


DEFAULT_POLICY = RetryPolicy()


def retry[T](fn: Callable[[], T], policy: RetryPolicy = DEFAULT_POLICY) -> T:
    """Call `fn` until it does not raise TransientError, at most `policy.attempts` times."""
    delays = policy.delays()
    for attempt in range(len(delays) + 1):
        try:
            return fn()
        except TransientError:
            if attempt == len(delays):
                raise
            time.sleep(delays[attempt])  # drawn only now: the common path draws nothing
    raise AssertionError("unreachable")
