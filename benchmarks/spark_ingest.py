"""W8: the W1 array written by a `local[2]` Spark job through zarrlake's data source
(engine "spark"), against the same array written from one driver process with plain zarr
(engine "zarr").

The DataFrame is generated on the executors by `mapInArrow`, one W1 chunk per input row
(rows: t, y, x indices + value `a`), so each partition holds whole chunks and the write needs
no shuffle. Both sides generate the same per-chunk seeded data inside the timed region.
Spark start-up is excluded, like interpreter start and imports.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import zarr

from benchmarks.procs import child_env

ARRAY, SEED, MIB = "a", 20240608, 1024 * 1024


def chunk_data(t: int, plane: tuple[int, int]) -> np.ndarray:
    return np.random.default_rng(SEED + t).random(plane, dtype=np.float32)


def spark_available() -> str | None:
    """None when zarrlake's Spark data source is importable, else why not."""
    try:
        import zarrlake.spark as zs
    except Exception as e:  # the Spark integration may not exist yet or not import
        return f"zarrlake.spark does not import: {type(e).__name__}: {e}"
    if not hasattr(zs, "register"):
        return "zarrlake.spark has no register()"
    return None


def _spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run the benchmark's venv
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The executors' Python workers unpickle this module's functions by reference.
    os.environ.update(child_env())
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("zarrlake-bench-w8")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )


def _spark_write(path: str, shape: tuple[int, int, int]) -> float:
    """Seconds for the timed job; a small job first warms the JVM and the Python workers, as
    a long-running Spark application would be (start-up is not what W8 measures)."""
    import zarrlake.spark as zs

    spark = _spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    zs.register(spark)
    _spark_job(spark, path + "-warmup", (2, 16, 16))
    seconds = _spark_job(spark, path, shape)
    spark.stop()
    return seconds


def _spark_job(spark: Any, path: str, shape: tuple[int, int, int]) -> float:
    import pyarrow as pa

    import zarrlake

    zarrlake.Repo.create(path).close()
    plane = shape[1:]
    ys, xs = (a.ravel().astype(np.int32) for a in np.indices(plane))

    def rows(batches: Any) -> Any:
        for batch in batches:
            for t in batch.column("id").to_pylist():
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array(np.full(ys.size, t, np.int32)),
                        pa.array(ys),
                        pa.array(xs),
                        pa.array(chunk_data(t, plane).ravel()),
                    ],
                    names=["t", "y", "x", ARRAY],
                )

    t0 = time.perf_counter()
    df = spark.range(0, shape[0], numPartitions=8).mapInArrow(rows, "t int, y int, x int, a float")
    (
        df.write.format("zarrlake")
        .mode("overwrite")
        .options(
            repo=path,
            array=ARRAY,
            shape=",".join(map(str, shape)),
            chunks=",".join(map(str, (1, *plane))),
            dtype="float32",
            dims="t,y,x",
            message="W8",
        )
        .save()
    )
    return time.perf_counter() - t0


def _zarr_write(path: str, shape: tuple[int, int, int]) -> float:
    t0 = time.perf_counter()
    data = np.empty(shape, np.float32)
    for t in range(shape[0]):
        data[t] = chunk_data(t, shape[1:])
    array = zarr.create_array(
        zarr.storage.LocalStore(path),
        name=ARRAY,
        shape=shape,
        chunks=(1, *shape[1:]),
        dtype="float32",
    )
    array[...] = data
    return time.perf_counter() - t0


def _check(path: str, engine: str, shape: tuple[int, int, int]) -> None:
    if engine == "spark":
        import zarrlake

        store = zarrlake.Repo.open(path).readonly_session("main").store
    else:
        store = zarr.storage.LocalStore(path, read_only=True)
    array = zarr.open_array(store, path=ARRAY, mode="r")
    for t in (0, shape[0] // 2, shape[0] - 1):
        if not np.array_equal(array[t], chunk_data(t, shape[1:])):
            raise AssertionError(f"W8 {engine}: chunk {t} reads back wrong")


def w8_spark_ingest(engine: Any, path: str, p: dict) -> dict:
    shape = tuple(p["w1_shape"])
    name = p["engine"]
    if name == "spark":
        missing = spark_available()
        if missing is not None:
            return {"available": False, "reason": missing}
        seconds = _spark_write(path, shape)
    else:
        seconds = _zarr_write(path, shape)
    _check(path, name, shape)
    mb = int(np.prod(shape)) * 4 / MIB
    return {"available": True, "seconds": seconds, "mb_s": mb / seconds}
