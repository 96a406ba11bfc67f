"""Workers of one session writing inner chunks of one shard: disjoint ones land in one
commit exactly; one inner chunk written with different bytes by two workers is refused,
naming the array and the inner chunk."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.shards.workers import BIG_INNER, INNER, SHAPE, SHARD, values, write_inner


@pytest.mark.parametrize("inner", [INNER, BIG_INNER], ids=["inline", "objects"])
def test_four_processes_write_disjoint_inner_chunks_of_one_shard(
    tmp_path: Path, inner: tuple[int, int]
) -> None:
    where = {"location": str(tmp_path / "repo")}
    repo = zl.Repo.create(**where)
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=SHAPE, chunks=inner, shards=SHARD, dtype="f8")
    s.commit("array a")
    before = len(repo.log("main"))
    s = repo.create_session()
    ctx = multiprocessing.get_context("spawn")  # no locks inherited from this process
    barrier = ctx.Barrier(4)
    procs = [
        ctx.Process(target=write_inner, args=(where, s.id, w, 4, inner, barrier)) for w in range(4)
    ]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=300)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    s.commit("four workers")
    assert len(repo.log("main")) == before + 1
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]
    np.testing.assert_array_equal(got, values(inner))
    assert repo.readonly_session().list_prefix("a/c/") == ["a/c/0/0"]  # one shard


def test_two_workers_writing_one_inner_chunk_differently_are_refused(repo: zl.Repo) -> None:
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=(4, 8), chunks=(2, 2), shards=(2, 4), dtype="i4"
    )
    arr[:] = 1
    s.commit("ones")
    s = repo.create_session()
    other = repo.join_session(s.id)
    mine = zarr.open_array(s.store, path="a", mode="r+")
    theirs = zarr.open_array(other.store, path="a", mode="r+")
    mine[2:4, 6:8] = 5  # inner chunk (1, 3): shard (1, 1), local (0, 1)
    theirs[2:4, 6:8] = 6
    theirs[0:2, 0:2] = 7  # and a disjoint one, which is no conflict
    mine[0:2, 4:6] = 8
    s.flush()
    other.flush()
    with pytest.raises(zl.ConflictError) as caught:
        s.commit("clash")
    (conflict,) = caught.value.conflicts
    assert conflict.path == "a" and conflict.chunks == [(1, 3)]
    assert "inner chunk (1, 3) of array 'a'" in str(caught.value)
    assert "a/c/1/1" in str(caught.value)  # and its shard


def test_the_same_bytes_from_two_workers_are_no_clash(repo: zl.Repo) -> None:
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=(4, 8), chunks=(2, 2), shards=(2, 4), dtype="i4")
    s.commit("array")
    s = repo.create_session()
    other = repo.join_session(s.id)
    zarr.open_array(s.store, path="a", mode="r+")[0:2, 0:2] = 3
    zarr.open_array(other.store, path="a", mode="r+")[0:2, 0:2] = 3
    other.flush()
    s.commit("same")
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]
    want = np.zeros((4, 8), "i4")
    want[0:2, 0:2] = 3
    np.testing.assert_array_equal(got, want)
