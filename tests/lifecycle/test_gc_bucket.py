"""gc and expiry on a bucket-only repository (moto's S3 server, metastore in the bucket):
the same reclaim as on SQLite and PostgreSQL; a crashed writer's staged uploads and its
staged records (pages of the metastore included) are found and collected; a full sweep
leaves the metastore's own objects alone."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import all_objects, chunk, fsck, reachable, unreachable
from zarrlake.errors import GcBusyError
from zarrlake.metastore.bucket.format import Names, decode_head, encode_head, segment
from zarrlake.vc.gc_protocol import GcState

ZERO = timedelta(0)


@pytest.fixture
def repo(s3_location) -> Iterator[zl.Repo]:
    location, options = s3_location
    r = zl.Repo.create(location, storage_options=options)
    yield r
    r.close()


def _meta_objects(repo: zl.Repo, partition: str) -> list[str]:
    return list(repo._context.object_store.list(f"meta/{segment(partition)}/"))


def _crash(repo: zl.Repo, session: zl.Session) -> None:
    """As if the session's process died long ago: its record runs out."""
    repo._context.records.update(
        session.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0})
    )


def test_reclaim_on_a_bucket_only_repository(repo: zl.Repo) -> None:
    for i in range(3):
        s = repo.create_session()
        s.write_many([(f"a/c/{j}", chunk(10 * i + j)) for j in range(3)] + [("b/c/0", b"p" * 900)])
        s.commit(f"c{i}")
    crashed = repo.create_session()
    uploads = [(f"x/c/{j}", chunk(100 + j)) for j in range(20)]
    inline = [(f"y/c/{j}", chunk(500 + j, 2000)) for j in range(100)]  # in a fragment
    crashed.write_many(uploads + inline)
    crashed.flush()
    stage = repo._context.stage_partition(crashed.id)
    assert _meta_objects(repo, stage)  # its head: one fragment record
    assert list(repo._context.object_store.list("fragments/"))
    _crash(repo, crashed)
    repo.expire(ZERO)
    expected, live = unreachable(repo), reachable(repo)
    report = repo.gc(ZERO)
    assert report.staged_records_deleted == 2  # its fragment record, its writer's state
    assert report.objects_deleted == len(expected)
    assert all_objects(repo) == live
    assert _meta_objects(repo, stage) == []  # its head and pages, gone with it
    assert fsck(repo) == []
    assert repo.readonly_session().read("a/c/2") == chunk(22)
    assert GcState(repo._context).candidates() == {}


def test_leftover_metastore_pages_are_collected(repo: zl.Repo) -> None:
    """A writer that died between writing a page and swapping its partition's head leaves a
    page no head names: dropping the partition deletes it with the incarnation's pages (a
    later flush does after a grace period by the storage service's clock; a young one may
    belong to a write in flight; tests/backends/test_bucket_pages.py)."""
    s = repo.create_session()
    s.write_many([(f"x/c/{j}", chunk(j)) for j in range(10)])
    stage = repo._context.stage_partition(s.id)
    names = Names(stage)
    store = repo._context.object_store
    head = decode_head(store.get(names.head), names.head)
    # The writer cleared the head's pageless mark first (a write of its own, as every writer
    # does before its first page), wrote its page, and died before its head swap.
    store.put(names.head, encode_head(dataclasses.replace(head, pageless=False)))
    store.put(f"{names.pages}{head.salt:08x}-{int(time.time() * 1000):011x}-deadbeef", b"leftover")
    s.commit("one")
    repo.gc(ZERO)  # settles the session: its staged records are dropped
    assert _meta_objects(repo, stage) == []


def test_one_collector_at_a_time(repo: zl.Repo) -> None:
    holder = GcState(repo._context)
    holder.acquire()
    try:
        with pytest.raises(GcBusyError, match="another garbage collection"):
            repo.gc(ZERO)
    finally:
        holder.release()
    assert repo.gc(ZERO).objects_deleted == 0


def test_full_gc_and_expiry_leave_the_metastore_working(repo: zl.Repo) -> None:
    for i in range(3):
        s = repo.create_session()
        s.write_many([(f"a/c/{j}", chunk(10 * i + j)) for j in range(4)])
        s.commit(f"c{i}")
    for j in range(5):  # an aborted job's uploads, unknown to the metastore
        repo._context.objects.put_chunk(chunk(300 + j))
    meta_before = set(repo._context.object_store.list("meta/"))
    report = repo.expire(datetime.now(UTC))
    assert report.commits_expired == 3  # all but the head
    expected, live = unreachable(repo), reachable(repo)
    report = repo.gc(ZERO, full=True)
    assert report.objects_deleted == len(expected)
    assert all_objects(repo) == live
    assert fsck(repo) == []
    refs = f"meta/{segment(repo._context.partition('refs'))}/head"
    assert refs in meta_before and refs in set(repo._context.object_store.list("meta/"))
    again = zl.Repo.open(repo.spec.location, storage_options=dict(repo.spec.storage_options))
    assert [c.message for c in again.log()] == ["c2"]
    s = again.create_session()
    s.write("a/c/0", chunk(999))
    s.commit("after gc")
    assert again.readonly_session().read("a/c/0") == chunk(999)
    again.close()  # waits for the commit's clean-up, while the server still runs
