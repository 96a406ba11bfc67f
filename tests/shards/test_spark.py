"""Spark on a sharded array: the DataFrame writer with tasks smaller than a shard, the
reader, map_regions and the chunk layout (whose rows are the array's chunk grid, whole
shards here); each write is one commit holding exactly what the tasks wrote."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl

SHAPE, INNER, SHARD = (8, 64), (1, 16), (4, 64)  # 2 shards of 16 inner chunks


@pytest.fixture
def sharded(tmp_path) -> tuple[zl.Repo, str]:
    path = str(tmp_path / "repo")
    repo = zl.Repo.create(path)
    s = repo.create_session()
    zarr.create_array(
        s.store, name="a", shape=SHAPE, chunks=INNER, shards=SHARD, dtype="f8",
        fill_value=0, dimension_names=("y", "x"),
    )  # fmt: skip
    s.commit("sharded a")
    return repo, path


def values(repo: zl.Repo) -> np.ndarray:
    return zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]


def test_tasks_smaller_than_a_shard_write_one_exact_commit_and_read_back(spark, sharded):
    from pyspark.sql import functions as F

    repo, path = sharded
    n = SHAPE[0] * SHAPE[1]
    df = spark.range(0, n).select(
        (F.col("id") / SHAPE[1]).cast("long").alias("y"),
        (F.col("id") % SHAPE[1]).alias("x"),
        (F.col("id") * 1.0).alias("a"),
    )
    zl.spark.write_array(df, repo=path, array="a", message="cells", partitions=8)
    assert np.array_equal(values(repo), np.arange(float(n)).reshape(SHAPE))
    assert [c.message for c in repo.log()][:2] == ["cells", "sharded a"]

    rows = (
        spark.read.format("zarrlake").option("repo", path).option("array", "a").load()
        .filter("y = 2 and x >= 16 and x < 20").collect()
    )  # fmt: skip
    assert sorted(r.a for r in rows) == [144.0, 145.0, 146.0, 147.0]


def test_map_regions_of_single_rows_commit_once(spark, sharded):
    repo, _ = sharded
    session = repo.create_session(message="rows")

    def fill(s: zl.Session, row: int) -> None:
        zarr.open_array(s.store, path="a")[row, :] = -(row + 1)

    zl.spark.map_regions(spark, session, list(range(SHAPE[0])), fill)
    session.commit()
    expected = -np.repeat(np.arange(1.0, SHAPE[0] + 1)[:, None], SHAPE[1], axis=1)
    assert np.array_equal(values(repo), expected)
    assert repo.log()[0].message == "rows"


def test_the_chunk_layout_round_trips_whole_shards(spark, sharded):
    from pyspark.sql import functions as F

    repo, path = sharded
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[:] = np.arange(float(SHAPE[0] * SHAPE[1])).reshape(SHAPE)
    s.commit("values")
    reader = spark.read.format("zarrlake").option("repo", path).option("array", "a")
    chunks = reader.option("layout", "chunks").load()
    assert sorted((r.y, r.x, list(r.shape)) for r in chunks.collect()) == [
        (0, 0, list(SHARD)),
        (1, 0, list(SHARD)),
    ]
    doubled = chunks.withColumn("a", F.transform("a", lambda v: v * 2))
    doubled.write.format("zarrlake").option("repo", path).option("array", "a").option(
        "layout", "chunks"
    ).mode("append").save()
    assert np.array_equal(values(repo), 2 * np.arange(float(SHAPE[0] * SHAPE[1])).reshape(SHAPE))
