"""The dedup race, step by step: a writer whose upload finds a chunk object already there
(dedup) and stages a reference to it, against a collector that judged that object garbage.

The collector runs in a thread and is held at each of its fault points in turn (crash points are
replaced by a function that blocks on an event); the writer runs up to each of its steps
meanwhile, then the collector finishes, then the writer. Whatever the interleaving, the
writer's commit reads back its bytes and the repository checks clean. Without the writer's
settle step, one of these interleavings loses the data: the protocol is what makes it safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck
from zarrlake._util import crashpoints
from zarrlake.format.chunk_ref import RefKind, chunk_object_key
from zarrlake.format.digest import DEFAULT, digest
from zarrlake.vc.gc_protocol import WriteGuard

GC_POINTS = ("gc_after_register", "gc_after_sweep_begins", "gc_before_delete", "gc_after_delete")
WRITER_STEPS = ("begin", "upload", "stage", "settle")
DATA = chunk(42, 50_000)
KEY = chunk_object_key(digest(DEFAULT, DATA))  # new repositories use the default hash


class Pause:
    """Replaces crashpoints.reached: the collector thread stops at `point` until released, and
    `writer_waits` is set once a writer polls for a sweep to end."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.writer_waits = threading.Event()
        self.original: Callable[[str], None] = crashpoints.reached

    def __call__(self, name: str) -> None:
        if name == crashpoints.WAIT_POINT:
            self.writer_waits.set()
        if name == self.point and threading.current_thread().name == "gc":
            self.arrived.set()
            assert self.release.wait(30), "the test never released the collector"
        self.original(name)


def garbage_with(repo: zl.Repo) -> None:
    """Make DATA's chunk object garbage the collector knows about: an expired session."""
    s = repo.create_session()
    s.write("g/c/0", DATA)
    s.flush()
    repo._context.records.update(s.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0}))


def run_writer(session: zl.Session, upto: int, state: dict) -> None:
    """Run the writer's steps [state['done'], upto); state['blocked'] is set when the
    writer waits for a sweep or its steps are done. The session's own write path settles
    at "stage" (staging and flushing: the write made durable); the explicit "settle" step
    runs the guard once more, as a caller may."""

    def waiting(seconds: float) -> None:
        state["blocked"].set()
        time.sleep(seconds)  # the library's own poll interval, not test synchronisation

    guard = WriteGuard(session._engine.context, poll=0.001, sleep=waiting)
    for step in WRITER_STEPS[state["done"] : upto]:
        if step == "begin":
            state["token"] = guard.begin()
        elif step == "upload":
            state["change"] = session._engine.prepare("w/c/0", DATA)
            assert state["change"][1].kind == RefKind.OBJECT
        elif step == "stage":
            session._engine.stage([state["change"]])
            session.flush()
        elif step == "settle" and state["settle"]:
            guard.settle(state["token"], [(KEY, DATA)])
        state["done"] += 1
    state["blocked"].set()


def interleave(repo: zl.Repo, point: str, upto: int, settle: bool, monkeypatch) -> bool:
    """Hold the collector at `point`, run the writer's first `upto` steps, release, finish
    both; True if the writer's commit reads back its bytes."""
    garbage_with(repo)
    writer = repo.create_session()
    pause = Pause(point)
    monkeypatch.setattr(crashpoints, "reached", pause)
    if not settle:  # the control: a write path without the protocol's settle step
        monkeypatch.setattr(WriteGuard, "settle", lambda self, before, uploads: [])
    errors: list[BaseException] = []

    def collect() -> None:
        try:
            repo.gc(timedelta(0))
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)

    gc = threading.Thread(target=collect, name="gc")
    gc.start()
    state = {"done": 0, "settle": settle, "blocked": pause.writer_waits}
    assert pause.arrived.wait(30) or not gc.is_alive()
    first = threading.Thread(target=run_writer, args=(writer, upto, state))
    first.start()
    assert state["blocked"].wait(30)  # the writer's steps are done, or it waits for the sweep
    pause.release.set()
    gc.join(30)
    first.join(30)
    run_writer(writer, len(WRITER_STEPS), state)  # the rest after the collector finished
    assert not gc.is_alive() and not errors, errors
    monkeypatch.setattr(crashpoints, "reached", pause.original)
    writer.commit("w")
    try:
        return repo.readonly_session().read("w/c/0") == DATA
    except zl.NotFoundError:
        return False


@pytest.mark.parametrize("point", GC_POINTS)
@pytest.mark.parametrize("upto", range(len(WRITER_STEPS) + 1))
def test_writer_never_loses_its_bytes(tmp_path, monkeypatch, point: str, upto: int) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    assert interleave(repo, point, upto, settle=True, monkeypatch=monkeypatch)
    assert fsck(repo) == []
    repo.gc(timedelta(0), full=True)  # and nothing the writer needs is garbage afterwards
    assert repo.readonly_session().read("w/c/0") == DATA
    assert fsck(repo) == []


def test_without_settle_the_race_loses_data(tmp_path, monkeypatch) -> None:
    """The control: upload (a dedup hit) and stage while the collector waits between
    marking and deleting, with no settle step: the committed reference dangles."""
    repo = zl.Repo.create(tmp_path / "repo")
    assert not interleave(repo, "gc_before_delete", 3, settle=False, monkeypatch=monkeypatch)
    assert any(KEY in p for p in fsck(repo))


def test_writer_waits_for_a_sweep_in_progress(tmp_path, monkeypatch) -> None:
    """A writer staging during a sweep does not return until the sweep ends."""
    repo = zl.Repo.create(tmp_path / "repo")
    garbage_with(repo)
    writer = repo.create_session()
    pause = Pause("gc_after_delete")
    monkeypatch.setattr(crashpoints, "reached", pause)
    gc = threading.Thread(target=lambda: repo.gc(timedelta(0)), name="gc")
    gc.start()
    assert pause.arrived.wait(30)
    state = {"done": 0, "settle": True, "blocked": threading.Event()}
    run_writer(writer, 2, state)  # upload finds nothing (deleted): a fresh upload
    staged = threading.Event()
    t = threading.Thread(target=lambda: (run_writer(writer, 3, state), staged.set()))
    t.start()
    assert pause.writer_waits.wait(30)  # it polls the phase: still sweeping
    assert not staged.is_set()
    pause.release.set()
    gc.join(30)
    t.join(30)
    assert staged.is_set()
    assert writer.read("w/c/0") == DATA
    writer.commit("w")
    assert repo.readonly_session().read("w/c/0") == DATA
    assert fsck(repo) == []
