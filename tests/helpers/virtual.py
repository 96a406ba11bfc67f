"""Small NetCDF archives made by xarray's `to_netcdf` (netCDF4 and h5netcdf engines): daily
files of three variables, compressed with shuffle and chunked, or contiguous, with the time
coordinate split across the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

import zarrlake as zl

DAYS_PER_FILE = 2


def day_dataset(first_day: int, days: int = DAYS_PER_FILE, lat: int = 6) -> xr.Dataset:
    rng = np.random.default_rng(first_day)
    start = np.datetime64("2024-01-01", "ns") + np.timedelta64(first_day, "D")
    time = pd.date_range(start, periods=days, freq="D")
    shape = (days, lat, 8)
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), rng.random(shape, dtype="f4") + 270, {"units": "K"}),
            "u10": (("time", "lat", "lon"), rng.standard_normal(shape), {"units": "m s-1"}),
            "mask": (("time", "lat", "lon"), rng.integers(0, 9, shape, dtype="i2")),
        },
        coords={"time": time, "lat": np.linspace(50, 55, lat), "lon": np.arange(8.0)},
        attrs={"title": "test archive"},
    )


def encoding(engine: str) -> dict:
    """Compression with shuffle on a chunked variable, a contiguous one, a chunked int."""
    if engine == "h5netcdf":
        packed = {"compression": "gzip", "shuffle": True, "chunksizes": (1, 3, 4)}
    else:
        packed = {"zlib": True, "shuffle": True, "chunksizes": (1, 3, 4)}
    return {"t2m": packed, "u10": {"contiguous": True}, "mask": {**packed, "chunksizes": (2, 6, 8)}}


def write_archive(directory: Path, engine: str, files: int = 3) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = directory / f"day{i:03d}.nc"
        day_dataset(i * DAYS_PER_FILE).to_netcdf(path, engine=engine, encoding=encoding(engine))
        paths.append(path)
    return paths


def urls(paths: list[Path]) -> list[str]:
    return [p.as_uri() for p in paths]


def assert_same(session: zl.Session, paths: list[Path]) -> None:
    """What zarrlake's store reads equals xarray's reading of the original files."""
    got = xr.open_zarr(session.store, consolidated=False).load()
    with xr.open_mfdataset(paths, combine="by_coords") as expected:
        xr.testing.assert_identical(got, expected.load())
