"""Statistics taken together on the writers that hold many chunks' values, outside one zarr
write: `write_many` (chunk bytes alone: decoded, then reduced per array together), the
Spark chunk layout (a batch's whole chunks, each written by its own zarr write) and the
cell layout's rows out of order (grouped by chunk, each chunk its own write). Every
chunk's statistics equal numpy's on its values (NaN, fill values, integer, unsigned,
boolean and float dtypes, big-endian bytes, compressed chunks, edge chunks), the whole
ones taken together (counted), edge chunks one by one. With statistics off, no values are
handed over and nothing is computed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import zarr
from zarr.codecs import BytesCodec
from zarr.storage import MemoryStore

import zarrlake as zl
from tests.statistics.model import Spec, assert_matches, chunk_values
from tests.statistics.test_together import _Count, _values
from zarrlake.vc import statistics as vs
from zarrlake.vc.statistics import as_stats, decoded_stats, decoded_together, of_chunk, of_rows

# (spec, compressed, big-endian bytes): edge chunks on every grid
MANY = [
    (Spec("a", (30, 22), (4, 8), "float32", float("nan")), False, False),
    (Spec("a", (30, 22), (4, 8), "float32", 0.0), True, False),
    (Spec("a", (30, 22), (4, 8), "int16", -1), False, False),
    (Spec("a", (30, 22), (4, 8), "uint8", 7), True, False),
    (Spec("a", (12, 10, 9), (2, 5, 3), "float64", 1.5), False, True),
    (Spec("a", (30, 20), (3, 4), "int64", 0), False, True),
    (Spec("a", (30, 20), (3, 4), "bool", False), False, False),
]


def _with_nan_chunks(spec: Spec, seed: int) -> np.ndarray:
    """Values for `spec`'s array; in a float array, its first row of chunks only NaN."""
    values = _values(spec.dtype, spec.shape, spec.fill, seed=seed)
    if values.dtype.kind == "f":
        values[: spec.chunks[0]] = np.nan
    return values


def _encoded(spec: Spec, values: np.ndarray, compressed: bool, big: bool) -> dict[str, bytes]:
    """The keys and bytes zarr writes for `spec`'s array holding `values` (document and
    chunks), in a memory store."""
    store = MemoryStore()
    spec.create(
        store,
        serializer=BytesCodec(endian="big" if big else "little"),
        compressors="auto" if compressed else None,
    )[...] = values
    return {k: v.to_bytes() for k, v in store._store_dict.items() if k.startswith(spec.name)}


@pytest.mark.parametrize("with_doc", [False, True], ids=["doc-committed", "doc-in-batch"])
@pytest.mark.parametrize("case", range(len(MANY)))
def test_write_many_takes_its_chunks_statistics_together(tmp_path, monkeypatch, case, with_doc):
    spec, compressed, big = MANY[case]
    values = _with_nan_chunks(spec, seed=case)
    written = _encoded(spec, values, compressed, big)
    doc = f"{spec.name}/zarr.json"
    chunks = [(k, v) for k, v in sorted(written.items()) if k != doc]
    assert len(chunks) > 8  # (enough to be taken together)
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    if not with_doc:
        s.write(doc, written[doc])
        s.commit("array")
        s = repo.create_session()
    count = _Count(monkeypatch)
    s.write_many(([(doc, written[doc])] if with_doc else []) + chunks)
    s.commit("chunks")
    assert count.alone == 0  # none taken alone: not even the edge chunks (bytes of a chunk)
    assert_matches(repo.chunk_stats(spec.name), spec, values, f"case {case}")


def test_decoded_together_equals_each_chunks_own_bits():
    spec, _, big = MANY[1]
    values = _values(spec.dtype, spec.shape, spec.fill, seed=11)
    written = _encoded(spec, values, True, big)
    doc = written["a/zarr.json"]
    datas = [v for k, v in written.items() if k.startswith("a/c/")] + [
        b"not a chunk"
    ]  # (bytes that do not decode: unknown)
    got = decoded_together(doc, datas)
    assert [None if g is None else as_stats(g) for g in got] == [
        decoded_stats(doc, d) for d in datas
    ]
    assert got[-1] is None and all(g is not None for g in got[:-1])


def test_rows_taken_together_equal_each_rows_own_bits():
    rng = np.random.default_rng(3)
    rows = rng.normal(0, 1, (40, 96)).astype("f4")
    rows[rng.random(rows.shape) < 0.05] = np.nan
    blocks = [rows[k].reshape(8, 12) for k in range(40)]
    want = [tuple(of_chunk(b, 0.0)) for b in blocks]  # type: ignore[arg-type]
    assert of_rows(blocks, 0.0) == want
    assert of_rows(rows, 0.0) == want  # (the rows of one array: no stacking)
    assert of_rows([blocks[0], blocks[1].astype("f8")], 0.0) is None  # not one dtype
    assert of_rows([], 0.0) == []


def test_write_many_with_statistics_off_takes_none(tmp_path, monkeypatch):
    taken = []
    monkeypatch.setattr(
        "zarrlake.txn.writes.decoded_together", lambda *a: taken.append(1) or [None] * len(a[1])
    )
    spec = MANY[0][0]
    written = _encoded(spec, _values(spec.dtype, spec.shape, spec.fill, seed=1), False, False)
    repo = zl.Repo.create(tmp_path / "r", settings={"chunk_statistics": False})
    s = repo.create_session()
    s.write_many(sorted(written.items()))
    s.commit("off")
    assert taken == []
    assert not any(repo.chunk_stats(spec.name)["known"].to_pylist())


def test_with_statistics_off_no_values_are_handed_to_the_store(tmp_path, monkeypatch):
    import zarrlake.zarr_store.store as store_module

    handed = []
    real = store_module.handed
    monkeypatch.setattr(
        store_module, "handed", lambda value, key: handed.append(real(value, key)) or handed[-1]
    )
    for on in (True, False):
        handed.clear()
        repo = zl.Repo.create(tmp_path / f"r{on}", settings={"chunk_statistics": on})
        s = repo.create_session()
        spec = Spec("s", (32, 48), (2, 4), "float32", 0.0, shards=(8, 16))
        spec.create(s.store)
        a = zarr.create_array(s.store, name="a", shape=(64, 8), chunks=(1, 8), dtype="f4")
        a[...] = np.ones((64, 8), "f4")  # small chunks, taken together
        b = zarr.create_array(s.store, name="b", shape=(4, 5000), chunks=(1, 5000), dtype="f4")
        b[...] = np.ones((4, 5000), "f4")  # large chunks, held by the write scope
        zarr.open_array(s.store, path="s")[...] = np.ones(spec.shape, "f4")  # shards
        s.commit("written")
        if on:
            assert sum(h is not None for h in handed) == 64 + 4 + 12  # a, b and the shards
        else:
            assert handed and all(h is None for h in handed)
            for name in ("a", "b", "s"):
                assert not any(repo.chunk_stats(name)["known"].to_pylist())


# the Spark chunk layout ----------------------------------------------------------------

LAYOUT = [
    Spec("a", (30, 22), (4, 8), "float32", float("nan")),
    Spec("a", (30, 22), (4, 8), "float64", 0.0),
    Spec("a", (30, 22), (4, 8), "int16", -1),
    Spec("a", (30, 20), (3, 4), "uint8", 7),
    Spec("a", (30, 20), (3, 4), "bool", False),
]


def _edge(spec: Spec, coords: tuple[int, ...]) -> bool:
    return any((k + 1) * c > s for k, c, s in zip(coords, spec.chunks, spec.shape, strict=True))


def _edge_chunks(spec: Spec, values: np.ndarray) -> int:
    """Edge chunks zarr writes for `values` (one all fill value it does not write)."""
    count = 0
    for coords in np.ndindex(*spec.grid):
        block = chunk_values(spec, values, coords)
        fill = np.asarray(spec.fill, block.dtype)
        empty = np.isnan(block) if np.isnan(fill) else block == fill
        count += _edge(spec, coords) and not empty.all()
    return count


def _sink_rows(spec: Spec, values: np.ndarray, coords: list[tuple[int, ...]]) -> list:
    return [
        (
            at,
            chunk_values(spec, values, at)[
                tuple(
                    slice(0, min(c, s - k * c))
                    for k, c, s in zip(at, spec.chunks, spec.shape, strict=True)
                )
            ],
        )
        for at in coords
    ]


@pytest.mark.parametrize("case", range(len(LAYOUT)))
def test_chunk_sink_takes_a_batchs_whole_chunks_together(tmp_path, monkeypatch, case):
    """The code a Spark task of the chunk layout runs, in this process (its calls counted):
    one batch of rows, a chunk given twice (the last wins), edge chunks one by one."""
    from zarrlake.spark.arrays import ArrayInfo
    from zarrlake.spark.layout import ChunkSink, chunk_batch

    spec = LAYOUT[case]
    values = _with_nan_chunks(spec, seed=case)
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    spec.create(s.store)
    array = zarr.open_array(s.store, path=spec.name)
    info = ArrayInfo.of(array, spec.name)
    coords = list(np.ndindex(*spec.grid))
    stale = _values(spec.dtype, spec.shape, spec.fill, seed=99)
    again = [c for c in coords if not _edge(spec, c)][:3]
    rows = _sink_rows(spec, stale, again) + _sink_rows(spec, values, coords)
    count = _Count(monkeypatch)
    sink = ChunkSink(array, info)
    try:
        sink.add(chunk_batch(info, rows[:5]))  # (two batches: the first one's chunks again)
        sink.add(chunk_batch(info, rows[5:]))
    finally:
        sink.stop()
    s.commit("chunks")
    assert_matches(repo.chunk_stats(spec.name), spec, values, f"case {case}")
    assert count.alone == _edge_chunks(spec, values)  # (the whole ones were taken together)


def test_chunk_sink_with_statistics_off_takes_none(tmp_path, monkeypatch):
    from zarrlake.spark.arrays import ArrayInfo
    from zarrlake.spark.layout import ChunkSink, chunk_batch

    monkeypatch.setattr(vs, "of_blocks", lambda *a: pytest.fail("statistics taken"))
    spec = LAYOUT[1]
    repo = zl.Repo.create(tmp_path / "r", settings={"chunk_statistics": False})
    s = repo.create_session()
    spec.create(s.store)
    array = zarr.open_array(s.store, path=spec.name)
    info = ArrayInfo.of(array, spec.name)
    values = _values(spec.dtype, spec.shape, spec.fill, seed=5)
    sink = ChunkSink(array, info)
    try:
        sink.add(chunk_batch(info, _sink_rows(spec, values, list(np.ndindex(*spec.grid)))))
    finally:
        sink.stop()
    s.commit("off")
    stored = zarr.open_array(repo.readonly_session().store, path="a")[:]
    np.testing.assert_array_equal(stored, values)
    assert not any(repo.chunk_stats(spec.name)["known"].to_pylist())


@pytest.mark.slow
def test_spark_chunk_layout_writes_get_numpys_statistics(spark, tmp_path):
    """Through Spark (local[2]): chunk-layout rows read from source arrays and written
    into empty ones get every chunk's statistics as numpy has them (edge chunks, NaN,
    fill values, integer and float dtypes)."""
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session()
    cases = []
    for n, spec in enumerate(LAYOUT):
        values = _with_nan_chunks(spec, seed=n)
        source = Spec(f"src{n}/a", spec.shape, spec.chunks, spec.dtype, spec.fill)
        target = Spec(f"dst{n}/a", spec.shape, spec.chunks, spec.dtype, spec.fill)
        source.create(s.store)
        target.create(s.store)
        zarr.open_array(s.store, path=source.name)[...] = values
        cases.append((target, values))
    s.commit("sources")
    for n, (target, _) in enumerate(cases):
        df = (
            spark.read.format("zarrlake")
            .options(repo=loc, array=f"src{n}/a", layout="chunks")
            .load()
            .repartition(2)
        )
        zl.spark.write_array(df, repo=loc, array=target.name, layout="chunks")
    for target, values in cases:
        assert_matches(repo.chunk_stats(target.name), target, values, target.name)


# the Spark cell layout's rows out of order --------------------------------------------


@pytest.mark.parametrize("case", range(len(LAYOUT)))
def test_row_sink_takes_whole_chunks_of_rows_out_of_order_together(tmp_path, monkeypatch, case):
    """The cell layout's task code with rows in no order (grouped by chunk,
    `chunks.write_chunks`): the chunks the rows cover whole get their statistics together;
    edge chunks, and a chunk the rows cover only partly (merged with what it held), one by
    one."""
    from zarrlake.spark.arrays import ArrayInfo
    from zarrlake.spark.rowsink import RowSink

    spec = LAYOUT[case]
    base = _values(spec.dtype, spec.shape, spec.fill, seed=50 + case)
    values = _with_nan_chunks(spec, seed=case)
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    spec.create(s.store)
    zarr.open_array(s.store, path=spec.name)[...] = base
    s.commit("base")
    s = repo.create_session()
    array = zarr.open_array(s.store, path=spec.name)
    info = ArrayInfo.of(array, spec.name)
    cells = np.array(list(np.ndindex(*spec.shape)))
    keep = np.ones(len(cells), bool)
    keep[1] = False  # chunk (0, 0) is covered only partly: it keeps its stored cell
    cells = cells[keep][np.random.default_rng(case).permutation(int(keep.sum()))]
    want = values.copy()
    kept = np.unravel_index(1, spec.shape)
    want[kept] = base[kept]
    batch = pa.RecordBatch.from_arrays(
        [
            *(pa.array(cells[:, d]) for d in range(len(spec.shape))),
            pa.array(values[tuple(cells.T)]),
        ],
        names=[*info.dims, info.column],
    )
    count = _Count(monkeypatch)
    sink = RowSink({spec.name: array}, [info], replace=False)
    sink.add(batch)
    sink.close()
    s.commit("rows")
    assert_matches(repo.chunk_stats(spec.name), spec, want, f"case {case}")
    edge = _edge_chunks(spec, want)
    assert count.alone == edge + (not _edge(spec, (0,) * len(spec.shape)))


@pytest.mark.slow
def test_spark_cell_layout_writes_get_numpys_statistics(spark, tmp_path):
    """Through Spark (local[2]): cell rows repartitioned by chunk (out of the array's order)
    get every chunk's statistics as numpy has them."""
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session()
    cases = []
    for n, spec in enumerate(LAYOUT[:3]):
        values = _with_nan_chunks(spec, seed=n)
        target = Spec(f"cells{n}/a", spec.shape, spec.chunks, spec.dtype, spec.fill)
        target.create(s.store)
        cases.append((target, values))
    s.commit("arrays")
    for target, values in cases:
        rows = [(*map(int, at), values[at].item()) for at in np.ndindex(*target.shape)]
        df = spark.createDataFrame(rows, schema=_cell_schema(target, values.dtype))
        zl.spark.write_array(df, repo=loc, array=target.name)
    for target, values in cases:
        assert_matches(repo.chunk_stats(target.name), target, values, target.name)


def _cell_schema(spec: Spec, dtype: np.dtype):
    from pyspark.sql.types import (
        DoubleType,
        FloatType,
        LongType,
        ShortType,
        StructField,
        StructType,
    )

    value = {"f": {4: FloatType(), 8: DoubleType()}, "i": {2: ShortType()}}[dtype.kind]
    return StructType(
        [StructField(f"d{i}", LongType(), False) for i in range(len(spec.shape))]
        + [StructField("a", value[dtype.itemsize], True)]
    )
