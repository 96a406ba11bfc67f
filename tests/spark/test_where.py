"""Option `where` of a Spark read: every value filter gives exactly the rows numpy's mask
gives, with chunk statistics used, ignored, and unknown (a repository writing without them),
on the cell layout and the chunk layout; with statistics used, the chunks they rule out are
not read."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from pyspark.sql import functions as F

import zarrlake as zl

SHAPE = (30, 40)
CHUNKS = (10, 10)
FILTERS: dict[str, object] = {
    "t > 100": lambda v: v > 100,
    "t >= 100": lambda v: v >= 100,
    "t < -50": lambda v: v < -50,
    "t <= -50.5": lambda v: v <= -50.5,
    "t = 7": lambda v: v == 7,
    "7 < t": lambda v: v > 7,
    "t IN (1, 2, 250)": lambda v: np.isin(v, [1, 2, 250]),
    "t IS NULL": np.isnan,
    "isnan(t)": np.isnan,
    "NOT isnan(t)": lambda v: ~np.isnan(v),
    "t > 0 AND t < 10": lambda v: (v > 0) & (v < 10),
    "t > 280 AND isnan(t)": lambda v: (v > 280) & np.isnan(v),
    "t > 1e9": lambda v: v > 1e9,
}


def _values() -> np.ndarray:
    """Chunk (i, j) holds values near 100*i + 10*j, a few chunks NaN, one all NaN."""
    rng = np.random.default_rng(5)
    base = np.add.outer(np.arange(SHAPE[0]) // 10 * 100.0, np.arange(SHAPE[1]) // 10 * 10.0)
    out = np.round(base + rng.normal(0, 3, SHAPE) - 60, 1).astype("f4")
    out[0:10, 0:10][rng.random((10, 10)) < 0.2] = np.nan
    out[20:30, 30:40] = np.nan
    out[15, 15] = 7
    return out


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, str]:
    """Two repositories holding the same array: with chunk statistics, and without."""
    values, out = _values(), {}
    for kind, on in (("known", True), ("unknown", False)):
        loc = str(tmp_path_factory.mktemp(kind) / "repo")
        repo = zl.Repo.create(loc, settings={"chunk_statistics": on})
        s = repo.create_session()
        a = zarr.create_array(
            s.store, name="t", shape=SHAPE, chunks=CHUNKS, dtype="f4", fill_value=0,
            dimension_names=["y", "x"],
        )  # fmt: skip
        a[:] = values
        s.commit("t")
        assert repo.chunk_stats("t")["known"].to_pylist() == [on] * 12
        repo.close()
        out[kind] = loc
    return out


@pytest.mark.parametrize("statistics", ["use", "ignore", "unknown"])
def test_cell_rows_equal_numpy_for_every_filter(spark, repos, statistics):
    values = _values()
    loc = repos["unknown" if statistics == "unknown" else "known"]
    option = "ignore" if statistics == "ignore" else "use"
    for text, mask_of in FILTERS.items():
        rows = (
            spark.read.format("zarrlake")
            .option("repo", loc)
            .option("where", text)
            .option("statistics", option)
            .option("array", "t")
            .load()
            .orderBy("y", "x")
            .toPandas()
        )
        mask = mask_of(values)
        y, x = np.nonzero(mask)
        assert rows["y"].tolist() == y.tolist(), text
        assert rows["x"].tolist() == x.tolist(), text
        np.testing.assert_array_equal(rows["t"].to_numpy(), values[mask], err_msg=text)


def test_chunk_layout_keeps_the_chunks_holding_a_match(spark, repos):
    values = _values()
    for statistics in ("use", "ignore"):
        for text in ("t > 100", "isnan(t)", "t = 7", "t > 1e9"):
            mask = FILTERS[text](values)
            want = sorted(
                (i, j)
                for i in range(3)
                for j in range(4)
                if mask[i * 10 : i * 10 + 10, j * 10 : j * 10 + 10].any()
            )
            df = (
                spark.read.format("zarrlake")
                .option("repo", repos["known"])
                .option("layout", "chunks")
                .option("where", text)
                .option("statistics", statistics)
                .option("array", "t")
                .load()
            )
            got = sorted((r["y"], r["x"]) for r in df.select("y", "x").collect())
            assert got == want, (text, statistics)


@pytest.mark.parametrize("statistics", ["use", "ignore"])
def test_statistics_skip_the_chunks_that_cannot_match(spark, repos, caplog, statistics):
    """The read's plan (made in-process here, as Spark's planning worker makes it) holds
    only the chunks whose statistics may match, and logs how many it skipped; the sum of
    the rows Spark gives is numpy's."""
    from zarrlake.spark.source import ZarrLakeSource

    values = _values()
    options = {"repo": repos["known"], "array": "t", "where": "t > 150"}
    options["statistics"] = statistics
    source = ZarrLakeSource(options)
    with caplog.at_level("INFO", logger="zarrlake.spark"):
        parts = source.reader(source.schema()).partitions()
    planned = sum(p.stop - p.start for p in parts)
    may = [
        (values[i * 10 : i * 10 + 10, j * 10 : j * 10 + 10] > 150).any()
        for i in range(3)
        for j in range(4)
    ]
    assert 0 < sum(may) < 12
    lines = [r.getMessage() for r in caplog.records if "chunk statistics skip" in r.getMessage()]
    if statistics == "use":
        assert planned == sum(may)
        assert lines == [lines[0]] and f"skip {12 - sum(may)} of 12 chunks" in lines[0], lines
    else:
        assert planned == 12 and lines == []
    df = spark.read.format("zarrlake").options(**options).load()
    total = df.agg(F.sum("t")).first()[0]
    assert total == pytest.approx(float(values[values > 150].astype("f8").sum()), rel=1e-6)


def test_a_bad_option_names_the_problem(spark, repos):
    with pytest.raises(Exception, match="statistics"):
        spark.read.format("zarrlake").option("repo", repos["known"]).option(
            "where", "t > 1"
        ).option("statistics", "maybe").option("array", "t").load().count()
    with pytest.raises(Exception, match="u"):
        spark.read.format("zarrlake").option("repo", repos["known"]).option(
            "where", "u > 1"
        ).option("array", "t").load().count()


def _planned(loc: str, layout: str | None = None, **extra: str):
    """The reader and partitions of a `where` read planned in this process, as Spark's
    planning worker plans them."""
    from zarrlake.spark.source import ZarrLakeSource

    options = {"repo": loc, "array": "t", **extra}
    if layout is not None:
        options["layout"] = layout
    source = ZarrLakeSource(options)
    reader = source.reader(source.schema())
    return reader, reader.partitions()


def _count_rounds(monkeypatch) -> list[int]:
    """The number of chunks of each zarr round a task's reader makes (appended as read)."""
    from zarrlake.spark import reader as reader_module

    rounds: list[int] = []
    real = reader_module.read_boxes

    def counted(array, boxes):
        rounds.append(len(boxes))
        return real(array, boxes)

    monkeypatch.setattr(reader_module, "read_boxes", counted)
    return rounds


def test_a_task_reads_its_chunks_in_rounds_and_gives_numpy_rows(repos, monkeypatch):
    """A task reads its partition's chunks READ_CHUNKS at a time (one zarr round each,
    here 2 chunks per round) and its rows are numpy's, for the cell and chunk layouts; a
    reader as Spark ships it to tasks (pickled after planning) reads the same."""
    import pickle

    from zarrlake.spark import reader as reader_module

    monkeypatch.setattr(reader_module, "READ_CHUNKS", 2)
    rounds = _count_rounds(monkeypatch)
    values = _values()
    mask = values > 100
    for layout in (None, "chunks"):
        rounds.clear()
        reader, parts = _planned(repos["known"], layout, where="t > 100")
        shipped = pickle.loads(pickle.dumps(reader))
        assert shipped.keep is None and reader.keep is not None  # tasks get their chunks
        batches = [b for p in parts for b in shipped.read(p)]
        planned = sum(p.stop - p.start for p in parts)
        assert len(parts) == 1 and planned >= 3
        assert sum(rounds) == planned and max(rounds) == 2 and len(rounds) == -(-planned // 2)
        if layout is None:
            y = np.concatenate([b.column("y").to_numpy() for b in batches])
            x = np.concatenate([b.column("x").to_numpy() for b in batches])
            got = np.concatenate([b.column("t").to_numpy() for b in batches])
            assert sorted(zip(y.tolist(), x.tolist(), strict=True)) == sorted(
                zip(*np.nonzero(mask), strict=True)
            )
            np.testing.assert_array_equal(got, values[y, x])
        else:
            chunks = sorted(
                (int(row["y"]), int(row["x"])) for b in batches for row in b.to_pylist()
            )
            want = [
                (i, j)
                for i in range(3)
                for j in range(4)
                if mask[i * 10 : i * 10 + 10, j * 10 : j * 10 + 10].any()
            ]
            assert chunks == want


def test_a_round_holds_fewer_chunks_when_they_are_large(repos, monkeypatch):
    """READ_BYTES bounds a round's decoded bytes: chunks of 400 bytes, 1,000 bytes a round,
    2 chunks a round; the rows are still numpy's."""
    from zarrlake.spark import reader as reader_module

    monkeypatch.setattr(reader_module, "READ_BYTES", 1000)
    rounds = _count_rounds(monkeypatch)
    reader, parts = _planned(repos["known"], statistics="ignore", where="t > 100")
    got = sum(float(v) for p in parts for b in reader.read(p) for v in b.column("t").to_numpy())
    values = _values()
    assert got == pytest.approx(float(values[values > 100].astype("f8").sum()), rel=1e-6)
    assert rounds and max(rounds) == 2 and sum(rounds) == 12
