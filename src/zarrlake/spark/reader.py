"""Batch read: one input partition per run of chunks; each task decodes its chunks with zarr
and yields Arrow record batches built with numpy. Option `isel` narrows the chunks read,
option `where` the values (spark/value_filter.py: chunks whose statistics cannot match are
not read, and only matching rows are given); Spark's own filters are left to Spark
(spark/region.py says why).

A sharded array is read in inner chunks (`ArrayInfo.unit`), taken shard by shard (all the
inner chunks of one shard, in C order, before the next shard's): a partition reads only the
inner chunks it covers (ranged reads of the shard), and a run of inner chunks stays within
few shards."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import numpy as np
import pyarrow as pa
import zarr
from pyspark.sql.datasource import DataSourceReader, InputPartition

from zarrlake._util.zarr_reads import read_boxes
from zarrlake.session import Session
from zarrlake.spark.arrays import ArrayInfo, open_array
from zarrlake.spark.handles import SessionHandle
from zarrlake.spark.region import Bounds
from zarrlake.vc.where import Node

DEFAULT_PARTITION_BYTES = 16 << 20
BATCH_ROWS = 1 << 18
READ_CHUNKS = 64
"""Chunks a task reads in one event-loop round (zarr fetches and decodes them concurrently):
one zarr call per chunk costs more than a small chunk's own read and decode."""
READ_BYTES = 64 << 20
"""At most about this many decoded bytes per round."""


class ChunkRun(InputPartition):
    """Chunks number `start` to `stop` (exclusive) of the filtered chunk grid, in C order
    (inner chunks of a sharded array: shard by shard, C order within each); with `units`,
    the positions in that grid of the chunks read (a value filter skipped the others)."""

    def __init__(self, start: int, stop: int, units: np.ndarray | None = None) -> None:
        self.start = start
        self.stop = stop
        self.units = units


class ZarrLakeReader(DataSourceReader):
    """Reads one array at one commit (the ref is resolved once, when the read is planned)."""

    def __init__(
        self,
        session: Session,
        info: ArrayInfo,
        *,
        bounds: Bounds | None = None,
        partition_rows: int | None = None,
        partition_bytes: int | None = None,
        where: Node | None = None,
        keep: np.ndarray | None = None,
    ) -> None:
        self.handle = SessionHandle(session)
        self.info = info
        self.where = where  # the value filter the rows must match (option `where`)
        self.keep = keep  # per position of the filtered grid: read it (None: every one)
        row_bytes = self.row_bytes(info)
        self.partition_rows = partition_rows or max(
            1, (partition_bytes or DEFAULT_PARTITION_BYTES) // row_bytes
        )
        # [low, high) element indices per dimension: the `isel` option, fixed for the read
        self.bounds = bounds if bounds is not None else [(0, s) for s in info.shape]

    def __getstate__(self) -> dict:
        """What a task needs: not `keep`, which partitions() already turned into each
        partition's chunks (Spark pickles the reader for its tasks before planning them,
        from the same object)."""
        return {**self.__dict__, "keep": None}

    @staticmethod
    def row_bytes(info: ArrayInfo) -> int:
        """Bytes per array element in this layout (sizes the partitions)."""
        return 8 * len(info.dims) + np.dtype(info.dtype).itemsize

    # planning ---------------------------------------------------------------------------

    def _chunk_ranges(self) -> list[range]:
        """Per dimension, the chunk indices that intersect the bounds."""
        return [
            range(lo // c, -(-hi // c)) if hi > lo else range(0)
            for (lo, hi), c in zip(self.bounds, self.info.unit, strict=True)
        ]

    def _order(self, ranges: list[range]) -> np.ndarray | None:
        """The C-order positions of the filtered grid's units, shard by shard (C order
        within each shard); None when that is plain C order (not sharded, or one unit per
        shard)."""
        per = self.info.per_shard
        if all(p == 1 for p in per) or not all(len(r) for r in ranges):
            return None
        grid = tuple(len(r) for r in ranges)
        k = np.indices(grid, dtype=np.int64).reshape(len(grid), -1)
        k += np.array([r.start for r in ranges], dtype=np.int64)[:, None]
        per_a = np.array(per, dtype=np.int64)[:, None]
        shards = k // per_a
        shard_grid = tuple(int(s.max()) + 1 for s in shards)
        key = np.ravel_multi_index(tuple(shards), shard_grid) * int(np.prod(per))
        key += np.ravel_multi_index(tuple(k % per_a), per)
        return np.argsort(key, kind="stable")

    def _rows_per_chunk(self, ranges: list[range]) -> np.ndarray:
        rows = np.ones((), dtype=np.int64)
        for (lo, hi), c, r in zip(self.bounds, self.info.unit, ranges, strict=True):
            k = np.arange(r.start, r.stop, dtype=np.int64)
            n = np.minimum((k + 1) * c, hi) - np.maximum(k * c, lo)
            rows = np.multiply.outer(rows, n)
        return rows.reshape(-1)

    def partitions(self) -> list[ChunkRun]:
        """The chunk grid (after filters) split into runs of about `partition_rows` rows."""
        ranges = self._chunk_ranges()
        rows = self._rows_per_chunk(ranges)
        order = self._order(ranges)
        if self.keep is not None:
            units = np.arange(rows.size) if order is None else order
            units = units[self.keep[units]]
            return self._runs(rows[units], units)
        if order is not None:
            rows = rows[order]
        return self._runs(rows, None)

    def _runs(self, rows: np.ndarray, units: np.ndarray | None) -> list[ChunkRun]:
        """Runs of about `partition_rows` rows over chunks holding `rows` rows each (the
        chunks at `units` of the filtered grid, when given)."""
        if rows.size == 0:
            return [ChunkRun(0, 0, units)]
        ends = np.cumsum(rows)
        runs, start = [], 0
        while start < rows.size:
            base = ends[start - 1] if start else 0
            stop = int(np.searchsorted(ends, base + self.partition_rows, side="right"))
            stop = max(stop, start + 1)
            runs.append(ChunkRun(start, stop, None if units is None else units[start:stop]))
            start = stop
        return runs

    # tasks ------------------------------------------------------------------------------

    def array(self) -> zarr.Array:
        """The array at the planned commit, opened once per task."""
        info = self.info
        return self.handle.array(
            info.path, lambda s: open_array(s, info.path, ref=self.handle.session.base_commit)
        )

    def boxes(self, partition: ChunkRun) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
        """(chunk coordinates, the part of it inside the bounds) for the partition's chunks."""
        ranges = self._chunk_ranges()
        grid = tuple(len(r) for r in ranges)
        if partition.units is not None:
            coords = np.unravel_index(partition.units, grid)
        else:
            order = self._order(ranges)
            positions = np.arange(partition.start, partition.stop)
            coords = np.unravel_index(positions if order is None else order[positions], grid)
        for i in range(partition.stop - partition.start):
            chunk = tuple(int(r.start + c[i]) for r, c in zip(ranges, coords, strict=True))
            box = tuple(
                slice(max(k * n, lo), min((k + 1) * n, hi))
                for k, n, (lo, hi) in zip(chunk, self.info.unit, self.bounds, strict=True)
            )
            yield chunk, box

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The record batches of one run of chunks, one row per cell."""
        assert isinstance(partition, ChunkRun)  # Spark hands back what partitions() made
        if partition.stop <= partition.start:
            return
        parts: list[list[np.ndarray]] = []
        buffered = 0
        for _, box, block in self.blocks(partition):
            if self.where is None:
                columns = _columns(block, box)
            else:  # only the matching cells, their indices from the mask
                mask = self.where.matches(block)
                at = np.nonzero(mask)
                columns = [i.astype(np.int64) + s.start for i, s in zip(at, box, strict=True)]
                columns.append(block[mask])
            parts.append(columns)
            buffered += len(columns[-1])
            if buffered >= BATCH_ROWS:
                yield self._batch(parts)
                parts, buffered = [], 0
        if parts:
            yield self._batch(parts)

    def blocks(
        self, partition: ChunkRun
    ) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...], np.ndarray]]:
        """(chunk coordinates, box, values of the box) for the partition's chunks, in its
        order, read READ_CHUNKS at a time (fewer when chunks are large)."""
        array = self.array()
        per_round = max(1, min(READ_CHUNKS, READ_BYTES // max(1, self._unit_bytes())))
        boxes = self.boxes(partition)
        while group := list(islice(boxes, per_round)):
            chunks = [chunk for chunk, _ in group]
            regions = [box for _, box in group]
            blocks = self.read_blocks(array, chunks, regions)
            yield from zip(chunks, regions, blocks, strict=True)

    def _unit_bytes(self) -> int:
        return int(np.prod(self.info.unit)) * np.dtype(self.info.dtype).itemsize

    def read_blocks(
        self, array: zarr.Array, chunks: list[tuple[int, ...]], boxes: list[tuple[slice, ...]]
    ) -> list[np.ndarray]:
        """The values of each of `boxes`, which lie inside chunks `chunks`, read
        concurrently."""
        return read_boxes(array, boxes)

    def _batch(self, parts: list[list[np.ndarray]]) -> pa.RecordBatch:
        names = [*self.info.dims, self.info.column]
        types: list[pa.DataType] = [pa.int64()] * len(self.info.dims)
        types.append(pa.from_numpy_dtype(np.dtype(self.info.spark_dtype)))
        fields = [pa.field(n, t, nullable=False) for n, t in zip(names, types, strict=True)]
        schema = pa.schema(fields)
        columns = [
            np.concatenate([p[i] for p in parts]) if len(parts) > 1 else parts[0][i]
            for i in range(len(names))
        ]
        columns[-1] = columns[-1].astype(self.info.spark_dtype, copy=False)
        return pa.RecordBatch.from_arrays([pa.array(c) for c in columns], schema=schema)


def _columns(block: np.ndarray, box: tuple[slice, ...]) -> list[np.ndarray]:
    """One index column per dimension plus the values, in C order of the block."""
    out = []
    for d, s in enumerate(box):
        shape = [1] * block.ndim
        shape[d] = -1
        axis = np.arange(s.start, s.stop, dtype=np.int64).reshape(shape)
        out.append(np.broadcast_to(axis, block.shape).reshape(-1))
    out.append(block.reshape(-1))
    return out
