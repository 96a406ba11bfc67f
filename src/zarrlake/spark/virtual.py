"""Importing NetCDF4/HDF5 archives as virtual chunks with Spark: one task per batch of files
finds their chunks (VirtualiZarr's HDF parser), the driver joins the references in the order
of the concat dimension's coordinate and stages them into the caller's session (one commit,
by the caller)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from zarrlake.errors import InvalidInputError, ZarrLakeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from zarrlake.session import Session
    from zarrlake.virtual.model import VirtualDataset


def _scan_batch(options: dict[str, Any]):
    """The task function: (index, url) pairs -> (index, dataset or error message)."""

    def run(items: Iterator[tuple[int, str]]) -> Iterator[tuple[int, Any, str | None]]:
        from zarrlake.storage.sources import SourceReader
        from zarrlake.virtual.scan import scan_file

        reader = SourceReader(options)
        for i, url in items:
            try:
                yield i, scan_file(url, reader), None
            except ZarrLakeError as e:  # reported by the driver, naming the file
                yield i, None, str(e)

    return run


def import_virtual(
    spark: SparkSession,
    session: Session,
    urls: Iterable[str],
    concat_dim: str = "time",
    group: str = "",
    *,
    files_per_task: int | None = None,
) -> VirtualDataset:
    """Import files as virtual chunks with one Spark task per batch of files.

    The files are joined along `concat_dim` in the order of its coordinate; the caller
    commits `session` once.

    Parameters
    ----------
    spark
        The Spark session whose executors read the files' metadata.
    session
        An open zarrlake session.
    urls
        `file:///...` or `s3://...` URLs of NetCDF4/HDF5 files, in any order.
    concat_dim, group
        As for `zarrlake.virtual.import_files`.
    files_per_task
        Files per Spark task (default: spread over about 4 tasks per core).

    Raises
    ------
    InvalidInputError
        A URL outside the allowed prefixes, a missing or unreadable file, or files that
        overlap or do not match (naming both). Nothing is staged.
    """
    from zarrlake.virtual import check_urls
    from zarrlake.virtual.model import concat
    from zarrlake.virtual.writing import write_dataset

    urls = check_urls(session, urls)
    cores = spark.sparkContext.defaultParallelism
    per = files_per_task or max(1, len(urls) // (4 * cores))
    slices = max(1, -(-len(urls) // per))
    options = dict(session.spec.storage_options)
    results = (
        spark.sparkContext.parallelize(list(enumerate(urls)), slices)
        .mapPartitions(_scan_batch(options))
        .collect()
    )
    errors = sorted((i, msg) for i, _, msg in results if msg is not None)
    if errors:
        raise InvalidInputError(errors[0][1])
    parts = [ds for _, ds, _ in sorted(results, key=lambda r: r[0])]
    if len(parts) != len(urls):
        raise InvalidInputError(
            f"{len(urls) - len(parts)} file(s) were not scanned; run the import again"
        )
    ds = concat(parts, concat_dim)
    write_dataset(session, ds, group, append_dim=concat_dim)
    return ds
