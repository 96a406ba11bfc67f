"""Batch write: every task writes its rows' chunks into the job's one session; the driver
commits once, or abandons the session if any task failed or met an error."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import pickle
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import zarr
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from zarrlake.errors import (
    REPORT_BUG,
    Conflict,
    ConflictError,
    ConflictKind,
    InvalidInputError,
    NotFoundError,
    SessionClosedError,
    ZarrLakeError,
)
from zarrlake.format.shard import SEP, shard_key_of, shown
from zarrlake.session import Session
from zarrlake.spark.append import resize
from zarrlake.spark.arrays import ArrayInfo, open_array
from zarrlake.spark.coords import Cells, CoordSink, merged, write_cells
from zarrlake.spark.errors import TaskError, keep_conflicts, raise_first
from zarrlake.spark.handles import SessionHandle
from zarrlake.spark.layout import CHUNKS, ChunkSink
from zarrlake.spark.rowsink import RowSink
from zarrlake.spark.targets import Targets


@dataclass
class WrittenChunks(WriterCommitMessage):
    """What one task attempt wrote: chunk keys per array, the task's partition id, the writer
    id it staged under (the driver accepts the writers of committed attempts), how far it
    wrote along append_dim (largest index + 1), the coordinate arrays' cells it saw, and the
    zarrlake error it met instead, if any."""

    partition: int
    keys: dict[str, list[str]] = field(default_factory=dict)
    rows: int = 0
    writer: str = ""
    extent: int = 0
    coords: dict[str, Cells] = field(default_factory=dict)
    error: TaskError | None = None


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
    """A write job: its session and targets. Pickled to every task (`write`) and to the
    driver's commit/abort step; each re-joins the job's session there on first use (so abort
    works even when the session is already closed). `write_array` runs the same object's
    `write` in a mapInArrow and its `commit` on the driver."""

    def __init__(self, session: Session, targets: Targets, allow_empty: bool = False) -> None:
        self.handle = SessionHandle(session)
        self.targets = targets
        self.allow_empty = allow_empty  # a job that changes nothing commits anyway
        self.tag = f"spark-{secrets.token_hex(8)}"  # this job's task attempts stage under it

    @property
    def session(self) -> Session:
        """The job's session, joined once per task."""
        return self.handle.session

    def opened(self) -> dict[str, zarr.Array]:
        """The target data arrays, opened once per Python worker and job."""
        ref = self.session.branch or ""
        return {
            a.path: self.handle.array(a.path, lambda s, p=a.path: open_array(s, p, ref=ref))
            for a in self.targets.infos
        }

    # executors --------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenChunks:
        """Write one task's rows into the job's session; the message says what it wrote (or
        the zarrlake error it met: the task itself does not fail)."""
        return write_batches(self.session, self.tag, self.opened(), self.targets, iterator)

    def task(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`write` as a mapInArrow function: its message as one row of a binary column."""
        message = pickle.dumps(self.write(batches))
        yield pa.RecordBatch.from_arrays([pa.array([message], pa.binary())], names=["message"])

    # driver -----------------------------------------------------------------------------

    @keep_conflicts
    def commit(self, messages: list[WrittenChunks | None]) -> None:
        """One repository commit for the whole job: unless a task met an error or two tasks
        wrote one chunk; the arrays grown along append_dim and the coordinate arrays written
        first."""
        session = self.session
        try:
            finish(session, self.targets, self.tag, messages)
            session.commit(allow_empty=self.allow_empty)
        except BaseException:
            with contextlib.suppress(SessionClosedError):
                session.abandon()
            raise

    def abort(self, messages: list[WrittenChunks | None]) -> None:
        """A task failed or the job was cancelled: abandon the session; the branch is
        untouched."""
        with contextlib.suppress(SessionClosedError, NotFoundError):
            self.session.abandon()


def finish(
    session: Session, targets: Targets, tag: str, messages: list[WrittenChunks | None]
) -> None:
    """The driver's part of a job before its commit: raise the first error a task met; count
    the committed attempts' writes; refuse chunks two tasks wrote; store the arrays' new
    extent along append_dim; write the coordinate arrays; with replace, delete the chunks no
    task wrote."""
    arrived = [m for m in messages if m is not None]
    raise_first([m.error for m in arrived if m.error is not None])
    accept(session, tag, arrived)
    written = _check_single_writers(targets.infos, arrived)
    ref = session.branch or ""
    extent = max((m.extent for m in arrived), default=0)
    for info in targets.everything:
        array = None
        axis = targets.append.axis(info) if targets.append is not None else None
        if axis is not None and extent > 0:  # resize() stores only a longer extent
            array = open_array(session, info.path, ref=ref)
            resize(array, axis, extent)
        if info in targets.coords:
            array = array or open_array(session, info.path, ref=ref)
            last = not targets.refuse_duplicates
            cells = merged(info, [m.coords[info.path] for m in arrived], last=last)
            write_cells(array, ArrayInfo.of(array, info.path), cells, replace=targets.replace)
    if targets.replace:
        for info in targets.infos:
            _delete_unwritten(session, info, written[info.path])


def _check_single_writers(
    infos: list[ArrayInfo], messages: list[WrittenChunks]
) -> dict[str, set[str]]:
    owner: dict[str, int] = {}
    written: dict[str, set[str]] = {a.path: set() for a in infos}
    conflicts = []
    for msg in messages:
        for path, keys in msg.keys.items():
            for key in keys:
                first = owner.setdefault(key, msg.partition)
                if first != msg.partition:
                    conflicts.append((path, key, first, msg.partition))
            written[path].update(keys)
    if conflicts:
        by_path = {a.path: a for a in infos}
        listed = []
        for path, key, a, b in conflicts:
            coords = _coords_of(by_path[path], key)
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


def _delete_unwritten(session: Session, info: ArrayInfo, keys: set[str]) -> None:
    """Overwrite: delete the array's chunks no task wrote (and fill a written shard's inner
    chunks no task wrote)."""
    meta = f"{info.path}/zarr.json"
    shards = {shard_key_of(k) for k in keys}
    stale = [k for k in session.list_prefix(info.path + "/") if k != meta and k not in shards]
    session.delete_many(stale)
    if info.inner is not None:
        _fill_unwritten_inner(session, info, keys)


def _fill_unwritten_inner(session: Session, info: ArrayInfo, keys: set[str]) -> None:
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
            array = open_array(session, info.path, ref=session.branch or "")
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
        raise InvalidInputError(f"unexpected chunk key {shown(key)!r}; {REPORT_BUG}") from e
    return tuple(c * p + k for c, p, k in zip(coords, info.per_shard, local, strict=True))


def write_batches(
    session: Session,
    tag: str,
    opened: dict[str, zarr.Array],
    targets: Targets,
    batches: Iterator[pa.RecordBatch],
) -> WrittenChunks:
    """Write one task attempt's record batches (cell rows, or whole chunks) into the opened
    data arrays of `session` (and take the coordinate arrays' cells), staged under a new
    writer tagged `tag` and flushed before it returns: what the attempt wrote, for the
    commit on the driver. A zarrlake error ends the attempt's work and comes back in the
    message instead (so Spark logs no failed task)."""
    try:
        writer = session._engine.start_writer(tag)
        # the arrays as this session holds them (a stream's grow from batch to batch)
        infos = [dataclasses.replace(i, shape=tuple(opened[i.path].shape)) for i in targets.infos]
        refuse = targets.refuse_duplicates
        sink: RowSink | ChunkSink
        if targets.layout == CHUNKS:
            sink = ChunkSink(
                opened[infos[0].path], infos[0], append=targets.append, refuse_duplicates=refuse
            )
        else:
            sink = RowSink(
                opened,
                infos,
                replace=targets.replace,
                append=targets.append,
                refuse_duplicates=refuse,
            )
        coords = CoordSink(targets.coords, last=not refuse) if targets.coords else None
        try:
            for batch in batches:
                sink.add(batch)
                if coords is not None:
                    coords.add(batch)
            sink.close()
        finally:
            if isinstance(sink, ChunkSink):
                sink.stop()
        session.flush()  # durable before Spark may count the attempt
        keys = {path: sorted(k) for path, k in sink.written.items()}
        extent = sink.growth.extent if sink.growth is not None else 0
        cells = coords.cells() if coords is not None else {}
        return WrittenChunks(partition_id(), keys, sink.rows, writer, extent, cells)
    except ZarrLakeError as e:
        return WrittenChunks(partition_id(), error=TaskError.of(e))
