"""Two sessions changing one shard: different inner chunks both land (the second rebases
automatically); the same inner chunk conflicts, named by its coordinates."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.shards.conftest import random


def base(repo: zl.Repo) -> np.ndarray:
    values = random((4, 64))
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=(4, 64), chunks=(1, 16), shards=(4, 64), dtype="f4"
    )
    arr[:] = values
    s.commit("one shard of sixteen inner chunks")
    return values


def test_different_inner_chunks_of_one_shard_both_land(repo: zl.Repo) -> None:
    values = base(repo)
    first, second = repo.create_session(), repo.create_session()
    zarr.open_array(first.store, path="a", mode="r+")[0, 0:16] = 1
    zarr.open_array(second.store, path="a", mode="r+")[3, 48:64] = 2
    first.commit("row 0")
    second.commit("row 3")  # based before "row 0": rebased, no conflict
    values[0, 0:16] = 1
    values[3, 48:64] = 2
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]
    np.testing.assert_array_equal(got, values)
    assert [c.message for c in repo.log("main")][:2] == ["row 3", "row 0"]


def test_one_inner_chunk_changed_by_two_sessions_conflicts(repo: zl.Repo) -> None:
    base(repo)
    first, second = repo.create_session(), repo.create_session()
    zarr.open_array(first.store, path="a", mode="r+")[2, 16:32] = 1
    zarr.open_array(second.store, path="a", mode="r+")[2, 20] = 2
    first.commit("first")
    with pytest.raises(zl.ConflictError) as caught:
        second.commit("second")
    (conflict,) = caught.value.conflicts
    assert conflict.path == "a" and conflict.chunks == [(2, 1)]  # inner chunk, not shard (0, 0)
    second.commit("second, ours", on_conflict="ours")
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[2, 16:32]
    assert got[4] == 2 and got[0] != 1  # ours: its whole inner chunk, as it read it


def test_diff_names_inner_chunks(repo: zl.Repo) -> None:
    base(repo)
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[1, 40] = 9
    assert s.changes().chunks_written == {"a": {(1, 2)}}
    s.commit("one inner chunk")
    assert repo.diff("main~1", "main").chunks_written == {"a": {(1, 2)}}


def test_blame_finds_the_commit_of_an_inner_chunk(repo: zl.Repo) -> None:
    base(repo)
    first = repo.log("main")[0].id
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[1, 40] = 9
    changed = s.commit("inner chunk (1, 2)")
    assert repo.blame("a", (1, 2)).id == changed
    assert repo.blame("a", (1, 3)).id == first
