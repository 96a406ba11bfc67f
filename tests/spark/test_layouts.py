"""The chunk layout, the change feed, and zarrlake errors through Spark, on local[2]."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from pyspark.sql import functions as F

import zarrlake as zl

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "float32",
    "float64",
]
SHAPE, CHUNKS = (5, 7), (2, 3)  # edge chunks on both dimensions


def _values(dtype: str) -> np.ndarray:
    n = np.arange(35).reshape(SHAPE)
    if dtype == "bool":
        return n % 3 == 0
    if dtype.startswith("float"):
        return (n * 0.25 - 3).astype(dtype)
    if dtype.startswith("uint"):
        return (n * 7 + 200).astype(dtype)
    return (n * 3 - 50).astype(dtype)


def _read(repo: zl.Repo, path: str, ref: str = "main") -> np.ndarray:
    return zarr.open_array(repo.readonly_session(ref).store, path=path, mode="r")[:]


@pytest.mark.slow
def test_chunk_layout_round_trip_every_dtype(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    for dtype in DTYPES:
        a = zarr.create_array(
            s.store,
            name=f"src/{dtype}",
            shape=SHAPE,
            chunks=CHUNKS,
            dtype=dtype,
            dimension_names=["y", "x"],
        )
        a[:] = _values(dtype)
    s.commit("sources")
    for dtype in DTYPES:
        df = (
            spark.read.format("zarrlake")
            .options(repo=loc, array=f"src/{dtype}", layout="chunks")
            .load()
            .withColumnRenamed(dtype, "out")
        )
        rows = {(r.y, r.x): r for r in df.collect()}
        assert sorted(rows) == [(i, j) for i in range(3) for j in range(3)]
        edge = rows[(2, 2)]  # y 4..5, x 6..7
        assert edge.shape == [1, 1]
        assert rows[(0, 2)].shape == [2, 1] and rows[(2, 0)].shape == [1, 3]
        expected = _values(dtype)
        np.testing.assert_array_equal(np.array(rows[(1, 1)].out), expected[2:4, 3:6].reshape(-1))
        zl.spark.write_array(
            df,
            repo=loc,
            array=f"dst_{dtype}/out",
            layout="chunks",
            message=f"copy {dtype}",
            shape=SHAPE,
            chunks=CHUNKS,
            dims="y,x",
            dtype=dtype,
        )
        got = _read(repo, f"dst_{dtype}/out")
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, expected)
    binary = ["bool", "uint16", "float64"]
    for dtype in binary:  # option values=binary: raw little-endian bytes per chunk
        read = spark.read.format("zarrlake").options(
            repo=loc, array=f"src/{dtype}", layout="chunks", values="binary"
        )
        # a fresh load for the write: Spark 4 keeps the pushed-down reader of a filtered query
        edge = read.load().filter((F.col("y") == 2) & (F.col("x") == 2)).first()
        df = read.load()
        assert (
            bytes(edge[dtype])
            == _values(dtype)[4:, 6:].astype(np.dtype(dtype).newbyteorder("<")).tobytes()
        )
        zl.spark.write_array(
            df, repo=loc, array=f"bin_{dtype}/{dtype}", layout="chunks", values="binary",
            shape=SHAPE, chunks=CHUNKS, dims="y,x", dtype=dtype,
        )  # fmt: skip
        np.testing.assert_array_equal(_read(repo, f"bin_{dtype}/{dtype}"), _values(dtype))
    assert len(repo.log()) == 2 + len(DTYPES) + len(binary)


@pytest.mark.slow
def test_chunk_layout_filters_on_chunk_coordinates_and_bad_chunks(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    a = zarr.create_array(
        s.store, name="v", shape=(6, 4), chunks=(2, 4), dtype="f8", dimension_names=["y", "x"]
    )
    a[:] = np.arange(24.0).reshape(6, 4)
    s.commit("setup")
    df = spark.read.format("zarrlake").options(repo=loc, array="v", layout="chunks").load()
    [row] = df.filter(F.col("y") == 1).collect()
    assert (row.y, row.x, row.shape) == (1, 0, [2, 4])
    assert row.v == list(np.arange(8.0, 16.0))

    odd = spark.createDataFrame([(0, 0, b"1234567")], "y long, x long, v binary")
    with pytest.raises(zl.errors.InvalidInputError, match="whole float64 items"):
        zl.spark.write_array(odd, repo=loc, array="v", layout="chunks")
    short = spark.createDataFrame([(0, 0, [1.0, 2.0])], "y long, x long, v array<double>")
    with pytest.raises(zl.errors.InvalidInputError, match=r"chunk \(0, 0\) of array 'v' needs 8"):
        zl.spark.write_array(short, repo=loc, array="v", layout="chunks")
    outside = spark.createDataFrame([(3, 0, [1.0] * 8)], "y long, x long, v array<double>")
    with pytest.raises(zl.errors.InvalidInputError, match="outside the chunk grid"):
        zl.spark.write_array(outside, repo=loc, array="v", layout="chunks")
    assert len(repo.log()) == 2


@pytest.mark.slow
def test_change_feed_between_a_tag_and_a_branch(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    a = zarr.create_array(
        s.store, name="g/t", shape=(6, 4), chunks=(2, 2), dtype="f4", dimension_names=["y", "x"]
    )
    a[:4] = 1.0  # chunks (0,*) and (1,*) exist; (2,*) do not
    s.commit("v1")
    repo.create_tag("v1", "main")
    s = repo.create_session("main")
    a = zarr.open_array(s.store, path="g/t")
    a[0:2, 0:2] = 5.0  # modified (0, 0)
    a[4:6, 2:4] = 7.0  # added (2, 1)
    s.delete("g/t/c/1/1")  # deleted (1, 1)
    s.commit("v2")

    opts = {"repo": loc, "array": "g/t", "changes": "v1..main"}
    cells = spark.read.format("zarrlake").options(**opts).load()
    assert cells.columns == ["y", "x", "change"]
    got = sorted((r.y, r.x, r.change) for r in cells.collect())
    assert got == [(0, 0, "modified"), (1, 1, "deleted"), (2, 1, "added")]

    chunks = spark.read.format("zarrlake").options(**opts, layout="chunks").load()
    rows = {(r.y, r.x): r for r in chunks.collect()}
    assert rows[(0, 0)].t == [5.0] * 4 and rows[(0, 0)].shape == [2, 2]
    assert rows[(2, 1)].t == [7.0] * 4
    assert rows[(1, 1)].t is None and rows[(1, 1)].change == "deleted"
    assert (
        spark.read.format("zarrlake").options(**{**opts, "changes": "main..main"}).load().count()
        == 0
    )


@pytest.mark.slow
def test_write_array_raises_zarrlake_errors(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    zarr.create_array(
        s.store, name="a", shape=(10, 10), chunks=(10, 10), dtype="f8", dimension_names=["x", "y"]
    )
    s.commit("setup")
    df = spark.range(0, 100, numPartitions=2).select(
        (F.col("id") / 10).cast("long").alias("x"),
        (F.col("id") % 10).alias("y"),
        (F.col("id") * 1.0).alias("a"),
    )
    # a type that does not fit, found when Spark plans the write
    with pytest.raises(zl.errors.InvalidInputError, match="value column 'a' has type string"):
        zl.spark.write_array(df.withColumn("a", F.col("a").cast("string")), repo=loc, array="a")
    # two tasks writing one chunk: the driver's commit refuses
    raw = df.write.format("zarrlake").options(repo=loc, array="a").mode("append")
    conflict = pytest.raises(zl.errors.ConflictError, match="written by two Spark tasks")
    with conflict as caught, zl.spark.zarrlake_errors():
        raw.save()
    [writers] = caught.value.conflicts
    assert (writers.path, writers.kind, writers.chunks) == ("a", "writers", [(0, 0)])
    # an error raised by a map_regions function
    ro = repo.readonly_session("main")

    def missing(session, i):
        return zarr.open_array(session.store, path="a").shape if i == 0 else session.read("nope")

    def fail(session, i):
        raise zl.errors.NotFoundError(f"region {i} has no data")

    assert zl.spark.map_regions(spark, ro, [0], missing) == [(10, 10)]
    with pytest.raises(zl.errors.NotFoundError, match="region 1 has no data"):
        zl.spark.map_regions(spark, ro, [1], fail)
    assert len(repo.log()) == 2
    assert repo.list_sessions() == []
