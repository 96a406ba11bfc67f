"""zarrlake on Spark: the "zarrlake" data source (batch read and write, one commit per job),
`write_array` (rows repartitioned by chunk, then written), `map_regions` (cooperative
sessions for RDD pipelines), `import_virtual` (NetCDF/HDF5 archives as virtual chunks) and
`export` (a version as plain Zarr v3, copied by tasks)."""

from __future__ import annotations

import math
import pickle
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from zarrlake.errors import InvalidInputError, SessionClosedError, ZarrLakeError
from zarrlake.spark.errors import TaskError, raise_first, zarrlake_errors
from zarrlake.spark.export import export
from zarrlake.spark.gc_job import gc
from zarrlake.spark.handles import SessionHandle
from zarrlake.spark.layout import CHUNKS
from zarrlake.spark.repo_arg import RepoArg, source_options
from zarrlake.spark.source import ZarrLakeSource
from zarrlake.spark.virtual import import_virtual

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from zarrlake.session import Session

__all__ = [
    "ZarrLakeSource",
    "export",
    "gc",
    "import_virtual",
    "map_regions",
    "register",
    "write_array",
    "zarrlake_errors",
]


def register(spark: SparkSession) -> None:
    """Register the "zarrlake" format with `spark`.

    Once per Spark session: registering again would make Spark warn that the source was
    replaced. Reads are narrowed by option `isel`, not by filter push-down (see
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


def write_array(
    df: DataFrame,
    *,
    repo: RepoArg,
    array: str | None = None,
    arrays: str | Iterable[str] | None = None,
    branch: str = "main",
    message: str | None = None,
    mode: str = "append",
    append_dim: str | None = None,
    duplicates: str = "error",
    partitions: int | None = None,
    **options: Any,
) -> None:
    """Write `df` into array(s) of the repository at `repo` on `branch` as one commit.

    `df` has dimension columns + value column(s). Rows are first repartitioned by chunk, so
    every chunk has exactly one writer. Other keyword options are data source options
    (metastore, storage options, author, layout, shape/chunks/dtype/dims to create the
    array). zarrlake errors (ConflictError, InvalidInputError, ...) arrive as themselves,
    with their one-line message; a task that meets one ends without failing, so Spark logs
    nothing.

    Parameters
    ----------
    df
        Rows with one long column per dimension and the value column(s).
    repo
        The repository: a `Repo`, its `spec`, or its location (path or URL; give its
        metastore and storage options as options then).
    array, arrays
        The target array path, or several arrays sharing dims, shape and chunks; among
        `arrays`, coordinate arrays on some of those dims (such as `time`) take their values
        from the same rows. An array named like a dimension has value column `<name>_value`.
    branch
        The branch the job commits to (default "main").
    message
        The commit message.
    mode
        "append" writes the rows' cells into the array; "overwrite" replaces its contents
        in the same commit (chunks no row writes are deleted); with `append_dim`, it lets
        rows replace cells at existing indices along that dimension instead.
    append_dim
        Grow the arrays along this dimension to cover the rows' largest index, in the same
        commit (xarray's `to_zarr(append_dim=...)`); rows at indices the array already has
        are refused, naming the first ones, unless mode is "overwrite".
    duplicates
        "error" (default) refuses a cell given by two rows, naming the first ones; "last"
        keeps the last row of each.
    partitions
        Spark partitions to write with (default: up to 4 per core, at most one per chunk).

    Raises
    ------
    InvalidInputError
        If a dimension column is missing, an option is malformed or contradicts the array,
        or rows repeat a cell or append at existing indices.
    NotFoundError
        If the branch does not exist, or the array does not and cannot be created.
    ConflictError
        If a concurrent commit changed the same chunks (or also grew the array).

    Examples
    --------
    >>> from zarrlake.spark import write_array
    >>> write_array(df, repo="/data/weather", array="t2m", message="day 1")  # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    from zarrlake.spark.source import open_writer

    if mode not in ("append", "overwrite"):
        raise InvalidInputError(f"mode must be 'append' or 'overwrite', not {mode!r}")
    if arrays is not None and not isinstance(arrays, str):
        arrays = ",".join(arrays)
    given = _string_options(
        {
            **source_options(repo),
            **options,
            "array": array,
            "arrays": arrays,
            "branch": branch,
            "message": message,
            "append_dim": append_dim,
            "duplicates": duplicates,
        }
    )
    register(df.sparkSession)  # as before: spark.read.format("zarrlake") works after it
    writer = open_writer(given, df.schema, overwrite=mode == "overwrite")
    try:
        targets = writer.targets
        info = targets.infos[0]
        per_row = [1] * len(info.dims) if targets.layout == CHUNKS else info.chunks
        keys = [
            F.floor(F.col(f"`{d}`") / F.lit(c)) for d, c in zip(info.dims, per_row, strict=True)
        ]
        grid = [max(1, math.ceil(s / c)) for s, c in zip(info.shape, per_row, strict=True)]
        if targets.append is not None:  # the chunks of one step along append_dim
            grid[info.dims.index(targets.append.dim)] = 1
        n = partitions or max(
            1, min(math.prod(grid), 4 * df.sparkSession.sparkContext.defaultParallelism)
        )
        with zarrlake_errors():
            rows = df.repartition(n, *keys).mapInArrow(writer.task, "message binary").collect()
    except BaseException:
        writer.abort([])
        raise
    writer.commit([pickle.loads(r.message) for r in rows])


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
        Spark partitions (default: one per core, at most one per region: each Spark task
        costs a scheduling round trip, which outweighs balancing for even regions; give more
        for regions of uneven cost).

    Returns
    -------
    list
        fn's results, in the order of `regions`.

    Raises
    ------
    SessionClosedError
        If the session is no longer open.
    """
    if not session.read_only and session.state != "open":
        raise SessionClosedError(f"session {session.id} is {session.state}; start a new session")
    items = list(regions)
    if not items:
        return []
    n = num_slices or min(len(items), spark.sparkContext.defaultParallelism)

    handle = SessionHandle(session)
    tag = f"spark-{secrets.token_hex(8)}"
    writable = not session.read_only

    def run(part: Iterator[R]) -> Iterator[tuple[str, Any]]:
        try:
            joined = handle.session  # once per Python worker and session, not per task
            writer = joined._engine.start_writer(tag) if writable else ""
            results = [fn(joined, region) for region in part]
            if writable:
                joined.flush()
        except ZarrLakeError as e:  # back as data: the task does not fail, Spark logs nothing
            yield _ERROR, TaskError.of(e)
            return
        for result in results:
            yield _RESULT, result
        yield _WRITER, writer

    with zarrlake_errors():
        out = spark.sparkContext.parallelize(items, n).mapPartitions(run).collect()
    raise_first([value for kind, value in out if kind == _ERROR])
    if writable:
        session._engine.accept_writers(tag, [w for kind, w in out if kind == _WRITER])
    return [value for kind, value in out if kind == _RESULT]


_RESULT, _WRITER, _ERROR = "result", "writer", "error"
