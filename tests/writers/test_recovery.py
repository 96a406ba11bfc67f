"""Recovery after a worker failed or died, with real processes: a finished worker that
wrote the dead one's part again makes the commit leave the dead one out by itself (no
`unfinished=`); otherwise the refusal names what is still missing and leads with the
choice that fits ("include" for a committer that crashed after flushing, "discard" when
the part looks rewritten but cannot be checked)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.writers.conftest import rows_at
from tests.writers.workers import (
    BIG,
    COLS,
    ROWS,
    commit_later,
    read_then_write_then_die,
    write_big_then_die,
    write_rows,
    write_rows_as,
    write_rows_within,
    write_then_die,
    write_then_raise,
    write_then_raise_behind,
)
from zarrlake._util import crashpoints

SPAWN = multiprocessing.get_context("spawn")
FORK = multiprocessing.get_context("fork")


def run(ctx, target, args) -> int:
    """Run `target(args)` in a child process of `ctx`; its pid."""
    p = ctx.Process(target=target, args=(args,))
    p.start()
    p.join()
    return p.pid


def table(repo: zl.Repo) -> np.ndarray:
    return zarr.open_array(repo.readonly_session().store, path="t", mode="r")[:]


def expected(rows: list[int], values: dict[int, int] | None = None) -> np.ndarray:
    """The array once `rows` were written by workers (row r holds r + 1 unless `values`)."""
    out = np.zeros((ROWS, COLS), dtype="i8")
    for r in rows:
        out[r] = (values or {}).get(r, r + 1)
    return out


def test_a_killed_workers_part_written_again_by_a_new_worker_commits_without_a_choice(where):
    repo = zl.Repo.open(**where)
    s = repo.create_session()
    run(FORK, write_rows, (where, s.id, [0, 1, 2, 3]))
    run(FORK, write_then_die, (where, s.id, [4, 5], [6, 7]))  # flushed 4-5, held 6-7
    run(FORK, write_rows, (where, s.id, [4, 5, 6, 7]))  # its part, from a new worker
    s.commit("job")
    assert np.array_equal(table(repo), expected(list(range(8))))


@pytest.mark.slow(seconds=10)
def test_the_same_with_spawned_processes(here):
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    run(SPAWN, write_then_die, (here, s.id, [4, 5], [6, 7]))
    run(SPAWN, write_rows, (here, s.id, [4, 5, 6, 7]))
    s.commit("job")
    assert np.array_equal(table(repo), expected([4, 5, 6, 7]))


def test_a_failed_workers_part_written_again_commits_without_a_choice(here):
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    run(FORK, write_then_raise, (here, s.id, [8, 9, 10, 11]))  # flushed 8-9, gave up 10-11
    run(FORK, write_rows, (here, s.id, [8, 9, 10, 11]))
    s.commit("job")
    assert np.array_equal(table(repo), expected([8, 9, 10, 11]))


@pytest.mark.slow(seconds=8)
def test_a_pool_whose_worker_died_runs_the_failed_parts_again_and_commits(here):
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    parts = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    # one worker: the kill breaks the pool; the first part finished before it returned
    with ProcessPoolExecutor(1, mp_context=SPAWN) as pool:
        futures = {
            0: pool.submit(write_rows_within, (here, s.id, parts[0])),
            1: pool.submit(write_then_die, (here, s.id, parts[1][:2], parts[1][2:])),
        }
        assert futures[0].result()  # the first part ended normally
        with pytest.raises(BrokenProcessPool):
            futures[1].result()
    with ProcessPoolExecutor(2, mp_context=SPAWN) as pool:  # the failed part, again
        list(pool.map(write_rows, [(here, s.id, parts[1])]))
    s.commit("job")
    assert np.array_equal(table(repo), expected(list(range(8))))


def test_a_part_rewritten_only_in_part_is_refused_naming_the_chunks_still_missing(here):
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    run(FORK, write_then_die, (here, s.id, [4, 5, 6], [7]))  # flushed 4-6, held 7
    run(FORK, write_rows, (here, s.id, [4]))
    with pytest.raises(zl.UnfinishedWritersError) as e:
        s.commit()
    message = str(e.value)
    assert e.value.choice == "rewrite"
    assert "1 key(s) of its part were written again" in message
    assert "still missing: array 't': 3 chunk(s), (5, 0), (6, 0), (7, 0)" in message
    assert "write the missing chunks again" in message
    assert rows_at(repo) == []
    run(FORK, write_rows, (here, s.id, [5, 6, 7]))
    s.commit()
    assert np.array_equal(table(repo), expected([4, 5, 6, 7]))


def test_a_part_written_earlier_by_others_does_not_supersede_a_later_write(here):
    # a finished worker wrote row 4 before the dead one wrote other bytes there: the dead
    # one's write was the later intent, so its part is not written again
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    run(FORK, write_rows_as, (here, s.id, [4], 50))
    run(FORK, write_then_die, (here, s.id, [4], []))
    with pytest.raises(zl.UnfinishedWritersError, match="nobody wrote its part again") as e:
        s.commit()
    assert e.value.choice == "include"


def test_a_failed_workers_given_up_rows_are_dated_by_the_metastores_clock(here):
    # a finished worker wrote rows 10-11 (other bytes) before a worker whose clock runs two
    # hours behind failed giving them up: they are still missing (its record once carried
    # its own clock's time, which made the earlier rewrite look later and left it out)
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    run(FORK, write_rows_as, (here, s.id, [10, 11], 50))
    run(FORK, write_rows, (here, s.id, [8, 9]))  # its flushed rows, the same bytes
    run(FORK, write_then_raise_behind, (here, s.id, [8, 9, 10, 11]))
    with pytest.raises(zl.UnfinishedWritersError, match=r"missing: .* \(10, 0\), \(11, 0\)") as e:
        s.commit()
    assert e.value.choice == "rewrite"


def test_the_same_bytes_written_earlier_supersede_a_dead_workers_write(here):
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    run(FORK, write_rows, (here, s.id, [4]))
    run(FORK, write_then_die, (here, s.id, [4], []))  # the same bytes, after
    s.commit()
    assert np.array_equal(table(repo), expected([4]))


def test_a_crashed_committer_commits_with_the_choice_the_message_names(here):
    repo = zl.Repo.open(**here)
    reader, writer = SPAWN.Pipe(duplex=False)
    p = SPAWN.Process(target=commit_later, args=((here, [0, 1, 2], writer),))
    p.start()
    session_id = reader.recv()
    p.join()
    s = repo.join_session(session_id)
    with pytest.raises(zl.UnfinishedWritersError) as e:
        s.commit()
    assert e.value.choice == "include"
    assert f"pid {p.pid}" in str(e.value)
    assert "flushed everything it held" in str(e.value)
    assert str(e.value).index("unfinished='include'") < str(e.value).index("'discard'")
    s.commit(unfinished=e.value.choice)
    assert np.array_equal(table(repo), expected([0, 1, 2]))


def test_a_part_whose_unflushed_keys_are_unknown_leads_with_discard(here):
    # its batch began with a read (serializable sessions record reads), so only what it
    # flushed is known: nothing; the rewrite cannot be checked, and discard fits
    repo = zl.Repo.open(**here)
    s = repo.create_session(isolation="serializable")
    run(FORK, read_then_write_then_die, (here, s.id, [2, 3]))
    run(FORK, write_rows, (here, s.id, [2, 3]))
    with pytest.raises(zl.UnfinishedWritersError) as e:
        s.commit()
    assert e.value.choice == "discard"
    assert "keys were never recorded" in str(e.value)
    s.commit(unfinished=e.value.choice)
    assert np.array_equal(table(repo), expected([2, 3]))


def test_writers_left_out_as_rewritten_are_left_out_of_an_include_too(here):
    # "include" keeps what unfinished writers flushed, except parts written again (which
    # would otherwise clash with the rewrite's other bytes)
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    run(FORK, write_then_die, (here, s.id, [4], []))
    run(FORK, write_rows_as, (here, s.id, [4], 77))  # other bytes, later
    run(FORK, write_then_die, (here, s.id, [9], []))  # not rewritten
    s.commit(unfinished="include")
    assert np.array_equal(table(repo), expected([4, 9], {4: 77}))


def _killed_after_staging(here, s, rows, monkeypatch):
    """A forked worker of session `s` that writes `rows` (row index -> values) of "big" and
    is killed at the crash point after staging, before its flush settles; its process."""
    with monkeypatch.context() as m:
        m.setattr(crashpoints, "_CRASH_AT", "after_staging")
        p = FORK.Process(target=write_big_then_die, args=((here, s.id, rows),))
        p.start()
        p.join()
    return p


def test_a_dead_workers_chunk_deleted_before_it_settled_refuses_the_commit(here, monkeypatch):
    """A worker reuses a chunk object an abandoned session left (it is there: no upload),
    registers its fragment and is killed before its flush settles the object with the
    garbage collector. A sweep that read the session's records before the registration
    deletes the object (done here by hand). A commit including the dead worker
    (unflushed="discard") refuses, naming it and the chunk, and lands nothing."""
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    zarr.create_array(s.store, name="big", shape=(4, BIG), chunks=(1, BIG), dtype="i8")
    head = s.commit("array big")
    row = np.random.default_rng(0).integers(0, 2**40, BIG)  # compresses to no less than 8 KiB
    small = np.random.default_rng(1).integers(0, 16, BIG)  # to 1-8 KiB: held in the fragment
    left = repo.create_session()
    zarr.open_array(left.store, path="big", mode="r+")[1] = row
    left.flush()
    left.abandon()
    store = repo._context.object_store
    (chunk,) = store.list("chunks/")
    s = repo.create_session()
    p = _killed_after_staging(here, s, {1: row, 2: small}, monkeypatch)
    assert p.exitcode == -9  # killed at the crash point, its flush never settled
    assert list(store.list("chunks/")) == [chunk]  # reused, not uploaded again
    store.delete(chunk)
    zarr.open_array(s.store, path="big", mode="r+")[0] = 5  # the driver's own part
    with pytest.raises(zl.UnfinishedWritersError) as e:
        s.commit("job", unflushed="discard")
    assert f"pid {p.pid}" in str(e.value)
    assert "array 'big': 1 chunk(s), (1, 0)" in str(e.value)  # not row 2, held inline
    assert chunk in str(e.value)
    assert e.value.choice == "discard"
    assert repo.list_branches()["main"] == head
    s.commit("job", unfinished=e.value.choice)  # the session stayed open
    big = zarr.open_array(repo.readonly_session().store, path="big", mode="r")
    want = np.zeros((4, BIG), dtype="i8")
    want[0] = 5
    assert np.array_equal(big[:], want)


def test_a_dead_workers_unsettled_chunks_still_there_are_committed_by_an_include(here, monkeypatch):
    """The same worker killed before settling, with nothing deleted: its chunk objects
    (and its small chunk, held in its fragment's record) are all there, so a commit
    including it (unflushed="discard") lands its rows."""
    repo = zl.Repo.open(**here)
    s = repo.create_session()
    zarr.create_array(s.store, name="big", shape=(4, BIG), chunks=(1, BIG), dtype="i8")
    s.commit("array big")
    row = np.random.default_rng(0).integers(0, 2**40, BIG)
    small = np.random.default_rng(1).integers(0, 16, BIG)  # held in the fragment's record
    s = repo.create_session()
    p = _killed_after_staging(here, s, {1: row, 2: small}, monkeypatch)
    assert p.exitcode == -9
    zarr.open_array(s.store, path="big", mode="r+")[0] = 5
    s.commit("job", unflushed="discard")
    big = zarr.open_array(repo.readonly_session().store, path="big", mode="r")
    want = np.zeros((4, BIG), dtype="i8")
    want[0], want[1], want[2] = 5, row, small
    assert np.array_equal(big[:], want)
