"""Session records spread over shards (repository format 3, created on the bucket
metastore): each record in the partition of its id's first hex digit, so writers of
different sessions change different head objects; every call that reads records sees them
all; a bucket repository of the older layout (format 2, one partition) keeps working as it
is; a zarrlake that reads format 2 only refuses the new one; a copy to SQLite keeps the
layout."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import zarrlake as zl
import zarrlake.connection as connection
import zarrlake.session_records as session_records
from tests.helpers.lifecycle import chunk
from zarrlake.errors import InvalidInputError, NotFoundError, ZarrLakeError
from zarrlake.metastore.bucket.format import Names
from zarrlake.session_records import SHARDS


@pytest.fixture
def bucket_repo(s3_location) -> Iterator[tuple[zl.Repo, str, dict]]:
    """A bucket-only repository on moto's S3 server: (repo, location, storage options)."""
    location, options = s3_location
    repo = zl.Repo.create(location, storage_options=options)
    yield repo, location, options
    repo.close()


def _config(repo: zl.Repo) -> dict:
    return json.loads(repo._context.object_store.get(connection.CONFIG_KEY))


def _in_thread[T](fn: Callable[[], T]) -> T:
    """`fn()` called on a thread of its own (a writer of its own: its own shard)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def _sessions(repo: zl.Repo, n: int) -> list[zl.Session]:
    """`n` sessions, each made on a thread of its own, with one chunk written and flushed."""
    out = []
    for i in range(n):
        s = _in_thread(lambda i=i: repo.create_session(message=f"s{i}"))
        s.write(f"a/c/{i}", chunk(i))
        s.flush()
        out.append(s)
    return out


def test_a_new_bucket_repository_spreads_its_session_records(bucket_repo) -> None:
    repo, _, _ = bucket_repo
    cfg = _config(repo)
    assert (cfg["format"], cfg["session_shards"]) == (3, SHARDS)
    sessions = _sessions(repo, 40)
    ctx = repo._context
    for s in sessions:
        part = ctx.records.partition_of(s.id)
        assert part == f"{ctx.partition('sessions')}/{s.id[0]}"
        assert ctx.meta.get(part, s.id.encode()) is not None
        assert ctx.meta.get(ctx.partition("sessions"), s.id.encode()) is None
    used = {s.id[0] for s in sessions}
    assert len(used) == SHARDS  # 40 writers: dealt the shards in turn, spread over all
    listed = [i.id for i in repo.list_sessions()]
    assert sorted(listed) == sorted(s.id for s in sessions)
    assert [r.id for r in ctx.records.scan()] == sorted(s.id for s in sessions)  # id order
    done = sessions[3]
    cid = done.commit("one of them")
    again = zl.Repo.open(bucket_repo[1], storage_options=bucket_repo[2])
    assert again.session_info(done.id).state == "committed"
    assert again.session_info(done.id[:8]).committed_as == cid  # a prefix finds it too
    assert len(again.list_sessions()) == 39
    joined = again.join_session(sessions[5].id)
    joined.write("b/c/0", chunk(50))
    joined.flush()
    sessions[5].commit("joined")
    assert again.readonly_session().read("b/c/0") == chunk(50)
    with pytest.raises(NotFoundError):
        again.session_info("zz" + sessions[0].id[2:])  # no hex digit: no shard to look in
    for s in (*sessions, joined):
        s.close()  # the writers finish before the repositories close
    again.close()


def test_writing_one_sessions_record_leaves_the_other_shards_alone(bucket_repo) -> None:
    repo, _, _ = bucket_repo
    a, b = repo.create_session(), _in_thread(repo.create_session)
    assert b.id[0] != a.id[0]  # another writer: another shard
    store = repo._context.object_store  # the metastore's heads are under meta/ in it
    heads = {s.id: Names(repo._context.records.partition_of(s.id)).head for s in (a, b)}
    _, tag_before = store.get_tagged(heads[b.id])
    a.write("a/c/0", chunk(1))
    a.commit("a")  # its seal, fence and finish: three swaps of its own record
    repo._context.records.settle()
    assert store.get_tagged(heads[b.id])[1] == tag_before
    assert repo.session_info(a.id).state == "committed"
    assert repo.session_info(b.id).state == "open"
    b.abandon()


def test_one_writers_sessions_keep_to_its_shard_and_store_their_records_in_one_request(
    bucket_repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, location, options = bucket_repo
    first = repo.create_session()
    first.write("a/c/0", chunk(1))
    first.commit("first")  # its record's shard is now held by this process
    other = zl.Repo.open(location, storage_options=options)  # another handle: its own shard
    theirs = other.create_session()
    assert theirs.id[0] != first.id[0]
    reads: list[str] = []
    meta = repo._context.meta
    get = type(meta).get
    monkeypatch.setattr(type(meta), "get", lambda m, p, k: reads.append(p) or get(m, p, k))
    ids = [first.id]
    for i in range(3):
        reads.clear()
        s = repo.create_session()
        assert not [p for p in reads if "/sessions" in p]  # its shard held: not read first
        s.write(f"a/c/{i + 1}", chunk(i + 2))
        s.commit(f"s{i}")
        ids.append(s.id)
    assert {sid[0] for sid in ids} == {first.id[0]}
    assert [repo.session_info(sid).state for sid in ids] == ["committed"] * 4
    theirs.abandon()
    other.close()


def test_a_bucket_repository_of_the_older_layout_keeps_it(s3_location, monkeypatch) -> None:
    location, options = s3_location
    with monkeypatch.context() as m:  # created as zarrlake before format 3 did
        m.setattr(session_records, "SHARDS", 1)  # (read where a repository is created)
        old = zl.Repo.create(location, storage_options=options)
        first = old.create_session()
        first.write("a/c/0", chunk(1))
        first.commit("before")
        old.close()
    repo = zl.Repo.open(location, storage_options=options)
    cfg = _config(repo)
    assert cfg["format"] == 2 and "session_shards" not in cfg
    s = repo.create_session()
    s.write("a/c/1", chunk(2))
    s.commit("after")
    ctx = repo._context
    for sid in (first.id, s.id):
        assert ctx.meta.get(ctx.partition("sessions"), sid.encode()) is not None
    assert repo.session_info(first.id).state == "committed"
    assert {r.id for r in ctx.records.scan()} == {first.id, s.id}
    repo.close()


def test_a_zarrlake_reading_format_2_only_refuses_a_sharded_repository(
    bucket_repo, monkeypatch
) -> None:
    _, location, options = bucket_repo
    monkeypatch.setattr(connection, "FORMAT", 2)
    with pytest.raises(ZarrLakeError, match="repository format 3 is newer"):
        zl.Repo.open(location, storage_options=options)


def test_a_sharded_repository_copied_to_sqlite_keeps_its_sessions(bucket_repo, tmp_path) -> None:
    repo, location, options = bucket_repo
    done, still_open = _sessions(repo, 2)
    done.commit("done")
    sqlite = f"sqlite:///{tmp_path}/metastore.sqlite"
    report = repo.copy_metastore(sqlite)
    assert report.sessions == 2 and report.switched
    moved = zl.Repo.open(location, metastore=sqlite, storage_options=options)
    assert moved.context.session_shards == SHARDS  # the layout is the repository's
    assert moved.session_info(done.id).state == "committed"
    assert moved.session_info(still_open.id).state == "open"
    again = moved.join_session(still_open.id)
    again.write("a/c/9", chunk(9))
    again.commit("after the copy")
    assert moved.readonly_session().read("a/c/9") == chunk(9)
    still_open.close()
    moved.close()


def test_the_shard_count_is_checked(bucket_repo) -> None:
    repo, _, _ = bucket_repo
    from zarrlake.session_records import SessionRecords

    with pytest.raises(InvalidInputError, match="1 or 16 shards"):
        SessionRecords(repo._context.meta, "x/sessions", shards=3)


def test_a_scan_reads_on_past_the_first_batch_of_a_shard(bucket_repo, monkeypatch) -> None:
    import zarrlake.session_records as session_records

    repo, _, _ = bucket_repo
    monkeypatch.setattr(session_records, "SCAN_BATCH", 1)  # every shard with 2+ records
    sessions = _sessions(repo, 30)  # 30 ids over 16 shards: some hold several
    ids = sorted(s.id for s in sessions)
    assert len({i[0] for i in ids}) < len(ids)
    assert [r.id for r in repo._context.records.scan()] == ids
    for s in sessions:
        s.close()
