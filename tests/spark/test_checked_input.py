"""Input a Spark write refuses by name (cells given twice, options that contradict the
array, a missing branch), and how its errors reach the caller: as themselves, one line, with
nothing from Spark on the console."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import zarr
from pyspark.sql import functions as F

import zarrlake as zl


def _repo(tmp_path) -> str:
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    zarr.create_array(
        s.store, name="v", shape=(6, 8), chunks=(3, 4), dtype="f4", dimension_names=["y", "x"]
    )
    s.commit("setup")
    repo.close()
    return loc


def _cells(spark, rows: list[tuple[int, int, float]]):
    return spark.createDataFrame(rows, "y long, x long, v float")


def _grid(spark):
    """Every cell once, in C order: value y * 8 + x."""
    i = F.col("id")
    return spark.range(0, 48, numPartitions=2).select(
        (i / 8).cast("long").alias("y"), (i % 8).alias("x"), i.cast("float").alias("v")
    )


def _read(loc: str) -> np.ndarray:
    return zarr.open_array(zl.Repo.open(loc).readonly_session().store, path="v", mode="r")[:]


@pytest.mark.slow
def test_cells_given_twice_are_refused_naming_the_first_unless_last_wins(spark, tmp_path):
    loc = _repo(tmp_path)
    repo = zl.Repo.open(loc)
    head = repo.resolve("main")
    twice = _cells(spark, [(0, 1, 1.0), (4, 5, 2.0), (4, 5, 3.0), (0, 1, 4.0), (2, 2, 5.0)])
    message = (
        r"rows give the same cell of array 'v' more than once: \(y=0, x=1\); "
        r"give duplicates='last' to keep the last row of each"
    )
    with pytest.raises(zl.errors.InvalidInputError, match=message):
        zl.spark.write_array(twice, repo=loc, array="v", partitions=1)
    # whole runs of cells in C order given twice (the slab path), in one task or split
    for parts in (1, 2):
        with pytest.raises(zl.errors.InvalidInputError, match=r"\(y=0, x=0\)"):
            zl.spark.write_array(
                _grid(spark).union(_grid(spark)), repo=loc, array="v", partitions=parts
            )
    assert repo.resolve("main") == head and repo.list_sessions() == []

    zl.spark.write_array(twice, repo=loc, array="v", duplicates="last")
    got = _read(loc)
    assert got[0, 1] in (1.0, 4.0) and got[4, 5] in (2.0, 3.0) and got[2, 2] == 5.0
    with pytest.raises(zl.errors.InvalidInputError, match="'error' or 'last', not 'first'"):
        zl.spark.write_array(twice, repo=loc, array="v", duplicates="first")


@pytest.mark.slow
def test_options_that_contradict_the_array_are_refused_naming_both(spark, tmp_path):
    loc = _repo(tmp_path)
    repo = zl.Repo.open(loc)
    head = repo.resolve("main")
    rows = _grid(spark)
    cases = [
        ({"dtype": "int32"}, "exists with dtype float32; the options say dtype int32"),
        ({"shape": (6, 9)}, r"exists with shape \(6, 8\); the options say shape \(6, 9\)"),
        (
            {"chunks": (3, 8), "dims": "x,y"},
            r"exists with chunks \(3, 4\), dims \[y, x\]; the options say chunks \(3, 8\), "
            r"dims \[x, y\]",
        ),
    ]
    for options, message in cases:
        with pytest.raises(zl.errors.InvalidInputError, match=message):
            zl.spark.write_array(rows, repo=loc, array="v", **options)
    # options that describe the array are fine
    zl.spark.write_array(
        rows, repo=loc, array="v", shape=(6, 8), chunks=(3, 4), dims="y,x", dtype="float32"
    )
    np.testing.assert_array_equal(_read(loc), np.arange(48, dtype="f4").reshape(6, 8))
    assert repo.log(limit=1)[0].parent_ids == (head,)

    with pytest.raises(zl.errors.NotFoundError, match=r"^branch 'nope' does not exist$"):
        zl.spark.write_array(rows, repo=loc, array="v", branch="nope")
    raw = rows.write.format("zarrlake").options(repo=loc, array="v", branch="nope")
    missing = pytest.raises(zl.errors.NotFoundError, match="branch 'nope' does not exist")
    with missing, zl.spark.zarrlake_errors():
        raw.mode("append").save()
    assert repo.list_sessions() == []


PLAIN = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession, functions as F
import zarr, zarrlake as zl

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
loc = sys.argv[1]
rows = spark.range(0, 4).select(
    F.lit(1).cast("long").alias("time"), F.col("id").alias("station"),
    F.col("id").cast("float").alias("t2m"),
)
print("START", file=sys.stderr, flush=True)
try:
    zl.spark.write_array(rows, repo=loc, array="t2m")  # time 1: outside a (1, 4) array
except zl.errors.InvalidInputError as e:
    print(repr(e))
    print(e.__cause__, e.__context__ is None or e.__suppress_context__)
try:
    zl.spark.write_array(rows, repo=loc, array="t2m", append_dim="time")
    zl.spark.write_array(rows, repo=loc, array="t2m", append_dim="time")
except zl.errors.InvalidInputError as e:
    print(repr(e))

def fail(session, i):
    raise zl.errors.NotFoundError(f"region {i} has no data")

try:
    zl.spark.map_regions(spark, zl.Repo.open(loc).readonly_session(), [0, 1], fail)
except zl.errors.NotFoundError as e:
    print(repr(e))
print("END", file=sys.stderr, flush=True)
spark.stop()
"""


@pytest.mark.slow
def test_errors_of_spark_jobs_are_one_line_with_nothing_from_spark_on_the_console(tmp_path):
    """In a Spark application of its own, with Spark's default logging: a job's console
    shows nothing of a zarrlake error met in its tasks."""
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    zarr.create_array(
        s.store,
        name="t2m",
        shape=(1, 4),
        chunks=(1, 4),
        dtype="f4",
        dimension_names=["time", "station"],
    )
    s.commit("setup")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", PLAIN, loc],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "InvalidInputError(\"column 'time' has index 1, outside array 't2m' of shape (1, 4) "
        '(valid: 0..0); drop or fix those rows")',
        "None True",
        "InvalidInputError(\"rows at time 1 are already in array 't2m' (time 0..1); an append "
        "writes past the end, or give mode('overwrite') to replace them\")",
        "NotFoundError('region 0 has no data')",
    ]
    during = done.stderr.split("START", 1)[1].split("END", 1)[0]
    assert re.sub(r"\[Stage \d+:[^\]]*\]", "", during).strip() == "", during  # progress bars only
