"""Run by test_cluster.py in its own process (one SparkSession per process): on a
`local-cluster[2,1,1024]` Spark (two executor JVMs, Python workers apart from the driver),
one DataFrame write job and one map_regions job into the repository given on the command
line. Prints one JSON line: the executors' Python process ids and the driver's."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import zarr
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import zarrlake as zl


def plane(t: int) -> np.ndarray:
    return np.full((8, 8), t, dtype="f4") + np.arange(64, dtype="f4").reshape(8, 8) / 100


def main(location: str, metastore: str, storage: dict) -> None:
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("zarrlake-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        zl.spark.register(spark)
        options = {"repo": location, "metastore": metastore, **storage}
        i = F.col("id")
        df = spark.range(0, 4 * 8 * 8, numPartitions=4).select(
            (i / 64).cast("long").alias("t"),
            ((i / 8).cast("long") % 8).alias("y"),
            (i % 8).alias("x"),
            (i * 0.5).alias("cells"),
        )
        zl.spark.write_array(
            df, array="cells", message="write job", shape=(4, 8, 8), chunks=(1, 8, 8),
            dims="t,y,x", dtype="float64", **options,
        )  # fmt: skip
        repo = zl.Repo.open(location, metastore=metastore, storage_options=storage)
        session = repo.create_session("main")
        zarr.create_array(
            session.store, name="planes", shape=(6, 8, 8), chunks=(1, 8, 8), dtype="f4"
        )

        def write(s, t: int) -> int:
            zarr.open_array(s.store, path="planes")[t] = plane(t)
            return os.getpid()

        pids = zl.spark.map_regions(spark, session, range(6), write, num_slices=6)
        session.commit("map_regions job")
        print(json.dumps({"driver": os.getpid(), "workers": sorted(set(pids))}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
