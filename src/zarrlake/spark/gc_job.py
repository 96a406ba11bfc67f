"""Garbage collection as a Spark job, for repositories too big for one machine's listing:
the full mark-and-sweep with the listing spread over tasks by key prefix (each task keeps
only keys the broadcast live set lacks) and deletes spread over tasks. Marking, candidate
bookkeeping and the sweep protocol run on the driver, as in `Repo.gc`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

from zarrlake.spark.repo_arg import RepoArg, opened

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from zarrlake.connection import RepoContext, RepoSpec
    from zarrlake.lifecycle.gc import GcReport
    from zarrlake.repo import Repo

HEX = "0123456789abcdef"
SPARK_DELETE_BATCH = 20_000


def _context(spec: RepoSpec) -> RepoContext:
    """The repository on an executor (one per process and spec)."""
    from zarrlake.connection import connect

    return connect(spec)


def gc(
    spark: SparkSession,
    repo: RepoArg,
    older_than: timedelta = timedelta(hours=1),
    *,
    dry_run: bool = False,
    partitions: int | None = None,
) -> GcReport:
    """Run `repo.gc(older_than, full=True, dry_run=dry_run)` on Spark.

    The listing and the deletes run as Spark jobs (`partitions` tasks; default: Spark's
    default parallelism). `repo` is a `Repo`, its `spec` or its location (opened for the run,
    then closed).
    """
    with opened(repo) as r:
        return _gc(spark, r, older_than, dry_run, partitions)


def _gc(
    spark: SparkSession,
    repo: Repo,
    older_than: timedelta,
    dry_run: bool,
    partitions: int | None,
) -> GcReport:
    from zarrlake.lifecycle.gc import collect
    from zarrlake.vc.sweep_fence import FencedDeletes, SweepEnded

    sc = spark.sparkContext
    spec = repo.spec
    tasks = partitions or sc.defaultParallelism

    def lister(prefixes: list[str], live: set[str]) -> Iterator[str]:
        shards = [p + a + b for p in prefixes for a in HEX for b in HEX]
        known = sc.broadcast(live)

        def list_shard(prefix: str) -> Iterator[str]:
            store = _context(spec).object_store
            return (k for k in store.list(prefix) if k not in known.value)

        try:
            yield from sc.parallelize(shards, tasks).flatMap(list_shard).toLocalIterator()
        finally:
            known.unpersist()

    def deleter(batch: FencedDeletes) -> list[str]:
        keys = list(batch.tags)

        def delete_part(part: Iterator[str]) -> Iterator[str | None]:
            try:  # under the sweep's fence, as the driver would (vc/sweep_fence.py)
                yield from batch.run(_context(spec).object_store, list(part))
            except SweepEnded:
                yield None  # ended by another process: the driver stops

        done = sc.parallelize(keys, max(1, min(tasks, len(keys)))).mapPartitions(delete_part)
        deleted = done.collect()
        if None in deleted:
            raise SweepEnded(
                "this garbage collection's sweep was ended by another process; run gc again "
                "(nothing it did not delete is lost)"
            )
        return [k for k in deleted if k is not None]

    return collect(
        repo._context,
        older_than,
        dry_run=dry_run,
        full=True,
        lister=lister,
        deleter=deleter,
        delete_batch=SPARK_DELETE_BATCH,
    )
