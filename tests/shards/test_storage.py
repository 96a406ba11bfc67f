"""Storage grows with the inner chunks changed, not with the shard; inner chunks are
deduplicated; an inner chunk rewritten with its own bytes changes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.shards.conftest import INNER, dir_bytes, random

INNER_BYTES = 4 * INNER[0] * INNER[1]


def test_rewriting_one_inner_chunk_stores_about_one_inner_chunk(
    stored: tuple[zl.Repo, Path, np.ndarray],
) -> None:
    repo, root, values = stored
    shard = dir_bytes(root, "chunks")
    assert shard > 30 * INNER_BYTES  # the first write stored the shard
    total = dir_bytes(root)
    s = repo.create_session()
    new = random(INNER, seed=1)
    zarr.open_array(s.store, path="a", mode="r+")[3:4, 4096:8192] = new
    s.commit("one inner chunk")
    s.wait()
    assert dir_bytes(root, "chunks") - shard == INNER_BYTES  # its bytes, once
    assert dir_bytes(root) - total < INNER_BYTES + 8 * 1024  # plus small records
    values[3:4, 4096:8192] = new
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]
    np.testing.assert_array_equal(got, values)


def test_inner_chunks_are_deduplicated(stored: tuple[zl.Repo, Path, np.ndarray]) -> None:
    repo, root, _ = stored
    new = random(INNER, seed=2)
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[0:1, 0:4096] = new
    s.commit("new bytes")
    objects = sorted((root / "chunks").rglob("*"))
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[7:8, 12288:16384] = new  # the same bytes
    s.commit("the same bytes elsewhere in the shard")
    assert sorted((root / "chunks").rglob("*")) == objects
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")
    np.testing.assert_array_equal(got[7:8, 12288:16384], new)


def test_an_inner_chunk_rewritten_as_it_was_changes_nothing(
    stored: tuple[zl.Repo, Path, np.ndarray],
) -> None:
    repo, _, values = stored
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[2:3, 0:4096] = values[2:3, 0:4096]
    assert s._staged_changes() == []
    with pytest.raises(zl.NoChangesError):
        s.commit("nothing")
