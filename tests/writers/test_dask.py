"""Dask on a LocalCluster with worker processes: a worker killed mid-task has its task run
again by Dask, and the commit leaves the dead copy's part out by itself; a Dask-backed
`to_zarr` into a session store leaves every task's writer finished when it returns."""

from __future__ import annotations

import os
import signal

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrlake as zl

DAYS, X = 6, 4


def day_rows(day: int) -> np.ndarray:
    return np.full((2, X), 10.0 * day + 1)


def write_day(session: zl.Session, day: int, flag: str) -> int:
    """A task: fills the two rows of `day`; the first attempt of day 3 flushes one row,
    writes the other and dies with its worker (SIGKILL), and Dask runs the task again."""
    with session:
        t = zarr.open_array(session.store, path="t", mode="r+")
        t[2 * day] = day_rows(day)[0]
        if day == 3 and _first_attempt(flag):
            session.flush()
            t[2 * day + 1] = day_rows(day)[1]
            os.kill(os.getpid(), signal.SIGKILL)
        t[2 * day + 1] = day_rows(day)[1]
    return os.getpid()


def _first_attempt(flag: str) -> bool:
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@pytest.mark.slow(seconds=15)
def test_a_killed_dask_workers_retried_task_commits_exactly(tmp_path, client):
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session(message="nightly")
    zarr.create_array(s.store, name="t", shape=(2 * DAYS, X), chunks=(1, X), dtype="f8")
    flag = str(tmp_path / "killed-once")
    client.gather(client.map(write_day, [s] * DAYS, range(DAYS), [flag] * DAYS))
    assert os.path.exists(flag)  # a worker did die
    states = [w.state for w in repo.session_writers(s.id)]
    # (Dask may run again other tasks whose results the dead worker held: more finished)
    assert states.count("gone") == 1 and states.count("finished") >= DAYS + 1
    s.commit("nightly")  # no unfinished=: the retried task wrote the dead copy's part
    got = zarr.open_array(repo.readonly_session().store, path="t", mode="r")[:]
    assert np.array_equal(got, np.concatenate([day_rows(d) for d in range(DAYS)]))


@pytest.mark.slow(seconds=8)
def test_a_dask_backed_to_zarr_finishes_its_writers_in_its_tasks(tmp_path, client):
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    values = np.arange(24 * DAYS * X, dtype="f8").reshape(24 * DAYS, X)
    ds = xr.Dataset({"t": (("time", "x"), da.from_array(values, chunks=(24, X)))})
    ds.to_zarr(s.store)
    writers = repo.session_writers(s.id)
    assert len(writers) > DAYS  # one per task's copy, and this handle's metadata
    assert {(w.state, w.unflushed) for w in writers} == {("finished", False)}
    s.commit("to_zarr")
    got = xr.open_zarr(repo.readonly_session().store)["t"].values
    assert np.array_equal(got, values)
