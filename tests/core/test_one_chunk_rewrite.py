"""A one-chunk commit whose chunk holds the bytes its base already has changes nothing
(the unchanged-write check's lookup of one key); one with other bytes, or into a chunk the
base lacks, commits, and reads back what numpy wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl


def test_one_chunk_with_the_base_bytes_is_no_change(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session("main")
    a = zarr.create_array(s.store, name="a", shape=(30, 8), chunks=(1, 8), dtype="f4")
    values = np.arange(240, dtype="f4").reshape(30, 8)
    a[:20] = values[:20]
    first = s.commit("twenty chunks")

    same = repo.create_session("main")
    zarr.open_array(same.store, path="a")[7] = values[7]  # the bytes chunk 7 holds
    with pytest.raises(zl.NoChangesError):
        same.commit("the same bytes", allow_empty=False)
    assert same.commit("the same bytes, empty allowed", allow_empty=True) != first

    other = repo.create_session("main")
    zarr.open_array(other.store, path="a")[7] = values[7] + 0.5
    other.commit("other bytes", allow_empty=False)
    new = repo.create_session("main")
    zarr.open_array(new.store, path="a")[25] = values[25]  # a chunk the base lacks
    new.commit("a new chunk", allow_empty=False)

    got = zarr.open_array(repo.readonly_session("main").store, path="a")[:]
    want = np.zeros((30, 8), "f4")
    want[:20] = values[:20]
    want[7] += 0.5
    want[25] = values[25]
    np.testing.assert_array_equal(got, want)
    log = [c.message for c in repo.log("main")]
    assert log[:3] == ["a new chunk", "other bytes", "the same bytes, empty allowed"]
