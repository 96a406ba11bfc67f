"""What the library asks of the world around it, in one replaceable place: the time, waiting,
threads, timers, and who this process is and whether another one still runs.

By default these are the real ones (time.time, time.sleep, a thread pool, a timer thread,
os.kill). The deterministic simulator (`tests.simulator`) runs many simulated processes
in one thread and installs a `Runtime` for each with `use` (a context variable, so each
greenlet it runs sees its own): the simulated clock, its own pid, and an executor and timers
that the simulator schedules.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from concurrent.futures import Executor


class Cancellable(Protocol):
    """A pending timer, as `call_later` returns it."""

    def cancel(self) -> None:
        """Stop the timer if it has not fired."""


class _Timer:
    """One pending `call_later`: cancelled, or claimed by the timer thread when it fires."""

    __slots__ = ("done", "fn", "lock")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.done = False
        self.lock = threading.Lock()

    def cancel(self) -> None:
        """Stop the timer if it has not fired (a function already running goes on)."""
        with self.lock:
            self.done = True

    def claim(self) -> bool:
        """Whether the timer is due to run now (not cancelled, not run before)."""
        with self.lock:
            if self.done:
                return False
            self.done = True
            return True


class _Timers:
    """The pending timers of one process, waited for by one thread (made on first use):
    a threading.Timer per call cost a thread start on the first write of every session. A
    timer that fires runs its function on a thread of its own, as threading.Timer did, so a
    slow one never delays the others."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.heap: list[tuple[float, int, _Timer]] = []
        self.seq = itertools.count()
        self.thread: threading.Thread | None = None

    def add(self, delay: float, fn: Callable[[], None]) -> _Timer:
        """Run `fn` once, `delay` seconds from now, unless cancelled first."""
        timer = _Timer(fn)
        with self.cond:
            heapq.heappush(self.heap, (time.monotonic() + delay, next(self.seq), timer))
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="zarrlake-timers", daemon=True
                )
                self.thread.start()
            if self.heap[0][2] is timer:  # else the thread wakes for an earlier one first
                self.cond.notify()
        return timer

    def _run(self) -> None:
        while True:
            with self.cond:
                while True:
                    while self.heap and self.heap[0][2].done:  # cancelled: forget at once
                        heapq.heappop(self.heap)
                    if not self.heap:
                        self.cond.wait()
                        continue
                    due = self.heap[0][0] - time.monotonic()
                    if due <= 0:
                        break
                    self.cond.wait(due)
                timer = heapq.heappop(self.heap)[2]
            if timer.claim():
                try:
                    threading.Thread(target=timer.fn, name="zarrlake-timer", daemon=True).start()
                except RuntimeError:  # interpreter shutdown: no new threads
                    timer.fn()


_TIMERS: dict[int, _Timers] = {}  # by pid: a fork child starts with none of its parent's
_TIMERS_LOCK = threading.Lock()


def _timers() -> _Timers:
    pid = os.getpid()
    timers = _TIMERS.get(pid)
    if timers is None:
        with _TIMERS_LOCK:
            timers = _TIMERS.get(pid)
            if timers is None:
                _TIMERS.clear()
                timers = _TIMERS[pid] = _Timers()
    return timers


def _forked() -> None:
    global _TIMERS_LOCK
    _TIMERS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def _thread_timer(delay: float, fn: Callable[[], None]) -> Cancellable:
    return _timers().add(delay, fn)


def _hostname() -> str:
    """This machine's name (socket loads with the first question about a process)."""
    import socket

    return socket.gethostname()


def _process_alive(host: str, pid: int) -> bool | None:
    """Whether process `pid` on `host` still runs; None when it runs on another host. A
    zombie (exited, not yet reaped: where PID 1 reaps no orphans it stays one for good)
    runs no more: it sends nothing and holds nothing."""
    if host != _hostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    stat = _read(f"/proc/{pid}/stat")
    state = stat.rsplit(")", 1)[-1].split()[:1] if stat else []
    return state not in (["Z"], ["X"])


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


_BOOT = _read("/proc/sys/kernel/random/boot_id")
try:
    _PIDNS = str(os.stat("/proc/self/ns/pid").st_ino)
except OSError:
    _PIDNS = ""


def _start_time(pid: int) -> str:
    """The start time of process `pid` in clock ticks since boot ("" where unknown): with
    the boot id and pid namespace it tells a process from a later one given the same pid."""
    if pid == _OWN[0]:
        return _OWN[1]
    stat = _read(f"/proc/{pid}/stat")
    start = stat.rsplit(")", 1)[-1].split()[19] if stat else ""
    if pid == os.getpid():
        _OWN[:] = [pid, start]  # a forked child has a pid of its own, so asks again
    return start


_OWN: list = [0, ""]


@dataclass(frozen=True)
class Runtime:
    """The clock, waits, threads and process identity the library uses."""

    now: Callable[[], float] = time.time
    """Seconds since the epoch (timestamps, expiry, leases, gc grace periods)."""
    monotonic: Callable[[], float] = time.monotonic
    """Seconds for deadlines and idle times."""
    sleep: Callable[[float], None] = time.sleep
    call_later: Callable[[float, Callable[[], None]], Cancellable] = _thread_timer
    """Run a function once, `delay` seconds from now, in the background."""
    executor: Executor | None = None
    """Where parallel work runs (None: each repository's own thread pool)."""
    host: Callable[[], str] = _hostname
    pid: Callable[[], int] = os.getpid
    alive: Callable[[str, int], bool | None] = _process_alive
    """Whether a process (host, pid) still runs; None if that cannot be told from here."""


REAL = Runtime()
_CURRENT: contextvars.ContextVar[Runtime] = contextvars.ContextVar("zarrlake_runtime", default=REAL)


def current() -> Runtime:
    """The Runtime in effect in this context."""
    return _CURRENT.get()


def use(runtime: Runtime) -> contextvars.Token[Runtime]:
    """Make `runtime` the one this thread (or greenlet) sees; `reset(token)` undoes it."""
    return _CURRENT.set(runtime)


def reset(token: contextvars.Token[Runtime]) -> None:
    """Restore the Runtime in effect before the `use` that returned `token`."""
    _CURRENT.reset(token)


def now() -> float:
    """Wall-clock time, seconds since the epoch (simulated under the simulator)."""
    return _CURRENT.get().now()


def monotonic() -> float:
    """A monotonic clock in seconds, for timeouts and intervals."""
    return _CURRENT.get().monotonic()


def sleep(seconds: float) -> None:
    """Wait `seconds` (on the simulated clock under the simulator)."""
    _CURRENT.get().sleep(seconds)


def call_later(delay: float, fn: Callable[[], None]) -> Cancellable:
    """Run `fn` once after `delay` seconds; the returned handle cancels it."""
    return _CURRENT.get().call_later(delay, fn)


def host() -> str:
    """The name of the host this process runs on."""
    return _CURRENT.get().host()


def pid() -> int:
    """The id of this process (a simulated one under the simulator)."""
    return _CURRENT.get().pid()


def alive(host: str, pid: int) -> bool | None:
    """Whether process `pid` on `host` still runs; None when that cannot be told from here."""
    return _CURRENT.get().alive(host, pid)


def identity() -> str:
    """This process as `identity_alive` can judge it from elsewhere: host, boot id, pid
    namespace, pid and start time. Containers sharing a host name but not a pid namespace
    (host networking) then never mistake each other's processes for their own."""
    rt = _CURRENT.get()
    pid = rt.pid()
    start = _start_time(pid) if rt is REAL else ""
    return "|".join((rt.host(), _BOOT, _PIDNS, str(pid), start))


def identity_alive(ident: str) -> bool | None:
    """Whether the process `identity()` returned `ident` still runs; None when that cannot
    be told from here (another host, boot or pid namespace)."""
    try:
        host, boot, ns, pid, start = ident.split("|")
    except ValueError:
        return None
    if host != _CURRENT.get().host() or boot != _BOOT or ns != _PIDNS:
        return None
    running = alive(host, int(pid))
    if running and start and start != _start_time(int(pid)):
        return False  # the pid was given to a later process
    return running


def identity_pid(ident: str) -> tuple[str, int]:
    """(host, pid) of an `identity()`, for messages."""
    parts = ident.split("|")
    return parts[0], int(parts[3]) if len(parts) == 5 else 0
