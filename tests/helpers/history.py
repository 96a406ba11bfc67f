"""Shared helpers for the history tests: a repository with one chunked 1-d array, and
one-line writes of whole chunks on a branch."""

from __future__ import annotations

import numpy as np
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
