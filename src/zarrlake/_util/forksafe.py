"""Fork safety in one place: a forked child must never use, or even close, its parent's locks,
connections or pools (a lock may be held by a thread that does not exist in the child; closing
a socket would end the parent's session)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

_PARKED: list[Any] = []
"""Resources inherited across fork(): referenced forever so the child never finalises them."""

_LIVE: weakref.WeakSet[PerProcess[Any]] = weakref.WeakSet()


def park(resource: Any) -> None:
    """Keep an inherited resource alive and untouched for the rest of this process."""
    _PARKED.append(resource)


class PerProcess[T]:
    """A value owned by the process that made it (a lock, a pool, a set of connections).

    `get()` returns this process's value, making it with `factory` on first use and again in
    a forked child, where the parent's value is parked instead of used or closed. `put` hands
    it a value made elsewhere (without a factory, only `put` gives it one).
    """

    __slots__ = ("__weakref__", "_factory", "_lock", "_pid", "_value")

    def __init__(self, factory: Callable[[], T] | None = None) -> None:
        self._factory = factory
        self._value: T | None = None
        self._pid = 0
        self._lock = threading.Lock()
        _LIVE.add(self)

    def get(self) -> T:
        """This process's value, made on first use and again after a fork."""
        value = self._value
        if value is not None and self._pid == os.getpid():
            return value
        with self._lock:
            pid = os.getpid()
            if self._value is None or self._pid != pid:
                if self._factory is None:
                    raise LookupError("no value for this process, and no factory to make one")
                if self._value is not None:
                    park(self._value)
                self._value, self._pid = self._factory(), pid
            return self._value

    def put(self, value: T) -> None:
        """Make `value` this process's value (a parent's is parked)."""
        with self._lock:
            if self._value is not None and self._pid != os.getpid():
                park(self._value)
            self._value, self._pid = value, os.getpid()

    def take(self) -> T | None:
        """Remove and return this process's value (None if there is none), e.g. to close it;
        a value inherited from the parent is parked, not returned."""
        with self._lock:
            value, self._value = self._value, None
            if value is not None and self._pid != os.getpid():
                park(value)
                return None
            return value


class ForkGuard:
    """Keeps fork() out of a C library's calls. A thread inside SQLite may hold one of its
    process-wide mutexes, and a child forked meanwhile deadlocks on its first connection
    (its parent's thread, which would release it, does not exist there). fork() waits, at
    most `wait` seconds, until no guarded call is in flight; no call starts until it is done."""

    def __init__(self, wait: float = 10.0) -> None:
        self.wait = wait
        self._reset()
        os.register_at_fork(
            before=self._before, after_in_parent=self._after, after_in_child=self._reset
        )

    def _reset(self) -> None:
        # A plain lock under the condition: an RLock costs more and no call nests on it.
        self._cond = threading.Condition(threading.Lock())  # the parent's may be held here
        self._active = 0
        self._forking = 0
        self._depth = threading.local()
        self._call = _Guarded(self)

    @property
    def forking(self) -> bool:
        """Whether a fork() is waiting for, or under way after, the calls in flight."""
        return self._forking > 0

    def call(self) -> _Guarded:
        """A guarded call, as a context manager (nested calls of a thread count once)."""
        return self._call

    def _enter(self) -> None:
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._cond:
                while self._forking:
                    self._cond.wait()
                self._active += 1
        self._depth.n = depth + 1

    def _exit(self) -> None:
        depth = self._depth.n - 1
        self._depth.n = depth
        if depth == 0:
            with self._cond:
                self._active -= 1
                if self._forking:  # only a fork waits for calls to end
                    self._cond.notify_all()

    def _before(self) -> None:
        mine = 1 if getattr(self._depth, "n", 0) else 0  # a fork from inside a call
        with self._cond:
            self._forking += 1
            self._cond.wait_for(lambda: self._active <= mine, timeout=self.wait)

    def _after(self) -> None:
        with self._cond:
            self._forking -= 1
            self._cond.notify_all()


class _Guarded:
    """`ForkGuard.call()`: a class, not a generator, as it runs around every SQLite call
    (its state is the guard's, per thread, so one instance serves every call)."""

    __slots__ = ("guard",)

    def __init__(self, guard: ForkGuard) -> None:
        self.guard = guard

    def __enter__(self) -> None:
        self.guard._enter()

    def __exit__(self, *exc: object) -> None:
        self.guard._exit()


def _after_fork_in_child() -> None:
    for holder in list(_LIVE):
        holder._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
