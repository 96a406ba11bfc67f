"""Worker functions for the writer-lifecycle tests: module level, so every multiprocessing
start method can import them. Each joins a session by id and writes rows of array `t`
(one chunk per row, value = row number + 1), as a user's worker would: no flush, no commit."""

from __future__ import annotations

import os
import signal
import time

import zarr

import zarrlake as zl
from zarrlake._util import runtime

ROWS, COLS = 16, 4
BIG = 2048  # columns of array `big`: its int64 chunks (16 KiB) are objects, not inline


def open_rows(where: dict, session_id: str) -> tuple[zl.Session, zarr.Array]:
    """Join the session and open its array `t`."""
    session = zl.Repo.open(**where).join_session(session_id)
    return session, zarr.open_array(session.store, path="t", mode="r+")


def write_rows(args: tuple[dict, str, list[int]]) -> int:
    """Join, write `rows`, end: what the seeds' workers do."""
    where, session_id, rows = args
    _, arr = open_rows(where, session_id)
    for r in rows:
        arr[r] = r + 1
    return os.getpid()


def write_rows_within(args: tuple[dict, str, list[int]]) -> int:
    """Join, write `rows` inside `with session:` (finished before the task returns)."""
    where, session_id, rows = args
    session, arr = open_rows(where, session_id)
    with session:
        for r in rows:
            arr[r] = r + 1
    return os.getpid()


def write_then_die(args: tuple[dict, str, list[int], list[int]]) -> None:
    """Write and flush `flushed`, write `buffered` without flushing, then be SIGKILLed."""
    where, session_id, flushed, buffered = args
    session, arr = open_rows(where, session_id)
    for r in flushed:
        arr[r] = r + 1
    session.flush()
    for r in buffered:
        arr[r] = r + 1
    os.kill(os.getpid(), signal.SIGKILL)


def write_then_raise(args: tuple[dict, str, list[int]]) -> None:
    """Write `rows` inside `with session:`, flush half, then raise: the writer fails."""
    where, session_id, rows = args
    session, arr = open_rows(where, session_id)
    with session:
        for r in rows[: len(rows) // 2]:
            arr[r] = r + 1
        session.flush()
        for r in rows[len(rows) // 2 :]:
            arr[r] = r + 1
        raise RuntimeError("bad input row")


def write_then_raise_behind(args: tuple[dict, str, list[int]]) -> None:
    """`write_then_raise` in a process whose clock runs two hours behind."""
    runtime.use(runtime.Runtime(now=lambda: time.time() - 7200.0))
    write_then_raise(args)


def flush_then_exit_hard(args: tuple[dict, str, list[int]]) -> None:
    """Write and flush `rows`, then leave by os._exit (no exit hooks run): gone."""
    where, session_id, rows = args
    session, arr = open_rows(where, session_id)
    for r in rows:
        arr[r] = r + 1
    session.flush()
    os._exit(0)


def write_rows_as(args: tuple[dict, str, list[int], int]) -> int:
    """Join, write `rows` with value `value` (not the row's own), end."""
    where, session_id, rows, value = args
    _, arr = open_rows(where, session_id)
    for r in rows:
        arr[r] = value
    return os.getpid()


def read_then_write_then_die(args: tuple[dict, str, list[int]]) -> None:
    """Read row 0, then write `rows` without flushing, then be SIGKILLed: its batch began
    with a read, so which chunks it held is not recorded."""
    where, session_id, rows = args
    _, arr = open_rows(where, session_id)
    _ = arr[0]
    for r in rows:
        arr[r] = r + 1
    os.kill(os.getpid(), signal.SIGKILL)


def write_big_then_die(args: tuple[dict, str, dict[int, object]]) -> None:
    """Write `rows` (row -> value) of array `big` and flush; with ZARRLAKE_CRASH_AT at
    "after_staging" the flush is killed once its fragment is registered, before it settles
    its uploads with the garbage collector."""
    where, session_id, rows = args
    session = zl.Repo.open(**where).join_session(session_id)
    arr = zarr.open_array(session.store, path="big", mode="r+")
    for row, value in rows.items():
        arr[row] = value
    session.flush()


def commit_later(args: tuple[dict, list[int], object]) -> None:
    """A driver that creates a session, writes `rows` and flushes, sends the session's id
    on the pipe end `conn`, and is SIGKILLed before it commits (a crashed committer)."""
    where, rows, conn = args
    session = zl.Repo.open(**where).create_session(message="crashed job")
    arr = zarr.open_array(session.store, path="t", mode="r+")
    for r in rows:
        arr[r] = r + 1
    session.flush()
    conn.send(session.id)  # type: ignore[attr-defined]  # (a Pipe sends before returning)
    os.kill(os.getpid(), signal.SIGKILL)
