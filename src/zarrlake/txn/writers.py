"""Writers of a cooperative session: when a handle's work counts, and what a commit does
about the others.

Every handle that writes is a writer with a state record (txn/staging.py `Writer`):
writing; finished (its process ended normally, its `with` block ended, it was closed,
returned, pickled back or garbage-collected, or its Spark task committed); failed (its
`with` block raised); gone (still writing, but its process is dead). A commit counts what
finished writers staged and what live writers flushed, waits (bounded) for live writers'
unflushed writes, and leaves out a writer that failed or is gone once finished writers
wrote its part again (txn/superseded.py). It refuses, naming the others and what is still
missing (txn/refusals.py), unless the caller chose: `unfinished="discard"` leaves out all
they staged, `"include"` keeps what they flushed.

Process exit is a finish point: `track` registers each writing handle of this process with
`atexit` and with `multiprocessing`'s finalizers (a forked `multiprocessing` child leaves by
`os._exit`, which skips `atexit`). A `Pool` leaving its `with` block terminates its
workers (SIGTERM) instead: close and join it to let them end normally, or commit inside
the block; a worker terminated before its handle was dropped is gone, and named.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import sys
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from zarrlake._util import retry
from zarrlake.errors import InvalidInputError, UnflushedWritesError
from zarrlake.txn.staging import State, Unflushed, Writer, WriterState, counts

log = logging.getLogger("zarrlake")


class Unfinished(StrEnum):
    """What a commit does with writers that failed or are gone (None: refuse)."""

    DISCARD = "discard"
    """Leave out everything they staged, flushed or not."""
    INCLUDE = "include"
    """Keep what they flushed; give up what they never flushed."""


def check_unfinished(value: object) -> Unfinished | None:
    """The policy named by `value` (None refuses); InvalidInputError naming the choices."""
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        if isinstance(value, str):
            return Unfinished(value)
    choices = ", ".join(repr(str(u)) for u in Unfinished)
    raise InvalidInputError(f"unfinished must be None, {choices}, not {value!r}")


# finishing at process exit ---------------------------------------------------------------


class Finishing(Protocol):
    """What process exit asks of a writing handle."""

    pid: int

    def release(self) -> str | None:
        """Flush and finish, logging (not raising) what goes wrong; returns what went
        wrong if the writer's writes may not count (None: finished, or nothing to count)."""


_LIVE: weakref.WeakSet[Finishing] = weakref.WeakSet()
_HOOKED: set[int] = set()  # pids whose exit hooks are installed
_LOCK = threading.Lock()


def track(handle: Finishing) -> None:
    """Finish `handle` when this process ends normally, if it has not finished before."""
    with _LOCK:
        _LIVE.add(handle)
        pid = os.getpid()
        if pid in _HOOKED:
            return
        _HOOKED.add(pid)
    atexit.register(finish_all)
    from multiprocessing import util  # a fork child of multiprocessing skips atexit

    util.Finalize(None, _finish_at_finalizers, exitpriority=100)


_RELEASES: queue.SimpleQueue[Finishing] = queue.SimpleQueue()
_RELEASER: list[int] = [0]  # pid whose release thread runs
_STARTING = threading.Lock()


def release_later(handle: Finishing) -> None:
    """Release `handle` on a thread of its own. A garbage-collection finalizer runs in
    whatever thread collected, possibly inside a lock the release needs, even inside this
    module's own (`track` allocates under `_LOCK`): so no lock is waited for here, and the
    queue is a SimpleQueue, whose `put` is reentrant."""
    _RELEASES.put(handle)
    if _RELEASER[0] == os.getpid() or not _STARTING.acquire(blocking=False):
        return  # the thread runs, or the call this one interrupted is starting it
    try:
        if _RELEASER[0] != os.getpid():
            try:
                threading.Thread(target=_release_loop, name="zarrlake-release", daemon=True).start()
                _RELEASER[0] = os.getpid()
            except RuntimeError:  # interpreter shutdown: no other thread holds a lock now
                if not getattr(_INLINE, "active", False):
                    _release_inline(())
    finally:
        _STARTING.release()


_INLINE = threading.local()  # `active` while a thread runs `_release_inline`


def _release_inline(handles: Iterable[Finishing]) -> list[str]:
    """Release `handles`, then every collected one queued meanwhile, on this thread (at
    interpreter shutdown, where no thread can start); return what went wrong. A handle
    collected in the middle of a release (a finalizer run inside a flush, whose lock this
    thread holds) stays queued until that release is done: released there, it would wait
    for that lock forever."""
    _INLINE.active = True
    failures: list[str] = []
    try:
        for handle in handles:
            failure = handle.release()
            if failure is not None:
                failures.append(failure)
        while True:
            try:
                _RELEASES.get_nowait().release()
            except queue.Empty:
                return failures
    finally:
        _INLINE.active = False


def _release_loop() -> None:
    while True:
        handle = _RELEASES.get()
        try:
            handle.release()
        except Exception:  # release logs its own failures; this thread must outlive any
            log.exception("zarrlake: releasing a collected writer failed")


def _forked() -> None:
    """A fork child starts with no release thread and none of its parent's handles."""
    global _RELEASES, _STARTING, _LOCK
    _RELEASES = queue.SimpleQueue()
    _STARTING = threading.Lock()
    _LOCK = threading.Lock()
    _RELEASER[0] = 0


os.register_at_fork(after_in_child=_forked)


def untrack(handle: Finishing) -> None:
    """`handle` finished (or failed): process exit need not finish it."""
    _LIVE.discard(handle)


def finish_each(handles: Iterable[Finishing]) -> None:
    """Finish every handle of `handles` this process made, in this thread (a repository
    closing: as each handle's `with` block ending would). A failure is logged, not raised
    (`release`): closing never raised, and a commit names a writer left unfinished."""
    for handle in list(handles):
        if handle.pid == os.getpid():
            handle.release()


class Flushing(Protocol):
    """What a collected repository asks of the writing handles opened on it."""

    pid: int

    def flush(self) -> object:
        """Make the handle's buffered writes durable."""


class _FlushLater:
    """A release that only flushes (see `flush_each_later`), logging what goes wrong."""

    def __init__(self, handle: Flushing) -> None:
        self.handle = handle
        self.pid = handle.pid

    def release(self) -> None:
        try:
            self.handle.flush()
        except Exception as e:  # its next flush or finish meets it again, and raises
            log.debug("zarrlake: flushing a writer of a collected repository: %s", e)
        return None


def flush_each_later(handles: Iterable[Flushing]) -> None:
    """Flush, on the release thread, every handle of `handles` this process made (a
    repository collected). Its writes become durable, so a commit from elsewhere need not
    wait for them; finishing is left to the handle itself (its `with` block, `close`, its
    collection, its process's end): a repository is often collected while its sessions
    are in use (`Repo.open(...).join_session(id)`), and a writer finished in the middle
    of its part would count that part as complete if its process were killed."""
    for handle in list(handles):
        if handle.pid == os.getpid():
            release_later(_FlushLater(handle))


EXIT_BUDGET = 20.0
"""Seconds process exit waits for its writers to finish (a metastore gone away must not
hold the process forever); those left unfinished are then gone, and a commit names them."""

EXIT_STATUS = 1
"""The exit status of a process some of whose writers could not finish at exit (their
writes may not count): job runners (Spark, Dask, batch schedulers) see the failure."""

_FINISHED: set[int] = set()  # pids whose exit finish ran
_FAILED: set[int] = set()  # pids some of whose writers could not finish at exit


def finish_all() -> None:
    """Finish every writing handle this process made (not those a fork inherited), within
    EXIT_BUDGET seconds, once. If some could not finish, say so on stderr: the process
    then exits with EXIT_STATUS (`_exit_status`)."""
    pid = os.getpid()
    if pid in _FINISHED:
        return
    _FINISHED.add(pid)
    handles = [h for h in list(_LIVE) if h.pid == pid]
    if not handles:
        return
    retry.stop_retrying_after(EXIT_BUDGET)  # the finish may run here, with no budget wait
    done = threading.Event()
    failures: list[str] = []

    def run() -> None:
        failures.extend(_release_inline(handles))
        done.set()

    try:
        threading.Thread(target=run, name="zarrlake-finish", daemon=True).start()
    except RuntimeError:  # at interpreter shutdown no thread can start: finish here
        run()
    if not done.wait(EXIT_BUDGET):
        failures.append(
            f"{len(handles)} writer(s) did not finish within {EXIT_BUDGET:.0f} s at exit "
            "(is the metastore reachable?)"
        )
    if failures:
        _FAILED.add(pid)
        print(
            f"zarrlake: this process's writes may not count: {'; '.join(failures)}. A commit "
            "of their session names this writer; write its part again from a new worker. "
            f"Exit status {EXIT_STATUS}.",
            file=sys.stderr,
            flush=True,
        )


def _finish_at_finalizers() -> None:
    """`finish_all` from `multiprocessing`'s finalizers. A child process of
    `multiprocessing` leaves by `os._exit` without running `atexit` (fork) or runs it
    later (spawn): its status is set here."""
    finish_all()
    from multiprocessing import parent_process

    if parent_process() is not None:
        _exit_status()


def _exit_status() -> None:
    """End the process with EXIT_STATUS if its writers could not finish at exit. Python
    keeps status 0 whatever an `atexit` handler raises, so the process ends here, after
    flushing what Python's own exit would (logging, standard streams) and ending
    `multiprocessing`'s children as it would. Registered when this module is imported, so
    the exit handlers registered since (those of the application's own) run first."""
    if os.getpid() not in _FAILED:
        return
    if "multiprocessing.util" in sys.modules:  # its children end as at a normal exit
        sys.modules["multiprocessing.util"]._exit_function()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(EXIT_STATUS)


atexit.register(_exit_status)


# what users see ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WriterInfo:
    """One writer of a session as `sessions show` lists it. `state` is writing, finished,
    failed or gone (still writing, its process dead)."""

    writer: str
    state: str
    pid: int
    host: str
    since: float | None
    tag: str | None
    error: str | None
    fragments: int  # fragments it flushed
    chunks: int  # chunk changes in them
    unflushed: bool  # holds writes it has not flushed


def describe(state: State) -> list[WriterInfo]:
    """Every writer of the session with a state record or unflushed writes, oldest first."""
    markers = {m.writer: m for m in state.unflushed}
    flushed: dict[str, list[int]] = {}
    for f in state.fragments:
        flushed.setdefault(f.writer, []).append(f.entries)
    out = []
    for w in dict.fromkeys([*state.writers, *markers]):
        marker = markers.get(w)
        rec: Writer | Unflushed | None = state.writers.get(w, marker)
        assert rec is not None
        if isinstance(rec, Writer):
            kind, since, error = str(rec.state), rec.since, rec.error
        else:
            kind, since, error = str(WriterState.WRITING), None, None
        if kind == WriterState.WRITING and rec.alive is False:
            kind = "gone"
        entries = flushed.get(w, [])
        error = error or (marker.error if marker else None)
        out.append(
            WriterInfo(
                w,
                kind,
                rec.pid,
                rec.host,
                since,
                rec.tag,
                error,
                len(entries),
                sum(entries),
                marker is not None,
            )
        )
    return sorted(out, key=lambda i: i.since or 0.0)


# the commit's rule -------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What a commit makes of the session's writers."""

    unfinished: list[str]  # failed or gone writers the commit refuses over, described
    unfinished_ids: frozenset[str]
    waiting: list[Unflushed]  # live writers' unflushed writes
    excluded: frozenset[str]  # writers whose staged writes the commit leaves out
    superseded: frozenset[str] = frozenset()  # unfinished writers whose part was rewritten
    choice: str | None = None  # the choice that fits the refusal (see `refuse`)
    described: dict[str, str] = field(default_factory=dict)  # unfinished writer -> line
    withdrawn: list[str] = field(default_factory=list)
    """Errors of the committing handle's own writes that were withdrawn (a flush found
    their uploads removed by gc) and not written again since: the commit refuses unless
    `unfinished` chose; either way the handle's other writes count."""


def judge(state: State, own: str, unfinished: Unfinished | None) -> Verdict:
    """Apply the writers' rule to the session's staging `state` for a commit by the handle
    whose writer is `own`. Spark's tagged writers keep their own rule: a task attempt counts
    once its task commit accepted it. Whether a failed or gone writer's part was written
    again is for txn/refusals.py's `settle` to say. The commit flushes its own unflushed
    writes itself, but own writes withdrawn by a flush (an error marker its handle drops
    once it wrote them all again) are `withdrawn`."""
    bad: dict[str, str] = {}
    for w in state.writers.values():
        if w.tag is not None or w.writer == own:
            continue
        if w.state == WriterState.FAILED:
            bad[w.writer] = f"failed: {w.error or 'its with block raised'}"
        elif w.state == WriterState.WRITING and w.alive is False:
            bad[w.writer] = "gone: its process ended without finishing"
    markers = [
        m for m in state.unflushed if m.writer != own and counts(m.writer, m.tag, state.accepted)
    ]
    for m in markers:
        if m.writer in bad:
            continue
        if m.error:
            bad[m.writer] = m.error
        elif m.alive is False:
            bad[m.writer] = "gone: its process ended holding writes it never flushed"
    infos = {i.writer: i for i in describe(state)} if bad else {}
    described = {w: _describe(state, infos[w], why) for w, why in bad.items()}
    waiting = [m for m in markers if m.writer not in bad]
    excluded = frozenset(bad) if unfinished == Unfinished.DISCARD else frozenset()
    withdrawn = [m.error for m in state.unflushed if m.writer == own and m.error]
    return Verdict(
        list(described.values()),
        frozenset(bad),
        waiting,
        excluded,
        described=described,
        withdrawn=withdrawn,
    )


def _describe(state: State, info: WriterInfo, why: str) -> str:
    staged = f"{info.fragments} fragment(s) of {info.chunks} chunk change(s)"
    if info.writer in state.meta_writers:
        staged += ", metadata"
    if info.unflushed:
        staged += ", and writes it never flushed"
    return f"worker {info.writer} (pid {info.pid} on {info.host}, {why}; staged {staged})"


def waiting_error(session_id: str, markers: list[Unflushed]) -> UnflushedWritesError:
    """The error a commit raises while live workers hold writes they have not flushed."""
    workers = [f"worker {m.writer} (pid {m.pid} on {m.host}, running)" for m in markers]
    error = UnflushedWritesError(
        f"session {session_id}: {len(workers)} worker(s) hold writes they have not flushed: "
        f"{'; '.join(workers)}. Call session.flush() (or finish the worker: leave its `with` "
        "block, close it, or let its task or process end) in each worker, then commit "
        "again; or commit without those writes: commit(..., unflushed='discard')",
        workers,
    )
    error.markers = markers
    return error
