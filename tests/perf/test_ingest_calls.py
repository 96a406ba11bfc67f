"""The metastore calls of writing the chunks of an array the session itself created (W1 and
W2's ingest): each chunk finds the array's document once it was read, so the reads do not
grow with the number of chunks, wherever the array sits in the hierarchy."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.core.counting import counted


def _ingest_scans(repo: zl.Repo, meta, path: str, rows: int) -> int:
    """Metastore scans of writing `rows` chunks into a new array at `path`."""
    s = repo.create_session("main")
    arr = zarr.create_array(s.store, name=path, shape=(rows, 8, 8), chunks=(1, 8, 8), dtype="f4")
    meta.calls.clear()
    arr[...] = np.arange(rows * 64, dtype="f4").reshape(rows, 8, 8)
    scans = meta.calls["scan"]
    s.commit(f"{rows} rows at {path}")
    s.wait()  # (its clean-up's scans, on a thread after the commit, are not the next ingest's)
    got = zarr.open_array(repo.readonly_session("main").store, path=path, mode="r")[...]
    assert np.array_equal(got, np.arange(rows * 64, dtype="f4").reshape(rows, 8, 8))
    return scans


@pytest.mark.parametrize("path", ["a", "g/h/a"])
def test_a_new_arrays_chunks_read_its_document_once(tmp_path, path: str) -> None:
    base = zl.Repo.create(tmp_path / "repo")
    repo, _, meta = counted(base)
    few = _ingest_scans(repo, meta, f"{path}8", 8)
    many = _ingest_scans(repo, meta, f"{path}64", 64)
    assert many == few < 8  # not one per chunk (before: 2 per chunk, 130 for 64)
    repo.close()
