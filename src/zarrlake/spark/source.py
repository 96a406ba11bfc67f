"""The "zarrlake" Spark data source: option parsing, schema, and the reader and writer it
hands to Spark. reader()/writer() run on the driver side; what they return is pickled to
the tasks."""

from __future__ import annotations

import contextlib

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
from pyspark.sql.types import StructType

from zarrlake.errors import InvalidInputError, NotFoundError, SessionClosedError
from zarrlake.spark import options as opts
from zarrlake.spark.arrays import (
    INTEGER_TYPES,
    ArrayInfo,
    check_value_type,
    create_array,
    creation_options,
    open_array,
)
from zarrlake.spark.layout import (
    CHUNKS,
    ChunkReader,
    binary_values,
    check_chunk_schema,
    chunk_schema,
    layout_of,
    rows_grid,
)
from zarrlake.spark.region import parse_region


class ZarrLakeSource(DataSource):
    """The "zarrlake" data source: zarr arrays in a zarrlake repository as rows.

    For spark.read/df.write .format("zarrlake"); each row holds dimension indices plus a value.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: `spark.read.format("zarrlake")`."""
        return "zarrlake"

    def _read_target(self):  # -> (readonly Session, ArrayInfo, ref)
        repo = opts.RepoOptions.parse(self.options).open()
        path = self._read_path()
        ref = self._given().get("ref") or self._given().get("branch") or "main"
        session = repo.readonly_session(ref)
        info = ArrayInfo.of(open_array(session, path, ref=ref), path)
        return session, info, ref

    def _given(self) -> dict[str, str]:
        return {k.lower(): v for k, v in dict(self.options).items()}

    def _read_path(self) -> str:
        paths = opts.array_paths(self.options)
        if len(paths) != 1:
            raise InvalidInputError(f"reading takes one array (option 'array'), not {paths}")
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
        _, info, _ = self._read_target()
        return self._schema_of(info)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader for the options: an array at a ref, or a change feed."""
        from zarrlake.spark.reader import ZarrLakeReader

        if self._given().get("changes"):
            from zarrlake.spark.changes import ChangeFeed, ChangeReader

            feed = ChangeFeed.plan(self.options, self._read_path())
            self._check_columns(schema, feed.info, feed.name)
            region = parse_region(self.options, feed.info.dims, feed.info.unit_grid)
            return ChangeReader(feed, layout_of(self.options), region)
        session, info, ref = self._read_target()
        self._check_columns(schema, info, ref)
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
        reader = cls(
            session,
            info,
            bounds=bounds,
            partition_rows=opts.get_int(self.options, "partition_rows", None),
            partition_bytes=opts.get_int(self.options, "partition_bytes", None),
        )
        if isinstance(reader, ChunkReader):
            reader.binary = binary_values(self.options)
        return reader

    def _check_columns(self, schema: StructType, info: ArrayInfo, ref: str) -> None:
        want = self._schema_of(info).fieldNames()
        if schema.fieldNames() != want:
            raise InvalidInputError(
                f"array {info.path!r} at {ref!r} reads as columns {want}, not {schema.fieldNames()}"
            )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch writer: opens the job's session on the branch, which the driver commits."""
        from zarrlake.spark.writer import ZarrLakeWriter

        repo_options = opts.RepoOptions.parse(self.options)
        paths = opts.array_paths(self.options)
        given = {k.lower(): v for k, v in dict(self.options).items()}
        branch = given.get("branch") or "main"
        create = creation_options(self.options)
        repo = repo_options.open()
        session = repo.create_session(
            branch, message=given.get("message"), author=given.get("author")
        )
        try:
            infos = [self._target_array(session, p, branch, create, overwrite) for p in paths]
            layout = layout_of(self.options)
            if layout == CHUNKS:
                check_chunk_schema(schema, infos)
                infos = [rows_grid(self.options, i) for i in infos]
            else:
                check_write_schema(schema, infos)
        except BaseException:
            with contextlib.suppress(SessionClosedError):
                session.abandon()
            raise
        allow_empty = opts.get_flag(self.options, "allow_empty")
        return ZarrLakeWriter(session, infos, overwrite, layout, allow_empty)

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
        infos = [
            ArrayInfo.of(open_array(session, p, ref=branch), p)
            for p in opts.array_paths(self.options)
        ]
        layout = layout_of(self.options)
        if layout == CHUNKS:
            check_chunk_schema(schema, infos)
            infos = [rows_grid(self.options, i) for i in infos]
        else:
            check_write_schema(schema, infos)
        return ZarrLakeStreamWriter(repo_options, branch, infos, stream_id(self.options), layout)

    @staticmethod
    def _target_array(session, path: str, branch: str, create: dict | None, overwrite: bool):
        try:
            array = open_array(session, path, ref=branch)
        except NotFoundError:
            if create is None:
                raise NotFoundError(
                    f"no array {path!r} on branch {branch!r}; to create it give options shape, "
                    "chunks, dtype and dims"
                ) from None
            array = create_array(session, path, create, replace=False)
        else:
            if overwrite and create is not None:
                array = create_array(session, path, create, replace=True)
            elif create is not None:
                _check_matches(array, path, create)
        return ArrayInfo.of(array, path)


def _check_matches(array, path: str, create: dict) -> None:
    """Creation options given for an existing array must describe it (or use overwrite)."""
    have = (tuple(array.shape), tuple(array.chunks), list(array.metadata.dimension_names or []))
    want = (tuple(create["shape"]), tuple(create["chunks"]), create["dimension_names"])
    if have != want:
        raise InvalidInputError(
            f"array {path!r} already exists with shape {have[0]}, chunks {have[1]}, dims "
            f"{have[2]}, not {want[0]}, {want[1]}, {want[2]}; use mode('overwrite') to "
            "replace it"
        )


def check_write_schema(schema: StructType, infos: list[ArrayInfo]) -> None:
    """The DataFrame must have an integer column per dimension and a value column per array
    whose type casts to the array's dtype without changing kind."""
    dims = infos[0].dims
    for info in infos[1:]:
        if info.dims != dims:
            raise InvalidInputError(
                f"arrays written together must share dimensions: {infos[0].path!r} has "
                f"{dims}, {info.path!r} has {info.dims}"
            )
    fields = {f.name: f.dataType for f in schema.fields}
    missing = [d for d in dims if d not in fields]
    if missing:
        raise InvalidInputError(
            f"the DataFrame has no column(s) {missing} for dimension(s) of array "
            f"{infos[0].path!r} (dims {list(dims)}; columns {list(fields)})"
        )
    for d in dims:
        if not isinstance(fields[d], INTEGER_TYPES):
            raise InvalidInputError(
                f"dimension column {d!r} must have an integer type, not {fields[d].simpleString()}"
            )
    for info in infos:
        col = info.column
        if col not in fields:
            raise InvalidInputError(
                f"the DataFrame has no value column {col!r} for array {info.path!r} "
                f"(columns {list(fields)})"
            )
        check_value_type(col, fields[col], info)
