"""Fixtures of the history tests; their helpers are in tests/helpers/history.py."""

from __future__ import annotations

import pytest
import zarr

import zarrlake as zl
from tests.helpers.history import CHUNK, NCHUNKS


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    """A repository whose main holds array `a`: 10 chunks of 10 int64, all 0."""
    r = zl.Repo.create(tmp_path / "repo")
    s = r.create_session()
    root = zarr.open_group(s.store, mode="a")
    arr = root.create_array(
        "a", shape=(CHUNK * NCHUNKS,), chunks=(CHUNK,), dtype="i8", fill_value=0
    )
    arr[:] = 0
    s.commit("create a")
    yield r
    r.close()
