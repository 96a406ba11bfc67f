"""gc with a real PostgreSQL metastore (and S3 through a moto server): the same reclaim as
on SQLite, with candidates and staged records deleted in batches; a concurrent second
collector is refused while the first holds the lock."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import all_objects, chunk, fsck, reachable, unreachable
from zarrlake.errors import GcBusyError
from zarrlake.vc.gc_protocol import GcState

ZERO = timedelta(0)


def test_reclaim_on_postgres(tmp_path, pg_metastore_url: str) -> None:
    repo = zl.Repo.create(tmp_path / "repo", metastore=pg_metastore_url)
    for i in range(3):
        s = repo.create_session()
        s.write_many([(f"a/c/{j}", chunk(10 * i + j)) for j in range(3)] + [("b/c/0", b"p" * 900)])
        s.commit(f"c{i}")
    s = repo.create_session()
    s.write_many([(f"x/c/{j}", chunk(100 + j)) for j in range(1500)])  # > one batch of 1,000
    s.flush()  # one fragment naming 1,500 chunk objects
    repo._context.records.update(s.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0}))
    repo.expire(ZERO)
    expected, live = unreachable(repo), reachable(repo)
    report = repo.gc(ZERO)
    assert report.staged_records_deleted == 2  # its fragment record, its writer's state
    assert report.objects_deleted == len(expected)
    assert all_objects(repo) == live
    assert fsck(repo) == []
    assert repo.readonly_session().read("a/c/2") == chunk(22)
    assert GcState(repo._context).candidates() == {}  # every candidate settled


def test_one_collector_at_a_time(tmp_path, pg_metastore_url: str) -> None:
    repo = zl.Repo.create(tmp_path / "repo", metastore=pg_metastore_url)
    holder = GcState(repo._context)
    holder.acquire()
    try:
        with pytest.raises(GcBusyError, match="another garbage collection"):
            repo.gc(ZERO)
    finally:
        holder.release()
    assert repo.gc(ZERO).objects_deleted == 0


def test_full_gc_on_s3(tmp_path, s3_location, pg_metastore_url: str) -> None:
    """The full mark-and-sweep lists and deletes through S3 (a moto server)."""
    location, options = s3_location
    repo = zl.Repo.create(location, metastore=pg_metastore_url, storage_options=options)
    s = repo.create_session()
    s.write_many([(f"a/c/{j}", chunk(j)) for j in range(4)])
    s.commit("one")
    for j in range(5):  # an aborted job's uploads, unknown to the metastore
        repo._context.objects.put_chunk(chunk(300 + j))
    expected, live = unreachable(repo), reachable(repo)
    assert len(expected) == 5
    report = repo.gc(ZERO, full=True)
    assert report.by_kind == {"chunks": (5, 5 * 20_000)}
    assert all_objects(repo) == live
    assert fsck(repo) == []
