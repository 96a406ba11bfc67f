"""What the library asks of the world around it, in one replaceable place: the time, waiting,
threads, timers, and who this process is and whether another one still runs.

By default these are the real ones (time.time, time.sleep, a thread pool, threading.Timer,
os.kill). The deterministic simulator (`zarrlake.testing.sim`) runs many simulated processes
in one thread and installs a `Runtime` for each with `use` (a context variable, so each
greenlet it runs sees its own): the simulated clock, its own pid, and an executor and timers
that the simulator schedules.
"""

from __future__ import annotations

import contextvars
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Protocol


class Cancellable(Protocol):
    """A pending timer, as `call_later` returns it."""

    def cancel(self) -> None:
        """Stop the timer if it has not fired."""


def _thread_timer(delay: float, fn: Callable[[], None]) -> Cancellable:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()
    return timer


def _process_alive(host: str, pid: int) -> bool | None:
    """Whether process `pid` on `host` still runs; None when it runs on another host."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    host: Callable[[], str] = socket.gethostname
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
