"""Spark reads of a sharded array fetch only the inner chunks a partition needs: partitions
are runs of inner chunks (shard by shard), and one partition's task reads about its inner
chunks' bytes from storage, not its shard's. Counted through a recording object store in
this process (the task's code, as Spark runs it), then end to end on local Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.core.test_ranged_reads import reopened
from tests.shards.conftest import random
from tests.spark.counting import logged_chunks, register_counting
from zarrlake.spark.arrays import ArrayInfo, open_array
from zarrlake.spark.reader import ZarrLakeReader

SHAPE, INNER, SHARD = (4, 65536), (1, 16384), (4, 65536)  # one shard of 16 inner chunks
INNER_BYTES = 16384 * 4  # 64 KiB of float32, uncompressed
SHARD_BYTES = 16 * INNER_BYTES


@pytest.fixture
def one_shard(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A repository holding array `a`: one shard written whole (stored as one object whose
    inner chunks are ranges of it, with a block table)."""
    root = tmp_path / "repo"
    repo = zl.Repo.create(root)
    values = random(SHAPE)
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=SHAPE, chunks=INNER, shards=SHARD, dtype="f4",
        compressors=None, dimension_names=("y", "x"),
    )  # fmt: skip
    arr[:] = values
    s.commit("one shard")
    return root, values


def planned(session: zl.Session) -> ZarrLakeReader:
    """The reader Spark plans for array `a`, one inner chunk per partition."""
    info = ArrayInfo.of(open_array(session, "a", ref="main"), "a")
    return ZarrLakeReader(session, info, partition_rows=INNER[0] * INNER[1])


def test_a_partition_of_one_inner_chunk_reads_about_one_inner_chunk(
    one_shard: tuple[Path, np.ndarray],
) -> None:
    root, values = one_shard
    repo, rec = reopened(zl.Repo.open(root))
    reader = planned(repo.readonly_session())
    parts = reader.partitions()
    assert len(parts) == 16  # one per inner chunk, not one per shard
    rec.reads.clear()
    rows = [b for b in reader.read(parts[5])]  # inner chunk (1, 1)
    got = np.concatenate([b.column("a").to_numpy() for b in rows])
    np.testing.assert_array_equal(got, values[1, 16384:32768])
    chunk_bytes = sum(n for _, _, n in rec.of("chunks/"))
    # the blocks (64 KiB each) covering the inner chunk, not the 1 MiB shard
    assert INNER_BYTES <= chunk_bytes <= 2 * INNER_BYTES < SHARD_BYTES
    assert sum(n for _, _, n in rec.of("blocks/")) < INNER_BYTES // 4


def test_partitions_go_shard_by_shard_and_cover_each_cell_once(tmp_path: Path) -> None:
    """Inner chunks of a grid of 2 x 2 shards, in runs of 3: each run within as few shards
    as its size allows, and every cell read exactly once."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    shape = (8, 8)
    arr = zarr.create_array(
        s.store, name="a", shape=shape, chunks=(2, 2), shards=(4, 4), dtype="i8",
        dimension_names=("y", "x"),
    )  # fmt: skip
    arr[:] = np.arange(64).reshape(shape)
    s.commit("2 x 2 shards")
    session = repo.readonly_session()
    info = ArrayInfo.of(open_array(session, "a", ref="main"), "a")
    reader = ZarrLakeReader(session, info, partition_rows=12)
    parts = reader.partitions()
    runs = [[chunk for chunk, _ in reader.boxes(p)] for p in parts]
    order = [c for run in runs for c in run]
    assert order[:4] == [(0, 0), (0, 1), (1, 0), (1, 1)]  # the first shard's inner chunks
    assert sorted(order) == [(i, j) for i in range(4) for j in range(4)]
    assert [len({(i // 2, j // 2) for i, j in run}) for run in runs] == [1, 2, 2, 1, 1, 1]
    cells = sorted(v for p in parts for b in reader.read(p) for v in b.column("a").to_pylist())
    assert cells == list(range(64))


def test_a_map_regions_session_reads_one_inner_chunk_by_range(
    one_shard: tuple[Path, np.ndarray],
) -> None:
    """What a map_regions task's function does: read through a writable session's store."""
    root, values = one_shard
    repo, rec = reopened(zl.Repo.open(root))
    session = repo.create_session()
    arr = zarr.open_array(session.store, path="a", mode="r")
    rec.reads.clear()
    np.testing.assert_array_equal(arr[2, 0:16384], values[2, 0:16384])
    assert INNER_BYTES <= sum(n for _, _, n in rec.of("chunks/")) <= 2 * INNER_BYTES
    session.abandon()


def test_spark_reads_inner_chunk_partitions(spark, tmp_path: Path) -> None:
    """On local Spark: one partition per inner chunk, each inner chunk read once, the cells
    exact; a region (isel) of one inner chunk's cells reads only that inner chunk."""
    shape = (4, 256)
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=shape, chunks=(1, 64), shards=shape, dtype="i8",
        dimension_names=("y", "x"),
    )  # fmt: skip
    arr[:] = np.arange(1024).reshape(shape)
    s.commit("one shard of 16 inner chunks")
    register_counting(spark)
    log = tmp_path / "chunks.log"

    def reader():
        return (
            spark.read.format("zarrlake_counting").option("repo", str(tmp_path / "repo"))
            .option("array", "a").option("chunk_log", str(log)).option("partition_rows", "64")
        )  # fmt: skip

    df = reader().load()
    assert df.rdd.getNumPartitions() == 16
    table = df.toArrow()
    cells = sorted(zip(table.column("y").to_pylist(), table.column("x").to_pylist(), strict=True))
    assert cells == [(y, x) for y in range(4) for x in range(256)]
    assert sorted(table.column("a").to_pylist()) == list(range(1024))
    assert sorted(logged_chunks(log)) == [(y, x) for y in range(4) for x in range(4)]
    rows = reader().load().filter("y = 3 and x >= 192 and x < 196").collect()
    assert sorted(r.a for r in rows) == [960, 961, 962, 963]  # Spark filters a full read
    log.unlink()
    rows = reader().option("isel", "y=3,x=192:196").load().collect()
    assert sorted(r.a for r in rows) == [960, 961, 962, 963]
    assert logged_chunks(log) == [(3, 3)]
