"""A SQLite metastore's connections are all closed when its repository closes or its process
ends, so SQLite checkpoints its write-ahead log into the file and removes it: the next
process to open the database does not read and replay a log a writer left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.metastore.sqlite import SqliteMetaStore

WRITER = """
import json, os, sys, threading
from concurrent.futures import ThreadPoolExecutor
import numpy as np, zarr
import zarrlake as zl

path = sys.argv[1]
repo = zl.Repo.create(path)
session = repo.create_session("main")
arr = zarr.create_array(session.store, name="a", shape=(64, 64), chunks=(16, 16), dtype="f4")
arr[:] = np.arange(64 * 64, dtype="f4").reshape(64, 64)
session.commit("one")

# Other threads use connections and are alive when the process ends: a pool never shut
# down (joined at exit by concurrent.futures) and a daemon thread idle forever.
pool = ThreadPoolExecutor(1, thread_name_prefix="user-pool")
assert len(pool.submit(lambda: list(repo.log("main"))).result()) >= 1
used, never = threading.Event(), threading.Event()

def idle() -> None:
    list(repo.log("main"))
    used.set()
    never.wait()

threading.Thread(target=idle, name="idle-daemon", daemon=True).start()
assert used.wait(60)
store = repo._ctx.meta.inner
print(json.dumps({
    "threads": sorted(s.thread.name for s in store._conns.get().slots),
    "wal": os.path.getsize(store.path + "-wal"),
}))
# no repo.close(): the process ends with every connection open
"""


def _log(db: Path) -> int:
    """The size of the database's write-ahead log (0 when there is none)."""
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_a_writer_process_that_never_closes_leaves_no_log(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    out = subprocess.run(
        [sys.executable, "-c", WRITER, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"MainThread", "idle-daemon", "user-pool_0"} <= set(seen["threads"]), seen
    assert seen["wal"] > 0  # the log was there while the writer ran
    assert _log(path / "metastore.sqlite") == 0
    repo = zl.Repo.open(str(path))
    try:
        got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[:]
        assert np.array_equal(got, np.arange(64 * 64, dtype="f4").reshape(64, 64))
    finally:
        repo.close()


def test_a_repository_closed_leaves_no_log_and_no_connection(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    repo = zl.Repo.create(str(path))
    session = repo.create_session("main")
    data = np.linspace(0, 1, 32 * 32, dtype="f8").reshape(32, 32)
    arr = zarr.create_array(session.store, name="b", shape=data.shape, chunks=(8, 8), dtype="f8")
    arr[:] = data
    session.commit("one")
    store = repo._ctx.meta.inner  # type: ignore[attr-defined]
    assert isinstance(store, SqliteMetaStore)
    assert _log(path / "metastore.sqlite") > 0
    slots = list(store._conns.get().slots)
    repo.close()
    assert all(slot.conn is None for slot in slots)
    assert store._conns.get().slots == []
    assert _log(path / "metastore.sqlite") == 0
    again = zl.Repo.open(str(path))
    try:
        got = zarr.open_array(again.readonly_session("main").store, path="b", mode="r")[:]
        assert np.array_equal(got, data)
    finally:
        again.close()


HOLDER = """
import os, signal, sys
from zarrlake.metastore.sqlite import SqliteMetaStore

store = SqliteMetaStore(sys.argv[1])
with store.batch():
    store.set("p", b"held", b"1")
    os.kill(os.getpid(), signal.SIGSTOP)  # stopped inside its write transaction
store.close()
"""


def test_a_writer_stopped_inside_a_write_is_named_when_the_wait_ends(tmp_path, monkeypatch):
    # A process stopped (SIGSTOP, Ctrl-Z, a debugger) while it holds the write lock holds
    # it until it continues: another writer used to wait for it forever, without a word.
    # It now waits BUSY_TIMEOUT, then raises TransientError naming the process and its
    # state; once the holder continues, writes go on.
    import os
    import signal

    import zarrlake.metastore.sqlite as backend
    from zarrlake.errors import TransientError

    monkeypatch.setattr(backend, "BUSY_TIMEOUT", 0.3)
    url = f"sqlite:///{tmp_path}/m.db"
    store = SqliteMetaStore(url)
    store.set("p", b"before", b"0")
    child = subprocess.Popen([sys.executable, "-c", HOLDER, url], stderr=subprocess.PIPE)
    try:
        _, status = os.waitpid(child.pid, os.WUNTRACED)  # returns once it is stopped
        assert os.WIFSTOPPED(status)
        try:
            store.set("p", b"mine", b"2")
        except TransientError as e:
            said = str(e)
        else:
            raise AssertionError("wrote past a stopped writer's lock")
        assert f"process {child.pid} (stopped)" in said and "m.db" in said, said
        assert store.get("p", b"before") is not None  # readers are not held
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(60) == 0, child.stderr.read() if child.stderr else ""
        store.set("p", b"mine", b"2")
        assert store.get("p", b"held") is not None and store.get("p", b"mine") is not None
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
        store.close()


def _write_in_child(url: str) -> None:
    SqliteMetaStore(url).set("p", b"child", b"v" * 5000)  # never closed


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_multiprocessing_child_that_never_closes_leaves_no_log(tmp_path, method):
    # A child of multiprocessing (fork, forkserver) leaves by os._exit, which skips
    # atexit: its finalizers close its connections, the last ones to the database.
    import multiprocessing

    url = f"sqlite:///{tmp_path}/m.db"
    first = SqliteMetaStore(url)
    first.set("p", b"parent", b"1")
    first.close()
    child = multiprocessing.get_context(method).Process(target=_write_in_child, args=(url,))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert _log(tmp_path / "m.db") == 0
    again = SqliteMetaStore(url)
    try:
        assert again.get("p", b"child") is not None
    finally:
        again.close()


AT_EXIT = """
import atexit, sys
import zarrlake.metastore.sqlite as backend

backend.BUSY_TIMEOUT = 0.2
store = backend.SqliteMetaStore(sys.argv[1])

def write_at_exit() -> None:  # as a writer's finish does, where no thread can start
    try:
        store.set("p", b"late", b"1")
        print("written")
    except Exception as e:
        print(type(e).__name__, e)

atexit.register(write_at_exit)
"""


def test_a_write_waiting_for_the_lock_at_interpreter_exit_is_bounded(tmp_path):
    # At interpreter exit no thread can start, so the wait for the write lock cannot use
    # its waiting thread: it polls instead, and is bounded all the same (a writer's finish
    # at exit failed with "can't create new thread at interpreter shutdown").
    import fcntl
    import os

    db = tmp_path / "m.db"
    SqliteMetaStore(f"sqlite:///{db}").close()
    fd = os.open(f"{db}-writer", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process's writer holds the lock
        out = subprocess.run(
            [sys.executable, "-c", AT_EXIT, f"sqlite:///{db}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.close(fd)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("TransientError") and "stayed locked" in out.stdout, out
    assert SqliteMetaStore(f"sqlite:///{db}").get("p", b"late") is None
