"""`option("changes", "A..B")`: the chunks of one array that changed between two refs, one
row per chunk: its grid coordinates, `change` ("added", "modified" or "deleted"), and in the
chunk layout its `shape` and new values (null for deleted chunks)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.session import Session
from zarrlake.spark import options as opts
from zarrlake.spark.arrays import ArrayInfo, open_array
from zarrlake.spark.handles import SessionHandle
from zarrlake.spark.layout import CHUNKS, SHAPE, arrow_schema, chunk_extent
from zarrlake.spark.region import Bounds, in_region

CHANGE = "change"
ADDED, MODIFIED, DELETED = "added", "modified", "deleted"
CHUNKS_PER_PARTITION = 64


def change_schema(info: ArrayInfo, layout: str) -> StructType:
    """The change feed's schema: dimensions, the change kind, then the layout's value columns."""
    for name in (CHANGE, SHAPE):
        if name in info.dims or name == info.column:
            raise InvalidInputError(
                f"array {info.path!r}: the change feed has a column {name!r}, which its "
                "dimension or value column would repeat"
                "; rename that column"
            )
    fields = [StructField(d, LongType(), False) for d in info.dims]
    fields.append(StructField(CHANGE, StringType(), False))
    if layout == CHUNKS:
        fields.append(StructField(SHAPE, ArrayType(LongType(), False), True))
        fields.append(StructField(info.column, ArrayType(info.spark_type, False), True))
    return StructType(fields)


def parse_range(spec: str) -> tuple[str, str]:
    """(from, to) of the `changes` option, "FROM..TO"; InvalidInputError otherwise."""
    a, sep, b = spec.partition("..")
    if not sep or not a.strip() or not b.strip() or ".." in b:
        raise InvalidInputError(f"option 'changes' must be 'FROM..TO' (two refs), not {spec!r}")
    return a.strip(), b.strip()


@dataclass
class ChangeFeed:
    """The planned feed: the array as of TO (or FROM, if TO deleted it), the changed chunks
    with their kind, and the session at TO to read new values from."""

    name: str
    info: ArrayInfo
    session: Session
    changed: list[tuple[tuple[int, ...], str]]

    @classmethod
    def plan(cls, options, path: str) -> ChangeFeed:
        """Plan the feed of array `path` between the refs named by the `changes` option."""
        old, new = parse_range(opts.required(options, "changes", "FROM..TO"))
        repo = opts.RepoOptions.parse(options).open()
        diff = repo.diff(old, new)
        before, after = repo.readonly_session(old), repo.readonly_session(new)
        try:
            array = open_array(after, path, ref=new)
            session = after
        except NotFoundError:
            array = open_array(before, path, ref=old)
            session = before
        info = ArrayInfo.of(array, path)
        if path not in diff.chunks_per_shard:  # the diff names stored objects (shards)
            info = dataclasses.replace(info, inner=None)
        try:
            old_array = open_array(before, path, ref=old)
        except NotFoundError:
            old_array = None
        changed = []
        for coords in sorted(c for c in diff.chunks_written.get(path, ()) if isinstance(c, tuple)):
            stored = tuple(c // n for c, n in zip(coords, info.per_shard, strict=True))
            existed = old_array is not None and before.exists(info.chunk_key(old_array, stored))
            changed.append((coords, MODIFIED if existed else ADDED))
        for coords in sorted(c for c in diff.chunks_deleted.get(path, ()) if isinstance(c, tuple)):
            changed.append((coords, DELETED))
        return cls(f"{old}..{new}", info, session, changed)


class ChangeRun(InputPartition):
    """One input partition of a change feed: the changed chunks it reads, with their kind."""

    def __init__(self, rows: list[tuple[tuple[int, ...], str]]) -> None:
        self.rows = rows


class ChangeReader(DataSourceReader):
    """Reads a planned change feed: one row per changed chunk (or cell), with its kind."""

    def __init__(self, feed: ChangeFeed, layout: str, region: Bounds | None = None) -> None:
        self.handle = SessionHandle(feed.session)
        self.info = feed.info
        self.changed = [c for c in feed.changed if region is None or in_region(c[0], region)]
        self.layout = layout

    def partitions(self) -> list[ChangeRun]:
        """The changed chunks split into runs (one input partition each)."""
        rows = self.changed
        if not rows:
            return [ChangeRun([])]
        n = CHUNKS_PER_PARTITION if self.layout == CHUNKS else 100_000
        return [ChangeRun(rows[i : i + n]) for i in range(0, len(rows), n)]

    def read(self, partition: ChangeRun) -> Iterator[pa.RecordBatch]:
        """The rows of one run: coordinates, change kind and the new values at TO."""
        info, rows = self.info, partition.rows
        if not rows:
            return
        columns = [pa.array([c[d] for c, _ in rows], pa.int64()) for d in range(len(info.dims))]
        columns.append(pa.array([kind for _, kind in rows], pa.string()))
        names = [*info.dims, CHANGE]
        if self.layout == CHUNKS:
            array = self.handle.array(
                info.path,
                lambda s: open_array(s, info.path, ref=self.handle.session.base_commit),
            )
            shapes, values = [], []
            for coords, kind in rows:
                if kind == DELETED:
                    shapes.append(None)
                    values.append(None)
                    continue
                block = array[chunk_extent(info, coords)]
                shapes.append(list(block.shape))
                values.append(pa.array(block.reshape(-1).astype(info.spark_dtype, copy=False)))
            columns.append(pa.array(shapes, pa.list_(pa.int64())))
            value_type = pa.list_(pa.from_numpy_dtype(info.spark_dtype))
            columns.append(
                pa.array([None if v is None else v.to_numpy() for v in values], value_type)
            )
            names += [SHAPE, info.column]
        batch = pa.RecordBatch.from_arrays(columns, names=names)
        yield batch.cast(arrow_schema(change_schema(info, self.layout)))
