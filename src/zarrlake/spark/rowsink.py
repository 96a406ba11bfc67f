"""Cell rows arriving in Arrow batches, written to chunks with numpy.

Rows that arrive in C order of the array (as a DataFrame built from `spark.range`, or read
from zarrlake, does) form a run: the run is cut into slabs of whole chunk rows along the
first dimension and each slab is written as one zarr assignment of the values as they came,
with no index arithmetic, sorting or read-modify-write. All other rows are buffered and
grouped by chunk (chunks.write_chunks).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import zarr

from zarrlake.errors import InvalidInputError
from zarrlake.spark.append import Append, Growth, grown, widened
from zarrlake.spark.arrays import ArrayInfo, cast_values
from zarrlake.spark.chunks import check_bounds, chunk_box, write_chunks
from zarrlake.spark.duplicates import Coverage

FLUSH_ROWS = 4_000_000
"""Out-of-order rows a task buffers before writing their chunks."""
MAX_SLAB = 64 << 20
"""Largest slab (elements) a run buffers; arrays with bigger slabs take the grouped path."""


def column(batch: pa.RecordBatch | pa.Table, name: str, what: str) -> np.ndarray:
    """A column of `batch` as numpy; InvalidInputError naming `what` if it holds nulls."""
    col = batch.column(name)
    if col.null_count:
        raise InvalidInputError(
            f"{what} column {name!r} has {col.null_count} null value(s)"
            "; fill or drop those rows first"
        )
    return col.to_numpy(zero_copy_only=False)


class RowSink:
    """Writes one task's cell rows into `arrays` (all sharing dims, shape and chunks);
    `written` collects the chunk keys per array path. With `append`, rows may go past the
    arrays' end along its dimension (`growth.extent` is how far they went); with
    `refuse_duplicates`, a cell given twice is refused."""

    def __init__(
        self,
        arrays: dict[str, zarr.Array],
        infos: list[ArrayInfo],
        *,
        replace: bool,
        append: Append | None = None,
        refuse_duplicates: bool = False,
    ):
        self.arrays = dict(arrays)
        self.infos = list(infos)
        self.replace = replace
        first = infos[0]
        self.dims, self.chunks = first.dims, first.chunks
        self._shaped(first.shape)
        self.growth = Growth(append, first) if append is not None else None
        self.coverage = Coverage(first) if refuse_duplicates else None
        self.written: dict[str, set[str]] = {i.path: set() for i in infos}
        self.done_chunks: set[tuple[int, ...]] = set()
        self.rows = 0
        self._run_start = -1
        self._run_len = 0
        self._run: dict[str, list[np.ndarray]] = {i.path: [] for i in infos}
        self._loose: list[tuple[list[np.ndarray], dict[str, np.ndarray]]] = []
        self._loose_rows = 0
        if self.growth is not None and self.growth.reach != self.shape[self.growth.axis]:
            self._reach(self.growth.reach)

    # input ------------------------------------------------------------------------------

    def add(self, batch: pa.RecordBatch) -> None:
        """Write the cells of one Arrow batch into their chunks (buffering rows that arrive out of
        order)."""
        n = batch.num_rows
        if n == 0:
            return
        self.rows += n
        index = [column(batch, d, "dimension").astype(np.int64, copy=False) for d in self.dims]
        if self.growth is not None:
            along = index[self.growth.axis]
            reach = self.growth.take(along, int(along.max()) + 1)
            if reach is not None:
                self._reach(reach)
        values = {
            i.path: cast_values(
                column(batch, i.column, "value"), i.dtype, f"value column {i.column!r}"
            )
            for i in self.infos
        }
        try:
            lin = np.ravel_multi_index(index, self.shape) if self.shape else None
        except ValueError:
            check_bounds(self.infos[0], index)
            raise
        ordered = (
            lin is not None
            and 0 < self.unit <= MAX_SLAB
            and int(lin[-1]) - int(lin[0]) == n - 1
            and (n == 1 or bool(np.all(np.diff(lin) == 1)))
        )
        if ordered and self._run_len and int(lin[0]) == self._run_start + self._run_len:
            self._extend(values, n)
        elif ordered:
            self._end_run()
            self._run_start = int(lin[0])
            self._extend(values, n)
        else:
            self._add_loose(index, values)

    def close(self) -> None:
        """Write what is still buffered."""
        self._end_run()
        self._flush_loose()

    def _shaped(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.total = math.prod(shape)
        self.unit = self.chunks[0] * math.prod(shape[1:]) if shape else 0

    def _reach(self, extent: int) -> None:
        """Let the handles reach `extent` along the append dimension (in memory only)."""
        assert self.growth is not None
        axis = self.growth.axis
        if axis != 0:  # the run's C-order positions change with a trailing dimension
            self._end_run()
        self.infos = [widened(i, axis, extent) for i in self.infos]
        self.arrays = {i.path: grown(self.arrays[i.path], axis, extent) for i in self.infos}
        self._shaped(self.infos[0].shape)

    # runs in C order --------------------------------------------------------------------

    def _extend(self, values: dict[str, np.ndarray], n: int) -> None:
        for path, v in values.items():
            self._run[path].append(v)
        self._run_len += n
        if self._run_len >= 2 * self.unit:
            self._write_run(final=False)

    def _end_run(self) -> None:
        if self._run_len:
            self._write_run(final=True)

    def _write_run(self, *, final: bool) -> None:
        """Write the run's whole slabs; the unaligned head (and with `final` the tail) goes
        to the grouped path, otherwise the tail stays as the start of the run."""
        start, end = self._run_start, self._run_start + self._run_len
        vals = {p: np.concatenate(v) if len(v) > 1 else v[0] for p, v in self._run.items()}
        lo = min(start + (-start) % self.unit, self.total)
        if end <= lo:
            self._loose_range(start, end, vals, 0)
            self._reset_run()
            return
        if lo > start:
            self._loose_range(start, lo, vals, 0)
        hi = end if end == self.total else lo + (end - lo) // self.unit * self.unit
        if hi > lo:
            self._write_slab(lo, hi, {p: v[lo - start : hi - start] for p, v in vals.items()})
        if hi < end and not final:
            self._run = {p: [v[hi - start :]] for p, v in vals.items()}
            self._run_start, self._run_len = hi, end - hi
            return
        if hi < end:
            self._loose_range(hi, end, vals, hi - start)
        self._reset_run()

    def _reset_run(self) -> None:
        self._run = {i.path: [] for i in self.infos}
        self._run_start, self._run_len = -1, 0

    def _write_slab(self, lo: int, hi: int, values: dict[str, np.ndarray]) -> None:
        plane = math.prod(self.shape[1:])
        t0, t1 = lo // plane, hi // plane
        for info in self.infos:
            array = self.arrays[info.path]
            array[t0:t1] = values[info.path].reshape((t1 - t0, *self.shape[1:]))
        c0 = self.chunks[0]
        trailing = [range(-(-s // c)) for s, c in zip(self.shape[1:], self.chunks[1:], strict=True)]
        for k in range(t0 // c0, -(-t1 // c0)):
            for rest in itertools.product(*trailing):
                coords = (k, *rest)
                if self.coverage is not None:
                    self.coverage.whole(coords, chunk_box(self.infos[0], coords))
                self.done_chunks.add(coords)
                for info in self.infos:
                    self.written[info.path].add(info.chunk_key(self.arrays[info.path], coords))

    # everything else ---------------------------------------------------------------------

    def _loose_range(self, lo: int, hi: int, vals: dict[str, np.ndarray], offset: int) -> None:
        index = list(np.unravel_index(np.arange(lo, hi, dtype=np.int64), self.shape))
        n = hi - lo
        self._add_loose(index, {p: v[offset : offset + n] for p, v in vals.items()})

    def _add_loose(self, index: Sequence[np.ndarray], values: dict[str, np.ndarray]) -> None:
        self._loose.append((list(index), values))
        self._loose_rows += len(index[0])
        if self._loose_rows >= FLUSH_ROWS:
            self._flush_loose()

    def _flush_loose(self) -> None:
        if not self._loose:
            return
        index = [np.concatenate([ix[d] for ix, _ in self._loose]) for d in range(len(self.dims))]
        check_bounds(self.infos[0], index)
        touched: set[tuple[int, ...]] = set()
        for n, info in enumerate(self.infos):
            values = np.concatenate([v[info.path] for _, v in self._loose])
            array = self.arrays[info.path]
            coords = write_chunks(
                array,
                info,
                index,
                values,
                replace=self.replace,
                done=self.done_chunks,
                coverage=self.coverage if n == 0 else None,  # the arrays share their cells
            )
            self.written[info.path].update(info.chunk_key(array, c) for c in coords)
            touched.update(coords)
        self.done_chunks |= touched
        self._loose, self._loose_rows = [], 0
