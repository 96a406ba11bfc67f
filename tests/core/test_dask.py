"""Dask. A session pickled to the worker processes of a distributed
LocalCluster; the workers write cooperatively (xarray region writes and dask.array.store),
then the client makes one commit."""

from __future__ import annotations

import os

import dask.array as da
import numpy as np
import xarray as xr
import zarr

import zarrlake as zl

T, X = 8, 6


def block(start: int, stop: int) -> xr.Dataset:
    """Rows start:stop of the dataset; every value says where it belongs."""
    rows = np.arange(start, stop, dtype="f8")[:, None] * 100 + np.arange(X)
    return xr.Dataset({"t": (("time", "x"), rows)})


def write_region(session: zl.Session, start: int, stop: int) -> int:
    """Runs on a worker: writes its rows into the session's store."""
    block(start, stop).to_zarr(session.store, region={"time": slice(start, stop)})
    return os.getpid()


def test_workers_write_cooperatively_and_the_client_commits_once(tmp_path, client):
    repo = zl.Repo.create(tmp_path / "repo")
    before = len(repo.log())
    s = repo.create_session(message="dask job")

    # the structure first, on the client: metadata only
    template = xr.Dataset({"t": (("time", "x"), da.zeros((T, X), chunks=(2, X)))})
    template.to_zarr(s.store, compute=False)
    target = zarr.open_group(s.store).create_array(
        "b", shape=(T, X), chunks=(2, 3), dtype="i8", dimension_names=["time", "x"]
    )

    # xarray region writes, one task per pair of rows, on the worker processes
    starts = list(range(0, T, 2))
    pids = client.gather(
        client.map(write_region, [s] * len(starts), starts, [i + 2 for i in starts])
    )
    assert os.getpid() not in pids  # written by the worker processes, not here

    # dask.array.store into a zarr array of the same session (pickled with its store)
    values = da.arange(T * X, chunks=12).reshape(T, X).rechunk((2, 3))
    da.store(values, target, lock=False, compute=True)

    cid = s.commit("dask job")
    assert repo.log()[0].id == cid
    assert len(repo.log()) == before + 1

    ro = repo.readonly_session("main")
    expected = np.arange(T, dtype="f8")[:, None] * 100 + np.arange(X)
    assert np.array_equal(xr.open_zarr(ro.store)["t"].values, expected)
    assert np.array_equal(
        zarr.open_array(ro.store, path="b", mode="r")[:], np.arange(T * X).reshape(T, X)
    )
