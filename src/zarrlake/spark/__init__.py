"""zarrlake on Spark: the "zarrlake" data source (batch read and write, one commit per job),
`write_array` (rows repartitioned by chunk, then written), `map_regions` (cooperative
sessions for RDD pipelines) and `import_virtual` (NetCDF/HDF5 archives as virtual chunks)."""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from zarrlake.errors import InvalidInputError, NotFoundError, SessionClosedError
from zarrlake.spark.errors import keep_conflicts, zarrlake_errors
from zarrlake.spark.gc_job import gc
from zarrlake.spark.handles import SessionHandle
from zarrlake.spark.layout import CHUNKS, layout_of
from zarrlake.spark.repo_arg import RepoArg, source_options
from zarrlake.spark.source import ZarrLakeSource
from zarrlake.spark.virtual import import_virtual

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from zarrlake.session import Session

__all__ = [
    "ZarrLakeSource",
    "gc",
    "import_virtual",
    "map_regions",
    "register",
    "write_array",
    "zarrlake_errors",
]

CHUNK_COLUMN = "__zarrlake_chunk"


def register(spark: SparkSession) -> None:
    """Register the "zarrlake" format with `spark`.

    Once per Spark session: registering again would make Spark warn that the source was
    replaced. Reads are narrowed by option `region`, not by filter push-down (see
    zarrlake.spark.region), so Spark's push-down setting is left as the user has it.
    """
    if spark.conf.get(_REGISTERED, "false") == "true":
        return
    spark.dataSource.register(ZarrLakeSource)
    spark.conf.set(_REGISTERED, "true")


_REGISTERED = "spark.zarrlake.registered"


def _string_options(options: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in options.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(value)
    return out


def _chunking(options: dict[str, str], paths: tuple[str, ...], branch: str):
    """(dims, chunks, shape) of the first target array: stored, or from creation options."""
    from zarrlake.spark import options as opts
    from zarrlake.spark.arrays import ArrayInfo, creation_options, open_array

    create = creation_options(options)
    if create is not None and options.get("mode") == "overwrite":
        return tuple(create["dimension_names"]), create["chunks"], create["shape"]
    repo = opts.RepoOptions.parse(options).open()
    try:
        session = repo.readonly_session(branch)
        info = ArrayInfo.of(open_array(session, paths[0], ref=branch), paths[0])
        return info.dims, info.chunks, info.shape
    except NotFoundError:
        if create is None:
            raise NotFoundError(
                f"no array {paths[0]!r} on branch {branch!r}; to create it give shape, "
                "chunks, dtype and dims"
            ) from None
        return tuple(create["dimension_names"]), create["chunks"], create["shape"]
    finally:
        repo.close()


def write_array(
    df: DataFrame,
    *,
    repo: RepoArg,
    array: str | None = None,
    arrays: str | Iterable[str] | None = None,
    branch: str = "main",
    message: str | None = None,
    mode: str = "append",
    partitions: int | None = None,
    **options: Any,
) -> None:
    """Write `df` into array(s) of the repository at `repo` on `branch` as one commit.

    `df` has dimension columns + value column(s). Rows are first repartitioned by chunk, so
    every chunk has exactly one writer. Other keyword options are data source options
    (metastore, storage options, author, layout, shape/chunks/dtype/dims to create the
    array). zarrlake errors (ConflictError, InvalidInputError, ...) arrive as themselves.

    Parameters
    ----------
    df
        Rows with one long column per dimension and the value column(s).
    repo
        The repository: a `Repo`, its `spec`, or its location (path or URL; give its
        metastore and storage options as options then).
    array, arrays
        The target array path, or several arrays sharing dims, shape and chunks.
    branch, message
        The branch the job commits to, and the commit message.
    mode
        "append" writes the rows' cells into the array; "overwrite" replaces its contents
        in the same commit (chunks no row writes are deleted).
    partitions
        Spark partitions to write with (default: up to 4 per core, at most one per chunk).

    Raises
    ------
    InvalidInputError
        If a dimension column is missing or an option is malformed.
    ConflictError
        If a concurrent commit changed the same chunks.

    Examples
    --------
    >>> from zarrlake.spark import write_array
    >>> write_array(df, repo="/data/weather", array="t2m", message="day 1")  # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    from zarrlake.spark import options as opts

    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"mode must be 'append' or 'overwrite', not {mode!r}")
    if arrays is not None and not isinstance(arrays, str):
        arrays = ",".join(arrays)
    given = _string_options(
        {**source_options(repo), **options, "array": array, "arrays": arrays, "branch": branch}
    )
    given["message"] = message if message is not None else ""
    if message is None:
        del given["message"]
    paths = opts.array_paths(given)
    dims, chunks, shape = _chunking({**given, "mode": mode}, paths, branch)
    missing = [d for d in dims if d not in df.columns]
    if missing:
        raise InvalidInputError(
            f"the DataFrame has no column(s) {missing} for dimension(s) {list(dims)} of array "
            f"{paths[0]!r} (columns {df.columns})"
        )
    grid = [max(1, math.ceil(s / c)) for s, c in zip(shape, chunks, strict=True)]
    per_row = [1] * len(chunks) if layout_of(given) == CHUNKS else chunks
    chunk_id = F.lit(0).cast("long")
    for d, c, stride in zip(dims, per_row, _strides(grid), strict=True):
        chunk_id = chunk_id + (F.col(f"`{d}`").cast("long") / F.lit(c)).cast("long") * stride
    n = partitions or max(
        1, min(math.prod(grid), 4 * df.sparkSession.sparkContext.defaultParallelism)
    )
    register(df.sparkSession)
    with zarrlake_errors():
        (
            df.withColumn(CHUNK_COLUMN, chunk_id)
            .repartition(n, CHUNK_COLUMN)
            .drop(CHUNK_COLUMN)
            .write.format("zarrlake")
            .mode(mode)
            .options(**given)
            .save()
        )


def _strides(grid: list[int]) -> list[int]:
    strides, acc = [], 1
    for g in reversed(grid):
        strides.append(acc)
        acc *= g
    return list(reversed(strides))


def map_regions[R, T](
    spark: SparkSession,
    session: Session,
    regions: Iterable[R],
    fn: Callable[[Session, R], T],
    *,
    num_slices: int | None = None,
) -> list[T]:
    """Run fn(session, region) for every region as Spark tasks.

    Each task runs on the same session re-joined on its executor; returns the results in
    region order. Commit the session on the driver afterwards: the whole run becomes one
    commit. Each task attempt stages under its own writer, flushed before the task ends; only
    the attempts whose results Spark returns count, so a failed or speculative attempt
    contributes nothing.

    Parameters
    ----------
    spark
        The active Spark session.
    session
        An open zarrlake session (or a read-only one, to read in parallel).
    regions
        The units of work (e.g. slices or chunk coordinates); each goes to one task call.
    fn
        Called as fn(session, region) on an executor.
    num_slices
        Spark partitions (default: up to 2 per core).

    Returns
    -------
    list
        fn's results, in the order of `regions`.

    Raises
    ------
    SessionClosedError
        If the session is no longer open.
    """
    if not session.read_only and session.status != "open":
        raise SessionClosedError(f"session {session.id} is {session.status}; start a new session")
    items = list(regions)
    if not items:
        return []
    n = num_slices or min(len(items), 2 * spark.sparkContext.defaultParallelism)

    handle = SessionHandle(session)
    tag = f"spark-{secrets.token_hex(8)}"
    writable = not session.read_only
    call = keep_conflicts(fn)

    def run(part: Iterator[R]) -> Iterator[tuple[bool, Any]]:
        joined = handle.session  # once per Python worker and session, not per task
        writer = joined._engine.start_writer(tag) if writable else ""
        for region in part:
            yield False, call(joined, region)
        if writable:
            joined.flush()
        yield True, writer

    with zarrlake_errors():
        out = spark.sparkContext.parallelize(items, n).mapPartitions(run).collect()
    if writable:
        session._engine.accept_writers(tag, [w for last, w in out if last])
    return [value for last, value in out if not last]
