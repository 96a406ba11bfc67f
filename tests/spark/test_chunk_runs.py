"""The Spark tasks' code, run in this process: the chunk layout (ChunkSink) and the cell
layout (`write_chunks`) write neighbouring whole small chunks of an unsharded array as
regions, one zarr write each (`spark.runs`), and every chunk reads back as numpy says:
rows out of order, gaps, edge chunks, a chunk all fill value (zarr stores none), a chunk
given again in a later batch, with statistics on and off."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.spark import runs
from zarrlake.spark.arrays import ArrayInfo
from zarrlake.spark.chunks import write_chunks
from zarrlake.spark.layout import ChunkSink, chunk_batch

SHAPE, CHUNKS = (70, 3, 16), (1, 1, 16)  # 70 x 3 chunks of 16 float32; no edge along 0
EDGE_SHAPE, EDGE_CHUNKS = (30, 10), (4, 4)  # edge chunks along both dimensions


def _rows(values: np.ndarray, chunks: tuple[int, ...], ats: list[tuple[int, ...]]) -> list:
    return [
        (at, values[tuple(slice(k * c, (k + 1) * c) for k, c in zip(at, chunks, strict=True))])
        for at in ats
    ]


class _Writes:
    """Counts the zarr array writes a sink makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = zarr.Array.__setitem__

        def counted(array: zarr.Array, selection: object, value: object) -> None:
            self.calls += 1
            real(array, selection, value)

        monkeypatch.setattr(zarr.Array, "__setitem__", counted)


def _sink(tmp_path, shape, chunks, batches, statistics: bool) -> tuple[zl.Repo, np.ndarray]:
    """Write `batches` (lists of (chunk coordinates, block)) through one ChunkSink and
    commit; returns the repository and what numpy says the array holds."""
    repo = zl.Repo.create(tmp_path / "r", settings={"chunk_statistics": statistics})
    s = repo.create_session()
    array = zarr.create_array(
        s.store,
        name="a",
        shape=shape,
        chunks=chunks,
        dtype="f4",
        fill_value=0.0,
        dimension_names=[f"d{i}" for i in range(len(shape))],
    )
    info = ArrayInfo.of(array, "a")
    expected = np.zeros(shape, "f4")
    sink = ChunkSink(array, info)
    try:
        for rows in batches:
            sink.add(chunk_batch(info, rows))
            for at, block in rows:
                expected[
                    tuple(
                        slice(k * c, k * c + n)
                        for k, c, n in zip(at, chunks, block.shape, strict=True)
                    )
                ] = block
    finally:
        sink.stop()
    s.commit("chunks")
    return repo, expected


@pytest.mark.parametrize("statistics", [True, False], ids=["stats", "no-stats"])
def test_neighbouring_chunks_are_written_as_regions(tmp_path, monkeypatch, statistics):
    rng = np.random.default_rng(3)
    values = rng.random(SHAPE, dtype=np.float32)
    values[5, 1] = 0.0  # a chunk all fill value: zarr stores nothing for it
    values[9, 2, 3] = np.nan
    ats = [(k, j, 0) for k in range(70) for j in range(3) if not (j == 2 and 40 <= k < 45)]
    rng.shuffle(ats)  # (rows out of order; a gap in one column)
    again = rng.random(SHAPE, dtype=np.float32)
    writes = _Writes(monkeypatch)
    repo, expected = _sink(
        tmp_path,
        SHAPE,
        CHUNKS,
        [_rows(again, CHUNKS, ats[:20]), _rows(values, CHUNKS, ats)],
        statistics,
    )
    # 3 columns of 70 chunks (one with a gap: 40 and 25) in the second batch: 4 regions;
    # the first batch's 20 scattered chunks are written alone (no run of 8)
    assert writes.calls <= 20 + 4
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[...]
    np.testing.assert_array_equal(got, expected)
    assert not repo.readonly_session("main").exists("a/c/5/1/0")  # all fill value
    if statistics:
        table = repo.chunk_stats("a").to_pydict()
        at = {tuple(table[d][i] for d in ("d0", "d1", "d2")): i for i in range(len(table["min"]))}
        for k, j in [(0, 0), (9, 2), (44, 1), (69, 2)]:
            i = at[(k, j, 0)]
            block = expected[k, j]
            assert table["known"][i]
            assert table["nan_count"][i] == int(np.isnan(block).sum())
            assert table["min"][i] == pytest.approx(float(np.nanmin(block)))
            assert table["sum"][i] == pytest.approx(float(np.nansum(block.astype("f8"))), rel=1e-6)


def test_edge_chunks_are_written_alone(tmp_path, monkeypatch):
    """Edge chunks (clipped by the array's end) are never part of a region, and fewer
    than 8 neighbours make no run."""
    values = np.random.default_rng(4).random(EDGE_SHAPE, dtype=np.float32)
    ats = list(np.ndindex(8, 3))  # (30, 10) in (4, 4): row 7 and column 2 are edge chunks
    writes = _Writes(monkeypatch)
    repo, expected = _sink(
        tmp_path, EDGE_SHAPE, EDGE_CHUNKS, [_rows(values, EDGE_CHUNKS, ats)], True
    )
    # columns 0 and 1 hold 7 whole chunks each (fewer than a run's 8): all 24 alone
    assert writes.calls == 24
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[...]
    np.testing.assert_array_equal(got, expected)


def test_large_chunks_are_written_alone(tmp_path, monkeypatch):
    """Chunks of 16,384 values or more (their statistics are taken one by one, and a
    write costs more than its call) are written one by one, as before."""
    shape, chunks = (12, 16_384), (1, 16_384)
    values = np.random.default_rng(7).random(shape, dtype=np.float32)
    writes = _Writes(monkeypatch)
    repo, expected = _sink(
        tmp_path, shape, chunks, [_rows(values, chunks, [(k, 0) for k in range(12)])], True
    )
    assert writes.calls == 12
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[...]
    np.testing.assert_array_equal(got, expected)


def test_a_run_holds_run_bytes_at_most(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "RUN_BYTES", 10 * 16 * 4)  # ten chunks of 16 float32
    values = np.random.default_rng(5).random(SHAPE, dtype=np.float32)
    writes = _Writes(monkeypatch)
    ats = [(k, 0, 0) for k in range(70)]
    repo, expected = _sink(tmp_path, SHAPE, CHUNKS, [_rows(values, CHUNKS, ats)], True)
    assert writes.calls == 7
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[...]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("statistics", [True, False], ids=["stats", "no-stats"])
def test_the_cell_layout_writes_runs_as_regions(tmp_path, monkeypatch, statistics):
    """Cells of whole chunks (two columns of 70 and 30 chunks, shuffled rows), one chunk
    half covered (its other cells keep what was stored) and one edge-free lone chunk."""
    rng = np.random.default_rng(6)
    repo = zl.Repo.create(tmp_path / "r", settings={"chunk_statistics": statistics})
    s = repo.create_session()
    array = zarr.create_array(
        s.store, name="a", shape=(70, 2, 16), chunks=(1, 1, 16), dtype="f4", fill_value=0.0,
        dimension_names=["t", "y", "x"],
    )  # fmt: skip
    stored = rng.random((70, 2, 16), dtype=np.float32)
    array[...] = stored
    s.commit("stored")
    s = repo.create_session()
    array = zarr.open_array(s.store, path="a")
    info = ArrayInfo.of(array, "a")
    new = rng.random((70, 2, 16), dtype=np.float32)
    cells = np.zeros((70, 2, 16), bool)
    cells[:, 0] = True  # a column of 70 whole chunks
    cells[10:40, 1] = True  # 30 more
    cells[50, 1, :8] = True  # half a chunk
    index = [v.astype(np.int64) for v in np.nonzero(cells)]
    order = rng.permutation(len(index[0]))
    index = [v[order] for v in index]
    values = new[tuple(index)]
    writes = _Writes(monkeypatch)
    written = write_chunks(array, info, index, values, replace=False)
    assert len(written) == 70 + 30 + 1
    assert writes.calls == 2 + 1  # two regions, the half-covered chunk alone
    s.commit("cells")
    expected = np.where(cells, new, stored)
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[...]
    np.testing.assert_array_equal(got, expected)
    if statistics:
        table = repo.chunk_stats("a").to_pydict()
        for i in range(len(table["min"])):
            block = expected[table["t"][i], table["y"][i]]
            assert table["known"][i]
            assert table["min"][i] == pytest.approx(float(block.min()))
            assert table["max"][i] == pytest.approx(float(block.max()))
