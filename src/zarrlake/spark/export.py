"""Exporting a version as plain Zarr v3 with Spark (`zl.spark.export`), for trees too large
for one machine: the driver plans (and refuses, before anything is written, what
`Repo.export` refuses), tasks copy the chunks of a few manifest ranges each, straight from
the repository's storage to the destination, and the driver writes the metadata documents
once every task has succeeded (a failed job leaves no hierarchy a reader would open)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from zarrlake.spark.repo_arg import RepoArg, opened

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from zarrlake.admin.export import ExportReport, Part
    from zarrlake.connection import RepoSpec


def _copy_task(
    spec: RepoSpec,
    snapshot: str,
    url: str,
    options: dict,
    workers: int,
) -> Callable[[Iterable[Part]], list[tuple[int, int, int]]]:
    """The function a task runs on its parts: (chunks, bytes, virtual chunks read)."""

    def run(parts: Iterable[Part]) -> list[tuple[int, int, int]]:
        from zarrlake.admin.export import copy_parts, threads_for
        from zarrlake.connection import connect
        from zarrlake.format.snapshot import SnapshotRoot
        from zarrlake.storage import open_storage

        ctx = connect(spec)
        root = ctx.objects.read(SnapshotRoot, snapshot)
        dest = open_storage(url, **options)
        try:
            threads = threads_for(workers, ctx.objects, dest)
            with ThreadPoolExecutor(threads, thread_name_prefix="zarrlake-export") as pool:
                return [copy_parts(ctx.objects, root, snapshot, parts, dest, pool, 4 * threads)]
        finally:
            dest.close()

    return run


def export(
    spark: SparkSession,
    repo: RepoArg,
    ref: str,
    dest: str | os.PathLike,
    *,
    arrays: list[str] | tuple[str, ...] | None = None,
    storage_options: dict | None = None,
    virtual: str = "refuse",
    overwrite: bool = False,
    ranges_per_task: int = 4,
    workers: int = 8,
) -> ExportReport:
    """`Repo.export` as a Spark job: each task copies the chunks of `ranges_per_task`
    manifest ranges (a few thousand chunks each), `workers` at once (at most two a core
    between local stores); the metadata is
    written by the driver once all tasks succeeded.

    `repo` is a `Repo`, its `spec` or its location; `dest` a directory every executor sees
    (a shared file system) or an object-store URL, with `storage_options` for it.

    Returns
    -------
    ExportReport
        Arrays, documents, chunks and bytes written, and the time taken.
    """
    from zarrlake.admin.export import prepare, write_documents
    from zarrlake.errors import InvalidInputError

    for name, value in (("ranges_per_task", ranges_per_task), ("workers", workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name} must be a positive integer, not {value!r}")
    began = time.monotonic()
    with opened(repo) as r:
        commit = r.resolve(ref)
        plan = prepare(
            r._context,
            commit,
            dest,
            None if arrays is None else list(arrays),
            storage_options,
            virtual,  # type: ignore[arg-type]
            overwrite,
            ranges_per_task,
        )
        try:
            counts = [0, 0, 0]
            if plan.parts:
                sc = spark.sparkContext
                run = _copy_task(r.spec, plan.snapshot, plan.url, storage_options or {}, workers)
                parts: list[Part] = plan.parts
                rdd = sc.parallelize(parts, len(parts)).mapPartitions(run)
                for got in rdd.collect():
                    counts = [a + b for a, b in zip(counts, got, strict=True)]
            write_documents(plan.store, plan.documents)
        finally:
            plan.store.close()
    return plan.report(commit, dest, counts, began)
