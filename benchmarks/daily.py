"""DAILY: write-audit-publish against publishing straight to main, one day at a time.

The demo's dataset (hourly t2m, u10, v10 on its grid) and its Spark ingest job
(`zarrlake.demo.spark.ingest_day`, local[2]). Two repositories side by side, days
alternating between them from the same warm Spark session:

- alone: the day's job commits straight to `main`;
- flow: a branch for the day, the same job into it, a pull request (its checks computed:
  value range, no missing values and the schema, on t2m), an approval and the merge into a
  `main` that checks guard and that takes pull requests only.

Target: the flow's median day <= 1.2x the ingest alone.

    python -m benchmarks.run --only DAILY [--quick]
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import zarr

from benchmarks.groups import Group, Step
from benchmarks.procs import child_env

SIZES = {
    "full": {"daily_days": 6, "daily_lat": 144, "daily_lon": 180},
    "quick": {"daily_days": 3, "daily_lat": 32, "daily_lon": 40},
}
NOTE = (
    "DAILY: one day ({daily_lat} x {daily_lon} x 24 hours, 3 variables) by a local[2] Spark "
    "job: branch + ingest + pull request with 3 checks + approval + merge, against the job "
    "committing to main; {daily_days} days each, alternating (medians)."
)


def _layout(repo: Any, grid: Any) -> None:
    from zarrlake.demo.data import GROUP, VARIABLES

    s = repo.create_session()
    group = zarr.open_group(s.store, mode="a").create_group(GROUP)
    for name in VARIABLES:
        group.create_array(
            name, shape=grid.shape, chunks=grid.chunks, dtype="f4", fill_value=np.nan,
            dimension_names=["time", "lat", "lon"], attributes={"units": "x"},
        )  # fmt: skip
    s.commit("layout")


def flow(engine: Any, path: str, p: dict) -> dict:
    """Seconds per day published straight to main, and through a pull request."""
    import os

    import zarrlake as zl
    from zarrlake.checks import MaxNaNFraction, SchemaUnchanged, ValueRange
    from zarrlake.demo.data import GROUP, VARIABLES, Grid, day_name
    from zarrlake.demo.spark import ingest_day, start_spark

    os.environ.update(child_env())  # executors unpickle the demo's functions by reference
    days = p["daily_days"]
    grid = Grid(days=days + 1, lat=p["daily_lat"], lon=p["daily_lon"], lat_chunk=16, lon_chunk=20)
    arrays = [f"{GROUP}/{v}" for v in VARIABLES]
    alone, audited = f"{path}/alone", f"{path}/flow"
    for location in (alone, audited):
        _layout(zl.Repo.create(location), grid)
    repo = zl.Repo.open(audited)
    t2m = f"{GROUP}/t2m"
    repo.add_check("range", ValueRange(t2m, -90, 60), branches="main")
    repo.add_check("complete", MaxNaNFraction(t2m, 0.0), branches="main")
    repo.add_check("schema", SchemaUnchanged(t2m), branches="main")
    repo.protect_branch("main", require_pull_request=True, required_approvals=1)
    spark = start_spark("local[2]")
    try:
        ingest_day(spark, alone, arrays, grid, days)  # warm the JVM and the Python workers
        plain, published = [], []
        for day in range(days):
            t0 = time.perf_counter()
            ingest_day(spark, alone, arrays, grid, day)
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            branch = f"day-{day_name(day)}"
            repo.create_branch(branch)
            ingest_day(spark, audited, arrays, grid, day, branch=branch)
            pr = repo.create_pull_request(branch, "main", title=branch, author="job")
            assert all(c.passed for c in pr.checks)
            pr.approve(by="reviewer")
            pr.merge(by="reviewer")
            published.append(time.perf_counter() - t0)
    finally:
        spark.stop()
    return {
        "alone_s": statistics.median(plain),
        "flow_s": statistics.median(published),
        "ratio": statistics.median(published) / statistics.median(plain),
        "days": days,
    }


def groups(cfg: dict[str, Any]) -> list[Group]:
    """DAILY: zarrlake only (the reference is its own job committing to main)."""
    return [Group("DAILY", ["zarrlake"], [Step("benchmarks.daily:flow", "DAILY", "daily.")])]
