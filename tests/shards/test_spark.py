"""Spark on a sharded array: the DataFrame writer with tasks smaller than a shard, the
reader, map_regions and the chunk layout (whose rows are inner chunks, or whole shards with
option grid=shards); each write is one commit holding exactly what the tasks wrote."""

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
    """option grid=shards: rows of whole shards (the chunk layout's rows before issue 31)."""
    from pyspark.sql import functions as F

    repo, path = sharded
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[:] = np.arange(float(SHAPE[0] * SHAPE[1])).reshape(SHAPE)
    s.commit("values")
    reader = spark.read.format("zarrlake").option("repo", path).option("array", "a")
    chunks = reader.option("layout", "chunks").option("grid", "shards").load()
    assert sorted((r.y, r.x, list(r.shape)) for r in chunks.collect()) == [
        (0, 0, list(SHARD)),
        (1, 0, list(SHARD)),
    ]
    doubled = chunks.withColumn("a", F.transform("a", lambda v: v * 2))
    doubled.write.format("zarrlake").option("repo", path).option("array", "a").option(
        "layout", "chunks"
    ).option("grid", "shards").mode("append").save()
    assert np.array_equal(values(repo), 2 * np.arange(float(SHAPE[0] * SHAPE[1])).reshape(SHAPE))


def test_the_chunk_layout_has_a_row_per_inner_chunk_and_round_trips(spark, sharded):
    """Rows are inner chunks (coordinates on the grid of inner chunks), read in partitions
    that split shards; written back from those partitions, tasks share shards and the job
    is one commit holding exactly the new values; the diff names inner chunks."""
    from pyspark.sql import functions as F

    repo, path = sharded
    start = np.arange(float(SHAPE[0] * SHAPE[1])).reshape(SHAPE)
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[:] = start
    s.commit("values")
    chunks = (
        spark.read.format("zarrlake").option("repo", path).option("array", "a")
        .option("layout", "chunks").option("partition_rows", "48").load()
    )  # fmt: skip
    assert chunks.rdd.getNumPartitions() == 11  # 32 inner chunks of 16 values, 3 a task
    rows = sorted((r.y, r.x, list(r.shape), list(r.a)) for r in chunks.collect())
    grid = [(y, x) for y in range(SHAPE[0]) for x in range(SHAPE[1] // INNER[1])]
    assert [(y, x) for y, x, _, _ in rows] == grid
    assert all(shape == list(INNER) for _, _, shape, _ in rows)
    assert rows[5][3] == start[1, 16:32].tolist()
    head = repo.log()[0].id
    changed = chunks.filter("x = 1 or y = 6").withColumn("a", F.transform("a", lambda v: -v))
    changed.write.format("zarrlake").option("repo", path).option("array", "a").option(
        "layout", "chunks"
    ).mode("append").save()
    expect = start.copy()
    expect[:, 16:32] *= -1
    expect[6, :] *= -1
    expect[6, 16:32] *= -1  # in both, negated once
    assert np.array_equal(values(repo), expect)
    assert repo.log()[1].id == head  # one commit
    diff = repo.diff(head, "main")
    assert sorted(diff.chunks_written["a"]) == sorted(
        {(y, 1) for y in range(8)} | {(6, x) for x in range(4)}
    )
    assert diff.chunks_per_shard["a"] == (4, 4)


def test_the_chunk_layout_refuses_an_inner_chunk_outside_the_grid(spark, sharded):
    _, path = sharded
    df = spark.createDataFrame([(0, 4, [1.0] * 16)], "y long, x long, a array<double>")
    with pytest.raises(Exception, match=r"chunk \(0, 4\) is outside the chunk grid \(8, 4\)"):
        df.write.format("zarrlake").option("repo", path).option("array", "a").option(
            "layout", "chunks"
        ).mode("append").save()


def test_one_inner_chunk_in_two_tasks_is_refused_naming_it(spark, sharded):
    """Two tasks writing one inner chunk would lose one's values: the job is refused, naming
    the inner chunk's coordinates (on the grid of inner chunks); another inner chunk of the
    same shard in the other task is no conflict."""
    repo, path = sharded
    head = repo.log()[0].id
    rows = [(5, 2, [1.0] * 16), (5, 3, [2.0] * 16), (5, 2, [3.0] * 16)]
    one_each = spark.sparkContext.parallelize(rows, 3)  # a task per row
    df = spark.createDataFrame(one_each, "y long, x long, a array<double>")
    with pytest.raises(zl.ConflictError) as caught, zl.spark.zarrlake_errors():
        df.write.format("zarrlake").option("repo", path).option("array", "a").option(
            "layout", "chunks"
        ).mode("append").save()
    assert [(c.path, c.chunks) for c in caught.value.conflicts] == [("a", [(5, 2)])]
    assert repo.log()[0].id == head


def test_overwrite_with_inner_chunk_rows_leaves_the_rest_fill(spark, sharded):
    """mode("overwrite") replaces the array's contents: inner chunks no task wrote, in a
    shard some task wrote and in shards none did, read back as the fill value."""
    repo, path = sharded
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[:] = 9.0
    s.commit("nines")
    rows = [(0, 0, [1.0] * 16), (1, 1, [2.0] * 16)]
    df = spark.createDataFrame(
        spark.sparkContext.parallelize(rows, 2), "y long, x long, a array<double>"
    )
    df.write.format("zarrlake").option("repo", path).option("array", "a").option(
        "layout", "chunks"
    ).mode("overwrite").save()
    expect = np.zeros(SHAPE)
    expect[0, 0:16] = 1.0
    expect[1, 16:32] = 2.0
    assert np.array_equal(values(repo), expect)
    assert repo.log()[1].message == "nines"


def test_the_change_feed_of_a_sharded_array_names_inner_chunks(spark, sharded):
    repo, path = sharded
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[:] = 1.0
    s.commit("ones")
    repo.create_tag("v1", "main")
    s = repo.create_session()
    arr = zarr.open_array(s.store, path="a")
    arr[2, 16:32] = 5.0  # inner chunk (2, 1), in shard (0, 0)
    arr[5, 48:64] = 7.0  # inner chunk (5, 3), in shard (1, 0)
    s.commit("two inner chunks")
    opts = {"repo": path, "array": "a", "changes": "v1..main", "layout": "chunks"}
    rows = {(r.y, r.x): r for r in spark.read.format("zarrlake").options(**opts).load().collect()}
    assert sorted(rows) == [(2, 1), (5, 3)]
    assert rows[(2, 1)].change == "modified" and rows[(2, 1)].a == [5.0] * 16
    assert rows[(5, 3)].shape == list(INNER) and rows[(5, 3)].a == [7.0] * 16
