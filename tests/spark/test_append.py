"""Appending along a dimension with Spark (`append_dim`): daily jobs grow the arrays in the
commit that writes the day; a day again is refused unless overwritten; two jobs appending
from one base conflict; coordinate arrays grow with the data; the chunk layout and the
streaming sink append too. Checked against numpy."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
import zarr
from pyspark.sql import functions as F

import zarrlake as zl

STATIONS = 6
CREATE = {"shape": (1, STATIONS), "chunks": (2, 4), "dims": "time,station", "dtype": "float32"}


def _truth(day: int, offset: float = 0.0) -> np.ndarray:
    return (day * 100 + np.arange(STATIONS) * 1.5 + offset).astype("f4")


def _day(spark, day: int, offset: float = 0.0, parts: int = 2):
    """The rows of one day: a value per station, and the day's time coordinate."""
    return spark.range(0, STATIONS, numPartitions=parts).select(
        F.lit(day).cast("long").alias("time"),
        F.col("id").alias("station"),
        (F.lit(day * 100 + offset) + F.col("id") * 1.5).cast("float").alias("t2m"),
        (F.lit(day * 100 + offset) - F.col("id")).cast("float").alias("u10"),
        F.lit(1000 + 24 * day).cast("long").alias("time_value"),
    )


def _read(loc: str, path: str, ref: str = "main") -> np.ndarray:
    return zarr.open_array(zl.Repo.open(loc).readonly_session(ref).store, path=path, mode="r")[:]


@pytest.mark.slow
def test_three_daily_appends_equal_the_numpy_concatenation(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    before = len(repo.log())
    for day in range(3):
        zl.spark.write_array(
            _day(spark, day).drop("u10", "time_value"),
            repo=loc,
            array="t2m",
            append_dim="time",
            message=f"day {day}",
            **CREATE,  # creates the array on day 0 (empty along time); checked after
        )
        assert _read(loc, "t2m").shape == (day + 1, STATIONS)
    log = repo.log()
    assert [c.message for c in log[:3]] == ["day 2", "day 1", "day 0"]
    assert len(log) == before + 3  # one commit per day, the growth in it
    np.testing.assert_array_equal(_read(loc, "t2m"), np.stack([_truth(d) for d in range(3)]))
    np.testing.assert_array_equal(_read(loc, "t2m", log[1].id), np.stack([_truth(0), _truth(1)]))

    # a re-run of day 1 is refused, naming the day; nothing changes
    with pytest.raises(zl.errors.InvalidInputError) as caught:
        zl.spark.write_array(
            _day(spark, 1).drop("u10", "time_value"), repo=loc, array="t2m", append_dim="time"
        )
    assert str(caught.value) == (
        "rows at time 1 are already in array 't2m' (time 0..2); an append writes past the "
        "end, or give mode('overwrite') to replace them"
    )
    assert [c.id for c in repo.log()] == [c.id for c in log]
    assert repo.list_sessions() == []

    # an overwrite of day 1 replaces it and keeps the other days
    zl.spark.write_array(
        _day(spark, 1, offset=0.25).drop("u10", "time_value"),
        repo=loc,
        array="t2m",
        append_dim="time",
        mode="overwrite",
        message="day 1 again",
    )
    expected = np.stack([_truth(0), _truth(1, 0.25), _truth(2)])
    np.testing.assert_array_equal(_read(loc, "t2m"), expected)
    # two days at once, past a gap: the gap holds the fill value
    two = _day(spark, 4).union(_day(spark, 5)).drop("u10", "time_value")
    zl.spark.write_array(two, repo=loc, array="t2m", append_dim="time")
    gap = np.zeros(STATIONS, "f4")
    expected = np.stack([*expected, gap, _truth(4), _truth(5)])
    np.testing.assert_array_equal(_read(loc, "t2m"), expected)


@pytest.mark.slow
def test_arrays_sharing_dims_and_their_time_coordinate_grow_together(spark, tmp_path):
    loc = str(tmp_path / "repo")
    zl.Repo.create(loc).close()
    for day in range(3):
        zl.spark.write_array(
            _day(spark, day, parts=3),
            repo=loc,
            arrays="t2m,u10,time",
            append_dim="time",
            message=f"day {day}",
            **CREATE,
        )
    t2m = np.stack([_truth(d) for d in range(3)])
    np.testing.assert_array_equal(_read(loc, "t2m"), t2m)
    np.testing.assert_array_equal(_read(loc, "u10"), t2m - np.arange(STATIONS) * 2.5)
    np.testing.assert_array_equal(_read(loc, "time"), [1000, 1024, 1048])
    assert _read(loc, "time").dtype == np.int64  # the dtype of its column
    # the coordinate reads back through Spark, its values named <name>_value
    back = spark.read.format("zarrlake").options(repo=loc, array="time").load()
    assert back.columns == ["time", "time_value"]
    assert sorted(tuple(r) for r in back.collect()) == [(0, 1000), (1, 1024), (2, 1048)]

    # rows that disagree on a coordinate cell are refused, naming it
    bad = _day(spark, 3).withColumn(
        "time_value", F.when(F.col("station") == 4, 7).otherwise(F.col("time_value"))
    )
    with pytest.raises(zl.errors.InvalidInputError, match=r"coordinate array 'time'.*\(time=3\)"):
        zl.spark.write_array(bad, repo=loc, arrays="t2m,u10,time", append_dim="time", partitions=1)
    assert _read(loc, "time").shape == (3,)


@pytest.mark.slow
def test_two_jobs_appending_the_same_day_from_one_base_conflict(spark, tmp_path):
    loc = str(tmp_path / "repo")
    zl.Repo.create(loc).close()
    first = _day(spark, 0).drop("u10", "time_value")
    zl.spark.write_array(first, repo=loc, array="t2m", append_dim="time", **CREATE)
    gate = str(tmp_path / "gate")
    os.mkfifo(gate)

    def gated(batches):  # job A's task waits until the test closes the gate
        with open(gate) as f:
            f.read()
        yield from batches

    day = _day(spark, 1).drop("u10", "time_value")
    job_a = day.repartition(1).mapInArrow(gated, day.schema)
    outcome: dict[str, BaseException] = {}

    def run_a() -> None:
        try:
            zl.spark.write_array(job_a, repo=loc, array="t2m", append_dim="time", message="A")
        except BaseException as e:
            outcome["a"] = e

    thread = threading.Thread(target=run_a)
    thread.start()
    with open(gate, "w"):  # returns once job A's task has it open: A's session is open
        zl.spark.write_array(day, repo=loc, array="t2m", append_dim="time", message="B")
    thread.join()
    assert isinstance(outcome.get("a"), zl.errors.ConflictError), outcome
    [conflict] = outcome["a"].conflicts  # both wrote the day's chunks
    assert (conflict.path, conflict.kind, conflict.chunks) == ("t2m", "chunk", [(0, 0), (0, 1)])
    repo = zl.Repo.open(loc)
    assert repo.log(limit=1)[0].message == "B"
    np.testing.assert_array_equal(_read(loc, "t2m"), np.stack([_truth(0), _truth(1)]))
    assert repo.list_sessions() == []


@pytest.mark.slow
def test_the_chunk_layout_appends_whole_and_short_chunks(spark, tmp_path):
    loc = str(tmp_path / "repo")
    zl.Repo.create(loc).close()
    values = np.arange(8 * 4, dtype="f8").reshape(8, 4)

    def rows(*chunks):  # (time chunk, days in it) -> chunk rows of `values`, chunks (2, 4)
        out = [(k, 0, values[2 * k : 2 * k + n].ravel().tolist()) for k, n in chunks]
        return spark.createDataFrame(out, "time long, x long, v array<double>")

    create = {"shape": (0, 4), "chunks": (2, 4), "dims": "time,x", "dtype": "float64"}
    zl.spark.write_array(
        rows((0, 2)), repo=loc, array="v", layout="chunks", append_dim="time", **create
    )
    zl.spark.write_array(
        rows((1, 2), (2, 1)), repo=loc, array="v", layout="chunks", append_dim="time"
    )
    np.testing.assert_array_equal(_read(loc, "v"), values[:5])
    with pytest.raises(zl.errors.InvalidInputError, match=r"rows at time 4 are already"):
        zl.spark.write_array(rows((2, 2)), repo=loc, array="v", layout="chunks", append_dim="time")
    with pytest.raises(zl.errors.InvalidInputError, match=r"same chunk of array 'v'.*\(time=3"):
        zl.spark.write_array(
            rows((3, 1), (3, 1)),
            repo=loc,
            array="v",
            layout="chunks",
            append_dim="time",
            partitions=1,
        )
    assert _read(loc, "v").shape == (5, 4)


@pytest.mark.slow
def test_the_stream_grows_the_array_with_each_micro_batch(spark, tmp_path):
    loc = str(tmp_path / "repo")
    zl.Repo.create(loc).close()
    zl.spark.write_array(
        _day(spark, 0).drop("u10", "time_value"),
        repo=loc,
        array="t2m",
        append_dim="time",
        **CREATE,
    )
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for day in (1, 2):
        lines = [
            json.dumps({"time": day, "station": s, "t2m": float(_truth(day)[s])})
            for s in range(STATIONS)
        ]
        (source / f"{day}.json").write_text("\n".join(lines) + "\n")
    query = (
        spark.readStream.schema("time long, station long, t2m float")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.format("zarrlake")
        .options(repo=loc, array="t2m", append_dim="time", checkpointLocation=str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    batches = [c for c in zl.Repo.open(loc).log() if c.metadata.get("zarrlake.batch")]
    assert len(batches) == 2  # one commit per day, each growing the array
    np.testing.assert_array_equal(_read(loc, "t2m"), np.stack([_truth(d) for d in range(3)]))
    np.testing.assert_array_equal(_read(loc, "t2m", batches[1].id).shape, (2, STATIONS))
