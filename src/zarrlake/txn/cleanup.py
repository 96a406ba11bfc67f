"""When the clean-up a committed session leaves (its staged records registered with gc,
then dropped) runs.

On a remote metastore it starts on a pool thread at once: it waits on round trips the
caller need not. On an embedded one it is CPU and local writes, which a pool thread can
only take from the caller's share, and waking that thread cost the commit call 33 us at
the median but milliseconds at load (the woken thread taking the core). There it waits
for the process's next session begin or join, `Repo.close`, process exit, or whoever asks
for its result, whichever comes first, and runs on that thread. A clean-up never run (a
process killed) leaves what a committer killed after its commit leaves, which gc drops.

Under a runtime that brings an executor (the simulator), the executor runs it, as it
runs every background task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Protocol

from zarrlake._util import runtime

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext

log = logging.getLogger("zarrlake")


class Pending(Protocol):
    """What a commit's caller may ask of its clean-up (a Future, or `Deferred`)."""

    def result(self, timeout: float | None = None) -> object:
        """Wait for the clean-up to be done; raise what it raised."""

    def done(self) -> bool:
        """Whether the clean-up is done (or failed)."""


class Deferred:
    """A clean-up run by the first thread that comes to it (see the module docstring)."""

    __slots__ = ("__weakref__", "_claim", "_done", "_error", "_work", "pid")

    def __init__(self, work: Callable[[], object]) -> None:
        self.pid = os.getpid()
        self._work = work
        self._claim = threading.Lock()
        self._done = threading.Event()
        self._error: BaseException | None = None

    def run(self) -> None:
        """Do the clean-up, unless another thread began it."""
        if not self._claim.acquire(blocking=False):
            return
        try:
            self._work()
        except BaseException as e:  # (a simulated crash or an interrupt included)
            self._error = e
            raise
        finally:
            self._work = _nothing  # its closure (the staging, the context) may go
            self._done.set()
            with _LOCK:
                if self in _PENDING:
                    _PENDING.remove(self)

    def release(self) -> None:
        """Run it where a repository closes or the process ends, or wait for the thread
        that began it (the release thread, a collected repository's handles flushing: at
        exit, its SQLite connection would be busy when the exit closes them, and the log
        would stay), logging (not raising) a failure: what it leaves, gc drops."""
        try:
            self.run()
            self._done.wait()
        except Exception as e:
            log.debug("zarrlake: dropping a committed session's staged records: %s", e)

    flush = release
    """(A repository collected: its handles are flushed on the release thread.)"""

    def result(self, timeout: float | None = None) -> object:
        """Run it here unless another thread began it, then wait for it to end; raise what
        it raised. None in a forked child (the parent's to run)."""
        if self.pid != os.getpid():
            return None
        with contextlib.suppress(BaseException):  # (raised below, as to every caller)
            self.run()
        self._done.wait(timeout)
        if self._error is not None:
            raise self._error
        return None

    def done(self) -> bool:
        """Whether the clean-up is done (or failed)."""
        return self._done.is_set()


def _nothing() -> None:
    return None


_PENDING: list[Deferred] = []
_LOCK = threading.Lock()
_HOOKED: list[int] = [0]  # the pid whose exit hook is installed


def leave(ctx: RepoContext, work: Callable[..., object], *args: object) -> Pending:
    """`work(*args)` (a committed session's clean-up on `ctx`) as a pending task: on the
    I/O pool at once on a remote metastore or under a runtime's executor (which sees
    `work` itself), else deferred (see the module docstring; `Repo.close` runs it too, as
    it finishes the context's handles)."""
    if ctx.meta.remote or runtime.current().executor is not None:
        future: Future[object] = ctx.objects.pool.submit(work, *args)
        return future
    task = Deferred(partial(work, *args))
    with _LOCK:
        _PENDING.append(task)
    ctx.handles.add(task)  # Repo.close runs it
    _hook_exit()
    return task


def run_pending() -> None:
    """Run this process's deferred clean-ups, on this thread (a session beginning)."""
    if not _PENDING:
        return
    pid = os.getpid()
    with _LOCK:
        tasks = [t for t in _PENDING if t.pid == pid]
        _PENDING.clear()
    for task in tasks:
        task.release()


def _hook_exit() -> None:
    """Run the deferred clean-ups at interpreter exit before the thread pools shut
    (`threading`'s exit hooks run last-registered first, so before concurrent.futures'):
    a clean-up may read on the I/O pool. A child of `multiprocessing` leaves by its
    finalizers (a forked one by `os._exit`, skipping both): they run them too. Where no
    hook can be set any more (exit under way), they run now."""
    pid = os.getpid()
    if _HOOKED[0] == pid:
        return
    import concurrent.futures.thread  # noqa: F401  (its pools' hook first: it runs last)

    try:
        threading._register_atexit(run_pending)  # type: ignore[attr-defined]
    except RuntimeError:  # the interpreter is shutting down already
        run_pending()
        return
    _HOOKED[0] = pid
    util = sys.modules.get("multiprocessing.util")  # (not imported for this alone)
    if util is not None:
        util.Finalize(None, run_pending, exitpriority=100)
