"""Repositories that several processes open: on a local directory (SQLite), on S3 with a
PostgreSQL metastore, and on S3 alone (the bucket metastore)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.writers.workers import COLS, ROWS


@pytest.fixture
def where(any_metastore: dict) -> dict:
    """Repo.open arguments of a new repository holding an empty int array `t` on main."""
    return with_array(any_metastore)


@pytest.fixture
def here(tmp_path) -> dict:
    """`where` on a local directory only (SQLite): for rules that no metastore changes."""
    return with_array({"location": str(tmp_path / "repo")})


def with_array(where: dict) -> dict:
    """Create the repository at `where` with the empty int array `t` on main."""
    repo = zl.Repo.create(**where)
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(ROWS, COLS), chunks=(1, COLS), dtype="i8")
    s.commit("array t")
    repo.close()
    return where


def rows_at(repo: zl.Repo, ref: str = "main") -> np.ndarray:
    """The rows written (a written row holds its number + 1; one never written holds 0)."""
    arr = zarr.open_array(repo.readonly_session(ref).store, path="t", mode="r")
    return np.flatnonzero(arr[:, 0] == np.arange(1, ROWS + 1)).tolist()
