"""Purging data from every version, on each metastore: reads of a purged chunk raise
PurgedError naming the purge at every version while other data reads as before (checked
against numpy); chunk objects, ranges of shared objects and inner chunks of stored shards;
the refusals (a branch head, other arrays, chunks kept in manifests); the record; fsck;
fsck --purges proving it, and failing when bytes come back; bytes written again after a
purge; a writer whose deduplicated upload races the purge; redacted messages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.format.chunk_ref import RefKind, chunk_object_key
from zarrlake.vc.purges import tombstone_of

ROOT = Path(__file__).resolve().parents[2]
SECRET = np.arange(64 * 64, dtype="f8").reshape(64, 64) + 0.5  # 32 KiB chunks: objects


def read(repo: zl.Repo, ref: str, path: str) -> np.ndarray:
    return zarr.open_array(repo.readonly_session(ref).store, path=path, mode="r")[:]


def history(repo: zl.Repo) -> tuple[str, str, dict[str, np.ndarray]]:
    """v1: `secret` (big chunks, objects), `notes` (small chunks, in fragments) and `keep`;
    then main drops `secret` and `notes` and rewrites `keep`. Returns (v1, main, main's keep)."""
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g.create_array("secret", shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = (
        SECRET
    )
    g.create_array("notes", shape=(16, 16), chunks=(8, 8), dtype="f8", compressors=None)[:] = (
        np.arange(256.0).reshape(16, 16) * 3
    )
    g.create_array("keep", shape=(8,), chunks=(4,), dtype="f8")[:] = np.arange(8.0)
    v1 = repo.create_tag("v1", at=s.commit("with the leak"))
    s = repo.create_session()
    g = zarr.open_group(s.store)
    del g["secret"]
    del g["notes"]
    g["keep"][:] = np.arange(8.0) * 2
    main = s.commit("drop the leak")
    return v1, main, {"keep": np.arange(8.0) * 2}


def test_purged_chunks_raise_at_every_version_and_the_rest_reads_as_before(any_metastore):
    repo = zl.Repo.create(**any_metastore)
    v1, main, _ = history(repo)
    record = repo.purge(["secret", "notes"], reason="leaked by mistake", by="dpo@example.org")
    assert record.state == "done" and record.paths == ("notes", "secret")
    assert record.objects == 2 and record.ranges == 4 and record.chunks == 6
    assert record.bytes == 2 * 32 * 64 * 8 + 4 * 8 * 8 * 8 and record.forced == ()
    assert [r.id for r in repo.purges()] == [record.id]
    for path in ("secret", "notes"):
        with pytest.raises(zl.PurgedError, match=f"purge {record.id}") as e:
            read(repo, v1, path)
        assert e.value.purge == record.id and "leaked by mistake" in str(e.value)
    np.testing.assert_array_equal(read(repo, v1, "keep"), np.arange(8.0))
    np.testing.assert_array_equal(read(repo, main, "keep"), np.arange(8.0) * 2)
    assert repo.log("main")[1].id == v1  # commits and ids untouched
    store = repo._context.object_store
    for d in repo._context.purges.records.digests(record):
        assert tombstone_of(store.get(chunk_object_key(d))) == record.id
    assert repo.fsck() == []  # purged chunks are not problems
    assert repo.fsck(purges=True) == []
    # a version written after the purge reads normally
    s = repo.create_session()
    zarr.open_group(s.store).create_array("secret", shape=(4,), chunks=(4,), dtype="i2")[:] = 7
    after = s.commit("new data")
    assert read(repo, after, "secret").tolist() == [7] * 4


def test_a_region_purges_only_the_chunks_it_meets(any_metastore):
    repo = zl.Repo.create(**any_metastore)
    v1, _, _ = history(repo)
    record = repo.purge("secret", region=(slice(0, 10), slice(None)), reason="rows", by="me")
    assert record.region == "0:10,:" and record.objects == 1 and record.chunks == 1
    arr = zarr.open_array(repo.readonly_session(v1).store, path="secret", mode="r")
    np.testing.assert_array_equal(arr[32:], SECRET[32:])
    with pytest.raises(zl.PurgedError):
        arr[:10]
    assert repo.fsck() == [] and repo.fsck(purges=True) == []


def write_shard(session: zl.Session, data: np.ndarray) -> None:
    """One shard of four inner chunks, written whole (stored as one object)."""
    zarr.create_array(
        session.store,
        name="sh",
        shape=(32, 32),
        chunks=(16, 16),
        shards=(32, 32),
        dtype="i8",
        compressors=None,
    )[:] = data


def test_an_inner_chunk_of_a_shard_stored_whole(tmp_path):
    """A shard written whole is one object its inner chunks are ranges of: the purged inner
    chunk's range is zeroed, the other inner chunks still read at that version."""
    repo = zl.Repo.create(tmp_path / "repo")
    data = np.arange(32 * 32, dtype="i8").reshape(32, 32)
    s = repo.create_session()
    write_shard(s, data)
    ref = s._engine.lookup("sh/c/0/0")
    assert ref.whole is not None  # stored as one object
    v1 = s.commit("shard")
    s = repo.create_session()
    zarr.open_group(s.store).__delitem__("sh")
    s.commit("gone")
    record = repo.purge("sh", region=(slice(0, 16), slice(16, 32)), reason="one tile", by="me")
    assert record.ranges == 1 and record.objects == 0
    arr = zarr.open_array(repo.readonly_session(v1).store, path="sh", mode="r")
    np.testing.assert_array_equal(arr[16:, :], data[16:, :])
    np.testing.assert_array_equal(arr[:16, :16], data[:16, :16])
    with pytest.raises(zl.PurgedError):
        arr[:16, 16:]
    with pytest.raises(zl.PurgedError):
        arr[:]
    assert repo.fsck() == [] and repo.fsck(purges=True) == []
    # the same shard written again is stored anew, never deduplicated against the purged one
    s = repo.create_session()
    write_shard(s, data)
    again = s.commit("again")
    np.testing.assert_array_equal(read(repo, again, "sh"), data)
    with pytest.raises(zl.PurgedError):
        read(repo, v1, "sh")
    assert repo.fsck() == [] and repo.fsck(purges=True) == []


def test_bytes_a_head_or_another_array_still_holds_need_force(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    g = zarr.open_group(s.store)
    for name in ("a", "b"):
        g.create_array(name, shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = (
            SECRET
        )
    old = s.commit("a and b hold the same bytes")
    before = repo._context.object_store.get(chunk_object_key(_digest(repo, "a/c/0/0")))
    with pytest.raises(zl.ZarrLakeError, match=r"branch 'main' still holds") as e:
        repo.purge("a", reason="r", by="me")
    assert "of 'b' outside the selection" in str(e.value) and "force" in str(e.value)
    assert repo.purges() == []  # nothing recorded, nothing removed
    assert repo._context.object_store.get(chunk_object_key(_digest(repo, "a/c/0/0"))) == before
    record = repo.purge("a", reason="r", by="me", force=True)
    assert len(record.forced) == 2
    for path in ("a", "b"):  # the same bytes are gone from both, at the head too
        with pytest.raises(zl.PurgedError):
            read(repo, "main", path)
    assert repo.log()[0].id == old  # (commits and ids unchanged)
    assert repo.fsck(purges=True) == []


def test_keep_heads_purges_history_once_the_branch_was_corrected(any_metastore):
    repo = zl.Repo.create(**any_metastore)
    s = repo.create_session()
    zarr.open_group(s.store).create_array(
        "secret", shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None
    )[:] = SECRET
    leak = s.commit("leak")
    s = repo.create_session()
    zarr.open_array(s.store, path="secret")[:32] = np.nan  # corrected on main
    s.commit("fix")
    region = (slice(0, 32), slice(None))
    with pytest.raises(zl.ZarrLakeError, match="branch 'main' still holds"):
        repo.purge("secret", region=region, reason="r", by="me")  # (the NaN chunk is there)
    record = repo.purge("secret", region=region, reason="r", by="me", keep_heads=True)
    assert record.objects == 1 and record.kept_at_heads == 1 and record.forced == ()
    head = read(repo, "main", "secret")
    assert np.isnan(head[:32]).all() and (head[32:] == SECRET[32:]).all()
    arr = zarr.open_array(repo.readonly_session(leak).store, path="secret", mode="r")
    np.testing.assert_array_equal(arr[32:], SECRET[32:])  # still held by main: kept
    with pytest.raises(zl.PurgedError, match=record.id):
        arr[:32]
    assert repo.fsck() == [] and repo.fsck(purges=True) == []


def _digest(repo: zl.Repo, key: str) -> bytes:
    ref = repo.readonly_session()._engine.lookup(key)
    assert ref.kind == RefKind.OBJECT
    return ref.digest


def test_chunks_kept_in_manifests_are_refused_unless_kept(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g.create_array("tiny", shape=(4,), chunks=(2,), dtype="i2", compressors=None)[:] = [1, 2, 3, 4]
    g.create_array("big", shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = SECRET
    s.commit("tiny chunks live in the manifest")
    s = repo.create_session()
    g = zarr.open_group(s.store)
    del g["tiny"]
    del g["big"]
    s.commit("gone")
    with pytest.raises(zl.InvalidInputError, match=r"2 chunk.*64 bytes.*commit ids cover"):
        repo.purge(["tiny", "big"], reason="r", by="me")
    record = repo.purge(["tiny", "big"], reason="r", by="me", keep_unremovable=True)
    assert record.kept_inline == 2 and record.objects == 2


def test_fsck_purges_fails_when_purged_bytes_come_back(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    v1, _, _ = history(repo)
    digest = _digest_at(repo, v1, "secret/c/0/0")
    key = chunk_object_key(digest)
    original = repo._context.object_store.get(key)
    record = repo.purge(["secret", "notes"], reason="r", by="me")
    repo._context.object_store.put(key, original)  # a backup restored by hand
    problems = repo.fsck(purges=True)
    assert [p.object for p in problems] == [key] and record.id in problems[0].detail
    # the bytes of a purged range, found as an object of their own (a stray upload)
    small = _digest_at(repo, v1, "notes/c/0/0")
    stray = chunk_object_key(small)
    repo._context.object_store.put(stray, np.arange(64.0).tobytes())
    assert stray in {p.object for p in repo.fsck(purges=True)}


def _digest_at(repo: zl.Repo, ref: str, key: str) -> bytes:
    return repo.readonly_session(ref)._engine.lookup(key).digest


def test_bytes_written_again_are_stored_anew_and_old_versions_stay_purged(any_metastore):
    repo = zl.Repo.create(**any_metastore)
    v1, _, _ = history(repo)
    digest = _digest_at(repo, v1, "secret/c/0/0")
    record = repo.purge(["secret", "notes"], reason="r", by="me")
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g.create_array("secret", shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = (
        SECRET  # exactly the purged bytes: their object is a tombstone, so they go elsewhere
    )
    ref = s._engine.lookup("secret/c/0/0")
    assert ref.digest == digest and ref.kind == RefKind.LOCATION
    assert ref.location.startswith("packs/")
    again = s.commit("the same data again")
    np.testing.assert_array_equal(read(repo, again, "secret"), SECRET)
    with pytest.raises(zl.PurgedError, match=record.id):
        read(repo, v1, "secret")
    store = repo._context.object_store
    assert tombstone_of(store.get(chunk_object_key(digest))) == record.id
    assert repo.fsck() == [] and repo.fsck(purges=True) == []


def test_a_deduplicated_upload_racing_the_purge_is_withdrawn_never_revived(tmp_path):
    """A writer reuses the existing object of a chunk (put-if-absent finds it), then the
    purge retires that object, then the writer flushes: its settle step sees the sweep
    epoch moved, finds the object retired and withdraws the write. Written again, the bytes
    are stored anew; the purged versions stay purged and the proof holds."""
    repo = zl.Repo.create(tmp_path / "repo")
    v1, _, _ = history(repo)
    digest = _digest_at(repo, v1, "secret/c/0/0")
    s = repo.create_session()
    zarr.open_group(s.store).create_array(
        "copy", shape=(32, 64), chunks=(32, 64), dtype="f8", compressors=None
    )
    change = s._engine.prepare("copy/c/0/0", SECRET[:32].tobytes())  # a dedup hit
    assert change[1].kind == RefKind.OBJECT and change[1].digest == digest
    record = repo.purge(["secret", "notes"], reason="r", by="me")
    s._engine.stage([change])
    with pytest.raises(zl.ZarrLakeError, match=r"purge removed 1 chunk object.*write those"):
        s.flush()
    zarr.open_array(s.store, path="copy")[:] = SECRET[:32]  # written again
    after = s.commit("copy")
    np.testing.assert_array_equal(read(repo, after, "copy"), SECRET[:32])
    with pytest.raises(zl.PurgedError, match=record.id):
        read(repo, v1, "secret")
    assert tombstone_of(repo._context.object_store.get(chunk_object_key(digest))) == record.id
    assert repo.fsck() == [] and repo.fsck(purges=True) == []


def test_writers_check_reused_objects_once_a_purge_exists(tmp_path):
    """Without purge records a write that reuses an object reads nothing more; another
    process learns of a purge when the sweep epoch (which every purge moves) changes."""
    repo = zl.Repo.create(tmp_path / "repo")
    history(repo)
    other = zl.Repo.open(tmp_path / "repo").context
    before = other.write_guard.current().epoch
    assert other.purges.exist(before) is False
    repo.purge(["secret", "notes"], reason="r", by="me")
    assert other.purges.exist(before) is False  # (asked at the same epoch: not read again)
    after = other.write_guard.current().epoch
    assert after > before and other.purges.exist(after) is True


def test_messages_are_redacted_where_the_commit_id_does_not_cover_them(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    repo.create_branch("leak")
    s = repo.create_session("leak", message="records of Jane Doe", author="jane")
    zarr.open_group(s.store).create_array("x", shape=(2,), chunks=(2,), dtype="i8")[:] = 1
    leaked = s.commit()
    pr = repo.create_pull_request("leak", "main", title="Jane Doe's data", description="AB123")
    pr.comment("national id AB123", by="bob")
    pr.merge(by="alice")
    record = repo.purge([], reason="names", by="dpo", messages=[leaked, repo.resolve("main")])
    assert record.redacted == (f"session {s.id}", f"pull request #{pr.id}")
    info = repo.session_info(s.id)
    assert "Jane" not in (info.message or "") and info.author != "jane"
    again = repo.pull_request(pr.id)
    assert "Jane" not in again.title and "AB123" not in again.description
    assert all("AB123" not in c.text for c in again.comments)
    assert repo.commit_info(leaked).message == "records of Jane Doe"  # its id covers it


def test_a_purge_killed_half_way_is_finished_by_the_next(tmp_path):
    """SIGKILLed after its first batch (objects retired, ranges not yet zeroed, the record
    pending), in a real process: fsck --purges says so, reads of what it reached already
    raise PurgedError, and finishing it proves it (the dead process's collector lock and
    sweep are taken over)."""
    location = tmp_path / "repo"
    repo = zl.Repo.create(location)
    v1, _, _ = history(repo)
    env = {
        **os.environ,
        "ZARRLAKE_CRASH_AT": "purge_after_batch",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.admin.test_purge", str(location)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    (record,) = repo.purges()
    assert record.state == "pending"
    kinds = [p.kind for p in repo.fsck(purges=True)]  # and the 4 ranges not reached yet
    assert kinds == ["unfinished"] + ["purged"] * 4
    with pytest.raises(zl.PurgedError, match=record.id):
        read(repo, v1, "secret")
    (done,) = repo.finish_purges()
    assert done.id == record.id and done.state == "done"
    with pytest.raises(zl.PurgedError, match=record.id):
        read(repo, v1, "notes")
    assert repo.fsck() == [] and repo.fsck(purges=True) == []
    np.testing.assert_array_equal(read(repo, v1, "keep"), np.arange(8.0))


if __name__ == "__main__":
    zl.Repo.open(sys.argv[1]).purge(["secret", "notes"], reason="killed", by="test")


def test_a_purge_batch_longer_than_the_sweep_lease_keeps_its_lease(tmp_path, monkeypatch):
    """A purge renews its sweep's lease in the background, as a collector does: a batch
    that outlasts the lease (here a slow progress callback, with a 1 s lease) still holds
    the sweep, so writers never take it for a dead purge's and end it in its place."""
    import threading

    from zarrlake.vc import gc_protocol
    from zarrlake.vc.gc_protocol import GcState

    monkeypatch.setattr(gc_protocol, "SWEEP_LEASE", 1.0)
    monkeypatch.setattr(gc_protocol, "HEARTBEAT", 0.2)
    repo = zl.Repo.create(tmp_path / "repo")
    history(repo)
    state = GcState(repo._context)
    seen: list[tuple[int, float, float]] = []  # (epoch, until, now) after the lease ran out

    def slow(label: str, done: int, total: int | None) -> None:
        if seen or label != "removing":  # (planning reports progress too)
            return
        first = state.phase()[0]
        assert first.sweeping
        pause = threading.Event()
        while state.clock() <= first.until + 0.5:  # past the lease as first taken
            pause.wait(0.05)
        now = state.phase()[0]
        seen.append((now.epoch - first.epoch, now.until, state.clock()))

    repo.purge(["secret"], reason="leak", by="me", progress=slow)
    [(epochs, until, now)] = seen
    assert epochs == 0 and until > now  # the same sweep, its lease renewed
