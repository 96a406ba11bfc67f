"""Batch write: every task writes its rows' chunks into the job's one session; the driver
commits once, or abandons the session if any task failed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from zarrlake.errors import (
    Conflict,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    SessionClosedError,
)
from zarrlake.session import Session
from zarrlake.spark.arrays import ArrayInfo, open_array
from zarrlake.spark.chunks import check_bounds, write_chunks

FLUSH_ROWS = 4_000_000
"""Rows a task buffers before writing their chunks. A chunk whose rows straddle two flushes
is written twice by the same task (the second read-modify-write sees the first)."""


@dataclass
class WrittenChunks(WriterCommitMessage):
    """What one task wrote: chunk keys per array, and the task's partition id."""

    partition: int
    keys: dict[str, list[str]] = field(default_factory=dict)
    rows: int = 0


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else -1


def _column(table: pa.Table, name: str, what: str) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        raise InvalidInputError(f"{what} column {name!r} has {col.null_count} null value(s)")
    return col.to_numpy()


class ZarrLakeWriter(DataSourceArrowWriter):
    """Pickled to every task and to the driver's commit/abort step; each re-joins the job's
    session there on first use (so abort works even when the session is already closed)."""

    def __init__(self, session: Session, arrays: list[ArrayInfo], replace: bool) -> None:
        self.handle = (session.repo.spec, session.id, session.base_commit)
        self._session: Session | None = session
        self.arrays = arrays
        self.replace = replace

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_session": None}

    @property
    def session(self) -> Session:
        if self._session is None:
            from zarrlake.repo import _rejoin

            self._session = _rejoin(*self.handle)
        return self._session

    # executors --------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenChunks:
        message = WrittenChunks(_partition_id(), {a.path: [] for a in self.arrays})
        opened = {
            a.path: open_array(self.session, a.path, ref=self.session.branch or "")
            for a in self.arrays
        }
        pending: list[pa.RecordBatch] = []
        buffered = 0
        for batch in iterator:
            pending.append(batch)
            buffered += batch.num_rows
            if buffered >= FLUSH_ROWS:
                self._flush(pa.Table.from_batches(pending), opened, message)
                pending, buffered = [], 0
        if pending:
            self._flush(pa.Table.from_batches(pending), opened, message)
        for path, keys in message.keys.items():
            message.keys[path] = sorted(set(keys))
        return message

    def _flush(self, table: pa.Table, opened: dict, message: WrittenChunks) -> None:
        message.rows += table.num_rows
        dims = self.arrays[0].dims
        index = [_column(table, d, "dimension").astype(np.int64, copy=False) for d in dims]
        for info in self.arrays:
            check_bounds(info, index)
            values = _column(table, info.column, "value").astype(info.dtype, copy=False)
            keys = write_chunks(opened[info.path], info, index, values, replace=self.replace)
            message.keys[info.path].extend(keys)

    # driver -----------------------------------------------------------------------------

    def commit(self, messages: list[WrittenChunks | None]) -> None:
        """One repository commit for the whole job, unless two tasks wrote one chunk."""
        try:
            written = self._check_single_writers(messages)
            if self.replace:
                self._delete_unwritten(written)
            self.session.commit()
        except BaseException:
            with contextlib.suppress(SessionClosedError):
                self.session.abandon()
            raise

    def abort(self, messages: list[WrittenChunks | None]) -> None:
        """A task failed or the job was cancelled: abandon the session; the branch is
        untouched."""
        with contextlib.suppress(SessionClosedError, NotFoundError):
            self.session.abandon()

    def _check_single_writers(self, messages: list[WrittenChunks | None]) -> dict[str, set[str]]:
        owner: dict[str, int] = {}
        written: dict[str, set[str]] = {a.path: set() for a in self.arrays}
        conflicts = []
        for msg in messages:
            if msg is None:
                continue
            for path, keys in msg.keys.items():
                for key in keys:
                    first = owner.setdefault(key, msg.partition)
                    if first != msg.partition:
                        conflicts.append((path, key, first, msg.partition))
                written[path].update(keys)
        if conflicts:
            infos = {a.path: a for a in self.arrays}
            listed = []
            for path, key, a, b in conflicts:
                coords = _coords_of(infos[path], key)
                listed.append(
                    Conflict(path, "writers", [coords], f"written by Spark tasks {a} and {b}")
                )
            first = listed[0]
            raise ConflictError(
                listed,
                f"chunk {first.chunks[0]} of array {first.path!r} was written by two Spark "
                f"tasks ({first.detail[len('written by Spark tasks ') :]}) and one would lose "
                f"values ({len(listed)} chunk(s) in all); repartition rows by chunk, e.g. with "
                "zarrlake.spark.write_array",
            )
        return written

    def _delete_unwritten(self, written: dict[str, set[str]]) -> None:
        for info in self.arrays:
            meta = f"{info.path}/zarr.json"
            stale = [
                k
                for k in self.session.list_prefix(info.path + "/")
                if k != meta and k not in written[info.path]
            ]
            self.session.delete_many(stale)


def _coords_of(info: ArrayInfo, key: str) -> tuple[int, ...]:
    parts = key[len(info.path) + 1 :].replace(".", "/").split("/")
    try:
        return tuple(int(p) for p in parts if p != "c")
    except ValueError as e:
        raise InvalidInputError(f"unexpected chunk key {key!r}") from e
