"""Computing statistics: one chunk's (the writer's path, a few numpy calls) equal the
vectorised rows' and numpy's, with NaN, fill values, all-NaN chunks, integer, unsigned,
boolean and float dtypes."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from zarrlake.format import statistics as sf
from zarrlake.vc.statistics import SUM_BLOCKED, of_blocks, of_chunk


def _chunks() -> list[tuple[np.ndarray, object]]:
    rng = np.random.default_rng(11)
    out: list[tuple[np.ndarray, object]] = []
    for dtype in ("f4", "f8", "f2"):
        v = rng.normal(0, 100, 300).astype(dtype)
        v[::7] = 0
        out += [(v, 0.0), (v, float("nan")), (v, 5.5)]
        w = v.copy()
        w[rng.random(300) < 0.2] = np.nan
        out += [(w, 0.0), (w, float("nan")), (np.full(50, np.nan, dtype), float("nan"))]
        out.append((np.full(50, np.nan, dtype), 1.0))
    for dtype in ("i1", "i4", "i8", "u1", "u2", "u8"):
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True)
        v[:10] = 3
        out += [(v, 3), (v, 0), (v.reshape(10, 20), None)]
    b = rng.random(100) < 0.4
    out += [(b, False), (b, True), (np.ones(9, bool), False), (np.zeros(9, bool), True)]
    return out


@pytest.mark.parametrize("case", range(len(_chunks())))
def test_one_chunk_equals_the_vectorised_row_and_numpy(case):
    values, fill = _chunks()[case]
    got = of_chunk(values, fill)
    row = sf.at(of_blocks(values.reshape(1, -1), fill), 0)
    assert got == row
    assert got is not None
    assert type(got) is sf.ChunkStats and got == sf.ChunkStats(*got)  # (made as a tuple)
    assert pickle.loads(pickle.dumps(got)) == got and got.known
    flat = values.reshape(-1)
    nan = np.isnan(flat) if flat.dtype.kind == "f" else np.zeros(flat.shape, bool)
    real = flat[~nan]
    assert (got.count, got.nan) == (flat.size, int(nan.sum()))
    if fill is not None:
        same = nan if isinstance(fill, float) and np.isnan(fill) else flat == fill
        assert got.fill == int(same.sum())
    want_lo = real.min().item() if real.size else None
    want_hi = real.max().item() if real.size else None
    assert (got.low, got.high) == (want_lo, want_hi)
    assert got.sum == pytest.approx(float(real.astype("f8").sum()), rel=1e-12)


def test_values_of_no_numeric_dtype_have_none():
    assert of_chunk(np.array(["a", "b"]), None) is None
    assert of_chunk(np.zeros(0, "f4"), 0.0) is None


@pytest.mark.parametrize(
    ("dtype", "endian"), [("<f4", "little"), (">f8", "big"), ("<i2", "little")]
)
def test_raw_bytes_written_without_a_compressor_get_numpys_statistics(tmp_path, dtype, endian):
    """write_many of chunk bytes (no values handed): the bytes are read as the array's
    dtype in the `bytes` codec's byte order; a chunk of the wrong length is unknown."""
    import zarr
    from zarr.codecs import BytesCodec

    import zarrlake as zl

    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    zarr.create_array(
        s.store, name="a", shape=(40,), chunks=(8,), dtype=dtype[1:], compressors=None,
        serializer=BytesCodec(endian=endian), fill_value=0,
    )  # fmt: skip
    s.commit("array")
    values = np.random.default_rng(2).normal(0, 50, 40).astype(dtype)
    values[8:12] = 0
    if values.dtype.kind == "f":
        values[16:18] = np.nan
    s = repo.create_session()
    s.write_many([(f"a/c/{k}", values[8 * k : 8 * k + 8].tobytes()) for k in range(4)])
    s.commit("raw")
    table = repo.chunk_stats("a")
    for k in range(4):
        v = values[8 * k : 8 * k + 8]
        real = v[~np.isnan(v)] if v.dtype.kind == "f" else v
        assert table["known"][k].as_py()
        assert table["min"][k].as_py() == real.min().item()
        assert table["max"][k].as_py() == real.max().item()
        assert table["fill_count"][k].as_py() == int((v == 0).sum())
        assert table["sum"][k].as_py() == pytest.approx(float(real.astype("f8").sum()))
    assert table["known"][4].as_py() and table["fill_count"][4].as_py() == 8  # absent: fill


@pytest.mark.parametrize("dtype", ["f4", "f8", "i2", "u8"])
@pytest.mark.parametrize("size", [SUM_BLOCKED - 1, SUM_BLOCKED, 512 * 512])
def test_a_large_chunks_sum_is_float64_exact_to_rounding(dtype, size):
    """Sums of large chunks (taken in blocks by einsum from SUM_BLOCKED values) and of
    small ones (pairwise) agree with the correctly rounded sum (math.fsum) to float64
    rounding, with and without NaN; one chunk's equal the vectorised rows'."""
    rng = np.random.default_rng(size)
    if dtype[0] == "f":
        values = rng.normal(280, 30, size).astype(dtype)
    else:
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
    cases = [values]
    if dtype[0] == "f":
        holes = values.copy()
        holes[rng.random(size) < 0.01] = np.nan
        cases.append(holes)
    for v in cases:
        got = of_chunk(v, 0)
        assert got is not None
        real = v[~np.isnan(v)] if v.dtype.kind == "f" else v
        exact = math.fsum(real.astype("f8").tolist())
        scale = math.fsum(np.abs(real.astype("f8")).tolist())
        assert abs(got.sum - exact) <= 1e-13 * scale
        rows = of_blocks(np.stack([v, v[::-1]]), 0)
        assert sf.at(rows, 0) == got
        assert sf.at(rows, 1).sum == pytest.approx(got.sum, rel=1e-12)


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
def test_nan_are_zeroed_on_the_bits_as_numpy_where_does(dtype):
    """The sum ignoring NaN is taken over a copy with 0 in place of each NaN, made on the
    bits (no branch per element): the same bits as `np.where`, for NaN of either sign and
    any payload, infinities, -0.0 and subnormals."""
    from zarrlake.vc.statistics import _zero_nan

    rng = np.random.default_rng(5)
    info = np.finfo(dtype)
    v = rng.normal(0, 1e3, 4096).astype(dtype)
    v[rng.random(4096) < 0.3] = np.nan
    bits = v.view(f"u{v.itemsize}")
    bits[:8] |= np.array(1, bits.dtype) << (8 * v.itemsize - 1)  # negative NaN where NaN
    v[8:16] = [np.inf, -np.inf, -0.0, 0.0, info.tiny / 4, info.max, info.min, -info.tiny / 4]
    bits[16] = bits.dtype.type(np.array(np.nan, dtype).view(bits.dtype) | 1)  # a payload
    gaps = np.isnan(v)
    got = _zero_nan(v, gaps)
    want = np.where(gaps, 0, v).astype(dtype)
    assert got.dtype == v.dtype
    assert np.array_equal(got.view(bits.dtype), want.view(bits.dtype))
    assert v[16] != v[16]  # (the input is left as it was)


@pytest.mark.parametrize("share", [0.001, 0.3, 0.97])
def test_a_large_chunk_with_scattered_nan_gets_numpys_statistics(share):
    """1 MiB of float32 with NaN scattered (a land mask): count, min, max and the sum
    ignoring NaN as numpy gives them, the sum to float64 rounding of math.fsum's."""
    rng = np.random.default_rng(int(share * 1000))
    v = rng.normal(280, 30, (512, 512)).astype("f4")
    v[rng.random(v.shape) < share] = np.nan
    v[0, 0] = 280.0
    got = of_chunk(v, 280.0)
    assert got is not None
    real = v[~np.isnan(v)].astype("f8")
    assert (got.count, got.nan, got.fill) == (v.size, int(np.isnan(v).sum()), int((v == 280).sum()))
    assert (got.low, got.high) == (float(np.nanmin(v)), float(np.nanmax(v)))
    exact = math.fsum(real.tolist())
    assert abs(got.sum - exact) <= 1e-13 * math.fsum(np.abs(real).tolist())
    assert sf.at(of_blocks(v.reshape(1, -1), 280.0), 0) == got
