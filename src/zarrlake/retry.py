"""Retrying with capped, jittered exponential backoff, shared by the storage layers."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from zarrlake.errors import TransientError


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a transient failure."""

    attempts: int = 8
    base_delay: float = 0.005
    max_delay: float = 0.5

    def delays(self) -> list[float]:
        """Sleep before each retry: full jitter over a doubling cap ("exponential backoff
        and jitter"), so many clients retrying at once spread out."""
        return [
            random.uniform(0, min(self.max_delay, self.base_delay * 2**i))
            for i in range(self.attempts - 1)
        ]


DEFAULT_POLICY = RetryPolicy()


def retry[T](fn: Callable[[], T], policy: RetryPolicy = DEFAULT_POLICY) -> T:
    """Call `fn` until it does not raise TransientError, at most `policy.attempts` times."""
    for delay in policy.delays():
        try:
            return fn()
        except TransientError:
            time.sleep(delay)
    return fn()
