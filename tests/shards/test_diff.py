"""Diffs of a sharded array speak in inner chunks: a shard stored whole (as before shards
were split) counts as all of its inner chunks, and splitting it by rewriting one inner chunk
shows every inner chunk written, none deleted; the shard grouping comes with the diff."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

import zarrlake as zl
from tests.shards.conftest import INNER, SHAPE, random
from tests.shards.test_reading import KEY, shard_bytes

GRID = [(r, c) for r in range(SHAPE[0]) for c in range(SHAPE[1] // INNER[1])]


def test_a_shard_stored_whole_diffs_as_its_inner_chunks(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    written = shard_bytes(random(SHAPE))
    s = repo.create_session()
    s.write(KEY, written[KEY])  # before the array's metadata: stored whole, as it was
    s.write("a/zarr.json", written["a/zarr.json"])
    whole = s.commit("whole")
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[0, 0:10] = -1
    split = s.commit("split")
    d = repo.diff(whole, split)
    assert sorted(d.chunks_written["a"]) == GRID  # the split stages every inner chunk
    assert "a" not in d.chunks_deleted  # each was rewritten, none lost
    assert d.chunks_per_shard == {"a": (8, 4)}
    assert d.to_json()["chunks_per_shard"] == {"a": [8, 4]}
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[3, 4096:4100] = -2
    d = repo.diff(split, s.commit("one inner chunk"))
    assert d.chunks_written == {"a": {(3, 1)}} and d.shards_of("a", {(3, 1)}) == {(0, 0): [(3, 1)]}


def test_deleting_a_shard_stored_whole_deletes_its_inner_chunks(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    written = shard_bytes(random(SHAPE))
    s = repo.create_session()
    s.write(KEY, written[KEY])
    s.write("a/zarr.json", written["a/zarr.json"])
    whole = s.commit("whole")
    s = repo.create_session()
    s.delete(KEY)
    d = repo.diff(whole, s.commit("gone"))
    assert "a" not in d.chunks_written and sorted(d.chunks_deleted["a"]) == GRID
    unsharded = zl.Repo.create(tmp_path / "plain")
    s = unsharded.create_session()
    zarr.create_array(s.store, name="p", shape=(4,), chunks=(2,), dtype="i4")[:] = np.arange(4)
    first = s.commit("plain")
    s = unsharded.create_session()
    zarr.open_array(s.store, path="p", mode="r+")[0] = 9
    d = unsharded.diff(first, s.commit("one chunk"))
    assert d.chunks_written == {"p": {(0,)}} and d.chunks_per_shard == {}
    assert "chunks_per_shard" not in d.to_json()
