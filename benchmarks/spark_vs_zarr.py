"""Issue 4 closing figures: a 1,000,000-row 3-D array written and read through zarrlake's
Spark data source on local[2], against the same data written and read with plain zarr
(zarr.open_array on a LocalStore) from the driver, in the same run.

    python -m benchmarks.spark_vs_zarr [--rows-side 100] [--reps 2] [--json out.json]

Spark start-up and a small warm-up round are excluded; the Spark DataFrame is generated on
the executors (spark.range plus column expressions), and the timed read materialises every
column (noop sink).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

CHUNKS = (25, 50, 50)


def _spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import zarrlake as zl

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("zarrlake-spark-vs-zarr")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    zl.spark.register(spark)
    return spark


def _frame(spark, side: int, parts: int):
    from pyspark.sql import functions as F

    i = F.col("id")
    return spark.range(0, side**3, numPartitions=parts).select(
        (i / (side * side)).cast("long").alias("x"),
        ((i / side).cast("long") % side).alias("y"),
        (i % side).alias("z"),
        (i * 0.5).alias("v"),
    )


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _one_rep(
    spark, work: Path, rep: int, side: int, out: dict[str, list[float]], raw_path: bool = True
) -> None:
    import zarrlake as zl

    shape = (side, side, side)
    expected = (np.arange(side**3, dtype="f8") * 0.5).reshape(shape)
    create = {"shape": shape, "chunks": CHUNKS, "dims": "x,y,z", "dtype": "float64"}
    flat = {k: ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in create.items()}
    df = _frame(spark, side, parts=4)

    loc = str(work / f"spark-{rep}")
    zl.Repo.create(loc).close()
    out["spark_write_array"].append(
        _timed(lambda: zl.spark.write_array(df, repo=loc, array="v", **create))
    )
    got = zarr.open_array(zl.Repo.open(loc).readonly_session().store, path="v")[:]
    assert np.array_equal(got, expected), "spark write_array read back wrong"

    if raw_path:
        _raw_write(df, work / f"raw-{rep}", flat, out)
    read = spark.read.format("zarrlake").options(repo=loc, array="v").load()
    out["spark_read"].append(_timed(read.write.format("noop").mode("overwrite").save))

    zpath = work / f"zarr-{rep}"

    def zarr_write() -> None:
        arr = zarr.open_array(
            zarr.storage.LocalStore(zpath),
            mode="w",
            shape=shape,
            chunks=CHUNKS,
            dtype="f8",
            dimension_names=["x", "y", "z"],
        )
        arr[:] = expected

    out["zarr_write"].append(_timed(zarr_write))
    holder: dict = {}

    def zarr_read() -> None:
        holder["a"] = zarr.open_array(zarr.storage.LocalStore(zpath), mode="r")[:]

    out["zarr_read"].append(_timed(zarr_read))
    assert np.array_equal(holder["a"], expected)

    def zl_write() -> None:
        repo = zl.Repo.create(work / f"zl-{rep}")
        s = repo.create_session("main")
        arr = zarr.create_array(
            s.store,
            name="v",
            shape=shape,
            chunks=CHUNKS,
            dtype="f8",
            dimension_names=["x", "y", "z"],
        )
        arr[:] = expected
        s.commit("driver write")

    out["zl_driver_write"].append(_timed(zl_write))


def _raw_write(df, loc: Path, flat: dict, out: dict[str, list[float]]) -> None:
    """The data source without write_array's repartition: 4 partitions of side/4 x-planes
    each hold whole chunks when side=100, so no chunk has two writers."""
    import zarrlake as zl

    zl.Repo.create(loc).close()
    raw = df.write.format("zarrlake").options(repo=str(loc), array="v", **flat).mode("append")
    out["spark_write_raw"].append(_timed(raw.save))


def run(side: int, reps: int) -> dict:
    spark = _spark()
    names = ("spark_write_array", "spark_write_raw", "spark_read", "zarr_write", "zarr_read")
    out: dict[str, list[float]] = {k: [] for k in (*names, "zl_driver_write")}
    work = Path(tempfile.mkdtemp(prefix="zl-spark-bench-"))
    try:
        _one_rep(
            spark, work, -1, 8, {k: [] for k in out}, raw_path=False
        )  # warm-up: JVM, Python workers
        for rep in range(reps):
            _one_rep(spark, work, rep, side, out)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = side**3
    medians = {k: float(np.median(v)) for k, v in out.items()}
    return {
        "rows": rows,
        "chunks": CHUNKS,
        "reps": reps,
        "seconds": out,
        "median_seconds": medians,
        "rows_per_second": {k: rows / v for k, v in medians.items()},
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows-side", type=int, default=100, help="array is side^3 rows")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = run(args.rows_side, args.reps)
    print(f"{result['rows']:,} rows, chunks {CHUNKS}, local[2], median of {args.reps}:")
    for k, s in result["median_seconds"].items():
        print(f"  {k:18s} {s:8.2f} s  {result['rows_per_second'][k]:>12,.0f} rows/s")
    print(f"  load average at end: {result['load_avg_at_end']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
