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
    releases it; one that is stopped (SIGSTOP, a suspended job, a debugger) holds it until
    it continues: `wait` bounds the wait for it."""

    def __init__(self, path: str) -> None:
        self.threads = threading.Lock()
        self.path = path
        self.fd: int | None = None
        self.held: int | None = None  # the descriptor whose flock is held (`fd` or a waiter's)
        self.waiter: _Waiter | None = None

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise ConfigurationError(f"cannot open the lock file {self.path}: {e}") from None

    def wait(self, limit: float) -> bool:
        """Wait at most `limit` seconds for the lock, woken as soon as it is free (a thread
        of this lock blocks in flock for the waiting caller: flock has no timeout, and
        polling would wake late; at interpreter exit, where no thread starts, it polls);
        whether it was taken. After a timeout that thread goes on waiting, and lets the
        lock go at once if nobody waits for it any more."""
        deadline = time.monotonic() + limit
        if not self.threads.acquire(timeout=limit):
            return False
        try:
            fd = self.held = self._fd()
            if _poll(fd, None):
                return True
            waiter = self._waiter()
            if waiter is None:
                taken = _poll(fd, deadline)
            elif taken := waiter.take(deadline - time.monotonic()):
                self.held = waiter.fd
            if not taken:
                self.threads.release()
            return taken
        except BaseException:
            self.threads.release()
            raise

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait for the lock, at most `timeout` seconds if given (the flock is then polled,
        every POLL seconds); whether it was taken."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.threads.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            fd = self.held = self._fd()
            if deadline is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
                return True
            if _poll(fd, deadline):
                return True
            self.threads.release()
            return False
        except BaseException:
            self.threads.release()
            raise

    def _fd(self) -> int:
        if self.fd is None:
            self.fd = self._open()
        return self.fd

    def _waiter(self) -> _Waiter | None:
        """This lock's waiting thread, started on first use (None where no thread can
        start: at interpreter exit, where writers finish)."""
        if self.waiter is None:
            fd = self._open()
            try:
                self.waiter = _Waiter(fd)
            except RuntimeError:  # "can't create new thread at interpreter shutdown"
                os.close(fd)
                return None
        return self.waiter

    def release(self) -> None:
        """Unlock the file, then let the next thread of this process take its turn."""
        assert self.held is not None
        fcntl.flock(self.held, fcntl.LOCK_UN)
        self.threads.release()

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _poll(fd: int, deadline: float | None) -> bool:
    """Take the flock of `fd` if it is free, looking again every POLL seconds until
    `deadline` (None: look once); whether it was taken."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if deadline is None or time.monotonic() >= deadline:
                return False
            time.sleep(POLL)


class _Waiter:
    """A thread blocked in flock on a descriptor of its own for `FileLock.wait`'s callers
    (one at a time: they hold the lock's thread turn). It keeps the lock it gets only if a
    caller still waits; else it lets it go at once."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.cond = threading.Condition(threading.Lock())
        self.pending = False  # the thread is (to be) blocked in flock
        self.wanted = False  # a caller waits for it
        self.got = False  # it holds the flock for the caller
        threading.Thread(target=self._run, name="zarrlake-lock-wait", daemon=True).start()

    def take(self, limit: float) -> bool:
        """Whether the lock was taken within `limit` seconds (then held on `fd`)."""
        with self.cond:
            self.wanted = True
            if not self.pending:
                self.pending = True
                self.cond.notify_all()
            try:
                if self.cond.wait_for(lambda: self.got, max(0.0, limit)):
                    self.got = False
                    return True
                return False
            finally:
                self.wanted = False

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.pending)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            with self.cond:
                self.pending = False
                if self.wanted:
                    self.got = True
                    self.cond.notify_all()
                else:  # the caller gave up meanwhile
                    fcntl.flock(self.fd, fcntl.LOCK_UN)


def holder(path: str) -> str:
    """Who holds the flock of the file `path`, as far as Linux says (/proc/locks): "process
    PID (STATE)", or "" where that cannot be told."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks") as f:
            rows = [line.split() for line in f]
    except OSError:
        return ""
    for row in rows:
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" ("->" marks a waiter's row)
        if len(row) >= 6 and row[1] == "FLOCK" and row[5].rsplit(":", 1)[-1] == str(inode):
            pid = row[4]
            try:
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return f"process {pid}"
            return f"process {pid} ({_STATES.get(state, state)})"
    return ""


_STATES = {
    "T": "stopped",
    "t": "stopped by a debugger",
    "R": "running",
    "S": "sleeping",
    "D": "waiting for the disk",
    "Z": "ended, not yet reaped",
}


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
