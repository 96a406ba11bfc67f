"""gc and expire on a real repository (SQLite metastore, local object store): what is
reclaimed is exactly what an independent mark-and-sweep finds unreachable; live data,
grace periods and bad input are respected."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import all_objects, chunk, fsck, reachable, unreachable
from zarrlake.errors import InvalidInputError
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.format.digest import DEFAULT, digest

ZERO = timedelta(0)

content_hash = partial(digest, DEFAULT)  # the chunk digests of a new repository


def commit(repo: zl.Repo, items: dict[str, bytes], message: str = "c", branch: str = "main") -> str:
    s = repo.create_session(branch)
    s.write_many(list(items.items()))
    cid = s.commit(message)
    s.wait()  # its staged records are dropped in the background: counted by no gc run
    return cid


def test_reclaims_exactly_the_unreachable_objects(repo: zl.Repo) -> None:
    commit(repo, {"a/c/0": chunk(0), "a/c/1": chunk(1), "a/c/2": b"x" * 900})
    commit(repo, {"a/c/0": chunk(2), "a/c/3": b"y" * 900})
    # an aborted job: chunks uploaded by a session that then died (never staged, never known
    # to the metastore): only the full listing finds them
    repo._context.objects.put_chunk(chunk(50))
    # an abandoned session with big chunks
    s = repo.create_session()
    s.write_many([(f"a/c/{i}", chunk(100 + i, 200_000)) for i in range(5)])
    s.abandon()
    # an expired session
    s = repo.create_session(expires_in=timedelta(seconds=1))
    s.write("a/c/9", chunk(9, 100_000))
    repo._context.records.update(s.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0}))
    # expired history
    repo.create_tag("v1", "main")
    commit(repo, {"a/c/1": chunk(3)})
    head = commit(repo, {"a/c/1": chunk(4)})
    report = repo.expire(ZERO)
    assert report.commits_expired >= 2
    assert [c.id for c in repo.log()] == [head]

    expected = unreachable(repo)
    live_before = reachable(repo)
    assert chunk_object_key(content_hash(chunk(50))) in expected
    result = repo.gc(ZERO, full=True)
    assert all_objects(repo) == live_before  # exactly the unreachable set went
    assert result.objects_deleted == len(expected)
    assert result.by_kind["chunks"][1] >= 5 * 200_000 + 100_000 + 20_000
    assert result.sessions_expired == 1
    assert fsck(repo) == []
    assert repo.readonly_session("v1").read("a/c/1") == chunk(1)  # the tag stays readable
    assert repo.readonly_session("main").read("a/c/1") == chunk(4)
    assert repo.readonly_session("main").read("a/c/0") == chunk(2)
    again = repo.gc(ZERO, full=True)
    assert again.objects_deleted == 0


def test_incremental_run_reclaims_what_the_metastore_knows(repo: zl.Repo) -> None:
    commit(repo, {"a/c/0": chunk(0)})
    s = repo.create_session()
    s.write_many([(f"b/c/{i}", chunk(10 + i)) for i in range(4)])
    s.flush()  # one fragment, in one staging record
    repo._context.records.update(s.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0}))
    commit(repo, {"a/c/0": chunk(1)})
    repo.expire(ZERO)
    expected = unreachable(repo)
    report = repo.gc(ZERO)  # no listing
    assert report.staged_records_deleted == 2  # its fragment record, its writer's state
    assert report.by_kind["chunks"] == (5, 5 * 20_000)  # 4 staged + the expired a/c/0
    assert unreachable(repo) == set()
    assert report.objects_deleted == len(expected)
    assert fsck(repo) == []
    assert repo.readonly_session().read("a/c/0") == chunk(1)


def test_grace_period_and_dry_run_delete_nothing(repo: zl.Repo) -> None:
    commit(repo, {"a/c/0": chunk(0)})
    commit(repo, {"a/c/0": chunk(1)})
    repo.expire(ZERO)
    before = all_objects(repo)
    dry = repo.gc(ZERO, dry_run=True)
    assert dry.objects_deleted > 0 and all_objects(repo) == before
    first = repo.gc(timedelta(hours=1))  # learned now: younger than the grace period
    assert first.objects_deleted == 0 and first.candidates_pending > 0
    assert all_objects(repo) == before
    second = repo.gc(ZERO)
    assert second.objects_deleted == dry.objects_deleted
    assert second.bytes_deleted == dry.bytes_deleted


def test_open_session_data_is_never_collected(repo: zl.Repo) -> None:
    commit(repo, {"a/c/0": chunk(0)})
    s = repo.create_session()
    s.write("a/c/0", chunk(7))  # staged, not committed
    commit(repo, {"a/c/5": chunk(5)})
    repo.gc(ZERO, full=True)
    assert s.read("a/c/0") == chunk(7)
    s.commit("late", on_conflict="ours")
    assert repo.readonly_session().read("a/c/0") == chunk(7)
    assert fsck(repo) == []


@pytest.mark.parametrize(
    "older_than",
    [timedelta(seconds=-1), timedelta(days=100_000), -5, "1h", None],
)
def test_bad_older_than(repo: zl.Repo, older_than: object) -> None:
    commit(repo, {"a/c/0": chunk(0)})
    commit(repo, {"a/c/0": chunk(1)})
    before = all_objects(repo)
    with pytest.raises(InvalidInputError, match="older_than"):
        repo.gc(older_than)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="older_than"):
        repo.expire(older_than)  # type: ignore[arg-type]
    assert all_objects(repo) == before
    assert len(repo.log()) == 3


def test_expire_rules(repo: zl.Repo) -> None:
    first = commit(repo, {"a/c/0": chunk(0)}, "first")
    repo.create_tag("keep", first)
    commit(repo, {"a/c/0": chunk(1)}, "second")
    head = commit(repo, {"a/c/0": chunk(2)}, "third")
    before = all_objects(repo)
    with pytest.raises(InvalidInputError, match="tag"):
        repo.expire(ZERO, branches=["keep"])
    with pytest.raises(zl.NotFoundError, match="nope"):
        repo.expire(ZERO, branches=["nope"])
    with pytest.raises(InvalidInputError, match="future"):
        repo.expire(datetime.now(UTC) + timedelta(days=1))
    assert all_objects(repo) == before and len(repo.log()) == 4

    repo.create_branch("dev", "main")
    s = repo.create_session("dev")  # an open session pins dev's history down to its base
    report = repo.expire(datetime.now(UTC), branches=["main"])
    assert report.commits_expired == 0  # everything main has is also dev's history
    s.abandon()
    repo.delete_branch("dev")
    report = repo.expire(datetime.now(UTC))
    assert report.commits_expired == 2  # the initial commit and "second"; "first" is tagged
    assert [c.id for c in repo.log()] == [head]
    expired = [c for c in before if c.startswith("commits/")]
    gone = [c.split("/")[1] for c in expired if c.split("/")[1] not in (head, first)]
    for cid in gone:
        with pytest.raises(zl.NotFoundError):
            repo.readonly_session(cid)
    assert repo.readonly_session("keep").read("a/c/0") == chunk(0)
    assert [c.message for c in repo.log("keep")] == ["first"]
    repo.gc(ZERO)
    assert fsck(repo) == []
    assert unreachable(repo) == set()


def test_staged_bytes_stay_out_of_the_metastore_and_gc_converts_older_files(
    repo: zl.Repo,
) -> None:
    """Small chunks are staged in fragment objects, not in SQLite rows: staging 6 MB of them
    grows the metastore file by a few pages. A file made before incremental auto-vacuum is
    switched to it by gc's vacuum."""
    import sqlite3

    path = repo.spec.metastore.removeprefix("sqlite:///")
    size = 3000 * 2000

    def ingest(tag: str) -> int:
        s = repo.create_session()
        s.write_many([(f"{tag}/c/{i}", chunk(i, 2000)) for i in range(3000)])
        s.commit(tag)
        s.wait()
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(path)

    assert ingest("a") < size // 20
    with sqlite3.connect(path, isolation_level=None) as db:  # as an older file was made
        db.execute("PRAGMA auto_vacuum = NONE")
        db.execute("VACUUM")
    ingest("b")
    meta = repo._context.meta  # rows an older zarrlake staged, dropped: pages freed
    meta.set_many("scratch", [(b"%d" % i, bytes(2000)) for i in range(1000)])
    meta.drop_partition("scratch")
    report = repo.gc(ZERO)
    assert report.metastore_bytes_freed > 1_000_000
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert repo.readonly_session().read("b/c/2999") == chunk(2999, 2000)


def test_abandoned_session_registered_before_its_records_go(repo: zl.Repo) -> None:
    """register_staged (for abandon to call before dropping staged records) lets an
    incremental run reclaim an abandoned session's uploads without listing."""
    from zarrlake.format.chunk_ref import chunk_object_key
    from zarrlake.vc.gc_protocol import GcState, register_staged

    commit(repo, {"a/c/0": chunk(0)})
    s = repo.create_session()
    s.write_many([("a/c/0", chunk(0)), ("a/c/1", chunk(1, 300_000))])  # one dedup hit
    s.flush()
    register_staged(repo._context, s.id)  # a/c/0 may be a candidate already (commit cleanup)
    assert {chunk_object_key(content_hash(c)) for c in (chunk(0), chunk(1, 300_000))} <= set(
        GcState(repo._context).candidates()
    )
    s.abandon()
    report = repo.gc(ZERO)
    assert report.by_kind["chunks"] == (1, 300_000)  # the live a/c/0 chunk stays
    assert report.candidates_live == 1
    assert unreachable(repo) == set()
    assert repo.readonly_session().read("a/c/0") == chunk(0)


def test_a_sweep_renews_the_lock_and_a_taken_over_collector_stops(repo: zl.Repo) -> None:
    """The lock's time is renewed when a sweep begins (another host may take a lock over
    only LOCK_TTL after it, long after the sweep's lease); a collector whose lock was
    taken over starts no sweep."""
    import json

    from zarrlake.errors import GcBusyError
    from zarrlake.vc.gc_protocol import LOCK, SWEEP_LEASE, GcState

    now = [1_000.0]
    repo._context.clock = lambda: now[0]
    state = GcState(repo._context)
    state.acquire()
    now[0] += 3_000.0
    phase = state.begin_sweep()
    lock = json.loads(repo._context.meta.get(state.partition, LOCK)[0])
    assert (lock["owner"], lock["since"]) == (state.owner, 4_000.0)
    assert phase.sweeping and phase.until == 4_000.0 + SWEEP_LEASE
    state.end_sweep(phase)

    other = GcState(repo._context)
    got = repo._context.meta.get(state.partition, LOCK)
    repo._context.meta.set_if(
        state.partition, LOCK, json.dumps({"owner": other.owner, "since": now[0]}).encode(), got[1]
    )
    with pytest.raises(GcBusyError, match="taken over"):
        state.begin_sweep()
    assert not state.phase()[0].sweeping


@pytest.mark.parametrize("how", ["delete", "reset"])
def test_incremental_gc_reclaims_a_dropped_branch_history(repo: zl.Repo, how: str) -> None:
    """A deleted (or reset) branch's commits and chunks are reclaimed without listing; what
    main still reaches stays."""
    commit(repo, {"a/c/0": chunk(0)})
    repo.create_branch("dev")
    commit(repo, {"a/c/1": chunk(1)}, branch="dev")
    commit(repo, {"a/c/2": chunk(2), "a/c/0": chunk(0)}, branch="dev")
    if how == "delete":
        repo.delete_branch("dev")
    else:
        repo.reset_branch("dev", "main")
    garbage = unreachable(repo)
    assert {chunk_object_key(content_hash(chunk(i))) for i in (1, 2)} <= garbage
    report = repo.gc(ZERO)
    assert not report.full and report.objects_deleted == len(garbage)
    assert unreachable(repo) == set()
    assert repo.readonly_session().read("a/c/0") == chunk(0)
    assert fsck(repo) == []


def test_a_chunk_objects_block_table_goes_with_it(tmp_path):
    # format/blocks.py: a table `blocks/<digest>` beside a large object of a sharded array
    import numpy as np
    import zarr

    repo = zl.Repo.create(tmp_path / "repo")
    data = np.random.default_rng(3).random((2, 512, 256), dtype=np.float32)
    s = repo.create_session()
    a = zarr.create_array(
        s.store, name="a", shape=data.shape, chunks=(1, 512, 256), shards=(2, 512, 256), dtype="f4"
    )
    a[...] = data
    s.commit("sharded")
    store = repo._context.object_store
    tables = list(store.list("blocks/"))
    assert len(tables) == 1
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[...] = data + 1
    s.flush()
    assert len(list(store.list("blocks/"))) == 2
    s.abandon()  # what it uploaded is garbage: the new shard, and its table
    repo.gc(timedelta(0))
    assert list(store.list("blocks/")) == tables
    assert np.array_equal(zarr.open_array(repo.readonly_session().store, path="a")[...], data)


def test_a_local_sweep_asks_to_delete_only_the_tables_there_are(tmp_path, monkeypatch):
    """Chunk objects of 256 KiB and more may have a block table; on a local directory the
    sweep deletes only the tables it lists, not a missing one per chunk object."""
    from zarrlake.storage.local import LocalObjectStore

    asked: list[str] = []
    move_to_bin = LocalObjectStore.move_to_bin  # a local sweep's delete (vc/sweep_fence.py)

    def spy(self: LocalObjectStore, name: str, keys: list[str]) -> list[str] | None:
        asked.extend(keys)
        return move_to_bin(self, name, keys)

    monkeypatch.setattr(LocalObjectStore, "move_to_bin", spy)
    import numpy as np
    import zarr

    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()  # 300 KB chunks of an array without shards: no tables
    zarr.create_array(s.store, name="a", shape=(4, 75_000), chunks=(1, 75_000), dtype="f4")
    s.commit("array")
    for seed in (1, 2):
        s = repo.create_session()
        zarr.open_array(s.store, path="a")[...] = np.random.default_rng(seed).random((4, 75_000))
        s.commit(f"fill {seed}")
        s.wait()
    repo.expire(ZERO)
    report = repo.gc(ZERO)
    assert report.by_kind["chunks"][0] == 4
    assert [k for k in asked if k.startswith("chunks/")] and not [
        k for k in asked if k.startswith("blocks/")
    ]
    repo.close()
