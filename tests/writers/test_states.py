"""Writers that fail or die: the commit refuses, naming them, and counts their writes only
if the caller says so (`unfinished="discard"` or `"include"`)."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest
import zarr

import zarrlake as zl
from tests.writers.conftest import rows_at
from tests.writers.workers import (
    COLS,
    ROWS,
    flush_then_exit_hard,
    write_rows,
    write_then_die,
    write_then_raise,
)

FORK = multiprocessing.get_context("fork")


def run(target, args) -> int:
    """Run `target(args)` in a child process; its pid."""
    p = FORK.Process(target=target, args=(args,))
    p.start()
    p.join()
    return p.pid


@pytest.fixture
def job(where):
    """A session where a healthy worker wrote rows 0-3 and ended."""
    repo = zl.Repo.open(**where)
    s = repo.create_session(message="job")
    run(write_rows, (where, s.id, [0, 1, 2, 3]))
    return repo, s


def test_a_worker_killed_after_flushing_half_its_region_is_refused(job, where):
    repo, s = job
    pid = run(write_then_die, (where, s.id, [4, 5], [6, 7]))
    with pytest.raises(zl.UnfinishedWritersError) as e:
        s.commit()
    assert f"pid {pid}" in str(e.value) and "gone" in str(e.value)
    assert "unfinished='discard'" in str(e.value)
    assert len(e.value.workers) == 1
    assert rows_at(repo) == []  # nothing landed
    s.commit(unfinished="include")  # what it flushed
    assert rows_at(repo) == [0, 1, 2, 3, 4, 5]


def test_discard_leaves_out_everything_a_dead_worker_staged(job, where):
    repo, s = job
    run(write_then_die, (where, s.id, [4, 5], [6, 7]))
    s.commit(unfinished="discard")
    assert rows_at(repo) == [0, 1, 2, 3]


def test_a_worker_whose_with_block_raised_is_failed(job, where):
    repo, s = job
    pid = run(write_then_raise, (where, s.id, [8, 9, 10, 11]))
    with pytest.raises(zl.UnfinishedWritersError) as e:
        s.commit()
    assert f"pid {pid}" in str(e.value) and "RuntimeError: bad input row" in str(e.value)
    assert repo.session_info(s.id).state == "open"  # a worker failing is not the job's end
    s.commit(unfinished="include")
    assert rows_at(repo) == [0, 1, 2, 3, 8, 9]


def test_a_worker_that_left_by_os_exit_is_gone_though_it_flushed(job, where):
    repo, s = job
    run(flush_then_exit_hard, (where, s.id, [12, 13]))
    with pytest.raises(zl.UnfinishedWritersError, match="gone"):
        s.commit()
    s.commit(unfinished="discard")
    assert rows_at(repo) == [0, 1, 2, 3]


def test_the_old_unflushed_discard_keeps_what_the_dead_flushed(job, where):
    repo, s = job
    run(write_then_die, (where, s.id, [4, 5], [6, 7]))
    s.commit(unflushed="discard")
    assert rows_at(repo) == [0, 1, 2, 3, 4, 5]


def test_an_unknown_choice_names_the_valid_ones(job):
    _, s = job
    with pytest.raises(zl.InvalidInputError, match="'discard', 'include'"):
        s.commit(unfinished="keep")


def test_a_handle_in_the_same_process_finishes_when_it_goes_away(where):
    repo = zl.Repo.open(**where)
    s = repo.create_session()
    write_rows((where, s.id, [0, 1]))  # its handle is dropped on return: finished
    s.commit()
    assert rows_at(repo) == [0, 1]


def test_a_release_asked_for_inside_the_exit_registry_lock_does_not_wait_for_it():
    # The garbage collector can run a handle's finalizer while this thread holds the lock
    # `track` takes (the 5,000-seed run hung there): the release must be queued, not block.
    from zarrlake.txn import writers

    released = threading.Event()

    class Handle:
        pid = os.getpid()

        def release(self) -> None:
            released.set()

    with writers._LOCK:
        writers.release_later(Handle())
        writers.release_later(Handle())
    assert released.wait(10)


def test_the_writers_are_shown_with_their_states(job, where):
    """`Repo.session_writers` names every writer's state, process and what it flushed."""
    repo, s = job
    dead = run(write_then_die, (where, s.id, [4, 5], [6, 7]))
    failed = run(write_then_raise, (where, s.id, [8, 9, 10, 11]))
    by_state = {w.state: w for w in repo.session_writers(s.id)}
    assert set(by_state) == {"finished", "gone", "failed"}
    assert by_state["gone"].pid == dead and by_state["gone"].chunks == 2
    assert by_state["failed"].pid == failed and "bad input row" in by_state["failed"].error
    assert by_state["finished"].chunks == 4


def test_sessions_list_and_show_print_the_writers(tmp_path):
    from tests.helpers.cli import ok

    where = {"location": str(tmp_path / "repo")}
    repo = zl.Repo.create(**where)
    setup = repo.create_session()
    zarr.create_array(setup.store, name="t", shape=(ROWS, COLS), chunks=(1, COLS), dtype="i8")
    setup.commit("array t")
    s = repo.create_session(message="job")
    run(write_rows, (where, s.id, [2]))
    dead = run(write_then_die, (where, s.id, [0], [1]))
    listed = ok("-r", where["location"], "sessions", "list", "--json").json()
    assert sorted(w["state"] for w in listed[0]["writers"]) == ["finished", "gone"]
    table = ok("-r", where["location"], "sessions", "list").stdout
    assert "1 finished, 1 gone" in table
    shown = ok("-r", where["location"], "sessions", "show", s.id).stdout
    assert f"pid {dead} on" in shown and "gone" in shown and "1 fragment(s), 1 chunk(s)" in shown
