"""A Spark job's commit onto a guarded branch runs the branch's checks: a failing one is
refused with ChecksFailedError (raised by write_array) and the branch is left untouched."""

from __future__ import annotations

import pytest
import zarr
from pyspark.sql import functions as F

import zarrlake as zl
from zarrlake.checks import MaxNaNFraction, ValueRange


@pytest.mark.slow
def test_write_array_onto_a_guarded_branch_is_checked(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session()
    zarr.create_array(
        s.store, name="a", shape=(10, 10), chunks=(5, 5), dtype="f8", dimension_names=["x", "y"]
    )
    s.commit("setup")
    repo.add_check("range", ValueRange("a", 0, 50))
    repo.add_check("nan", MaxNaNFraction("a", 0.0))
    head = repo.resolve("main")

    def df(scale: float):
        return spark.range(0, 100, numPartitions=2).select(
            (F.col("id") / 10).cast("long").alias("x"),
            (F.col("id") % 10).alias("y"),
            (F.col("id") * scale + 1).cast("double").alias("a"),  # no 0: the fill value
        )

    with pytest.raises(
        zl.ChecksFailedError, match=r"1 of 2 .*'range'.*'a' at chunks \(1, 0\), \(1, 1\)"
    ):
        zl.spark.write_array(df(1.0), repo=loc, array="a", message="ids up to 99")
    assert repo.resolve("main") == head
    zl.spark.write_array(df(0.4), repo=loc, array="a", message="ids scaled")
    assert repo.log(limit=1)[0].message == "ids scaled"
    assert [r.passed for r in repo.run_checks("main")] == [True, True]
