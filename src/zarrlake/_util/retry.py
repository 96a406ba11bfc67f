"""Retrying with capped, jittered exponential backoff, on stamina (which runs on tenacity).

`retry(fn, policy)` is the one helper; the lost-reply rules (a conditional write that landed
but whose answer was lost) stay with the wrappers that know them, on top of it.

The first attempt runs outside the library, so a call that succeeds costs one function call:
stamina's machinery costs tens of microseconds per call, as much as a metastore read. Only
after a failure does stamina take over; it re-raises that first failure as its own first
attempt, so the attempt count and the waits are entirely stamina's.

Each scheduled retry logs one line on the `zarrlake.retry` logger naming the failure (the
error names the operation and the object), at DEBUG, and at WARNING before the last attempt:
a flaky network stays quiet, one that is down says so once. stamina's own log line ("a retry
was scheduled", with the details out of sight in `extra`) is left to other callers.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zarrlake._util import runtime
from zarrlake.errors import TransientError

if TYPE_CHECKING:
    import stamina


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a failure.

    `attempts` counts every call including the first (None: no limit; then set `timeout`);
    the wait before retry n is about ``min(max_delay, base_delay * 2**(n-1))`` plus up to
    `base_delay` of random jitter, so many clients retrying at once spread out. `timeout`
    (seconds, None: none) bounds the whole call. `over_retried`: retry errors a lower layer
    already gave up on too (`retried`), for a read whose answer must be had within `timeout`
    (reading back a write whose reply was lost); other policies leave them to that layer.
    """

    attempts: int | None = 8
    base_delay: float = 0.005
    max_delay: float = 0.5
    timeout: float | None = None
    over_retried: bool = False


DEFAULT_POLICY = RetryPolicy()
_DEADLINE: list[float | None] = [None]  # (runtime.monotonic) no retry begins after it


def stop_retrying_after(seconds: float) -> None:
    """End every retry of this process `seconds` from now, whatever its policy (process
    exit: retries nested in layers, each its own policy, must not hold it for minutes)."""
    _DEADLINE[0] = runtime.monotonic() + seconds


def _left() -> float | None:
    """Seconds until the process-wide retry deadline (None: none set)."""
    deadline = _DEADLINE[0]
    return None if deadline is None else deadline - runtime.monotonic()


OURS = "zarrlake"
"""The name stamina reports for zarrlake's retries (its hooks tell ours from others' by it)."""
log = logging.getLogger("zarrlake.retry")


def log_retry(details: stamina.instrumentation.RetryDetails) -> None:
    """One line per scheduled retry: DEBUG, or WARNING when the next attempt is the last."""
    (attempts,) = details.args
    last = isinstance(attempts, int) and details.retry_num + 1 >= attempts
    of = f" of {attempts - 1}" if isinstance(attempts, int) else ""
    log.log(
        logging.WARNING if last else logging.DEBUG,
        "%s; retry %d%s in %.2f s",
        details.caused_by,
        details.retry_num,
        of,
        details.wait_for,
    )


@functools.cache
def _install_hook() -> None:
    """Route stamina's retry hooks: zarrlake's retries to `log_retry`, others' to the hooks
    stamina had (its defaults, or what the application set)."""
    from stamina import instrumentation

    theirs = instrumentation.get_on_retry_hooks()

    def hook(details: instrumentation.RetryDetails) -> None:
        if details.name == OURS:
            log_retry(details)
            return
        for other in theirs:
            other(details)

    instrumentation.set_on_retry_hooks([hook])


def attempts(
    policy: RetryPolicy = DEFAULT_POLICY,
    on: type[Exception] | tuple[type[Exception], ...] = TransientError,
) -> Iterator[stamina.Attempt]:
    """stamina's attempt context managers for `policy`: ``for a in attempts(p): with a: ...``
    (use `retry` unless the loop keeps state between attempts)."""
    import stamina  # imported on the first failure: a process that never retries skips it

    _install_hook()
    timeout, left = policy.timeout, _left()
    if left is not None:
        timeout = max(0.0, left if timeout is None else min(timeout, left))
    context = stamina.retry_context(
        on=_retryable(on, policy.over_retried),
        attempts=policy.attempts,
        timeout=None if timeout is None else dt.timedelta(seconds=timeout),
        wait_initial=policy.base_delay,
        wait_max=policy.max_delay,
        wait_jitter=policy.base_delay,
    )
    return iter(context.with_name(OURS, (policy.attempts,), {}))


def backoff(policy: RetryPolicy, slot: Callable[[], float] | None = None) -> Iterator[int]:
    """The attempts (0, 1, 2, ...) of a loop that retries by itself, such as a
    compare-and-swap that re-reads and rebuilds before trying again. Before attempt n > 0 it
    waits a random time up to ``min(max_delay, base_delay * 2**n)``; with `slot` (seconds,
    read before each wait: how long the attempt just lost was open to others), up to
    ``min(max_delay, max(2 * base_delay, slot()) * 2**(n - 1))``, so that losers of a race
    spread their retries over about the time one attempt takes, whatever the latency. It
    ends after `policy.attempts`, or once `policy.timeout` has passed. Waits and deadline go
    through `runtime`, so the simulator runs these loops on its own clock (stamina's would
    not)."""
    deadline = None if policy.timeout is None else runtime.monotonic() + policy.timeout
    if _DEADLINE[0] is not None:
        deadline = _DEADLINE[0] if deadline is None else min(deadline, _DEADLINE[0])
    n = 0
    while True:
        yield n
        n += 1
        if policy.attempts is not None and n >= policy.attempts:
            return
        if deadline is not None and runtime.monotonic() > deadline:
            return
        span = policy.base_delay * 2 if slot is None else max(policy.base_delay * 2, slot())
        runtime.sleep(random.uniform(0, min(policy.max_delay, span * 2 ** (n - 1))))


def retry[T](
    fn: Callable[[], T],
    policy: RetryPolicy = DEFAULT_POLICY,
    on: type[Exception] | tuple[type[Exception], ...] = TransientError,
    failed: BaseException | None = None,
) -> T:
    """Call `fn` until it does not raise `on`, within `policy`; then re-raise the last error.
    `failed`: the caller made the first attempt itself, and it raised this."""
    if failed is None:
        try:
            return fn()
        except on as error:
            failed = error
    left = _left()
    if (retried(failed) and not policy.over_retried) or (left is not None and left <= 0):
        raise failed
    try:
        for attempt in attempts(policy, on):
            with attempt:
                if failed is not None:  # the first attempt, already made: hand its error over
                    first, failed = failed, None
                    raise first
                return fn()
    except on as error:
        error.retried = True  # type: ignore[attr-defined]  # (see `retried`)
        raise
    raise AssertionError("unreachable: stamina re-raises the last error")


def retried(error: BaseException) -> bool:
    """Whether a retry layer gave up on `error` already (this module's, or obstore's own:
    storage/obstore.py): a layer above does not retry it again, so retries nested in
    layers (a metastore on an object store on obstore) do not multiply."""
    return getattr(error, "retried", False) is True


def _retryable(
    on: type[Exception] | tuple[type[Exception], ...], over_retried: bool
) -> Callable[[Exception], bool]:
    if over_retried:
        return lambda error: isinstance(error, on)
    return lambda error: isinstance(error, on) and not retried(error)
