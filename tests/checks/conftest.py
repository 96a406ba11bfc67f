"""Repositories for the checks tests: a local one (SQLite), and one per metastore kind
(SQLite, S3 + PostgreSQL, the bucket alone) for the enforcement tests."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import zarr

import zarrlake as zl

ROWS, COLS = 8, 4
"""Array `t`: ROWS x COLS floats in chunks of one row; `time`: ROWS ints, chunks of 2."""


def fill(repo: zl.Repo) -> str:
    """Create `t` (rows of 1.0, CF attributes) and `time` (0..ROWS-1) on main."""
    s = repo.create_session()
    t = zarr.create_array(
        s.store,
        name="t",
        shape=(ROWS, COLS),
        chunks=(1, COLS),
        dtype="f8",
        fill_value=np.nan,
        dimension_names=("time", "x"),
        attributes={"units": "K", "standard_name": "air_temperature"},
    )
    t[:] = 1.0
    tm = zarr.create_array(s.store, name="time", shape=(ROWS,), chunks=(2,), dtype="i8")
    tm[:] = np.arange(ROWS)
    return s.commit("t and time")


@pytest.fixture
def repo(tmp_path) -> Iterator[zl.Repo]:
    """A local repository holding `t` and `time` on main."""
    r = zl.Repo.create(tmp_path / "repo")
    fill(r)
    yield r
    r.close()


@pytest.fixture
def where(any_metastore: dict) -> dict:
    """Repo.open arguments of a new repository holding `t` and `time` on main, on each
    metastore kind."""
    r = zl.Repo.create(**any_metastore)
    fill(r)
    r.close()
    return any_metastore


def write(repo: zl.Repo, branch: str = "main", **arrays: dict) -> zl.Session:
    """A session on `branch` with `arrays` written: {name: {selection: value}}."""
    s = repo.create_session(branch)
    g = zarr.open_group(s.store)
    for name, items in arrays.items():
        for sel, value in items.items():
            g[name][sel] = value
    return s
