"""Garbage collection and fsck over shards stored as inner chunks: an object whose inner
chunks are ranges of it stays while any of them is referenced, and goes when none is."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import zarr

import zarrlake as zl
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.format.shard import ShardRef


def test_gc_keeps_a_shard_object_while_inner_chunks_point_into_it(
    stored: tuple[zl.Repo, Path, np.ndarray],
) -> None:
    repo, root, values = stored
    ref = repo.readonly_session()._engine.lookup("a/c/0/0")
    assert isinstance(ref, ShardRef) and ref.whole is not None
    first = root / chunk_object_key(ref.whole.digest)
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[0, 0:4096] = 1
    s.commit("one inner chunk")
    s.wait()
    values[0, 0:4096] = 1
    repo.expire(timedelta(0))
    repo.gc(older_than=timedelta(0), full=True)
    assert first.exists()  # 31 of its 32 inner chunks are still the array's
    assert repo.fsck() == []
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]
    np.testing.assert_array_equal(got, values)
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[:] = 2
    s.commit("all of it")
    s.wait()
    repo.expire(timedelta(0))
    repo.gc(older_than=timedelta(0), full=True)
    assert not first.exists()  # none is
    assert repo.fsck() == []
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]
    assert (got == 2).all()
