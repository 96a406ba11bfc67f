"""Repository life cycle, sessions, commits, refs: the public API's everyday behaviour."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl


def write_array(session, path="temp", shape=(20,), chunks=(10,), value=None):
    root = zarr.open_group(session.store, mode="a")
    arr = root.require_array(path, shape=shape, chunks=chunks, dtype="f4", fill_value=0)
    arr[:] = np.arange(np.prod(shape), dtype="f4").reshape(shape) if value is None else value
    return arr


def test_new_repository_has_initial_commit(repo):
    log = repo.log("main")
    assert len(log) == 1
    assert log[0].parent_ids == ()
    assert repo.list_branches() == {"main": log[0].id}
    assert repo.resolve("main") == log[0].id


def test_create_twice_and_open_missing(repo_location, tmp_path):
    zl.Repo.create(**repo_location)
    with pytest.raises(zl.AlreadyExistsError):
        zl.Repo.create(**repo_location)
    with pytest.raises(zl.NotFoundError):
        zl.Repo.open(tmp_path / "nowhere")
    again = zl.Repo.open_or_create(**repo_location)
    assert again.list_branches().keys() == {"main"}


def test_write_commit_read(repo):
    s = repo.create_session(message="first")
    write_array(s)
    cid = s.commit("add temp")
    assert repo.log("main")[0].id == cid
    assert repo.log("main")[0].message == "add temp"
    ro = repo.readonly_session("main")
    arr = zarr.open_array(ro.store, path="temp", mode="r")
    np.testing.assert_array_equal(arr[:], np.arange(20, dtype="f4"))
    assert s.state == "committed"
    with pytest.raises(zl.SessionClosedError):
        write_array(s)


def test_snapshot_isolation_and_immutable_history(repo):
    s1 = repo.create_session()
    write_array(s1)
    c1 = s1.commit("v1")
    repo.create_tag("v1", at=c1)
    reader = repo.readonly_session("main")
    s2 = repo.create_session()
    write_array(s2, value=np.full(20, 7, "f4"))
    # staged writes are invisible to others, visible to the session itself
    assert zarr.open_array(s2.store, path="temp")[0] == 7
    assert zarr.open_array(repo.readonly_session("main").store, path="temp")[0] == 0
    s2.commit("v2")
    assert zarr.open_array(reader.store, path="temp", mode="r")[0] == 0  # pinned
    assert zarr.open_array(repo.readonly_session("v1").store, path="temp", mode="r")[5] == 5
    assert zarr.open_array(repo.readonly_session("main").store, path="temp", mode="r")[5] == 7


def test_tags_never_move_and_names_are_validated(repo):
    repo.create_tag("t", at="main")
    with pytest.raises(zl.AlreadyExistsError):
        repo.create_tag("t", at="main")
    for bad in ["", "a..b", "/lead", "trail/", "sp ace", "ctl\x01", "x" * 300, "a.lock"]:
        with pytest.raises(ValueError):
            repo.create_branch(bad)
    with pytest.raises(zl.NotFoundError):
        repo.delete_branch("missing")
    repo.create_branch("dev")
    repo.delete_branch("dev")
    assert "dev" not in repo.list_branches()
    repo.delete_tag("t")
    assert repo.list_tags() == {}


def test_readonly_session_rejects_writes(repo):
    ro = repo.readonly_session("main")
    assert ro.read_only
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(ro.store, mode="a")
    with pytest.raises(zl.ReadOnlyError):
        ro.write("x/zarr.json", b"{}")
    with pytest.raises(zl.ReadOnlyError):
        ro.store.with_read_only(False)


def test_abandon_leaves_nothing(repo):
    head = repo.resolve("main")
    s = repo.create_session()
    write_array(s)
    s.abandon()
    assert repo.resolve("main") == head
    assert s.state == "abandoned"
    with pytest.raises(zl.SessionClosedError):
        s.commit("nope")
    assert repo.list_sessions() == []


def test_expiry_and_update(repo):
    with pytest.raises(ValueError):
        repo.create_session(expires_in=timedelta(days=8))
    with pytest.raises(ValueError):
        repo.create_session(expires_in=timedelta(0))
    s = repo.create_session(expires_in=timedelta(seconds=1))
    s.update_expiration(timedelta(days=2))
    assert s.expires_at is not None
    with pytest.raises(ValueError):
        s.update_expiration(timedelta(days=7, seconds=5))
    # force expiry by rewriting the record's deadline into the past
    from dataclasses import replace

    repo._context.records.update(s.id, lambda rec: replace(rec, expires_at=rec.created - 1))
    with pytest.raises(zl.SessionExpiredError):
        write_array(s)
    with pytest.raises(zl.SessionExpiredError):
        s.commit("late")
    assert s.state == "expired"


def test_join_session_shares_staged_writes(repo):
    s = repo.create_session()
    root = zarr.open_group(s.store, mode="a")
    root.create_array("temp", shape=(40,), chunks=(10,), dtype="f4", fill_value=0)[0:20] = 1
    other = repo.join_session(s.id)
    zarr.open_array(other.store, path="temp")[30:40] = 99
    assert zarr.open_array(other.store, path="temp")[35] == 99  # its own buffered writes
    assert zarr.open_array(s.store, path="temp")[35] == 0  # not flushed yet: not shared
    other.flush()
    assert zarr.open_array(s.store, path="temp")[35] == 99  # read uncommitted within a session
    cid = s.commit("joint")
    assert repo.log("main", limit=1)[0].id == cid
    got = zarr.open_array(repo.readonly_session("main").store, path="temp", mode="r")[:]
    np.testing.assert_array_equal(got, [1] * 20 + [0] * 10 + [99] * 10)


def test_two_workers_staging_different_bytes_is_refused(repo):
    s = repo.create_session()
    zarr.open_group(s.store, mode="a").create_array("a", shape=(20,), chunks=(10,), dtype="i4")
    zarr.open_array(s.store, path="a")[0:10] = 1
    worker = repo.join_session(s.id)
    zarr.open_array(worker.store, path="a")[0:10] = 2
    worker.flush()  # the worker's writes are durable (the commit would wait for them)
    head = repo.resolve("main")
    with pytest.raises(zl.ConflictError) as e:
        s.commit("clash")
    (c,) = e.value.conflicts
    assert (c.path, c.kind, c.chunks) == ("a", "writers", [(0,)])
    assert repo.resolve("main") == head
    assert s.state == "open"


def test_diff_and_changes(repo):
    s = repo.create_session()
    write_array(s, shape=(40,), chunks=(10,))
    ch = s.changes()
    assert ch.nodes_added == {"", "temp"}
    assert ch.chunks_written["temp"] == {(0,), (1,), (2,), (3,)}
    c1 = s.commit("one")
    s2 = repo.create_session()
    arr = zarr.open_array(s2.store, path="temp")
    arr[12] = -1
    arr.attrs["units"] = "K"
    c2 = s2.commit("two")
    d = repo.diff(c1, c2)
    assert d.chunks_written == {"temp": {(1,)}}
    assert d.metadata_changed == {"temp"}
    assert not d.nodes_added and not d.chunks_deleted


def test_dedup_identical_chunks(local_repo):
    big = np.random.default_rng(0).random(5000).astype("f8")  # 40 kB chunks: chunk objects
    s1 = local_repo.create_session()
    write_array(s1, shape=(10000,), chunks=(5000,), value=np.concatenate([big, big]))
    s1.commit("twice the same chunk")
    objs = list(local_repo._context.object_store.list("chunks/"))
    assert len(objs) == 1


def test_corruption_is_detected(local_repo, tmp_path):
    s = local_repo.create_session()
    write_array(s, shape=(10000,), chunks=(5000,), value=np.random.default_rng(1).random(10000))
    s.commit("data")
    (key,) = [k for k in local_repo._context.object_store.list("chunks/")][:1]
    path = tmp_path / "repo" / key
    raw = bytearray(path.read_bytes())
    raw[10] ^= 0xFF
    path.write_bytes(bytes(raw))
    fresh = zl.Repo.open(tmp_path / "repo")
    arr = zarr.open_array(fresh.readonly_session("main").store, path="temp", mode="r")
    with pytest.raises(zl.CorruptionError, match="chunks/"):
        arr[:]
