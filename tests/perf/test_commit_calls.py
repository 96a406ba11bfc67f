"""The metastore and object-store calls of the everyday paths, counted on each metastore:
a one-chunk commit (issue 34: begin, write, the commit call, the clean-up after it) and a
read-only open + read of one chunk. Counts, not seconds: a change that adds a call to
these paths fails here and has to say why (and update the figure); one that removes a
call lowers the figure."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.core.counting import counted
from zarrlake.session_records import SessionRecords
from zarrlake.txn.transaction import Transaction

CHUNK = (64, 64)  # 16 KiB of float32: above the staging inline limit, so it is uploaded


def _value(i: int) -> np.ndarray:
    return np.random.default_rng(i).random(CHUNK, dtype=np.float32)


@pytest.fixture
def held_cleanup(monkeypatch) -> Iterator[threading.Event]:
    """The work a commit leaves to background threads (the record's finish, the clean-up)
    waits for this event, so the calls of the commit call and of that work are counted
    apart."""
    release = threading.Event()
    drop = Transaction._drop_staged
    later = SessionRecords.later

    def held(self: Transaction, staging: object) -> None:
        release.wait(30)
        drop(self, staging)  # type: ignore[arg-type]

    def held_later(self: SessionRecords, write):
        if not self.meta.remote:  # written in place: part of the commit call
            return later(self, write)
        return later(self, lambda records: (release.wait(30), write(records))[1])

    monkeypatch.setattr(Transaction, "_drop_staged", held)
    monkeypatch.setattr(SessionRecords, "later", held_later)
    yield release
    release.set()


@pytest.fixture
def hops(monkeypatch) -> list[str]:
    """The names of the functions run through `asyncio.to_thread` from now on, in order:
    each is a hop from zarr's event loop to a thread and back."""
    names: list[str] = []
    to_thread = asyncio.to_thread

    def counting(fn, /, *args, **kwargs):
        names.append(getattr(fn, "__name__", repr(fn)))
        return to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    return names


def _calls(meta: Counter[str], blobs: Counter[str]) -> dict[str, int]:
    """Non-zero counts, metastore calls as M.name and object-store calls as O.name."""
    out = {f"M.{k}": v for k, v in meta.items() if v}
    return out | {f"O.{k}": v for k, v in blobs.items() if v}


def _one_chunk_commit(repo: zl.Repo, meta, blobs, release: threading.Event, i: int):
    """(begin + write, commit call, clean-up) calls of one one-chunk commit."""
    meta.calls.clear()
    blobs.calls.clear()
    s = repo.create_session("main")
    zarr.open_array(s.store, path="a")[i] = _value(i)
    write = _calls(meta.calls, blobs.calls)
    meta.calls.clear()
    blobs.calls.clear()
    release.clear()
    s.commit(f"commit {i}")
    commit = _calls(meta.calls, blobs.calls)
    meta.calls.clear()
    blobs.calls.clear()
    release.set()
    s._txn.wait()
    return write, commit, _calls(meta.calls, blobs.calls)


# What each path costs, per metastore (M. metastore calls, O. object-store calls). The
# SQLite and bucket figures are the same calls (the metastore interface is one), but for
# where the session record's finish goes (FINISH).
WRITE = {
    "M.get": 2,  # the branch head; the old metastore's moved marker (metastore copy's fence)
    "M.set_if": 1,  # the new session record, stored at the first write (txn/birth.py)
    # (zarr opening the array asks whether its zarr.json is staged: no call while the
    # session's record is not stored, as nobody else can have staged in it)
    "M.set_many": 2,  # the handle's unflushed-writes marker; the upload's record (for gc)
    "O.exists": 2,  # the base's expiry marker and its commit record (a reset and gc may
    # have deleted it), looked for at once after the record is stored
    "O.put_if_absent": 1,  # the chunk
}
COMMIT = {
    "M.set_many": 1,  # the handle's fragment record and its writer finished
    "M.scan": 2,  # protection rules and checks; the staged records (gather)
    "M.get": 3,  # the branch head; the gc phase (settles the uploads); the landing fence
    "M.set_if": 2,  # seal; lease + attempt (the fence)
    "M.write_if": 1,  # the branch, guarded by the session's landing fence in the same write
    "O.put_if_absent": 4,  # manifest range, snapshot, change set, commit record
}

CLEANUP = {  # in the background: the records go; the chunk is no gc candidate (the commit
    # keeps it, and gc finds it through that commit once it is dropped or expired)
    "M.scan": 2,  # fragments, uploads (3 and a set_many when the upload records were
    # deleted one by one and their partition scanned again before it was dropped)
    "M.drop_partition": 2,  # uploads (with their records), staging
}

FINISH = {"M.set_if": 1}  # the session record committed: in the commit call on an embedded
# metastore, after it returns (in the background) on a remote one


def _plus(calls: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    return dict(Counter(calls) + Counter(more))


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_one_chunk_commit_costs_what_it_did(any_metastore: dict, held_cleanup) -> None:
    base = zl.Repo.create(**any_metastore)
    s = base.create_session("main")
    zarr.create_array(s.store, name="a", shape=(8, *CHUNK), chunks=(1, *CHUNK), dtype="f4")
    s.commit("array a")
    repo, blobs, meta = counted(base)
    seen = [_one_chunk_commit(repo, meta, blobs, held_cleanup, i) for i in range(4)]
    # Each commit after the first costs the same: nothing grows with their number.
    for write, commit, _ in seen[1:]:
        assert write == seen[1][0] and commit == seen[1][1]
    write, commit, cleanup = seen[-1]
    remote = repo._context.meta.remote
    assert commit == (COMMIT if remote else _plus(COMMIT, FINISH))
    # On the bucket metastore too: the new record's shard is read beside the branch head
    # (making its store one write: MetaStore.writes_after_reads) only while the process
    # holds no head of it; a thread's sessions keep to one shard, so the first commit's did
    # (one M.get more, with its cold caches' reads) and these do not.
    assert write == WRITE
    assert cleanup == (_plus(CLEANUP, FINISH) if remote else CLEANUP)
    rows = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")
    assert np.array_equal(rows[3], _value(3))
    repo.close()  # and base: they share the backends


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_open_and_read_one_chunk_costs_what_it_did(any_metastore: dict, hops: list[str]) -> None:
    """A read-only open + read of one chunk from a new Repo: the branch head, then the
    snapshot, one manifest range and the chunk; on a local directory the chunk is read on
    zarr's event loop, without a hop to a thread (SessionEngine.read_here)."""
    base = zl.Repo.create(**any_metastore)
    s = base.create_session("main")
    zarr.create_array(s.store, name="a", shape=(8, *CHUNK), chunks=(1, *CHUNK), dtype="f4")[2] = (
        _value(2)
    )
    s.commit("array a")
    hops.clear()  # the writes hopped too: count the read
    repo, blobs, meta = counted(zl.Repo.open(**any_metastore))
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[2]
    assert np.array_equal(got, _value(2))
    assert _calls(meta.calls, blobs.calls) == {"M.get": 1, "O.get": 3}
    local = "metastore" not in any_metastore and "storage_options" not in any_metastore
    assert hops.count("read") == (0 if local else 1)
    repo.close()
    base.close()


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_reading_one_inner_chunk_of_a_shard_takes_no_hop_to_a_thread_on_a_local_directory(
    any_metastore: dict, hops: list[str]
) -> None:
    """zarr reads a shard's index, then the inner chunk: on a local directory both are read
    on zarr's event loop (SessionEngine.read_ranges_here); on a remote store each runs on a
    thread. A whole shard, or more than READ_HERE_MAX bytes of it, is read on a thread
    either way, so shards are read side by side."""
    from zarrlake.txn.overlay import READ_HERE_MAX

    base = zl.Repo.create(**any_metastore)
    s = base.create_session("main")
    shape = (4, *CHUNK)
    values = np.stack([_value(i) for i in range(4)])
    zarr.create_array(s.store, name="a", shape=shape, chunks=(1, *CHUNK), shards=shape, dtype="f4")[
        :
    ] = values
    big = (8, 1024, 64)  # 2 MiB of float32 in one shard, inner chunks of 256 KiB
    assert READ_HERE_MAX < 4 * 8 * 1024 * 64
    zarr.create_array(s.store, name="b", shape=big, chunks=(1, 1024, 64), shards=big, dtype="f4")[
        :
    ] = np.arange(np.prod(big), dtype="f4").reshape(big)
    s.commit("sharded arrays")
    hops.clear()
    repo = zl.Repo.open(**any_metastore)
    store = repo.readonly_session("main").store
    got = zarr.open_array(store, path="a", mode="r")[2]
    assert np.array_equal(got, values[2])
    local = "metastore" not in any_metastore and "storage_options" not in any_metastore
    assert hops.count("_read_ranges") == (0 if local else 2)
    hops.clear()
    whole = zarr.open_array(store, path="b", mode="r")[:]
    assert np.array_equal(whole, np.arange(np.prod(big), dtype="f4").reshape(big))
    assert {"read", "_read_ranges"} & set(hops)  # the whole shard, read on a thread
    repo.close()
    base.close()
