"""Spark on a bucket-only repository (moto's S3 server, metastore in the bucket): the data
source writes one commit from its tasks, and map_regions workers stage into one session,
with nothing but the location and storage options given."""

from __future__ import annotations

import os

import numpy as np
import zarr
from pyspark.sql import functions as F

import zarrlake as zl


def test_write_and_map_regions_on_a_bucket_only_repository(spark, s3_location):
    location, storage = s3_location
    repo = zl.Repo.create(location, storage_options=storage)
    zl.spark.register(spark)
    i = F.col("id")
    df = spark.range(0, 4 * 8 * 8, numPartitions=2).select(
        (i / 64).cast("long").alias("t"),
        ((i / 8).cast("long") % 8).alias("y"),
        (i % 8).alias("x"),
        (i * 0.5).alias("cells"),
    )
    zl.spark.write_array(
        df, repo=location, array="cells", message="write job", shape=(4, 8, 8),
        chunks=(1, 8, 8), dims="t,y,x", dtype="float64", **storage,
    )  # fmt: skip
    session = repo.create_session("main")
    zarr.create_array(session.store, name="planes", shape=(6, 8, 8), chunks=(1, 8, 8), dtype="f4")

    def write(s, t: int) -> int:
        zarr.open_array(s.store, path="planes")[t] = t
        return os.getpid()

    zl.spark.map_regions(spark, session, range(6), write, num_slices=3)
    session.commit("map_regions job")
    assert [c.message for c in repo.log()[:2]] == ["map_regions job", "write job"]
    store = zl.Repo.open(location, storage_options=storage).readonly_session().store
    cells = zarr.open_array(store, path="cells", mode="r")[:]
    np.testing.assert_array_equal(cells, (np.arange(256) * 0.5).reshape(4, 8, 8))
    planes = zarr.open_array(store, path="planes", mode="r")[:]
    np.testing.assert_array_equal(planes[:, 0, 0], np.arange(6, dtype="f4"))
    repo.close()
