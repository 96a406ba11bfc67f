"""`option("layout", "chunks")`: one row per chunk. Columns: one long per dimension with the
chunk's grid coordinates, `shape` (array<long>: the chunk's actual extent, smaller than the
array's chunk shape at the upper edges), and the values as array<dtype> in C order of that
extent. Writes of whole chunks need no read-modify-write.

A sharded array's rows are its inner chunks (coordinates on the grid of inner chunks);
`option("grid", "shards")` gives and takes rows of whole shards instead (as before issue
31). A write task writes the rows of one shard together: all its inner chunks as one
assignment without a read, some of them as one read-modify-write of the shard, which stages
only the inner chunks that changed (txn/shards.py), so tasks may split a shard between them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import zarr
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import ArrayType, BinaryType, LongType, StructField, StructType

from zarrlake.errors import InvalidInputError
from zarrlake.format.shard import inner_key
from zarrlake.spark import options as opts
from zarrlake.spark.append import Append, Growth, grown, widened
from zarrlake.spark.arrays import INTEGER_TYPES, ArrayInfo, cast_values, check_value_type
from zarrlake.spark.chunks import taken_together, takes_together
from zarrlake.spark.duplicates import refuse
from zarrlake.spark.reader import ChunkRun, ZarrLakeReader
from zarrlake.spark.rowsink import column
from zarrlake.spark.runs import runs
from zarrlake.zarr_store.pipeline import given

CELLS, CHUNKS = "cells", "chunks"
SHAPE = "shape"
WRITE_THREADS = 4
"""Chunks a write task encodes and stores at once."""
BATCH_BYTES = 16 << 20
"""A read task yields a record batch once its chunks hold this many bytes."""


def layout_of(options) -> str:
    """The `layout` option: "cells" (default) or "chunks"; InvalidInputError otherwise."""
    layout = (opts.get_names(options, "layout") or (CELLS,))[0].lower()
    if layout not in (CELLS, CHUNKS):
        raise InvalidInputError(f"option 'layout' must be 'cells' or 'chunks', not {layout!r}")
    return layout


GRIDS = ("chunks", "shards")


def rows_grid(options, info: ArrayInfo) -> ArrayInfo:
    """`info` for the chunk layout's rows by option "grid": "chunks" (default; a sharded
    array's inner chunks) or "shards" (whole shards, the rows before issue 31)."""
    grid = (opts.get_names(options, "grid") or (GRIDS[0],))[0].lower()
    if grid not in GRIDS:
        raise InvalidInputError(f"option 'grid' must be 'chunks' or 'shards', not {grid!r}")
    return dataclasses.replace(info, inner=None) if grid == "shards" else info


def binary_values(options) -> bool:
    """option("values", "binary"): chunk values as raw bytes of the array's dtype in C order
    (Spark moves a binary value as one block; an array<...> value element by element)."""
    values = (opts.get_names(options, "values") or ("array",))[0].lower()
    if values not in ("array", "binary"):
        raise InvalidInputError(f"option 'values' must be 'array' or 'binary', not {values!r}")
    return values == "binary"


def chunk_schema(info: ArrayInfo, binary: bool = False) -> StructType:
    """The chunk-layout schema: a long per dimension, the chunk's shape, and its values."""
    if SHAPE in info.dims or info.column == SHAPE:
        raise InvalidInputError(
            f"array {info.path!r}: the chunk layout has a column {SHAPE!r}, which its "
            f"dimension or value column would repeat"
            "; rename that column"
        )
    return StructType(
        [
            *(StructField(d, LongType(), False) for d in info.dims),
            StructField(SHAPE, ArrayType(LongType(), False), False),
            StructField(
                info.column, BinaryType() if binary else ArrayType(info.spark_type, False), False
            ),
        ]
    )


def chunk_extent(info: ArrayInfo, coords: tuple[int, ...]) -> tuple[slice, ...]:
    """The region of chunk `coords` (a unit of `info`: an inner chunk of a sharded array) in
    array coordinates (clipped at the array's edge)."""
    return tuple(
        slice(k * c, min((k + 1) * c, s))
        for k, c, s in zip(coords, info.unit, info.shape, strict=True)
    )


def chunk_batch(
    info: ArrayInfo, rows: list[tuple[tuple[int, ...], np.ndarray]], binary: bool = False
) -> pa.RecordBatch:
    """Rows (chunk coordinates, block) as one record batch of the chunk schema."""
    dims = [pa.array([c[d] for c, _ in rows], pa.int64()) for d in range(len(info.dims))]
    shapes = pa.array([list(b.shape) for _, b in rows], pa.list_(pa.int64()))
    sizes = np.array([0] + [b.size for _, b in rows], dtype=np.int64)
    dtype = np.dtype(info.dtype).newbyteorder("<") if binary else info.spark_dtype
    flat = np.concatenate([b.reshape(-1) for _, b in rows]).astype(dtype, copy=False)
    offsets = np.cumsum(sizes)
    if binary:
        offsets = offsets * flat.itemsize
        kind = pa.binary() if offsets[-1] < 2**31 else pa.large_binary()
        width = np.int32 if kind == pa.binary() else np.int64
        buffers = [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(flat.view(np.uint8))]
        values: pa.Array = pa.Array.from_buffers(kind, len(rows), buffers)
    elif offsets[-1] < 2**31:
        values = pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32), pa.int32()), pa.array(flat)
        )
    else:
        values = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(flat))
    batch = pa.RecordBatch.from_arrays([*dims, shapes, values], names=chunk_names(info))
    return batch.cast(arrow_schema(chunk_schema(info, binary)))


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects of a reader's batches (nullability, list fields)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


def chunk_names(info: ArrayInfo) -> list[str]:
    """The column names of the chunk layout, in order."""
    return [*info.dims, SHAPE, info.column]


class ChunkReader(ZarrLakeReader):
    """Whole chunks (a region is on chunk coordinates)."""

    binary = False

    @staticmethod
    def row_bytes(info: ArrayInfo) -> int:
        """The bytes per value, which the partition size is measured in."""
        return np.dtype(info.dtype).itemsize

    def boxes(self, partition: ChunkRun) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
        """(chunk coordinates, the whole chunk within the array) for the partition's chunks."""
        for chunk, _ in super().boxes(partition):
            yield chunk, chunk_extent(self.info, chunk)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The record batches of one run of chunks, one row per chunk."""
        assert isinstance(partition, ChunkRun)  # Spark hands back what partitions() made
        if partition.stop <= partition.start:
            return
        rows: list[tuple[tuple[int, ...], np.ndarray]] = []
        buffered = 0
        for chunk, _, block in self.blocks(partition):
            if self.where is not None and not self.where.matches(block).any():
                continue  # a chunk holding no matching value is no row of a filtered read
            rows.append((chunk, block))
            buffered += block.nbytes
            if buffered >= BATCH_BYTES:
                yield chunk_batch(self.info, rows, self.binary)
                rows, buffered = [], 0
        if rows:
            yield chunk_batch(self.info, rows, self.binary)


def check_chunk_schema(schema: StructType, infos: list[ArrayInfo]) -> None:
    """Chunk-layout writes: one array, an integer column per dimension, an array column of
    values (and optionally `shape`)."""
    if len(infos) != 1:
        raise InvalidInputError(
            f"the chunk layout writes one array at a time, not {[i.path for i in infos]}"
            "; write one array per DataFrame"
        )
    info = infos[0]
    fields = {f.name: f.dataType for f in schema.fields}
    for d in info.dims:
        if d not in fields or not isinstance(fields[d], INTEGER_TYPES):
            raise InvalidInputError(
                f"the chunk layout needs an integer column {d!r} (chunk coordinate of dimension "
                f"{d!r} of array {info.path!r}); columns: {list(fields)}"
            )
    value = fields.get(info.column)
    if isinstance(value, BinaryType):
        return
    if not isinstance(value, ArrayType):
        raise InvalidInputError(
            f"the chunk layout needs an array or binary column {info.column!r} of values for array "
            f"{info.path!r}, not {value.simpleString() if value else 'none'}"
        )
    check_value_type(info.column, value.elementType, info)


class ChunkSink:
    """Writes one task's chunk rows: each row is one whole chunk (of a sharded array, an
    inner chunk, or a whole shard with option grid=shards), assigned without reading; the
    inner chunks of one shard are written together. With `append`, rows may go past the
    array's end along its dimension, and there a row may be shorter than a chunk (its
    values say how long); with `refuse_duplicates`, a chunk given twice is refused."""

    def __init__(
        self,
        array: zarr.Array,
        info: ArrayInfo,
        *,
        append: Append | None = None,
        refuse_duplicates: bool = False,
    ) -> None:
        self.growth = Growth(append, info) if append is not None else None
        if self.growth is not None:
            array = grown(array, self.growth.axis, self.growth.reach)
            info = widened(info, self.growth.axis, self.growth.reach)
        self.array = array
        self.info = info
        self.written: dict[str, set[str]] = {info.path: set()}
        self.seen: set[tuple[int, ...]] | None = set() if refuse_duplicates else None
        self.rows = 0
        self._pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="zarrlake-chunks")

    def add(self, batch: pa.RecordBatch) -> None:
        """Write the whole chunks of one Arrow batch (a row per chunk)."""
        n = batch.num_rows
        if n == 0:
            return
        self.rows += n
        coords = [
            column(batch, d, "chunk coordinate").astype(np.int64, copy=False)
            for d in self.info.dims
        ]
        values = batch.column(self.info.column)
        if values.null_count:
            raise InvalidInputError(
                f"value column {self.info.column!r} has null chunk(s); drop those rows or fill them"
            )
        if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
            offsets, flat = _binary_values(values, np.dtype(self.info.dtype))
        else:
            assert isinstance(values, pa.ListArray | pa.LargeListArray)  # the schema's list
            offsets = values.offsets.to_numpy()
            flat = values.flatten().to_numpy(zero_copy_only=False)
            offsets = offsets - int(offsets[0])
            flat = cast_values(flat, self.info.dtype, f"value column {self.info.column!r}")
        lengths = self._grow(coords, np.diff(offsets)) if self.growth is not None else None
        info = self.info
        shapes = batch.column(SHAPE) if SHAPE in batch.schema.names else None
        grid = info.unit_grid
        per = info.per_shard
        shards: dict[tuple[int, ...], dict[tuple[int, ...], tuple]] = {}
        keys: dict[tuple[int, ...], str] = {}
        for i in range(n):
            at = tuple(int(c[i]) for c in coords)
            if any(not 0 <= k < g for k, g in zip(at, grid, strict=True)):
                raise InvalidInputError(
                    f"chunk {at} is outside the chunk grid {grid} of array {info.path!r}"
                    "; give coordinates inside the grid"
                )
            box = chunk_extent(info, at)
            if lengths is not None:  # rows past the end may stop short along the dimension
                axis = self.growth.axis  # type: ignore[union-attr]
                start = box[axis].start
                box = tuple(
                    slice(start, start + int(lengths[i])) if d == axis else b
                    for d, b in enumerate(box)
                )
            extent = tuple(s.stop - s.start for s in box)
            if shapes is not None and shapes[i].is_valid and tuple(shapes[i].as_py()) != extent:
                raise InvalidInputError(
                    f"chunk {at} of array {info.path!r} has shape {extent}, not "
                    f"{tuple(shapes[i].as_py())}"
                    "; give each chunk the array's chunk shape"
                )
            block = flat[offsets[i] : offsets[i + 1]]
            if block.size != math.prod(extent):
                raise InvalidInputError(
                    f"chunk {at} of array {info.path!r} needs {math.prod(extent)} values "
                    f"(shape {extent}), got {block.size}"
                )
            if self.seen is not None:
                if at in self.seen:
                    refuse(info, [at], "chunk")
                self.seen.add(at)
            shard = tuple(k // p for k, p in zip(at, per, strict=True))
            shards.setdefault(shard, {})[at] = (box, block.reshape(extent))
            key = info.chunk_key(self.array, shard)
            if info.inner is not None:
                key = inner_key(key, ".".join(str(k % p) for k, p in zip(at, per, strict=True)))
            self.written[info.path].add(key)
            keys[at] = key
        runs, alone = self._runs(shards)
        taken = self._stats_together(alone, keys)
        # shards are encoded, hashed and stored in threads (zstd, hashing and I/O release the
        # GIL); the inner chunks of one shard in one write, so no two threads share a shard;
        # a run of whole chunks in one write too (zarr takes their statistics together)
        write = self._write_shard
        if taken is not None:  # (each pool thread writes with them in its context)
            write = lambda item: given(taken, lambda: self._write_shard(item))  # noqa: E731
        for _ in self._pool.map(self._write_shard, runs):
            pass
        for _ in self._pool.map(write, alone.items()):
            pass

    def _runs(
        self, shards: dict[tuple[int, ...], dict[tuple[int, ...], tuple]]
    ) -> tuple[list[tuple[Any, dict]], dict[tuple[int, ...], dict[tuple[int, ...], tuple]]]:
        """The runs (`spark.runs`) of an unsharded array's whole, unclipped chunks among
        `shards`, each to be written as one region, and the rest, to be written alone."""
        if self.info.inner is not None:
            return [], shards
        unit = self.info.unit
        whole = [at for at, got in shards.items() if _extent(got[at][0]) == unit]
        alone = dict(shards)
        return [
            (run[0], {at: alone.pop(at)[at] for at in run})
            for run in runs(whole, unit, np.dtype(self.info.dtype).itemsize)
        ], alone

    def _stats_together(
        self,
        shards: dict[tuple[int, ...], dict[tuple[int, ...], tuple]],
        keys: dict[tuple[int, ...], str],
    ) -> Any:
        """The statistics of the batch's whole chunks of an unsharded array (chunk
        coordinates -> (box, values) in `shards`, store key in `keys`), taken together for
        their writes (`chunks.taken_together`); edge chunks (zarr pads them with the fill
        value) get their own as zarr encodes them."""
        if self.info.inner is not None or not takes_together(self.array):
            return None
        unit = self.info.unit
        whole = [
            (keys[at], block)
            for blocks in shards.values()
            for at, (_, block) in blocks.items()
            if block.shape == unit
        ]
        return taken_together(self.array, whole)  # (every row is a view of the batch's values)

    def _grow(self, coords: list[np.ndarray], sizes: np.ndarray) -> np.ndarray:
        """The rows' lengths along the append dimension (from their number of values); the
        handle grows to cover them."""
        growth = self.growth
        assert growth is not None
        axis = growth.axis
        unit = self.info.unit[axis]
        along = coords[axis]
        if len(along) and int(along.min()) < 0:
            raise InvalidInputError(
                f"chunk coordinate {int(along.min())} of {self.info.dims[axis]!r} is negative"
                "; give non-negative chunk coordinates"
            )
        others = np.ones(len(along), dtype=np.int64)
        for d, (c, u, size) in enumerate(zip(coords, self.info.unit, self.info.shape, strict=True)):
            if d != axis:
                others *= np.clip(np.minimum((c + 1) * u, size) - c * u, 1, None)
        lengths = np.minimum(sizes // others, unit)
        bad = np.flatnonzero((sizes % others != 0) | (lengths == 0))
        if len(bad):
            at = tuple(int(c[bad[0]]) for c in coords)
            raise InvalidInputError(
                f"chunk {at} of array {self.info.path!r} has {int(sizes[bad[0]])} values; along "
                f"{self.info.dims[axis]!r} it holds 1 to {unit} steps of {int(others[bad[0]])}"
                "; give each chunk its full shape"
            )
        starts = along * unit
        reach = growth.take(starts, int((starts + lengths).max()))
        if reach is not None:
            self.array = grown(self.array, axis, reach)
            self.info = widened(self.info, axis, reach)
        return lengths

    def _write_shard(self, item: tuple[tuple[int, ...], dict[tuple[int, ...], tuple]]) -> None:
        """Write the given units of one stored object: all of it without reading; some, as
        their bounding box (read first where the rows do not cover it)."""
        _, blocks = item
        if len(blocks) == 1:
            ((box, block),) = blocks.values()
            self.array[box] = block
            return
        boxes = {at: box for at, (box, _) in blocks.items()}
        ndim = len(self.info.shape)
        lo = [min(b[d].start for b in boxes.values()) for d in range(ndim)]
        hi = [max(b[d].stop for b in boxes.values()) for d in range(ndim)]
        region = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
        units = math.prod(
            len(range(min(a[d] for a in blocks), max(a[d] for a in blocks) + 1))
            for d in range(ndim)
        )
        whole = all(box == chunk_extent(self.info, at) for at, box in boxes.items())
        if units == len(blocks) and whole:
            values = np.empty([b - a for a, b in zip(lo, hi, strict=True)], dtype=self.array.dtype)
        else:
            values = np.asarray(self.array[region])
        for box, block in blocks.values():
            local = tuple(slice(s.start - a, s.stop - a) for s, a in zip(box, lo, strict=True))
            values[local] = block
        self.array[region] = values

    def close(self) -> None:
        """Every chunk is written when add() returns; nothing is buffered."""

    def stop(self) -> None:
        """Wait for the pending chunk writes and stop the writer pool."""
        self._pool.shutdown()


def _extent(box: tuple[slice, ...]) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in box)


def _binary_values(values: pa.Array, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(offsets in items, all items) of a binary column of raw little-endian C-order bytes."""
    offsets_buf, data_buf = values.buffers()[1:3]
    assert offsets_buf is not None and data_buf is not None  # a binary array has both
    width = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=width)[
        values.offset : values.offset + len(values) + 1
    ]
    offsets = offsets.astype(np.int64) - int(offsets[0])
    start = int(np.frombuffer(offsets_buf, dtype=width)[values.offset])
    data = np.frombuffer(data_buf, dtype=np.uint8)[start : start + int(offsets[-1])]
    item = dtype.itemsize
    if np.any(offsets % item):
        raise InvalidInputError(
            f"binary chunk values must be whole {dtype} items ({item} bytes each)"
        )
    return offsets // item, data.view(dtype.newbyteorder("<")).astype(dtype, copy=False)
