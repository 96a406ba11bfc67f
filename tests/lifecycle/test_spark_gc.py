"""zl.spark.gc: the full mark-and-sweep with listing and deletes as Spark jobs deletes
exactly what an independent mark-and-sweep finds unreachable."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import all_objects, chunk, fsck, reachable, unreachable


@pytest.mark.slow
def test_spark_gc_deletes_exactly_the_unreachable(tmp_path, spark) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    for i in range(3):
        s = repo.create_session()
        s.write_many([(f"a/c/{j}", chunk(10 * i + j)) for j in range(4)] + [("p/c/0", b"q" * 900)])
        s.commit(f"c{i}")
    for j in range(20):  # an aborted job's uploads, unknown to the metastore
        repo._context.objects.put_chunk(chunk(500 + j))
    repo.expire(timedelta(0))
    expected = unreachable(repo)
    live = reachable(repo)
    assert len(expected) > 20
    dry = zl.spark.gc(spark, repo, timedelta(0), dry_run=True)
    assert dry.objects_deleted == len(expected) and all_objects(repo) == live | expected
    report = zl.spark.gc(spark, repo, timedelta(0))
    assert report.full and report.objects_deleted == len(expected)
    assert all_objects(repo) == live
    assert fsck(repo) == []
    assert repo.readonly_session().read("a/c/3") == chunk(23)
