"""A new session's record is stored at its first write, hand-over or commit (txn/birth.py):
create_session stores nothing; a session that never writes and is never handed over leaves
no record; an error storing the record is raised where it is stored."""

from __future__ import annotations

import pickle
import sqlite3
import threading
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.connection import RepoContext
from zarrlake.errors import NotFoundError, SessionExpiredError, TransientError
from zarrlake.metastore.base import Call, MetaStore, WrapperMetaStore
from zarrlake.metastore.sqlite import SqliteMetaStore
from zarrlake.vc.gc_protocol import uploads_of


@pytest.fixture
def repo(tmp_path: Path) -> zl.Repo:
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=(4, 8), chunks=(1, 8), dtype="i4")
    s.commit("array")
    return repo


def records(repo: zl.Repo) -> list[str]:
    """The ids of every stored session record, whatever its state."""
    return sorted(r.id for r in repo._context.records.scan())


def test_a_session_that_never_writes_leaves_no_record(repo: zl.Repo) -> None:
    before = records(repo)
    s = repo.create_session()
    assert s.state == "open" and s.read("a/zarr.json") is not None
    assert zarr.open_array(s.store, path="a")[0].tolist() == [0] * 8
    s.flush()  # nothing buffered: nothing stored
    with s:
        pass
    assert records(repo) == before
    t = repo.create_session()
    t.abandon()
    assert t.state == "abandoned" and records(repo) == before


def test_the_first_write_stores_the_record_before_what_it_stages(repo: zl.Repo) -> None:
    s = repo.create_session(message="m")
    sid = s._engine.id
    zarr.open_array(s.store, path="a")[1] = 7  # buffered: the unflushed mark is staged
    info = repo.session_info(sid)
    assert (info.state, info.base_commit, info.message) == ("open", s.base_commit, "m")
    s.commit("one chunk")
    assert zarr.open_array(repo.readonly_session().store, path="a")[1].tolist() == [7] * 8


def test_handing_a_session_over_stores_its_record(repo: zl.Repo) -> None:
    s = repo.create_session()
    sid = s.id  # reading the id hands it over
    assert sid in records(repo)
    joined = zl.Repo.open(repo.spec.location).join_session(sid)
    zarr.open_array(joined.store, path="a")[2] = 3
    joined.close()
    t = repo.create_session()
    copy = pickle.loads(pickle.dumps(t))
    assert t._engine.id in records(repo)
    zarr.open_array(copy.store, path="a")[3] = 4
    copy.close()
    s.commit("from a joined handle")
    t.commit("from a pickled copy", on_conflict="ours")
    got = zarr.open_array(repo.readonly_session().store, path="a")[:]
    np.testing.assert_array_equal(got[2:], [[3] * 8, [4] * 8])


def test_a_commit_stores_the_record_of_a_session_that_only_buffered(repo: zl.Repo) -> None:
    s = repo.create_session()
    s.write("b/zarr.json", s.read("a/zarr.json"))  # type: ignore[arg-type]
    assert s._engine.id in records(repo)  # metadata is staged at once
    t = repo.create_session()
    assert t._engine.id not in records(repo)
    cid = t.commit("empty", allow_empty=True)
    assert repo.session_info(t._engine.id).committed_as == cid


def test_expiry_and_its_extension_hold_before_the_record_is_stored(repo: zl.Repo) -> None:
    ctx = repo._context
    s = repo.create_session(expires_in=timedelta(seconds=60))
    s.update_expiration(timedelta(hours=2))
    zarr.open_array(s.store, path="a")[0] = 1
    assert repo.session_info(s._engine.id).expires_at == s.expires_at
    t = repo.create_session(expires_in=timedelta(seconds=60))
    real = ctx.clock
    ctx.clock = lambda: real() + 120
    try:
        assert t.state == "expired"
        with pytest.raises(SessionExpiredError):
            zarr.open_array(t.store, path="a")[0] = 1
        assert t._engine.id not in records(repo)
    finally:
        ctx.clock = real


class RefusesSessionRecords(WrapperMetaStore):
    """A metastore that fails every write of a session record (a metastore gone down, or
    refusing writes, after the branch head was read)."""

    def _around(self, call: Call, run):  # type: ignore[no-untyped-def]
        if call.write and call.partition.endswith("sessions"):
            raise TransientError("injected: the metastore refuses the session record")
        return run()


def with_meta(repo: zl.Repo, meta: MetaStore) -> zl.Repo:
    ctx = repo._context
    return zl.Repo(
        RepoContext(
            repo.spec, repo.repo_id, ctx.object_store, meta, hash=ctx.hash, format=ctx.format
        )
    )


def test_an_error_storing_the_record_is_raised_by_the_first_write(repo: zl.Repo) -> None:
    broken = with_meta(repo, RefusesSessionRecords(repo._context.meta))
    s = broken.create_session()  # reads only: it succeeds
    sid = s._engine.id
    with pytest.raises(TransientError, match="refuses the session record"):
        s.write("b/zarr.json", s.read("a/zarr.json"))  # type: ignore[arg-type]
    with pytest.raises(TransientError, match="refuses the session record"):
        _ = s.id
    with pytest.raises(TransientError, match="refuses the session record"):
        s.commit("x", allow_empty=True)
    assert sid not in records(repo)
    assert list(repo._context.meta.scan(repo._context.stage_partition(sid))) == []


def test_a_base_a_reset_and_gc_took_before_the_first_write_is_named(tmp_path: Path) -> None:
    """A session whose record is not stored yet does not keep its base: once a reset moved
    its branch off it and gc deleted it, the first write refuses naming both (it failed at
    the commit, on a missing manifest fsck could not explain)."""
    path = tmp_path / "r"
    admin = zl.Repo.create(path)
    s = admin.create_session()
    zarr.create_array(s.store, name="a", shape=(4, 8), chunks=(1, 8), dtype="i4", compressors=None)
    zarr.create_array(
        s.store, name="big", shape=(2, 64, 64), chunks=(1, 64, 64), dtype="i4", compressors=None
    )
    old = s.commit("array")
    s = admin.create_session()
    zarr.open_array(s.store, path="a")[0] = 5
    s.commit("row 0")
    worker = zl.Repo.open(path)  # another process: nothing of the base in its caches
    doc, chunk, empty, big = (worker.create_session() for _ in range(4))  # no record stored
    admin.reset_branch("main", old)
    assert admin.gc(timedelta(0)).by_kind["commits"][0] == 1  # the base of all four
    group = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    with pytest.raises(NotFoundError, match=r"no longer exists: branch 'main' moved off it"):
        doc.write("b/zarr.json", group)  # staged at once: the record is stored first
    with pytest.raises(NotFoundError, match=r"reset.*`gc` deleted it"):
        chunk.write("a/c/1/0", np.full(8, 3, dtype="i4").tobytes())  # its unflushed marker
    with pytest.raises(NotFoundError, match=r"start a new session on 'main'"):
        empty.commit("nothing", allow_empty=True)
    with pytest.raises(NotFoundError, match=r"no longer exists"):  # its upload record too
        big.write("big/c/0/0/0", np.arange(64 * 64, dtype="<i4").tobytes())
    refused_all = (doc, chunk, empty, big)
    assert not {r._engine.id for r in refused_all} & set(records(admin))
    for refused in refused_all:  # what a first write stored went with the record
        stage = admin._context.stage_partition(refused._engine.id)
        assert list(admin._context.meta.scan(stage)) == []
        assert list(admin._context.meta.scan(uploads_of(stage))) == []
    t = worker.create_session()
    zarr.open_array(t.store, path="a")[1] = 2
    t.commit("row 1 again")
    rows = zarr.open_array(admin.readonly_session().store, path="a", mode="r")[:]
    assert np.array_equal(rows, np.array([[0] * 8, [2] * 8, [0] * 8, [0] * 8]))
    assert admin.fsck() == []


def test_on_sqlite_the_record_and_the_first_write_are_one_transaction(
    repo: zl.Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record and the first write (a big chunk's upload record and the writer's
    unflushed mark) take SQLite's write lock once: no moment, crash or other process sees
    one stored without the other. The base is looked at after it, before the upload."""
    s = repo.create_session()
    zarr.create_array(
        s.store, name="big", shape=(2, 64, 64), chunks=(1, 64, 64), dtype="i4", compressors=None
    )
    s.commit("big")
    begun: list[str] = []
    me = threading.get_ident()
    connect = SqliteMetaStore._connect

    def traced(self: SqliteMetaStore) -> sqlite3.Connection:
        conn = connect(self)
        if threading.get_ident() == me:
            conn.set_trace_callback(lambda sql: begun.extend([sql][: sql == "BEGIN IMMEDIATE"]))
        return conn

    monkeypatch.setattr(SqliteMetaStore, "_connect", traced)
    worker = zl.Repo.open(repo._context.spec.location)  # its connections traced from here
    s = worker.create_session()
    chunk = np.arange(64 * 64, dtype="<i4")  # 16 KiB, above the inline size: uploaded
    s.write("big/c/1/0/0", chunk.tobytes())
    assert len(begun) == 2, begun  # the record and the mark; then the upload records
    sid = s._engine.id  # (read after: reading it stores the record)
    assert sid in records(repo)
    stage = repo._context.stage_partition(sid)
    assert [k for k, _, _ in repo._context.meta.scan(uploads_of(stage))]  # its upload record
    s.commit("big 1")
    got = zarr.open_array(repo.readonly_session().store, path="big")[1]
    np.testing.assert_array_equal(got, chunk.reshape(64, 64))
