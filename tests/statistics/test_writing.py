"""Statistics taken at the write are those of the values written (not of the writer's
array as it is by the flush or the commit), of the last write of a key, for every dtype
and fill value one batch mixes, across flushes; with statistics off there are none. The
answers come from numpy on the values written."""

from __future__ import annotations

import numpy as np
import zarr

import zarrlake as zl


def _expected(values: np.ndarray, fill: object) -> dict[str, object]:
    flat = values.reshape(-1)
    nan = np.isnan(flat) if flat.dtype.kind == "f" else np.zeros(flat.shape, bool)
    real = flat[~nan]
    fills = nan if isinstance(fill, float) and np.isnan(fill) else flat == fill
    return {
        "count": flat.size,
        "nan_count": int(nan.sum()),
        "fill_count": int(fills.sum()),
        "min": real.min().item() if real.size else None,
        "max": real.max().item() if real.size else None,
        "sum": float(real.astype("f8").sum()),
    }


def _assert_rows(table, arrays: dict[int, np.ndarray], fill: object) -> None:
    """Each row's statistics equal numpy's on its values (the sum to float64 rounding)."""
    for row, values in arrays.items():
        want = _expected(values, fill)
        assert table["known"][row].as_py(), row
        for col in ("count", "nan_count", "fill_count", "min", "max"):
            assert table[col][row].as_py() == want[col], (row, col)
        assert abs(table["sum"][row].as_py() - want["sum"]) <= 1e-9 * (1 + abs(want["sum"]))


def test_statistics_are_of_the_values_written_though_the_writer_reuses_its_array(tmp_path):
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    a = zarr.create_array(s.store, name="a", shape=(6, 8), chunks=(1, 8), dtype="f4", fill_value=0)
    buf = np.arange(48, dtype="f4").reshape(6, 8)
    written = buf.copy()
    a[...] = buf
    buf[...] = -5  # reused before the flush: the statistics stay those of what was written
    buf[0, 0] = np.nan
    s.commit("rows")
    _assert_rows(repo.chunk_stats("a"), {k: written[k] for k in range(6)}, 0.0)


def test_a_batch_of_many_dtypes_fills_and_overwrites_gets_each_chunks_own(tmp_path):
    rng = np.random.default_rng(5)
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    specs = {"f": ("f4", float("nan")), "d": ("f8", 1.5), "i": ("i2", -1), "b": ("u1", 7)}
    arrays, last = {}, {}
    for name, (dtype, fill) in specs.items():
        arrays[name] = zarr.create_array(
            s.store, name=name, shape=(5, 16), chunks=(1, 16), dtype=dtype, fill_value=fill
        )
    for round_ in range(3):  # the same keys written again in the same batch
        for name, (dtype, fill) in specs.items():
            if dtype[0] == "f":
                v = rng.normal(0, 50, (5, 16)).astype(dtype)
                v[rng.random(v.shape) < 0.2] = np.nan
            else:
                v = rng.integers(0, 100, (5, 16)).astype(dtype)
            v[rng.random(v.shape) < 0.2] = fill
            v[round_] = rng.normal(0, 1, 16).astype(dtype) if dtype[0] == "f" else 3
            arrays[name][...] = v
            last[name] = v
        if round_ == 1:
            s.flush()  # some batches flushed, the last one at the commit
    s.commit("mixed")
    for name, (_, fill) in specs.items():
        table = repo.chunk_stats(name)
        assert table.num_rows == 5
        _assert_rows(table, {row: last[name][row] for row in range(5)}, fill)


def test_statistics_off_stores_none(tmp_path):
    repo = zl.Repo.create(tmp_path / "r", settings={"chunk_statistics": False})
    s = repo.create_session()
    a = zarr.create_array(s.store, name="a", shape=(3, 4), chunks=(1, 4), dtype="f4", fill_value=0)
    a[...] = np.ones((3, 4), "f4")
    s.commit("off")
    assert repo.chunk_stats("a")["known"].to_pylist() == [False, False, False]
