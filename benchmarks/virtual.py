"""VIRTUAL (issue 23): a NetCDF archive versioned where it lies, against VirtualiZarr + Icechunk.

Daily NetCDF4 files (4 float32 variables of 720 x 900, chunked 360 x 450, 10.4 MB each; 365
at full size) are generated once into a cache directory outside the repository
(ZARRLAKE_BENCH_CACHE, default ~/.cache/zarrlake-bench). Three steps, each in a fresh worker
process per engine (zarrlake, icechunk, files = the NetCDF files themselves):

- import: `zl.spark.import_virtual` on local[2] + commit, against VirtualiZarr's
  `open_virtual_mfdataset` + `to_icechunk` + commit in one process (the same warm-up first:
  two files each; the Spark start is not timed);
- read: `xr.open_zarr(store).load()` of everything (the store opened before the clock),
  against `xr.open_mfdataset(files).load()`; the files are read once before, untimed, so
  every engine finds them in the page cache; best of `virtual_loads` loads;
- one: open the repository and read one chunk in a new process (timed inside it, after its
  imports), median of `virtual_readers` processes.

    python -m benchmarks.run --quick --only VIRTUAL
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from benchmarks.groups import Group, Step
from benchmarks.procs import run_worker

VARIABLES = ("t2m", "u10", "v10", "msl")
GRID = (720, 900)
CHUNKS = (1, 360, 450)
CACHE = Path(os.environ.get("ZARRLAKE_BENCH_CACHE", Path.home() / ".cache" / "zarrlake-bench"))
SEED = 0

SIZES = {
    "full": {"virtual_files": 365, "virtual_loads": 3, "virtual_readers": 7},
    "quick": {"virtual_files": 20, "virtual_loads": 2, "virtual_readers": 3},
}
NOTE = (
    "VIRTUAL (issue 23): {virtual_files} daily NetCDF4 files (4 float32 variables of 720 x 900, "
    "chunks 360 x 450, 10.4 MB each), made once into ZARRLAKE_BENCH_CACHE. Import: zarrlake "
    "= zl.spark.import_virtual on local[2] + commit, Icechunk = VirtualiZarr's "
    "open_virtual_mfdataset + to_icechunk + commit, one process, both after a two-file "
    "warm-up. Read all: xr.open_zarr(store).load(), files = xr.open_mfdataset(files).load(), "
    "best of {virtual_loads} in one process, files in the page cache. Open + read one chunk: "
    "median of {virtual_readers} new processes."
)


# the archive -------------------------------------------------------------------------------


def archive_dir(files: int) -> Path:
    return CACHE / f"virtual-{files}"


def base_values() -> np.ndarray:
    """Day d of variable i holds base_values()[i] + d."""
    return np.random.default_rng(SEED).random((len(VARIABLES), *GRID), dtype="f4")


def archive(files: int) -> list[Path]:
    """The daily files (made once; reused while they are all there)."""
    import pandas as pd
    import xarray as xr

    directory = archive_dir(files)
    paths = [directory / f"day{d:03d}.nc" for d in range(files)]
    if all(p.exists() for p in paths):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    base = base_values()
    lat, lon = np.linspace(90, -90, GRID[0]), np.linspace(0, 360, GRID[1], endpoint=False)
    for d, path in enumerate(paths):
        time_ = pd.date_range("2023-01-01", periods=1) + pd.Timedelta(days=d)
        data = {
            v: (("time", "lat", "lon"), (base[i] + d)[None], {"units": "1"})
            for i, v in enumerate(VARIABLES)
        }
        ds = xr.Dataset(data, coords={"time": time_, "lat": lat, "lon": lon})
        enc = {v: {"chunksizes": CHUNKS} for v in VARIABLES}
        tmp = path.with_suffix(".tmp")
        ds.to_netcdf(tmp, engine="netcdf4", encoding=enc)
        tmp.rename(path)
    return paths


def prefix(files: int) -> str:
    """The allowed source prefix (zarrlake) and virtual chunk container (Icechunk)."""
    return archive_dir(files).as_uri() + "/"


def _repo(path: str) -> str:
    return str(Path(path) / "repo")


# the steps ---------------------------------------------------------------------------------


def import_step(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """Import every file as virtual references into a new repository, one commit."""
    paths = archive(p["virtual_files"])
    if engine is None:  # files: nothing to import
        return {"files": len(paths), "mb": sum(f.stat().st_size for f in paths) / 1e6}
    urls = [f.as_uri() for f in paths]
    if engine.name == "zarrlake":
        from benchmarks.spark_arrays import spark_session

        spark = spark_session("zarrlake-bench-virtual")
        try:
            _import_zarrlake(engine, spark, urls[:2], str(Path(path) / "warm"), p)
            seconds = _import_zarrlake(engine, spark, urls, _repo(path), p)
        finally:
            spark.stop()
    else:
        _import_icechunk(engine, urls[:2], str(Path(path) / "warm"))
        seconds = _import_icechunk(engine, urls, _repo(path))
    return {"import_s": seconds, "files_s": len(urls) / seconds}


def _import_zarrlake(engine: Any, spark: Any, urls: list[str], where: str, p: dict) -> float:
    import zarrlake as zl

    engine.create(where)
    engine.repo.add_virtual_source(prefix(p["virtual_files"]))
    t0 = time.perf_counter()
    engine.begin()
    zl.spark.import_virtual(spark, engine.session, urls, concat_dim="time")
    engine.commit("import")
    seconds = time.perf_counter() - t0
    engine.settle()
    engine.close()
    return seconds


def _import_icechunk(engine: Any, urls: list[str], where: str) -> float:
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_mfdataset
    from virtualizarr.parsers import HDFParser

    engine.create(where)
    t0 = time.perf_counter()
    vds = open_virtual_mfdataset(
        urls,
        registry=ObjectStoreRegistry({"file:///": LocalStore("/")}),
        parser=HDFParser(),
        concat_dim="time",
        combine="nested",
        coords="minimal",
        compat="override",
    )
    vds.vz.to_icechunk(engine.begin())
    engine.commit("import")
    seconds = time.perf_counter() - t0
    engine.close()
    return seconds


def read_step(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """Load everything (best of `virtual_loads`), each load freed before the next: two
    3.8 GB datasets at once would evict the files' pages."""
    import xarray as xr

    paths = archive(p["virtual_files"])
    for f in paths:  # the page cache, for every engine alike
        with f.open("rb") as fh:
            while fh.read(1 << 23):
                pass
    if engine is None:

        def open_all() -> Any:
            return xr.open_mfdataset(paths, combine="by_coords")
    else:
        engine.open(_repo(path))
        store = engine.reader()

        def open_all() -> Any:
            return xr.open_zarr(store, consolidated=False, chunks=None)

    last_day = base_values()[0] + (len(paths) - 1)
    best = float("inf")
    for _ in range(p["virtual_loads"]):
        t0 = time.perf_counter()
        ds = open_all().load()
        best = min(best, time.perf_counter() - t0)
        if not np.array_equal(ds["t2m"].values[-1], last_day):
            raise AssertionError("read back other values than the files hold")
        del ds
        gc.collect()
    mb = sum(f.stat().st_size for f in paths) / 1e6
    return {"read_s": best, "mb_s": mb / best}


def one_step(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """Median ms of open + read one chunk over `virtual_readers` fresh processes."""
    if engine is None:
        return {}
    ms = [
        run_worker("benchmarks.virtual:read_one_chunk", engine.name, path, p)["ms"]
        for _ in range(p["virtual_readers"])
    ]
    return {"ms": statistics.median(ms)}


def read_one_chunk(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process, its imports done: open the repository, read the first chunk of
    the middle day of `t2m`."""
    day = p["virtual_files"] // 2
    t0 = time.perf_counter()
    engine.open(_repo(path))
    got = zarr.open_array(engine.reader(), path="t2m", mode="r")[day, : CHUNKS[1], : CHUNKS[2]]
    ms = (time.perf_counter() - t0) * 1000
    if not np.array_equal(got, base_values()[0, : CHUNKS[1], : CHUNKS[2]] + day):
        raise AssertionError(f"read other values than day {day} holds")
    return {"ms": ms}


def groups(cfg: dict[str, Any]) -> list[Group]:
    engine_params = {"virtual_prefix": prefix(cfg["virtual_files"])}  # Icechunk's container
    return [
        Group(
            "VIRTUAL",
            ["zarrlake", "icechunk", "files"],
            [
                Step("benchmarks.virtual:import_step", "VIRTUAL", "import.", engine_params),
                Step("benchmarks.virtual:read_step", "VIRTUAL", "read.", engine_params),
                Step("benchmarks.virtual:one_step", "VIRTUAL", "one.", engine_params),
            ],
        )
    ]
