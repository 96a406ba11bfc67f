"""fork() and SQLite calls wait for each other (forksafe.ForkGuard): a child forked while a
parent thread is inside SQLite used to deadlock on its first connection (a worker joining
a session by id, forked right after a commit whose clean-up was still running)."""

from __future__ import annotations

import multiprocessing
import os
import threading

import zarrlake as zl
from zarrlake._util.forksafe import ForkGuard

FORK = multiprocessing.get_context("fork")


def test_fork_waits_for_the_call_in_flight() -> None:
    guard = ForkGuard()
    order: list[str] = []
    entered, leave = threading.Event(), threading.Event()

    def call() -> None:
        with guard.call():
            entered.set()
            leave.wait(30)
            order.append("call done")

    def fork() -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        order.append("forked")
        assert os.waitpid(pid, 0)[1] == 0

    caller = threading.Thread(target=call)
    caller.start()
    assert entered.wait(30)
    forker = threading.Thread(target=fork)
    forker.start()
    while not guard.forking:  # the fork is held in its before-fork hook
        assert forker.is_alive()
    assert order == []
    leave.set()
    caller.join(30)
    forker.join(30)
    assert order == ["call done", "forked"]
    assert not guard.forking
    with guard.call():  # calls start again after the fork
        pass


def _open_and_read(location: str) -> None:
    repo = zl.Repo.open(location)
    assert repo.list_branches()
    repo.close()


def test_children_forked_while_a_thread_uses_sqlite_open_it(tmp_path) -> None:
    """A parent thread runs metastore calls without pause while children are forked; each
    child opens the repository (a new SQLite connection) and exits."""
    repo = zl.Repo.create(tmp_path / "repo")
    meta = repo._context.meta
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            meta.set("busy", b"k", b"v")
            meta.get("busy", b"k")

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        for _ in range(20):
            child = FORK.Process(target=_open_and_read, args=(str(tmp_path / "repo"),))
            child.start()
            child.join(60)
            if child.exitcode is None:
                child.kill()  # never left behind
                child.join()
            assert child.exitcode == 0, "a forked child hung or failed opening SQLite"
    finally:
        stop.set()
        worker.join()
        repo.close()
