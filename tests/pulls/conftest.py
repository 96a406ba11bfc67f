"""Repositories that several processes open, on each metastore (the `where` pattern of
tests/writers/conftest.py): a local directory (SQLite), S3 with PostgreSQL, S3 alone.
Each holds an int array `t` (one chunk per row) on main and a branch `day1` that wrote row 1."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import zarr

import zarrlake as zl

ROWS, COLS = 8, 4


def write_row(repo: zl.Repo, branch: str, row: int, value: int, message: str) -> str:
    """Commit `value` into row `row` of `t` on `branch`; returns the commit id."""
    s = repo.create_session(branch, author="ingest")
    zarr.open_array(s.store, path="t", mode="r+")[row] = value
    return s.commit(message)


def row_values(repo: zl.Repo, ref: str = "main") -> list[int]:
    """The first column of `t` at `ref`."""
    arr = zarr.open_array(repo.readonly_session(ref).store, path="t", mode="r")
    return np.asarray(arr[:, 0]).tolist()


@pytest.fixture
def where(any_metastore: dict) -> dict:
    """Repo.open arguments of a new repository with `t` on main and branch `day1`."""
    repo = zl.Repo.create(**any_metastore)
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(ROWS, COLS), chunks=(1, COLS), dtype="i8")
    s.commit("array t")
    repo.create_branch("day1")
    write_row(repo, "day1", 1, 11, "day 1")
    repo.close()
    return any_metastore


@pytest.fixture
def repo(where: dict) -> Iterator[zl.Repo]:
    """The repository of `where`, opened."""
    r = zl.Repo.open(**where)
    yield r
    r.close()
