"""The statistics of a write's whole small chunks, taken together (`of_tiles`, one reduction
per statistic over all the blocks) equal numpy's on each chunk's values, bit for bit those
`of_chunk` takes of one chunk: NaN, fill values, integer, unsigned, boolean and float dtypes,
1-, 2- and 3-dimensional grids. Through zarr, a write mixing whole chunks, edge chunks and
chunks merged with what they held gets numpy's statistics for every chunk, the whole ones
taken together (counted), the others one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.statistics.model import Spec, assert_matches
from tests.statistics.model import random_values as _values
from zarrlake.vc import statistics as vs
from zarrlake.vc.statistics import as_stats, of_chunk, of_tiles

CASES = [
    ("f4", (64, 32), (4, 8), 0.0),
    ("f4", (64, 32), (1, 32), float("nan")),
    ("f8", (12, 10, 9), (2, 5, 3), 1.5),
    ("f2", (40,), (5,), 0.0),
    ("i2", (30, 20), (3, 4), -1),
    ("i8", (30, 20), (3, 4), 0),
    ("u1", (30, 20), (3, 4), 7),
    ("u8", (16, 8), (2, 8), None),
    ("bool", (30, 20), (3, 4), False),
    ("bool", (30, 20), (3, 4), True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[2]))}")
def test_blocks_taken_together_equal_each_blocks_own_and_numpy(case):
    dtype, shape, chunk, fill = case
    values = _values(dtype, shape, fill, seed=len(shape) + 3)
    if values.dtype.kind == "f":
        values[: chunk[0]] = np.nan  # blocks holding only NaN
    grid = [s // c for s, c in zip(shape, chunk, strict=True)]
    starts = np.array([np.multiply(k, chunk) for k in np.ndindex(*grid)], np.int64)
    starts = starts[np.random.default_rng(1).permutation(len(starts))]  # in any order
    got = of_tiles(values, chunk, starts, fill)
    assert got is not None and len(got) == len(starts)
    for fields, start in zip(got, starts.tolist(), strict=True):
        assert type(fields) is tuple  # (plain: the garbage collector untracks it)
        stats = as_stats(fields)
        block = values[tuple(slice(a, a + c) for a, c in zip(start, chunk, strict=True))]
        assert stats == of_chunk(block, fill)  # the same bits: min, max and sum included
        flat = block.reshape(-1)
        nan = np.isnan(flat) if flat.dtype.kind == "f" else np.zeros(flat.size, bool)
        real = flat[~nan]
        assert (stats.count, stats.nan) == (flat.size, int(nan.sum()))
        if fill is not None:
            same = nan if isinstance(fill, float) and math.isnan(fill) else flat == fill
            assert stats.fill == int(same.sum())
        assert stats.low == (real.min().item() if real.size else None)
        assert stats.high == (real.max().item() if real.size else None)
        assert stats.sum == pytest.approx(float(real.astype("f8").sum()), rel=1e-12)


def test_many_blocks_are_taken_a_slab_at_a_time(monkeypatch):
    monkeypatch.setattr(vs, "TILES_SLAB", 1000)  # 4 rows of 256 per slab: 13 slabs
    values = _values("f4", (50, 256), 0.0, seed=9)
    starts = np.stack([np.arange(50), np.zeros(50, np.int64)], axis=1)
    got = of_tiles(values, (1, 256), starts, 0.0)
    assert got == [of_chunk(values[k : k + 1], 0.0) for k in range(50)]


def test_blocks_off_one_grid_or_outside_the_values_are_left_to_each_chunk():
    values = np.zeros((16, 16), "f4")
    assert of_tiles(values, (4, 4), np.array([[0, 0], [2, 4]]), 0.0) is None  # off the grid
    assert of_tiles(values, (4, 4), np.array([[0, 0], [12, 12]]), 0.0) is None  # sparse
    assert of_tiles(values, (4, 4), np.array([[0, 0], [14, 0]]), 0.0) is None  # outside
    assert of_tiles(values.astype("U1"), (4, 4), np.array([[0, 0]]), "") is None  # no kind


class _Count:
    """Counts the chunks whose statistics are taken one by one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.alone = 0
        real = vs.of_chunk

        def counted(values: np.ndarray, fill: object):
            self.alone += 1
            return real(values, fill)

        monkeypatch.setattr(vs, "of_chunk", counted)


WRITES = [
    # (spec, region written): whole chunks only; an unaligned region (edge chunks of the
    # region merged with what they held); the array's edge chunks (fill beyond its shape)
    (Spec("a", (64, 32), (4, 8), "float32", float("nan")), (slice(0, 64), slice(0, 32))),
    (Spec("a", (64, 32), (4, 8), "float32", 0.0), (slice(3, 61), slice(5, 30))),
    (Spec("a", (30, 22), (4, 8), "int16", -1), (slice(0, 30), slice(0, 22))),
    (Spec("a", (30, 22), (4, 8), "uint8", 7), (slice(2, 30), slice(0, 22))),
    (Spec("a", (12, 10, 9), (2, 5, 3), "float64", 1.5), (slice(0, 12), slice(0, 10), slice(0, 9))),
    (Spec("a", (40, 256), (1, 256), "float32", 0.0), (slice(0, 40), slice(0, 256))),
    (Spec("a", (30, 20), (3, 4), "bool", False), (slice(0, 30), slice(0, 20))),
]


def _expected_alone(spec: Spec, box: tuple[slice, ...]) -> int:
    """Chunks a write of `box` does not cover whole, or covers only past the array's edge."""
    alone = 0
    for coords in np.ndindex(*spec.grid):
        lo = [k * c for k, c in zip(coords, spec.chunks, strict=True)]
        hi = [(k + 1) * c for k, c in zip(coords, spec.chunks, strict=True)]
        if not all(b.start < h and lo_ < b.stop for b, lo_, h in zip(box, lo, hi, strict=True)):
            continue  # not written
        whole = all(b.start <= a and h <= b.stop for b, a, h in zip(box, lo, hi, strict=True))
        alone += not whole
    return alone


@pytest.mark.parametrize("case", range(len(WRITES)))
def test_a_writes_whole_chunks_get_numpys_statistics_taken_together(tmp_path, monkeypatch, case):
    spec, box = WRITES[case]
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    spec.create(s.store)
    base = _values(spec.dtype, spec.shape, spec.fill, seed=case)
    arr = zarr.open_array(s.store, path=spec.name)
    arr[...] = base  # the chunks the region's edges merge with
    s.commit("base")
    s = repo.create_session()
    arr = zarr.open_array(s.store, path=spec.name)
    new = _values(spec.dtype, spec.shape, spec.fill, seed=100 + case)
    count = _Count(monkeypatch)
    arr[box] = new[box]
    s.commit("region")
    want = base.copy()
    want[box] = new[box]
    assert_matches(repo.chunk_stats(spec.name), spec, want, f"case {case}")
    assert count.alone == _expected_alone(spec, box)


def test_writes_from_views_of_other_layouts_get_each_chunks_statistics(tmp_path, monkeypatch):
    spec = Spec("a", (32, 24), (4, 6), "float32", 0.0)
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    spec.create(s.store)
    arr = zarr.open_array(s.store, path=spec.name)
    count = _Count(monkeypatch)
    transposed = np.asfortranarray(_values("f4", spec.shape, 0.0, seed=3))
    arr[...] = transposed  # Fortran order: the chunks' views have other strides
    reversed_ = _values("f4", (32, 48), 0.0, seed=4)[::-1, ::2]  # negative and wide strides
    arr[...] = reversed_
    s.commit("views")
    assert_matches(repo.chunk_stats(spec.name), spec, reversed_)
    assert count.alone == 0


def test_with_statistics_off_nothing_is_taken(tmp_path, monkeypatch):
    taken = []
    real = vs.of_tiles
    monkeypatch.setattr(
        "zarrlake.zarr_store.pipeline.of_tiles", lambda *a: taken.append(1) or real(*a)
    )
    repo = zl.Repo.create(tmp_path / "r", settings={"chunk_statistics": False})
    s = repo.create_session()
    a = zarr.create_array(s.store, name="a", shape=(64, 8), chunks=(1, 8), dtype="f4")
    a[...] = np.ones((64, 8), "f4")
    s.commit("off")
    assert taken == []
    assert repo.chunk_stats("a")["known"].to_pylist() == [False] * 64


SHARDED = [
    (
        Spec("s", (32, 48), (2, 4), "float32", float("nan"), shards=(8, 16)),
        (slice(0, 32), slice(0, 48)),
    ),
    (Spec("s", (30, 45), (2, 4), "float64", 0.0, shards=(8, 16)), (slice(3, 30), slice(1, 45))),
    (Spec("s", (30, 45), (2, 4), "int32", -1, shards=(8, 16)), (slice(0, 30), slice(0, 45))),
]


def _expected_alone_sharded(spec: Spec, box: tuple[slice, ...]) -> int:
    """Inner chunks of shards a write of `box` touches taken one by one: those it does not
    cover whole (or covers only past the array's edge), and all those of a shard with fewer
    than TOGETHER_MIN whole ones."""
    from zarrlake.zarr_store.pipeline import TOGETHER_MIN

    assert spec.shards is not None
    per = [s // c for s, c in zip(spec.shards, spec.chunks, strict=True)]
    shards = [-(-n // s) for n, s in zip(spec.shape, spec.shards, strict=True)]
    alone = 0
    for shard in np.ndindex(*shards):
        whole = cut = 0
        for local in np.ndindex(*per):
            coords = [s * p + k for s, p, k in zip(shard, per, local, strict=True)]
            lo = [k * c for k, c in zip(coords, spec.chunks, strict=True)]
            hi = [(k + 1) * c for k, c in zip(coords, spec.chunks, strict=True)]
            if not all(
                b.start < h and a < min(b.stop, n)
                for b, a, h, n in zip(box, lo, hi, spec.shape, strict=True)
            ):
                continue
            if all(b.start <= a and h <= b.stop for b, a, h in zip(box, lo, hi, strict=True)):
                whole += 1
            else:
                cut += 1
        alone += cut + (whole if whole < TOGETHER_MIN else 0)
    return alone


@pytest.mark.parametrize("case", range(len(SHARDED)))
def test_a_shards_whole_inner_chunks_get_numpys_statistics_taken_together(
    tmp_path, monkeypatch, case
):
    spec, box = SHARDED[case]
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    spec.create(s.store)
    base = _values(spec.dtype, spec.shape, spec.fill, seed=case)
    zarr.open_array(s.store, path=spec.name)[...] = base
    s.commit("base")
    s = repo.create_session()
    new = _values(spec.dtype, spec.shape, spec.fill, seed=200 + case)
    count = _Count(monkeypatch)
    zarr.open_array(s.store, path=spec.name)[box] = new[box]
    s.commit("region")
    want = base.copy()
    want[box] = new[box]
    assert_matches(repo.chunk_stats(spec.name), spec, want, f"case {case}")
    assert count.alone == _expected_alone_sharded(spec, box)


def test_a_chunk_is_matched_only_as_the_view_zarr_takes_of_the_written_array():
    from zarrlake.zarr_store.pipeline import _Taken

    written = _values("f4", (16, 8), 0.0, seed=5)
    fields = of_tiles(written, (2, 8), np.array([[2, 0]]), 0.0)
    assert fields is not None
    owner = written[:1].base
    taken = _Taken(owner, (2, 8), written.strides, written.dtype, {"a/c/1/0": fields[0]})
    assert taken.of("a/c/1/0", written[2:4].copy()) is None  # a copy: its own array
    assert taken.of("a/c/1/0", written[2:4].astype("f8")) is None
    assert taken.of("a/c/1/0", written[2:4, ::-1]) is None  # other strides
    assert taken.of("a/c/1/0", written[2:4]) == of_chunk(written[2:4], 0.0)
    assert taken.of("a/c/1/0", written[2:4]) is None  # once


@pytest.mark.parametrize("dtype", ["f4", "f2", "i4", "u8"])
@pytest.mark.parametrize("size", [7, 256, 300, 8191, 8192, 8193, 12289, 16383])
def test_row_sums_widened_a_buffer_at_a_time_equal_each_chunks_own(dtype, size):
    # numpy widens rows to float64 a buffer (8,192 values) at a time: the sums must still
    # be each row's pairwise sum, as of_chunk takes it, bit for bit
    values = _values(dtype, (6, size), None, seed=size)
    if values.dtype.kind == "f":
        values[np.isnan(values)] = 1.0  # (the rows without NaN take that path)
    starts = np.stack([np.arange(6), np.zeros(6, np.int64)], axis=1)
    got = of_tiles(values, (1, size), starts, None)
    assert got == [of_chunk(values[k : k + 1], None) for k in range(6)]
    assert got is not None
    sums = [as_stats(fields).sum for fields in got]
    assert sums == [float(np.add.reduce(row.astype(np.float64))) for row in values]


def test_row_sums_longer_than_numpys_buffer_equal_each_chunks_own():
    old = np.setbufsize(1024)  # (a process may shrink numpy's buffer)
    try:
        values = _values("u8", (6, 2000), None, seed=5)
        starts = np.stack([np.arange(6), np.zeros(6, np.int64)], axis=1)
        got = of_tiles(values, (1, 2000), starts, None)
    finally:
        np.setbufsize(old)
    assert got == [of_chunk(values[k : k + 1], None) for k in range(6)]
