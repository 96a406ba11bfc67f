"""Batch write: every task writes its rows' chunks into the job's one session; the driver
commits once, or abandons the session if any task failed."""

from __future__ import annotations

import contextlib
import itertools
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import zarr
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from zarrlake.errors import (
    Conflict,
    ConflictError,
    ConflictKind,
    InvalidInputError,
    NotFoundError,
    SessionClosedError,
)
from zarrlake.format.shard import SEP, shard_key_of, shown
from zarrlake.session import Session
from zarrlake.spark.arrays import ArrayInfo, open_array
from zarrlake.spark.errors import keep_conflicts
from zarrlake.spark.handles import SessionHandle
from zarrlake.spark.layout import CELLS, CHUNKS, ChunkSink
from zarrlake.spark.rowsink import RowSink


@dataclass
class WrittenChunks(WriterCommitMessage):
    """What one task attempt wrote: chunk keys per array, the task's partition id, and the
    writer id it staged under (the driver accepts the writers of committed attempts)."""

    partition: int
    keys: dict[str, list[str]] = field(default_factory=dict)
    rows: int = 0
    writer: str = ""


def accept(session: Session, tag: str, messages: list[WrittenChunks | None]) -> None:
    """Count the writes of the task attempts Spark committed (those whose messages arrived),
    and nothing of failed or speculative attempts."""
    session._engine.accept_writers(tag, [m.writer for m in messages if m is not None and m.writer])


def partition_id() -> int:
    """The Spark partition id of the running task; -1 outside a task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else -1


class ZarrLakeWriter(DataSourceArrowWriter):
    """Pickled to every task and to the driver's commit/abort step; each re-joins the job's
    session there on first use (so abort works even when the session is already closed)."""

    def __init__(
        self,
        session: Session,
        arrays: list[ArrayInfo],
        replace: bool,
        layout: str = CELLS,
        allow_empty: bool = False,
    ) -> None:
        self.handle = SessionHandle(session)
        self.arrays = arrays
        self.replace = replace
        self.layout = layout
        self.allow_empty = allow_empty  # a job that changes nothing commits anyway
        self.tag = f"spark-{secrets.token_hex(8)}"  # this job's task attempts stage under it

    @property
    def session(self) -> Session:
        """The job's session, joined once per task."""
        return self.handle.session

    def opened(self) -> dict[str, zarr.Array]:
        """The target arrays, opened once per Python worker and job."""
        ref = self.session.branch or ""
        return {
            a.path: self.handle.array(a.path, lambda s, p=a.path: open_array(s, p, ref=ref))
            for a in self.arrays
        }

    # executors --------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenChunks:
        """Write one task's rows into the job's session; the message says what it wrote."""
        return write_batches(
            self.session, self.tag, self.opened(), self.arrays, self.layout, self.replace, iterator
        )

    # driver -----------------------------------------------------------------------------

    @keep_conflicts
    def commit(self, messages: list[WrittenChunks | None]) -> None:
        """One repository commit for the whole job, unless two tasks wrote one chunk."""
        try:
            accept(self.session, self.tag, messages)
            written = self._check_single_writers(messages)
            if self.replace:
                self._delete_unwritten(written)
            self.session.commit(allow_empty=self.allow_empty)
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
                    Conflict(
                        path, ConflictKind.WRITERS, [coords], f"written by Spark tasks {a} and {b}"
                    )
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
            shards = {shard_key_of(k) for k in written[info.path]}
            stale = [
                k
                for k in self.session.list_prefix(info.path + "/")
                if k != meta and k not in shards
            ]
            self.session.delete_many(stale)
            if info.inner is not None:
                self._fill_unwritten_inner(info, written[info.path])

    def _fill_unwritten_inner(self, info: ArrayInfo, keys: set[str]) -> None:
        """Overwrite with chunk-layout rows of inner chunks: the inner chunks of a written
        shard that no task wrote become the fill value (as the chunks no task wrote are
        deleted), one read-modify-write per such shard on the driver; inner chunks the tasks
        wrote are written back as read, which stages nothing for them."""
        names: dict[str, set[str]] = {}
        for key in keys:
            shard, _, name = key.partition(SEP)
            if name:
                names.setdefault(shard, set()).add(name)
        array = None
        grid, per = info.unit_grid, info.per_shard
        for shard_key, done in sorted(names.items()):
            origin = [c * p for c, p in zip(_coords_of(info, shard_key), per, strict=True)]
            units = [range(o, min(o + p, g)) for o, p, g in zip(origin, per, grid, strict=True)]
            missing = [
                at
                for at in itertools.product(*units)
                if ".".join(str(a - o) for a, o in zip(at, origin, strict=True)) not in done
            ]
            if not missing:
                continue
            if array is None:
                array = open_array(self.session, info.path, ref=self.session.branch or "")
            region = tuple(
                slice(u.start * c, min(u.stop * c, n))
                for u, c, n in zip(units, info.unit, info.shape, strict=True)
            )
            values = np.asarray(array[region])
            for at in missing:
                box = tuple(
                    slice(a * c - r.start, min((a + 1) * c, n) - r.start)
                    for a, c, n, r in zip(at, info.unit, info.shape, region, strict=True)
                )
                values[box] = array.fill_value
            array[region] = values


def _coords_of(info: ArrayInfo, key: str) -> tuple[int, ...]:
    """The chunk coordinates of a written key; of an inner chunk's key (chunk-layout rows
    of a sharded array), its coordinates on the grid of inner chunks."""
    shard_key, _, name = key.partition(SEP)
    parts = shard_key[len(info.path) + 1 :].replace(".", "/").split("/")
    try:
        coords = tuple(int(p) for p in parts if p != "c")
        if not name:
            return coords
        local = [int(p) for p in name.split(".")]
    except ValueError as e:
        raise InvalidInputError(f"unexpected chunk key {shown(key)!r}") from e
    return tuple(c * p + k for c, p, k in zip(coords, info.per_shard, local, strict=True))


def write_batches(
    session: Session,
    tag: str,
    opened: dict[str, zarr.Array],
    infos: list[ArrayInfo],
    layout: str,
    replace: bool,
    batches: Iterator[pa.RecordBatch],
) -> WrittenChunks:
    """Write one task attempt's record batches (cell rows, or whole chunks) into the opened
    arrays of `session`, staged under a new writer tagged `tag` and flushed before it
    returns: what the attempt wrote, for the commit on the driver."""
    writer = session._engine.start_writer(tag)
    sink: RowSink | ChunkSink
    if layout == CHUNKS:
        sink = ChunkSink(opened[infos[0].path], infos[0])
    else:
        sink = RowSink(opened, infos, replace=replace)
    try:
        for batch in batches:
            sink.add(batch)
        sink.close()
    finally:
        if isinstance(sink, ChunkSink):
            sink.stop()
    session.flush()  # durable before Spark may count the attempt
    keys = {path: sorted(k) for path, k in sink.written.items()}
    return WrittenChunks(partition_id(), keys, sink.rows, writer)
