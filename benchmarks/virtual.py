"""VIRTUAL (issue 23): a NetCDF archive versioned where it lies, against VirtualiZarr + Icechunk.

365 daily NetCDF4 files (4 float32 variables of 720 x 900, chunked 360 x 450, about 10 MB
each) are generated once into a cache directory outside the repository. Three targets:

- import: `zl.spark.import_virtual` on local[2] (+ commit) >= 1.5x the speed of VirtualiZarr's
  `open_virtual_mfdataset` + `to_icechunk` + commit in one process;
- read all: `xr.open_zarr(session.store).load()` >= 0.9x `xr.open_mfdataset(files).load()`
  and >= 1.0x Icechunk's virtual read of the same references (same process, warm cache);
- open + read one chunk in a new process <= 1.0x Icechunk's time (median of 7).

Run with the bench venv: `.venv-bench/bin/python benchmarks/virtual.py [--files N]`.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DAYS = 365
VARIABLES = ("t2m", "u10", "v10", "msl")
GRID = (720, 900)
CHUNKS = (1, 360, 450)
CACHE = Path(os.environ.get("ZARRLAKE_BENCH_CACHE", Path.home() / ".cache" / "zarrlake-bench"))


def archive(files: int) -> list[Path]:
    """The daily files (made once; reused while their count and layout match)."""
    import pandas as pd
    import xarray as xr

    directory = CACHE / f"virtual-{files}"
    paths = [directory / f"day{d:03d}.nc" for d in range(files)]
    if all(p.exists() for p in paths):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    base = rng.random((len(VARIABLES), *GRID), dtype="f4")
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


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# import ------------------------------------------------------------------------------------


def import_zarrlake(spark, paths: list[Path], where: Path) -> tuple[float, str]:
    import zarrlake as zl

    repo = zl.Repo.create(where)
    repo.add_virtual_source(paths[0].parent.as_uri())

    def run() -> None:
        s = repo.create_session()
        zl.spark.import_virtual(spark, s, [p.as_uri() for p in paths], concat_dim="time")
        s.commit("import")

    seconds, _ = timed(run)
    return seconds, str(where)


def icechunk_repo(where: Path, prefix: str, create: bool):
    import icechunk as ic

    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(prefix, ic.local_filesystem_store(prefix[len("file://") :]))
    )
    creds = ic.containers_credentials({prefix: ic.credentials.LocalFileSystemAccess})
    storage = ic.local_filesystem_storage(str(where))
    if create:
        return ic.Repository.create(storage, config, authorize_virtual_chunk_access=creds)
    return ic.Repository.open(storage, config, authorize_virtual_chunk_access=creds)


def import_icechunk(paths: list[Path], where: Path) -> float:
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_mfdataset
    from virtualizarr.parsers import HDFParser

    prefix = paths[0].parent.as_uri() + "/"
    repo = icechunk_repo(where, prefix, create=True)

    def run() -> None:
        registry = ObjectStoreRegistry({"file:///": LocalStore("/")})
        vds = open_virtual_mfdataset(
            [p.as_uri() for p in paths],
            registry=registry,
            parser=HDFParser(),
            concat_dim="time",
            combine="nested",
            coords="minimal",
            compat="override",
        )
        session = repo.writable_session("main")
        vds.vz.to_icechunk(session.store)
        session.commit("import")

    seconds, _ = timed(run)
    return seconds


# reads -------------------------------------------------------------------------------------


def read_all(openers: dict, reps: int) -> dict[str, float]:
    """Best of `reps` full loads (seconds) per engine, the engines taking turns so that load
    from elsewhere on the machine falls on all of them alike; each load's arrays are freed
    before the next starts (two 3.8 GB datasets at once would evict the files' pages)."""
    best = dict.fromkeys(openers, float("inf"))
    for _ in range(reps):
        for name, open_fn in openers.items():
            t0 = time.perf_counter()
            ds = open_fn().load()
            best[name] = min(best[name], time.perf_counter() - t0)
            del ds
            gc.collect()
    return best


_CHILD = {
    "zarrlake": """
import sys, time, zarr, zarrlake as zl
import zarrlake.repo  # loaded before timing, as `import icechunk` loads Icechunk's modules
t0 = time.perf_counter()
s = zl.Repo.open(sys.argv[1]).readonly_session("main")
a = zarr.open_array(s.store, path="t2m", mode="r")[int(sys.argv[4]), :360, :450]
print(time.perf_counter() - t0)
""",
    "icechunk": """
import sys, time, zarr, icechunk as ic
sys.path.insert(0, sys.argv[3])
from virtual import icechunk_repo
t0 = time.perf_counter()
repo = icechunk_repo(sys.argv[1], sys.argv[2], create=False)
s = repo.readonly_session(branch="main")
a = zarr.open_array(s.store, path="t2m", mode="r")[int(sys.argv[4]), :360, :450]
print(time.perf_counter() - t0)
""",
}


def open_read_one(engines: dict[str, str], prefix: str, day: int, reps: int) -> dict:
    """Median seconds per engine to open the repository and read one chunk, in fresh
    processes (timed inside the child, after its imports), the engines taking turns."""
    times: dict[str, list[float]] = {e: [] for e in engines}
    here = str(Path(__file__).parent)
    for _ in range(reps):
        for engine, where in engines.items():
            out = subprocess.run(
                [sys.executable, "-c", _CHILD[engine], where, prefix, here, str(day)],
                capture_output=True,
                text=True,
                check=True,
            )
            times[engine].append(float(out.stdout.strip().splitlines()[-1]))
    return {e: statistics.median(t) for e, t in times.items()}


# main --------------------------------------------------------------------------------------


def spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize(range(8), 8).map(lambda x: x).collect()  # warm workers
    return spark


def rows(files: int, reps: int) -> list[tuple[str, float, str, bool | None]]:
    import xarray as xr

    import zarrlake as zl

    paths = archive(files)
    prefix = paths[0].parent.as_uri() + "/"
    work = Path(tempfile.mkdtemp(prefix="zl-virtual-bench-"))
    try:
        spark = spark_session()
        # the same warm-up for both: parse one file with each path first
        import_zarrlake(spark, paths[:2], work / "warm-zl")
        import_icechunk(paths[:2], work / "warm-ic")
        zl_import, zl_where = import_zarrlake(spark, paths, work / "zl")
        spark.stop()
        ic_import = import_icechunk(paths, work / "ic")
        store = zl.Repo.open(zl_where).readonly_session().store
        ic_repo = icechunk_repo(work / "ic", prefix, create=False)
        ic_store = ic_repo.readonly_session(branch="main").store
        best = read_all(
            {
                "files": lambda: xr.open_mfdataset(paths, combine="by_coords"),
                "zarrlake": lambda: xr.open_zarr(store, consolidated=False, chunks=None),
                "icechunk": lambda: xr.open_zarr(ic_store, consolidated=False, chunks=None),
            },
            reps,
        )
        files_read, zl_read, ic_read = best["files"], best["zarrlake"], best["icechunk"]
        one = open_read_one(
            {"zarrlake": zl_where, "icechunk": str(work / "ic")}, prefix, files // 2, 7
        )
        zl_one, ic_one = one["zarrlake"], one["icechunk"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    return [
        (f"import {files} files: zarrlake spark local[2] (s)", zl_import, "", None),
        ("import: VirtualiZarr + Icechunk, one process (s)", ic_import, "", None),
        (
            "import speed, zarrlake / VirtualiZarr+Icechunk",
            ic_import / zl_import,
            ">= 1.5",
            ic_import / zl_import >= 1.5,
        ),
        (f"read all {mb:.0f} MB: xr.open_mfdataset (MB/s)", mb / files_read, "", None),
        ("read all: zarrlake store (MB/s)", mb / zl_read, "", None),
        ("read all: Icechunk store (MB/s)", mb / ic_read, "", None),
        (
            "read speed, zarrlake / open_mfdataset",
            files_read / zl_read,
            ">= 0.9",
            files_read / zl_read >= 0.9,
        ),
        ("read speed, zarrlake / Icechunk", ic_read / zl_read, ">= 1.0", ic_read / zl_read >= 1.0),
        ("open + read one chunk, new process: zarrlake (ms)", 1000 * zl_one, "", None),
        ("open + read one chunk, new process: Icechunk (ms)", 1000 * ic_one, "", None),
        (
            "open + read one chunk, zarrlake / Icechunk time",
            zl_one / ic_one,
            "<= 1.0",
            zl_one / ic_one <= 1.0,
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=DAYS, help="daily files (default 365)")
    ap.add_argument("--reps", type=int, default=3, help="full reads per engine (best counts)")
    args = ap.parse_args()
    print(
        f"VIRTUAL: {args.files} daily NetCDF4 files of {len(VARIABLES)} variables {GRID}, "
        f"chunks {CHUNKS}, cache {CACHE}"
    )
    for name, value, target, met in rows(args.files, args.reps):
        verdict = "-" if met is None else ("met" if met else "MISSED")
        print(f"  {name:<55} {value:>10.3f}  {target:<8} {verdict}")


if __name__ == "__main__":
    main()
