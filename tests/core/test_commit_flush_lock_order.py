"""A commit's final flush and its seal are one SQLite write transaction (`MetaStore.batch`).
A flush that fails after its first write puts its writes back under the handle's buffer
lock; another thread writing through the same handle may hold that lock while it waits
for the write lock (its first upload's marker). The flush lets the write lock go first
(`MetaStore.commit_batch`): taken the other way round, the two threads wait for each
other for ever."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk
from zarrlake.format.fragment import FragmentRecord

WAIT = 60.0
"""Seconds a thread is given to finish; a deadlock never does."""


class Failed(RuntimeError):
    """The failure planted in the commit's final flush, after its registration."""


def test_a_failing_final_flush_and_a_first_upload_of_another_thread_both_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    s.write("a/c/0", chunk(0))  # buffered: the commit's final flush writes it
    writes = s._txn.writes
    registered = threading.Event()  # the commit's batch holds the write lock
    marking = threading.Event()  # the other thread holds the buffer lock, marking

    def remember(record: FragmentRecord, index: object) -> None:
        registered.set()  # called after the fragment's registration, inside the batch
        assert marking.wait(WAIT)
        raise Failed("after the final flush's registration")

    real_mark = writes.staging.mark_unflushed

    def mark_unflushed(*args: object, **kwargs: object) -> None:
        marking.set()  # under the buffer lock, about to take the write lock
        real_mark(*args, **kwargs)

    monkeypatch.setattr(writes.fragments, "remember", remember)
    monkeypatch.setattr(writes.staging, "mark_unflushed", mark_unflushed)
    outcome: dict[str, object] = {}

    def commit() -> None:
        try:
            s.commit("fails in its final flush")
        except Failed as e:
            outcome["commit"] = e

    def write() -> None:
        assert registered.wait(WAIT)
        s.write("a/c/1", chunk(1))  # bigger than stage_inline_max: an upload, marked first
        outcome["write"] = True

    threads = [threading.Thread(target=t, daemon=True) for t in (commit, write)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads), "the two threads wait for each other"
    assert isinstance(outcome.get("commit"), Failed) and outcome.get("write") is True

    monkeypatch.undo()  # both writes are still the session's: the next commit has them
    assert s.state == "open"
    s.commit("both")
    head = repo.readonly_session()
    assert head.read("a/c/0") == chunk(0) and head.read("a/c/1") == chunk(1)
    repo.close()
