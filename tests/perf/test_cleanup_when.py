"""When a committed session's staged records are dropped on a local repository: not by
the commit call itself, nor on another thread (txn/cleanup.py), but by the process's next
session begin or join, `Session.wait`, `Repo.close` or the process's exit, whichever
comes first; a forked child leaves its parent's alone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.vc import gc_protocol
from zarrlake.vc.gc_protocol import uploads_partition


def _staged(repo: zl.Repo, session_id: str) -> list[object]:
    """The staged and upload records session `session_id` left."""
    ctx = repo._context
    return [
        *ctx.meta.scan(ctx.stage_partition(session_id)),
        *ctx.meta.scan(uploads_partition(ctx, session_id)),
    ]


def _commit_one(repo: zl.Repo, i: int) -> zl.Session:
    s = repo.create_session()
    value = np.random.default_rng(i).random((64, 64), dtype=np.float32)  # (uploaded)
    zarr.open_array(s.store, path="a")[i] = value
    s.commit(f"chunk {i}")
    return s


@pytest.fixture
def repo(one_chunk_repo: zl.Repo) -> zl.Repo:
    return one_chunk_repo


def test_the_next_session_drops_what_a_commit_left_on_its_own_thread(repo, monkeypatch):
    s = _commit_one(repo, 0)
    assert _staged(repo, s.id)  # left by the commit call
    threads = []
    register = gc_protocol.register_staged  # (imported by the commit's clean-up at its run)

    def registering(*args, **kw):
        threads.append(threading.current_thread())
        return register(*args, **kw)

    monkeypatch.setattr(gc_protocol, "register_staged", registering)
    repo.create_session()
    assert threads == [threading.current_thread()]
    assert not _staged(repo, s.id)
    s.wait()  # done already: nothing runs again
    assert len(threads) == 1


def test_joining_a_session_drops_them_too(repo):
    s = _commit_one(repo, 1)
    other = repo.create_session()
    other_id = other.id  # (its record stored: an id is handed over)
    s2 = _commit_one(repo, 2)
    assert _staged(repo, s2.id)
    repo.join_session(other_id)
    assert not _staged(repo, s2.id) and not _staged(repo, s.id)


def test_repo_close_drops_them(repo):
    s = _commit_one(repo, 3)
    assert _staged(repo, s.id)
    repo.close()
    again = zl.Repo.open(repo.spec.location)
    assert not _staged(again, s.id)
    np.testing.assert_array_equal(
        zarr.open_array(again.readonly_session().store, path="a")[3],
        np.random.default_rng(3).random((64, 64), dtype=np.float32),
    )
    again.close()


CHILD = """
import sys
import numpy as np, zarr
import zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
s = repo.create_session()
zarr.open_array(s.store, path="a")[4] = np.full((64, 64), 4, np.float32)
s.commit("four")
print(s.id)
"""


def test_process_exit_drops_them(repo):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(repo.spec.location)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    sid = done.stdout.strip().splitlines()[-1]
    assert repo.session_info(sid).state == "committed"
    assert not _staged(repo, sid)


def test_a_forked_child_leaves_its_parent_s_alone(repo):
    s = _commit_one(repo, 5)
    pid = os.fork()
    if pid == 0:  # the child: its session's begin must not run the parent's clean-up
        code = 0
        try:
            repo.create_session()
            code = 0 if _staged(repo, s.id) else 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _staged(repo, s.id)
    s.wait()
    assert not _staged(repo, s.id)


def test_a_clean_up_another_thread_began_is_waited_for():
    """The release thread may have begun a clean-up (a collected repository's handles
    flushing) when the process exits or a session begins: they wait for it to end, so the
    exit does not close the metastore's connections under it (and leave SQLite's log)."""
    from zarrlake.txn.cleanup import Deferred

    started, go = threading.Event(), threading.Event()
    done: list[str] = []

    def work() -> None:
        started.set()
        go.wait()
        done.append("cleaned")

    task = Deferred(work)
    runner = threading.Thread(target=task.run)
    runner.start()
    started.wait()
    releaser = threading.Thread(target=task.release)
    releaser.start()
    releaser.join(timeout=0.5)
    assert releaser.is_alive()  # waiting for the other thread's clean-up, not returned
    go.set()
    releaser.join()
    runner.join()
    assert done == ["cleaned"] and task.done()
