"""A small repository with everything the UI shows: several commits on main, a branch with
its own commit, a tag, 2-D and 3-D arrays, a chunk deleted, an array of an undrawable
dtype, and an open session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import zarr

import zarrlake as zl


@dataclass
class Built:
    path: Path
    repo: zl.Repo
    first: str  # the layout commit (tagged v1)
    t2m: str  # wrote time chunk 1 of weather/t2m (2 x 2 chunks)
    grid: str  # wrote 2 chunks of grid2d and deleted 1
    storm: str  # wrote 2 x 3 of the 6 x 6 chunks of weather/field (the head of main)
    dev: str  # the commit on branch dev
    session_id: str


def smooth(rows: int, cols: int, waves: float = 1.5) -> np.ndarray:
    """A smooth float32 field, good to look at in a preview."""
    y, x = np.mgrid[0:rows, 0:cols].astype("f4")
    return (270 + 10 * np.sin(waves * np.pi * y / rows) * np.cos(waves * np.pi * x / cols)).astype(
        "f4"
    )


def build(path: Path) -> Built:
    repo = zl.Repo.create(path)
    s = repo.create_session("main", author="ada")
    root = zarr.open_group(s.store)
    weather = root.create_group("weather", attributes={"source": "test"})
    t2m = weather.create_array(
        "t2m",
        shape=(6, 8, 10),
        chunks=(2, 4, 5),
        dtype="f4",
        fill_value=float("nan"),
        dimension_names=("time", "lat", "lon"),
        attributes={"units": "K"},
    )
    t2m[0:2] = np.arange(2 * 8 * 10, dtype="f4").reshape(2, 8, 10)
    grid = root.create_array("grid2d", shape=(12, 16), chunks=(4, 4), dtype="i4", fill_value=0)
    grid[:] = np.arange(1, 12 * 16 + 1, dtype="i4").reshape(12, 16)
    field = weather.create_array(
        "field", shape=(180, 240), chunks=(30, 40), dtype="f4", dimension_names=("y", "x")
    )
    field[:] = smooth(180, 240)
    labels = root.create_array("labels", shape=(4,), chunks=(2,), dtype="complex64")
    labels[:] = np.arange(4) * (1 + 1j)
    first = s.commit("Create the layout")
    repo.create_tag("v1", at=first)

    s = repo.create_session("main", author="ada")
    a = zarr.open_array(s.store, path="weather/t2m")
    a[2:4] = 280 + np.arange(2 * 8 * 10, dtype="f4").reshape(2, 8, 10) / 10
    a[3, 0, 0] = np.nan
    t2m_commit = s.commit("Day 2 of t2m")
    repo.create_branch("dev", at=t2m_commit)

    s = repo.create_session("main", author="bob")
    g = zarr.open_array(s.store, path="grid2d")
    g[0:4, 0:8] = -5  # two chunks written
    g[4:8, 0:4] = 0  # all fill: the chunk is deleted
    grid_commit = s.commit("Fix grid2d")

    s = repo.create_session("main", author="bob")
    f = zarr.open_array(s.store, path="weather/field")
    f[0:60, 120:240] = f[0:60, 120:240] + 2 * (smooth(60, 120, 3.0) - 270)
    storm = s.commit("Storm over the north-east")

    s = repo.create_session("dev", author="cy")
    zarr.open_array(s.store, path="weather/t2m")[0, 0:4, 0:5] = 1.5
    dev_commit = s.commit("Experiment on dev")

    open_session = repo.create_session(
        "main", author="dee", message="work in progress", expires_in=timedelta(hours=5)
    )
    zarr.open_array(open_session.store, path="grid2d")[0, 0] = 7
    return Built(
        path, repo, first, t2m_commit, grid_commit, storm, dev_commit, str(open_session.id)
    )
