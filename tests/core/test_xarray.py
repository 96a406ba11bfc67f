"""xarray on the session store: Dataset.to_zarr into a session, commit, open_zarr from a
read-only session, and the dataset comes back equal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrlake as zl


def make_dataset() -> xr.Dataset:
    rng = np.random.default_rng(3)
    time = pd.date_range("2024-01-01", periods=6, freq="D")
    lat = np.linspace(-30.0, 30.0, 5)
    lon = np.linspace(0.0, 350.0, 8)
    return xr.Dataset(
        {
            "temperature": (
                ("time", "lat", "lon"),
                rng.normal(280, 5, (6, 5, 8)).astype("f4"),
                {"units": "K", "long_name": "air temperature"},
            ),
            "precip": (("time", "lat", "lon"), rng.gamma(1.0, 2.0, (6, 5, 8)), {"units": "mm"}),
            "station_count": (("lat", "lon"), rng.integers(0, 9, (5, 8)).astype("i2")),
        },
        coords={
            "time": time,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
            "label": ("lat", np.array([f"band{i}" for i in range(5)])),
        },
        attrs={"title": "zarrlake round trip", "version": 3, "source": "synthetic"},
    )


@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
def test_to_zarr_commit_open_zarr_round_trip(repo: zl.Repo) -> None:
    ds = make_dataset()
    s = repo.create_session(message="xarray ingest")
    ds.to_zarr(
        s.store, mode="w", consolidated=False, encoding={"temperature": {"chunks": (2, 5, 4)}}
    )
    cid = s.commit("dataset")
    ro = repo.readonly_session(cid)
    back = xr.open_zarr(ro.store, consolidated=False).load()
    xr.testing.assert_identical(back, ds)
    assert back["temperature"].encoding["chunks"] == (2, 5, 4)

    # an append along time in a second commit; the first commit still reads as before
    more = make_dataset().assign_coords(time=pd.date_range("2024-01-07", periods=6, freq="D"))
    s2 = repo.create_session()
    more.to_zarr(s2.store, append_dim="time", consolidated=False)
    s2.commit("append")
    grown = xr.open_zarr(repo.readonly_session("main").store, consolidated=False).load()
    xr.testing.assert_identical(grown, xr.concat([ds, more], dim="time", data_vars="minimal"))
    again = xr.open_zarr(repo.readonly_session(cid).store, consolidated=False).load()
    xr.testing.assert_identical(again, ds)
