"""The "zarrlake" Spark data source, write_array and map_regions on a real local[2] Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from pyspark.sql import functions as F

import zarrlake as zl
from tests.spark.counting import logged_chunks, register_counting


def _head(repo: zl.Repo, branch: str = "main") -> str:
    return repo.resolve(branch)


def _session_status(repo: zl.Repo, session_id: str) -> str:
    return repo.session_info(session_id).state


def _grid_df(spark, n: int, shape: tuple[int, ...], parts: int, names=("x", "y", "z")):
    """Rows id -> C-order coordinates of `shape` plus value id * 0.5, in `parts` partitions."""
    cols, stride = [], 1
    for name, size in reversed(list(zip(names, shape, strict=False))):
        cols.append(((F.col("id") / stride).cast("long") % size).alias(name))
        stride *= size
    value = (F.col("id") * 0.5).alias("v")
    return spark.range(0, n, numPartitions=parts).select(*reversed(cols), value)


def _read_array(repo: zl.Repo, path: str, ref: str = "main") -> np.ndarray:
    return zarr.open_array(repo.readonly_session(ref).store, path=path, mode="r")[:]


def _spark_error(excinfo) -> str:
    return str(excinfo.value)


@pytest.mark.slow
def test_write_million_rows_is_one_commit(spark, tmp_path, monkeypatch):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    before = repo.log()
    df = _grid_df(spark, 1_000_000, (100, 100, 100), parts=3)
    registrations = []  # registered once per Spark session (again, Spark warns of a replace)
    monkeypatch.setattr(
        type(spark.dataSource), "register", lambda self, cls: registrations.append(cls)
    )
    zl.spark.register(spark)
    zl.spark.write_array(
        df,
        repo=loc,
        array="grid/v",
        message="ingest a million rows",
        shape=(100, 100, 100),
        chunks=(32, 50, 40),
        dims="x,y,z",
        dtype="float64",
    )
    assert registrations == []
    log = repo.log()
    assert len(log) == len(before) + 1
    assert log[0].message == "ingest a million rows"
    assert log[0].parent_ids == (before[0].id,)
    expected = (np.arange(1_000_000, dtype="f8") * 0.5).reshape(100, 100, 100)
    np.testing.assert_array_equal(_read_array(repo, "grid/v"), expected)

    back = spark.read.format("zarrlake").option("repo", loc).option("array", "grid/v").load()
    row = back.agg(
        F.count("*").alias("n"),
        F.max(F.abs(F.col("v") - 0.5 * (F.col("x") * 10000 + F.col("y") * 100 + F.col("z")))).alias(
            "err"
        ),
    ).collect()[0]
    assert (row["n"], row["err"]) == (1_000_000, 0.0)
    assert repo.list_sessions() == []


@pytest.mark.slow
def test_failed_task_leaves_branch_untouched(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    head = _head(repo)
    marker = tmp_path / "staged.json"

    def fail_in_last_partition(batches):
        from pyspark import TaskContext

        yield from batches
        if TaskContext.get().partitionId() == 2:
            # Runs after tasks 0 or 1 finished writing (local[2]: task 2 waits for a core).
            other = zl.Repo.open(loc)
            [rec] = other.list_sessions("main")
            staged = len(other.join_session(rec.id)._staged_changes())
            marker.write_text(json.dumps({"session": rec.id, "staged": staged}))
            raise RuntimeError("injected task failure")

    df = _grid_df(spark, 300, (30, 10), parts=3, names=("x", "y"))
    df = df.mapInArrow(fail_in_last_partition, df.schema)
    writer = (
        df.write.format("zarrlake")
        .option("repo", loc)
        .option("array", "t/v")
        .options(shape="30,10", chunks="5,10", dims="x,y")
        .mode("append")
    )
    with pytest.raises(Exception) as excinfo:
        writer.save()
    assert "injected task failure" in _spark_error(excinfo)
    seen = json.loads(marker.read_text())
    assert seen["staged"] > 1  # the array metadata and chunks of the finished task(s)
    assert _head(repo) == head
    assert len(repo.log()) == 1
    assert repo.list_sessions() == []
    assert _session_status(repo, seen["session"]) == "abandoned"
    with pytest.raises(zl.SessionClosedError):
        repo.join_session(seen["session"])


def test_two_tasks_on_one_chunk(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    head = _head(repo)
    # Partition 0 holds rows x < 5, partition 1 rows x >= 5: both in chunk (0, 0).
    df = _grid_df(spark, 100, (10, 10), parts=2, names=("x", "y"))
    create = {"shape": "10,10", "chunks": "10,10", "dims": "x,y"}
    raw = df.write.format("zarrlake").option("repo", loc).option("array", "dup/v").options(**create)
    with pytest.raises(Exception) as excinfo:
        raw.mode("append").save()
    text = _spark_error(excinfo)
    assert "ConflictError" in text
    assert "chunk (0, 0) of array 'dup/v' was written by two Spark tasks" in text
    assert _head(repo) == head
    assert repo.list_sessions() == []

    zl.spark.write_array(df, repo=loc, array="dup/v", message="deduplicated", **create)
    assert repo.log()[0].message == "deduplicated"
    expected = (np.arange(100) * 0.5).reshape(10, 10)
    np.testing.assert_array_equal(_read_array(repo, "dup/v"), expected)


def test_write_array_conflict_keeps_its_details(spark, tmp_path):
    """A commit that lands on chunk (0, 0) while the job runs: write_array raises the core's
    ConflictError, conflicts and all, not only its message."""
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session()
    zarr.create_array(
        s.store, name="a", shape=(10, 10), chunks=(5, 5), dtype="f8", dimension_names=["x", "y"]
    )
    s.commit("setup")
    flag = str(tmp_path / "committed")

    @F.udf("double")
    def value(i):  # runs in a task, after the job's session began
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return float(i)
        other = zl.Repo.open(loc)
        s = other.create_session()
        zarr.open_array(s.store, path="a")[0, 0] = -1
        s.commit("concurrent")
        other.close()
        return float(i)

    df = spark.range(0, 100, numPartitions=1).select(
        (F.col("id") / 10).cast("long").alias("x"),
        (F.col("id") % 10).alias("y"),
        value("id").alias("a"),
    )
    head = repo.log(limit=1)[0].id
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # plan (session) before any task
    try:
        with pytest.raises(zl.ConflictError) as e:
            zl.spark.write_array(df, repo=loc, array="a", message="job")
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
    assert [(c.path, c.kind, c.chunks) for c in e.value.conflicts] == [("a", "chunk", [(0, 0)])]
    assert repo.log(limit=2)[1].id == head and repo.log(limit=1)[0].message == "concurrent"


def _to_dense(table, shape, value="v") -> np.ndarray:
    out = np.full(shape, np.nan)
    idx = tuple(table.column(d).to_numpy() for d in ("x", "y", "z"))
    out[idx] = table.column(value).to_numpy()
    return out


def test_read_at_tag_and_branch_a_region_and_filters(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    rng = np.random.default_rng(7)
    v1 = rng.random((40, 30, 20))
    session = repo.create_session("main")
    arr = zarr.create_array(
        session.store,
        name="obs/v",
        shape=v1.shape,
        chunks=(10, 10, 10),
        dtype="f8",
        dimension_names=["x", "y", "z"],
    )
    arr[:] = v1
    repo.create_tag("v1", at=session.commit("first"))
    later = repo.create_session("main")
    v2 = v1.copy()
    v2[0:10] += 1000
    zarr.open_array(later.store, path="obs/v", mode="r+")[0:10] = v2[0:10]
    later.commit("second")

    def load(fmt="zarrlake", **extra):
        return spark.read.format(fmt).options(repo=loc, array="obs/v", **extra).load()

    at_tag = load(ref="v1", partition_rows="5000")
    assert at_tag.schema.simpleString() == "struct<x:bigint,y:bigint,z:bigint,v:double>"
    np.testing.assert_array_equal(_to_dense(at_tag.toArrow(), v1.shape), v1)
    np.testing.assert_array_equal(_to_dense(load(ref="main").toArrow(), v2.shape), v2)

    register_counting(spark)
    log = tmp_path / "chunks.log"
    log.touch()
    region = load("zarrlake_counting", chunk_log=str(log), isel="x=12:18, y=5, z=3:16")
    slab = region.filter(F.col("z").isin(3, 4, 15) & (F.col("v") > 0.5))
    rows = slab.toArrow()
    assert sorted(logged_chunks(log)) == [(1, 0, 0), (1, 0, 1)]  # the region's chunks only
    expected = {
        (x, 5, z): v2[x, 5, z] for x in range(12, 18) for z in (3, 4, 15) if v2[x, 5, z] > 0.5
    }
    assert len(expected) > 5
    got = {
        (x, y, z): v
        for x, y, z, v in zip(*(rows.column(c).to_pylist() for c in "xyzv"), strict=True)
    }
    assert got == expected
    # the same query as filters: Spark applies them to a read of the whole array
    filtered = load().filter(
        (F.col("x") >= 12)
        & (F.col("x") < 18)
        & (F.col("y") == 5)
        & F.col("z").isin(3, 4, 15)
        & (F.col("v") > 0.5)
    )
    rows = filtered.toArrow()
    got = {
        (x, y, z): v
        for x, y, z, v in zip(*(rows.column(c).to_pylist() for c in "xyzv"), strict=True)
    }
    assert got == expected


def test_map_regions_is_one_commit(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    session = repo.create_session("main", message="regions")
    zarr.create_array(
        session.store, name="m", shape=(100, 50), chunks=(1, 50), dtype="i8", fill_value=-1
    )

    def fill_row(s, i):
        arr = zarr.open_array(s.store, path="m", mode="r+")
        arr[i] = np.arange(50) + 1000 * i
        return i * 2

    results = zl.spark.map_regions(spark, session, range(100), fill_row)
    assert results == [i * 2 for i in range(100)]
    assert len(repo.log()) == 1
    session.commit()
    log = repo.log()
    assert len(log) == 2 and log[0].message == "regions"
    expected = np.arange(50)[None, :] + 1000 * np.arange(100)[:, None]
    np.testing.assert_array_equal(_read_array(repo, "m"), expected)


def test_a_commit_after_a_failed_map_regions_job_is_refused(spark, tmp_path):
    """Every task of the job raises: the session changes nothing, and its commit says so
    instead of landing an empty commit."""
    repo = zl.Repo.create(tmp_path / "repo")
    setup = repo.create_session()
    zarr.create_array(setup.store, name="f", shape=(4, 10), chunks=(1, 10), dtype="i8")
    setup.commit("array f")
    session = repo.create_session("main", message="failed job")

    def fail(s, i):
        raise RuntimeError("bad input")

    with pytest.raises(Exception, match="bad input"):
        zl.spark.map_regions(spark, session, range(4), fail)
    with pytest.raises(zl.NoChangesError, match="changes nothing"):
        session.commit()
    assert [c.message for c in repo.log()][:1] == ["array f"]
    assert session.state == "open"


def test_a_failed_attempt_contributes_nothing_its_retry_once(spark, tmp_path):
    """Each region's first attempt writes other bytes, flushes them and fails; Spark tries
    it again. Only the retried attempts count: no clash with the failed ones' fragments,
    and every chunk holds the retry's values."""
    repo = zl.Repo.create(tmp_path / "repo")
    session = repo.create_session("main", message="retried")
    zarr.create_array(
        session.store, name="r", shape=(8, 10), chunks=(1, 10), dtype="i8", fill_value=-99
    )

    def fill(s, i):
        from pyspark import TaskContext

        arr = zarr.open_array(s.store, path="r", mode="r+")
        if TaskContext.get().attemptNumber() == 0:
            arr[i] = -1  # a failed attempt's write, made durable before it fails
            s.flush()
            raise RuntimeError("the first attempt fails")
        arr[i] = i
        return i

    assert zl.spark.map_regions(spark, session, range(8), fill, num_slices=4) == list(range(8))
    session.commit()
    np.testing.assert_array_equal(
        _read_array(repo, "r"), np.repeat(np.arange(8), 10).reshape(8, 10)
    )
    assert repo.stats().chunks == 8


CONCURRENT_COMMIT = """
import sys, zarr, zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
open_sessions = len(repo.list_sessions("main"))
s = repo.create_session("main")
zarr.open_array(s.store, path="other", mode="r+")[:] = 7
s.commit("from another process")
print(open_sessions)
"""


def test_concurrent_commit_from_another_process(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    zarr.create_array(s.store, name="other", shape=(10,), chunks=(10,), dtype="i8")
    zarr.create_array(
        s.store, name="t", shape=(20, 10), chunks=(5, 10), dtype="f8", dimension_names=["x", "y"]
    )
    base = s.commit("setup")
    marker = tmp_path / "other.txt"

    def commit_elsewhere_first(batches):
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 0:
            done = subprocess.run(
                [sys.executable, "-c", CONCURRENT_COMMIT, loc],
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            )
            marker.write_text(done.stdout.strip())
        yield from batches

    df = _grid_df(spark, 200, (20, 10), parts=2, names=("x", "y")).withColumnRenamed("v", "t")
    df = df.mapInArrow(commit_elsewhere_first, df.schema)
    df.write.format("zarrlake").options(repo=loc, array="t", message="spark job").mode(
        "append"
    ).save()

    assert marker.read_text() == "1"  # the job's session was open during the other commit
    log = repo.log()
    assert [c.message for c in log[:3]] == ["spark job", "from another process", "setup"]
    assert log[2].id == base
    np.testing.assert_array_equal(_read_array(repo, "other"), np.full(10, 7))
    np.testing.assert_array_equal(_read_array(repo, "t"), (np.arange(200) * 0.5).reshape(20, 10))


def test_overwrite_replaces_contents_in_one_commit(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    arr = zarr.create_array(
        s.store, name="w", shape=(20, 10), chunks=(5, 10), dtype="f8", dimension_names=["x", "y"]
    )
    arr[:] = 3.0
    s.commit("old")
    df = _grid_df(spark, 50, (5, 10), parts=1, names=("x", "y")).withColumnRenamed("v", "w")
    zl.spark.write_array(df, repo=loc, array="w", message="replace", mode="overwrite")
    assert [c.message for c in repo.log()[:2]] == ["replace", "old"]
    got = _read_array(repo, "w")
    np.testing.assert_array_equal(got[:5], (np.arange(50) * 0.5).reshape(5, 10))
    np.testing.assert_array_equal(got[5:], np.zeros((15, 10)))
    keys = repo.readonly_session("main").list_prefix("w/")
    assert keys == ["w/c/0/0", "w/zarr.json"]


def test_several_arrays_in_one_commit(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    df = _grid_df(spark, 60, (6, 10), parts=2, names=("lat", "lon")).select(
        "lat", "lon", F.col("v").alias("t2m"), (F.col("lat") * 10 + F.col("lon")).alias("u10")
    )
    df.write.format("zarrlake").options(
        repo=loc, arrays="era/t2m,era/u10", shape="6,10", chunks="3,5", dims="lat,lon"
    ).mode("append").save()
    assert len(repo.log()) == 2
    np.testing.assert_array_equal(
        _read_array(repo, "era/t2m"), (np.arange(60) * 0.5).reshape(6, 10)
    )
    np.testing.assert_array_equal(_read_array(repo, "era/u10"), np.arange(60.0).reshape(6, 10))
    assert zarr.open_array(repo.readonly_session().store, path="era/u10").dtype == np.float64


@pytest.mark.slow
def test_bad_input_gives_clear_errors(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    zarr.create_array(
        s.store, name="a", shape=(10, 10), chunks=(5, 5), dtype="f8", dimension_names=["x", "y"]
    )
    s.commit("setup")
    head = _head(repo)
    good = _grid_df(spark, 100, (10, 10), parts=1, names=("x", "y")).withColumnRenamed("v", "a")

    def fails(action, *needles):
        with pytest.raises(Exception) as excinfo:
            action()
        text = _spark_error(excinfo)
        for needle in needles:
            assert needle in text, text

    def save(df, **options):
        return lambda: df.write.format("zarrlake").options(**options).mode("append").save()

    fails(save(good, array="a"), "InvalidInputError", "needs option 'repo'")
    fails(save(good, repo=loc), "needs option 'array'")
    fails(save(good, repo=loc, array="nope"), "no array 'nope' on branch 'main'")
    fails(
        save(good.withColumn("x", F.col("x").cast("string")), repo=loc, array="a"),
        "dimension column 'x' must have an integer type, not string",
    )
    fails(save(good.drop("a"), repo=loc, array="a"), "no value column 'a'")
    fails(
        save(good.withColumn("y", F.col("y") + 5), repo=loc, array="a"),
        "column 'y' has index 14, outside array 'a' of shape (10, 10)",
    )
    fails(
        lambda: spark.read.format("zarrlake").options(repo=loc, array="b").load().collect(),
        "no array 'b' at 'main'",
    )
    with pytest.raises(zl.errors.InvalidInputError, match="no column"):
        zl.spark.write_array(good.drop("y"), repo=loc, array="a")
    assert _head(repo) == head
    assert repo.list_sessions() == []
    assert Path(loc, "zarrlake.json").exists()
