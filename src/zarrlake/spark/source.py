"""The "zarrlake" Spark data source: option parsing, schema, and the reader and writer it
hands to Spark. reader()/writer() run on the driver side; what they return is pickled to
the tasks."""

from __future__ import annotations

import contextlib

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
from pyspark.sql.types import StructType

from zarrlake.errors import InvalidInputError, SessionClosedError
from zarrlake.spark import options as opts
from zarrlake.spark.arrays import ArrayInfo, open_array
from zarrlake.spark.layout import (
    CHUNKS,
    ChunkReader,
    binary_values,
    chunk_schema,
    layout_of,
    rows_grid,
)
from zarrlake.spark.region import parse_region
from zarrlake.spark.targets import plan
from zarrlake.spark.value_filter import WHERE, value_filter


class ZarrLakeSource(DataSource):
    """The "zarrlake" data source: zarr arrays in a zarrlake repository as rows.

    For spark.read/df.write .format("zarrlake"); each row holds dimension indices plus a value.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: `spark.read.format("zarrlake")`."""
        return "zarrlake"

    def _read_target(self):  # -> (readonly Session, ArrayInfo, ref, Repo)
        repo = opts.RepoOptions.parse(self.options).open()
        path = self._read_path()
        ref = self._given().get("ref") or self._given().get("branch") or "main"
        session = repo.readonly_session(ref)
        info = ArrayInfo.of(open_array(session, path, ref=ref), path)
        return session, info, ref, repo

    def _given(self) -> dict[str, str]:
        return {k.lower(): v for k, v in dict(self.options).items()}

    def _read_path(self) -> str:
        paths = opts.array_paths(self.options)
        if len(paths) != 1:
            raise InvalidInputError(
                f"reading takes one array (option 'array'), not {paths}"
                "; read one array per DataFrame"
            )
        return paths[0]

    def _schema_of(self, info: ArrayInfo) -> StructType:
        if self._given().get("changes"):
            from zarrlake.spark.changes import change_schema

            return change_schema(info, layout_of(self.options))
        if layout_of(self.options) == CHUNKS:
            return chunk_schema(info, binary_values(self.options))
        return info.schema()

    def schema(self) -> StructType:
        """The schema of the read (cells, chunks or change feed) the options describe."""
        if self._given().get("changes"):
            from zarrlake.spark.changes import ChangeFeed

            return self._schema_of(ChangeFeed.plan(self.options, self._read_path()).info)
        _, info, _, _ = self._read_target()
        return self._schema_of(info)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader for the options: an array at a ref, or a change feed."""
        from zarrlake.spark.reader import ZarrLakeReader

        if self._given().get("changes"):
            from zarrlake.spark.changes import ChangeFeed, ChangeReader

            if WHERE in self._given():
                raise InvalidInputError(
                    "option 'where' filters an array's values; the change feed (option "
                    "'changes') takes none; use Spark's filter() on its rows instead"
                )
            feed = ChangeFeed.plan(self.options, self._read_path())
            self._check_columns(schema, feed.info, feed.name)
            region = parse_region(self.options, feed.info.dims, feed.info.unit_grid)
            return ChangeReader(feed, layout_of(self.options), region)
        session, info, ref, repo = self._read_target()
        self._check_columns(schema, info, ref)
        chunks = info.unit  # the chunks statistics are kept for
        cls = ChunkReader if layout_of(self.options) == CHUNKS else ZarrLakeReader
        if cls is ChunkReader:
            info = rows_grid(self.options, info)
            region = parse_region(self.options, info.dims, info.unit_grid)
            bounds = [
                (lo * c, min(hi * c, n))
                for (lo, hi), c, n in zip(region, info.unit, info.shape, strict=True)
            ]
        else:
            bounds = parse_region(self.options, info.dims, info.shape)
        values = value_filter(self.options, repo, info, session.base_commit, bounds, chunks)
        reader = cls(
            session,
            info,
            bounds=bounds,
            partition_rows=opts.get_int(self.options, "partition_rows", None),
            partition_bytes=opts.get_int(self.options, "partition_bytes", None),
            where=None if values is None else values.node,
            keep=None if values is None else values.keep,
        )
        if isinstance(reader, ChunkReader):
            reader.binary = binary_values(self.options)
        return reader

    def _check_columns(self, schema: StructType, info: ArrayInfo, ref: str) -> None:
        want = self._schema_of(info).fieldNames()
        if schema.fieldNames() != want:
            raise InvalidInputError(
                f"array {info.path!r} at {ref!r} reads as columns {want}, not {schema.fieldNames()}"
                "; select those columns"
            )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch writer: opens the job's session on the branch, which the driver commits."""
        return open_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        """df.writeStream.format("zarrlake"): one commit per micro-batch, exactly once.

        The array must exist (create it with a batch write or zarr first).
        """
        from zarrlake.spark.stream import ZarrLakeStreamWriter, stream_id

        if overwrite:
            raise InvalidInputError("the zarrlake streaming sink appends; use outputMode append")
        repo_options = opts.RepoOptions.parse(self.options)
        branch = self._given().get("branch") or "main"
        session = repo_options.open().readonly_session(branch)
        targets = plan(session, self.options, schema, overwrite=False)
        return ZarrLakeStreamWriter(repo_options, branch, targets, stream_id(self.options))


def open_writer(options, schema: StructType, overwrite: bool):  # -> ZarrLakeWriter
    """A batch write job: its session on the branch (NotFoundError naming a missing branch)
    and its targets, planned and checked; the session is abandoned if the plan fails."""
    from zarrlake.spark.writer import ZarrLakeWriter

    given = {k.lower(): v for k, v in dict(options).items()}
    repo = opts.RepoOptions.parse(options).open()
    session = repo.create_session(
        given.get("branch") or "main", message=given.get("message"), author=given.get("author")
    )
    try:
        targets = plan(session, options, schema, overwrite)
    except BaseException:
        with contextlib.suppress(SessionClosedError):
            session.abandon()
        raise
    return ZarrLakeWriter(session, targets, opts.get_flag(options, "allow_empty"))
