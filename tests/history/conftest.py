"""Shared helpers for the history tests: a repository with one chunked 1-d array, and
one-line writes of whole chunks on a branch."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl

CHUNK = 10
NCHUNKS = 10


def commit_chunks(repo: zl.Repo, branch: str, values: dict[int, int], path: str = "a") -> str:
    """Fill whole chunks (index -> value) of array `path` on `branch` in one commit."""
    s = repo.create_session(branch)
    arr = zarr.open_array(s.store, path=path)
    for i, v in values.items():
        arr[i * CHUNK : (i + 1) * CHUNK] = v
    return s.commit(f"{branch}: write {sorted(values)}")


def read(repo: zl.Repo, ref: str, path: str = "a") -> np.ndarray:
    return zarr.open_array(repo.readonly_session(ref).store, path=path, mode="r")[:]


def chunk_values(repo: zl.Repo, ref: str, path: str = "a") -> list[int]:
    """The first value of every chunk (chunks are written whole)."""
    return [int(v) for v in read(repo, ref, path)[::CHUNK]]


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
