"""Every query of a zarrlake DataFrame answers with its own filters, checked against numpy:
the same DataFrame re-queried with other filters or none, a temp view queried by SQL many
times, a cached filtered read, a self-join of two differently filtered reads, and explain();
on the cell layout, the chunk layout, the change feed, and a sharded array. (Spark 4.1-4.3
keep the read planned for one query's pushed filters on the data source object every query
of the DataFrame shares; zarrlake narrows reads by option `isel` instead.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import zarr
from pyspark.sql import Column
from pyspark.sql import functions as F

import zarrlake as zl

SHAPE = (40, 60)
CHUNKS = (10, 20)
SHARDS = (20, 60)


def _values() -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE) * 0.5


def _repo(tmp_path, *, sharded: bool = False) -> str:
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    a = zarr.create_array(
        s.store,
        name="g/v",
        shape=SHAPE,
        chunks=CHUNKS,
        shards=SHARDS if sharded else None,
        dtype="f8",
        dimension_names=["y", "x"],
    )
    a[:] = _values()
    s.commit("v1")
    repo.create_tag("v1", "main")
    repo.close()
    return loc


@dataclass
class Truth:
    """The rows a read should give, from numpy: a column per name (one entry per row), and
    for each row the number a query sums (its value, or the sum of its chunk's values)."""

    columns: dict[str, np.ndarray]
    weight: np.ndarray
    sql: str  # the same number as a Spark SQL expression

    def weigh(self) -> Column:
        return F.expr(self.sql)

    def answer(self, where: Callable[[dict[str, np.ndarray]], np.ndarray] | None):
        mask = np.ones(len(self.weight), bool) if where is None else where(self.columns)
        return int(mask.sum()), float(self.weight[mask].sum())


def _cells(values: np.ndarray) -> Truth:
    y, x = np.indices(values.shape)
    return Truth({"y": y.ravel(), "x": x.ravel()}, values.ravel(), "v")


def _chunks(values: np.ndarray, unit: tuple[int, int]) -> Truth:
    grid = [-(-s // c) for s, c in zip(values.shape, unit, strict=True)]
    cy, cx = np.indices(grid)
    sums = np.array(
        [
            values[i * unit[0] : (i + 1) * unit[0], j * unit[1] : (j + 1) * unit[1]].sum()
            for i, j in zip(cy.ravel(), cx.ravel(), strict=True)
        ]
    )
    return Truth({"y": cy.ravel(), "x": cx.ravel()}, sums, "aggregate(v, 0D, (a, b) -> a + b)")


def _ask(df, truth: Truth, where: Column | None, numpy_where) -> None:
    """One query of `df`: count and sum of the rows `where` keeps, against numpy."""
    q = df if where is None else df.filter(where)
    row = q.agg(F.count("*").alias("n"), F.sum(truth.weigh()).alias("s")).first()
    n, s = truth.answer(numpy_where)
    assert (row.n, row.s or 0.0) == pytest.approx((n, s)), where


def _every_pattern(spark, load, truth: Truth, view: str) -> None:
    """The patterns of a user's session against one DataFrame, each checked with numpy."""
    d = load()
    y_lt = lambda k: (F.col("y") < k, lambda c: c["y"] < k)  # noqa: E731
    x_ge = lambda k: (F.col("x") >= k, lambda c: c["x"] >= k)  # noqa: E731
    # the same DataFrame: no filter, a filter, none again, another filter, none again
    for where in [(None, None), y_lt(2), (None, None), x_ge(1), y_lt(3), (None, None)]:
        _ask(d, truth, *where)
    both = (F.col("y") == 1) & (F.col("x") <= 1)
    _ask(d, truth, both, lambda c: (c["y"] == 1) & (c["x"] <= 1))

    # a temp view, queried by SQL many times
    d.createOrReplaceTempView(view)
    for cond, mask in [
        ("y < 2", lambda c: c["y"] < 2),
        ("", None),
        ("x = 1", lambda c: c["x"] == 1),
        ("y >= 1 and x < 2", lambda c: (c["y"] >= 1) & (c["x"] < 2)),
        ("", None),
    ]:
        where = f" where {cond}" if cond else ""
        row = spark.sql(f"select count(*) as n, sum({truth.sql}) as s from {view}{where}").first()
        assert (row.n, row.s or 0.0) == pytest.approx(truth.answer(mask)), cond

    # a cached filtered read, then the DataFrame it came from
    cached = d.filter(F.col("y") < 2).cache()
    try:
        _ask(cached, truth, None, lambda c: c["y"] < 2)
        _ask(d, truth, None, None)
        _ask(cached, truth, F.col("x") == 0, lambda c: (c["y"] < 2) & (c["x"] == 0))
    finally:
        cached.unpersist()

    # a self-join of two differently filtered reads of one DataFrame
    a = d.filter(F.col("y") < 1).select(F.col("x").alias("ax"))
    b = d.filter(F.col("y") < 3).select(F.col("x").alias("bx"))
    joined = a.join(b, F.col("ax") == F.col("bx")).count()
    xs = truth.columns["x"]
    left = np.bincount(xs[truth.columns["y"] < 1], minlength=xs.max() + 1)
    right = np.bincount(xs[truth.columns["y"] < 3], minlength=xs.max() + 1)
    assert joined == int((left * right).sum())

    # explain(): Spark applies the filter itself, and nothing is pushed to the read
    plan = spark.sql(f"explain formatted select * from {view} where y < 2").first()[0]
    assert "Condition : (y#" in plan and " < 2)" in plan
    assert "PushedFilters" not in plan.replace("PushedFilters: []", "")


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True], ids=["plain", "sharded"])
def test_cell_layout_answers_every_query_with_its_own_filters(spark, tmp_path, sharded):
    loc = _repo(tmp_path, sharded=sharded)

    def load(**extra):
        return spark.read.format("zarrlake").options(repo=loc, array="g/v", **extra).load()

    _every_pattern(spark, load, _cells(_values()), f"cells_{int(sharded)}")
    # an isel region: every query of it reads that region, whatever its filters
    region = _values()[5:17, 30:]
    truth = _cells(region)
    truth.columns["y"] += 5
    truth.columns["x"] += 30
    d = load(isel="y=5:17,x=30:")
    _ask(d, truth, F.col("y") < 8, lambda c: c["y"] < 8)
    _ask(d, truth, None, None)
    _ask(load(isel="y=7"), _cells(_values()[7:8]), None, None)


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True], ids=["plain", "sharded"])
def test_chunk_layout_answers_every_query_with_its_own_filters(spark, tmp_path, sharded):
    loc = _repo(tmp_path, sharded=sharded)

    def load(**extra):
        return (
            spark.read.format("zarrlake")
            .options(repo=loc, array="g/v", layout="chunks", **extra)
            .load()
        )

    truth = _chunks(_values(), CHUNKS)  # a sharded array's rows are its inner chunks
    _every_pattern(spark, load, truth, f"chunks_{int(sharded)}")
    d = load(isel="y=1:3")  # chunk coordinates
    _ask(d, truth, F.col("x") == 2, lambda c: (c["y"] >= 1) & (c["y"] < 3) & (c["x"] == 2))
    _ask(d, truth, None, lambda c: (c["y"] >= 1) & (c["y"] < 3))
    if sharded:  # rows of whole shards
        shards = _chunks(_values(), SHARDS)
        _every_pattern(spark, lambda: load(grid="shards"), shards, "shard_rows")


@pytest.mark.slow
def test_change_feed_answers_every_query_with_its_own_filters(spark, tmp_path):
    loc = _repo(tmp_path)
    repo = zl.Repo.open(loc)
    before = _values()
    after = before.copy()
    after[0:10, 0:20] += 1  # chunk (0, 0)
    after[10:30, 20:40] -= 1  # chunks (1, 1), (2, 1)
    after[39, 59] = 0  # chunk (3, 2)
    s = repo.create_session("main")
    zarr.open_array(s.store, path="g/v")[:] = after
    s.commit("v2")
    repo.close()
    changed = np.array(
        [
            (before[i * 10 : (i + 1) * 10, j * 20 : (j + 1) * 20] != block).any()
            for i, j in np.ndindex(4, 3)
            for block in [after[i * 10 : (i + 1) * 10, j * 20 : (j + 1) * 20]]
        ]
    )
    full = _chunks(after, CHUNKS)
    truth = Truth({k: v[changed] for k, v in full.columns.items()}, full.weight[changed], full.sql)
    assert len(truth.weight) == 4

    def load(**extra):
        return (
            spark.read.format("zarrlake")
            .options(repo=loc, array="g/v", changes="v1..main", layout="chunks", **extra)
            .load()
        )

    _every_pattern(spark, load, truth, "changes")
    cells = spark.read.format("zarrlake").options(repo=loc, array="g/v", changes="v1..main")
    kinds = cells.load().filter(F.col("y") >= 1).groupBy("change").count().collect()
    assert {(r.change, r["count"]) for r in kinds} == {("modified", 3)}
    region = cells.option("isel", "y=2:").load()
    assert sorted((r.y, r.x) for r in region.collect()) == [(2, 1), (3, 2)]


def test_a_bad_isel_is_refused_by_name(spark, tmp_path):
    loc = _repo(tmp_path)
    read = spark.read.format("zarrlake").options(repo=loc, array="g/v")
    for isel, message in [
        ("t=1:2", r"names dimension 't'; the array's are \['y', 'x'\]"),
        ("y=1-2", r"'y=1-2' is not one"),
        ("y=1,y=2", "names dimension 'y' twice"),
    ]:
        with pytest.raises(zl.errors.InvalidInputError, match=message), zl.spark.zarrlake_errors():
            read.option("isel", isel).load().count()
