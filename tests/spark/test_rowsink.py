"""RowSink (the cell-row writer inside a Spark task) without Spark: rows in C order, rows out
of order, ragged batch boundaries, edge chunks, replace semantics."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
import zarr

import zarrlake as zl
from zarrlake.spark.arrays import ArrayInfo
from zarrlake.spark.rowsink import RowSink

SHAPE, CHUNKS = (10, 7), (3, 5)


def _session(tmp_path):
    repo = zl.Repo.create(str(tmp_path / "repo"))
    s = repo.create_session("main")
    a = zarr.create_array(
        s.store, name="v", shape=SHAPE, chunks=CHUNKS, dtype="f8", dimension_names=["y", "x"]
    )
    return s, a, ArrayInfo.of(a, "v")


def _batches(lin: np.ndarray, values: np.ndarray, cuts: list[int]):
    y, x = np.unravel_index(lin, SHAPE)
    bounds = [0, *cuts, len(lin)]
    for lo, hi in itertools.pairwise(bounds):
        yield pa.RecordBatch.from_arrays(
            [pa.array(y[lo:hi]), pa.array(x[lo:hi]), pa.array(values[lo:hi])],
            names=["y", "x", "v"],
        )


@pytest.mark.parametrize(
    ("rows", "cuts"),
    [
        (np.arange(70), [1, 20, 21, 50]),  # C order, ragged batches, edge slab at the end
        (np.arange(4, 66), [30]),  # unaligned head and tail
        (np.random.default_rng(1).permutation(70), [35]),  # out of order
        (np.concatenate([np.arange(21, 70), np.arange(0, 21)]), [10, 49]),  # two runs
    ],
)
def test_rows_land_where_they_belong(tmp_path, rows, cuts):
    _s, a, info = _session(tmp_path)
    a[:] = -1.0
    values = rows * 0.5
    sink = RowSink({"v": a}, [info], replace=False)
    for batch in _batches(rows, values, cuts):
        sink.add(batch)
    sink.close()
    expected = np.full(70, -1.0)
    expected[rows] = values
    np.testing.assert_array_equal(a[:], expected.reshape(SHAPE))
    touched = {
        tuple(int(i) // c for i, c in zip(ix, CHUNKS, strict=True))
        for ix in zip(*np.unravel_index(rows, SHAPE), strict=True)
    }
    assert sink.written["v"] == {info.chunk_key(a, c) for c in touched}
    assert sink.rows == len(rows)


def test_replace_fills_uncovered_cells_but_keeps_rows_of_this_task(tmp_path):
    _s, a, info = _session(tmp_path)
    a[:] = -1.0
    rows = np.concatenate([np.arange(0, 21), [22, 23]])  # a whole slab, then 2 stray cells
    sink = RowSink({"v": a}, [info], replace=True)
    for batch in _batches(rows, rows * 1.0, [21]):
        sink.add(batch)
    sink.add(next(_batches(np.array([1]), np.array([99.0]), [])))  # a chunk written before
    sink.close()
    got = a[:].reshape(-1)
    assert got[1] == 99.0 and got[0] == 0.0 and got[20] == 20.0  # slab kept
    assert got[22] == 22.0 and got[21] == 0.0  # fill value in the stray rows' chunk
    assert got[63] == -1.0  # chunks the task did not touch keep their values


def test_out_of_bounds_names_the_column(tmp_path):
    _s, a, info = _session(tmp_path)
    sink = RowSink({"v": a}, [info], replace=False)
    bad = pa.RecordBatch.from_arrays(
        [pa.array([0, 12]), pa.array([0, 0]), pa.array([1.0, 2.0])], names=["y", "x", "v"]
    )
    with pytest.raises(zl.errors.InvalidInputError, match="column 'y' has index 12"):
        sink.add(bad)
