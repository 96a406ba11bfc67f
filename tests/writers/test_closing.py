"""A repository that closes, or whose process ends, finishes the session handles it opened
(one collected flushes them): their writes count in a commit made from elsewhere."""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.writers.conftest import rows_at
from tests.writers.workers import COLS, ROWS, write_then_die
from zarrlake.txn import writers

NO_IDLE_FLUSH = {"flush": {"idle": None}}  # only closing flushes


def write_all(session: zl.Session) -> np.ndarray:
    values = np.arange(ROWS * COLS, dtype="i8").reshape(ROWS, COLS)
    zarr.open_array(session.store, path="t", mode="r+")[:] = values
    return values


def test_a_closed_repo_finishes_its_handles_and_a_new_repo_commits_everything(here):
    repo = zl.Repo.open(**here, settings=NO_IDLE_FLUSH)
    s = repo.create_session()
    values = write_all(s)
    assert [w.unflushed for w in repo.session_writers(s.id)] == [True]
    repo.close()
    again = zl.Repo.open(**here)
    assert [(w.state, w.unflushed) for w in again.session_writers(s.id)] == [("finished", False)]
    again.join_session(s.id).commit("from a new Repo")  # no wait, no choice
    got = zarr.open_array(again.readonly_session().store, path="t", mode="r")[:]
    assert np.array_equal(got, values)


def test_a_closed_repo_s_session_moves_to_another_metastore_and_commits(here, tmp_path):
    repo = zl.Repo.open(**here, settings=NO_IDLE_FLUSH)
    s = repo.create_session()
    values = write_all(s)
    repo.close()
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    zl.Repo.open(**here).copy_metastore(other)
    moved = zl.Repo.open(here["location"], metastore=other)
    moved.join_session(s.id).commit("after the copy")
    got = zarr.open_array(moved.readonly_session().store, path="t", mode="r")[:]
    assert np.array_equal(got, values)


def test_a_collected_repo_flushes_its_handles(here):
    # flushed, not finished: a Repo is often collected while its sessions are in use
    repo = zl.Repo.open(**here, settings=NO_IDLE_FLUSH)
    s = repo.create_session()
    values = write_all(s)
    session_id = s.id
    del repo
    gc.collect()
    released = threading.Event()

    class Marker:  # queued after the collected repo's handles: released after them
        pid = os.getpid()

        def release(self) -> None:
            released.set()

    writers.release_later(Marker())
    assert released.wait(30)
    again = zl.Repo.open(**here)
    assert [(w.state, w.unflushed) for w in again.session_writers(session_id)] == [
        ("writing", False)
    ]
    again.join_session(session_id).commit("no writes to wait for")
    got = zarr.open_array(again.readonly_session().store, path="t", mode="r")[:]
    assert np.array_equal(got, values)


def test_a_repo_shared_with_a_session_does_not_finish_it_when_collected(here):
    repo = zl.Repo.open(**here, settings=NO_IDLE_FLUSH)
    s = repo.create_session()
    write_all(s)
    shared = zl.Repo.of(s)  # a view on the session's connection, not its owner
    del shared
    gc.collect()
    assert [w.unflushed for w in repo.session_writers(s.id)] == [True]
    s.commit()


EXIT_SCRIPT = """
import logging, shutil, sys, tempfile, threading
import zarr
import zarrlake as zl

logging.basicConfig()
kept = []


def job() -> None:  # a temporary repository, written, then removed (a test suite's)
    d = tempfile.mkdtemp()
    repo = zl.Repo.create(d + "/r", settings={"flush": {"idle": None}})
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(4,), chunks=(1,), dtype="i8")[:] = 1
    kept.append(s)
    shutil.rmtree(d)


for _ in range(3):
    t = threading.Thread(target=job)
    t.start()
    t.join()
print("leaving", file=sys.stderr)
"""


@pytest.mark.slow(seconds=10)
def test_writers_of_a_removed_repository_are_quiet_at_exit(tmp_path):
    res = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip() == "leaving"  # no "could not finish" line per writer


READ_AT_EXIT = """
import atexit, sys, threading
import zarr
import zarrlake as zl

where, session_id = {where!r}, sys.argv[1]
session = zl.Repo.open(**where).join_session(session_id)
arr = zarr.open_array(session.store, path="t", mode="r+")
arr[0] = 1
arr[1] = 2
session.flush()
arr[2] = 3
arr[3] = 4  # not flushed: process exit finishes the writer
repo, exiting = zl.Repo.of(session), threading.Event()


def read() -> None:  # a thread of the program reading while the process exits
    exiting.wait()
    repo.resolve("main")


reader = threading.Thread(target=read, daemon=True)
reader.start()


def at_exit() -> None:  # runs before the writer is finished (atexit runs last-in first)
    exiting.set()
    reader.join()


atexit.register(at_exit)
"""


@pytest.mark.slow(seconds=10)
def test_a_worker_whose_exit_meets_another_thread_s_call_still_finishes(here):
    """At exit Python marks the main thread stopped before the exit hooks run in it, which
    finish the writers: another thread's first metastore call then must not close the main
    thread's connection (it did, and the writer, gone, lost all it wrote under discard)."""
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    res = subprocess.run(
        [sys.executable, "-c", READ_AT_EXIT.format(where=here), s.id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""  # no "could not finish"
    sibling = multiprocessing.get_context("spawn").Process(
        target=write_then_die, args=((here, s.id, [4, 5], [6, 7]),)
    )
    sibling.start()
    sibling.join()  # killed after flushing half its rows
    with pytest.raises(zl.UnfinishedWritersError) as e:
        s.commit()
    assert len(e.value.workers) == 1 and f"pid {sibling.pid}" in e.value.workers[0]
    s.commit(unfinished="discard")
    assert rows_at(repo) == [0, 1, 2, 3]


EXIT_WITH_A_COLLECTED_HANDLE = """
import os, threading
from zarrlake.txn import writers

flush = threading.Lock()  # a flush's lock, not reentrant
done = []

class Collected:  # a handle whose finalizer runs in the middle of another's flush
    pid = os.getpid()

    def release(self):
        with flush:
            done.append("collected")

class Live:
    pid = os.getpid()

    def release(self):
        with flush:
            writers.release_later(Collected())
        done.append("live")

def no_thread(self):  # as at interpreter shutdown
    raise RuntimeError("can't create new thread at interpreter shutdown")

live = Live()
writers.track(live)
threading.Thread.start = no_thread
writers.finish_all()
print(done)
"""


def test_a_handle_collected_inside_a_release_at_shutdown_is_released_after_it():
    """At interpreter shutdown no thread starts, so process exit finishes its writers on
    its own thread; a handle collected in the middle of one's flush waits for that flush
    instead of taking its lock again (it hung the process forever)."""
    run = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_A_COLLECTED_HANDLE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "['live', 'collected']"
