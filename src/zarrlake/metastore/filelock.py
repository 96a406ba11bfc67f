"""Locks on a file beside a database, for the threads and processes of one machine.

Not the `filelock` package: it polls even when it may wait forever, where a blocking flock
wakes the next in line at once, which the SQLite writer queue depends on.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

from zarrlake._util.forksafe import PerProcess
from zarrlake.errors import ConfigurationError

POLL = 0.0005
"""Seconds between looks at a lock another process holds, when waiting with a timeout."""


class FileLock:
    """Turns among threads (a Python lock) and processes (an flock of a file beside the
    database). Both wake the next in line as soon as the lock is free, where SQLite's busy
    handler sleeps in growing steps (up to 100 ms) and serialises badly. A process that dies
    releases it."""

    def __init__(self, path: str) -> None:
        self.threads = threading.Lock()
        self.path = path
        self.fd: int | None = None

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait for the lock, at most `timeout` seconds if given (the flock is then polled,
        every POLL seconds); whether it was taken."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.threads.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            if self.fd is None:
                try:
                    self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                except OSError as e:
                    raise ConfigurationError(
                        f"cannot open the lock file {self.path}: {e}"
                    ) from None
            if deadline is None:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                return True
            while True:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        self.threads.release()
                        return False
                    time.sleep(POLL)
        except BaseException:
            self.threads.release()
            raise

    def release(self) -> None:
        """Unlock the file, then let the next thread of this process take its turn."""
        assert self.fd is not None
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self.threads.release()

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Locks:
    """One process's file locks, one per lock file."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.locks: dict[str, FileLock] = {}

    def of(self, path: str) -> FileLock:
        with self.guard:
            lock = self.locks.get(path)
            if lock is None:
                lock = self.locks[path] = FileLock(path)
            return lock


_LOCKS = PerProcess(_Locks)


def file_lock(path: str) -> FileLock:
    """This process's lock on the file `path` (created if missing)."""
    return _LOCKS.get().of(path)
