"""The sequential round trips of a one-chunk commit on the bucket-only metastore (issue 50),
counted by the benchmarks' relay in front of moto's S3 server (real HTTP, every byte
delayed, so requests that overlap are seen to): the new session's record is stored once
(its shard's head held from the thread's last session, else read beside the branch head),
carrying the first chunk's upload record, and its base is checked beside the first
write (the chunk's upload included), not before it. And a first write whose base a reset
and gc deleted still refuses, naming them, with the check overlapped, leaving nothing
behind."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from benchmarks.relay import RelayProcess
from benchmarks.wire import format_log
from tests.core.counting import CountingMetaStore, CountingObjectStore
from tests.fixtures.s3 import s3_options
from tests.perf.test_bucket_requests import REQUESTS, requests_of
from tests.perf.test_commit_calls import held_cleanup  # noqa: F401 - a fixture
from zarrlake.connection import RepoContext
from zarrlake.errors import NotFoundError

CHUNK = (64, 64)  # 16 KiB of float32: uploaded, not staged inline

ROUNDS = 6
"""Begin + write one chunk + commit: the branch head (with the record's shard unless this
process holds its head), the record carrying the chunk's upload record (txn/birth.py),
the chunk with the marker, the upload record's copy and the base check, then the commit
call's three (seal with the final flush; gather with the gc phase and landing fence, and
the premade commit's objects with its fence: txn/commit.py `Premade`; the branch). (7 when
the objects and the fence went in a round of their own after the gather; 8 when the record
went alone, the marker and upload record with the base check after it, and the chunk after
them.)"""


def _value(i: int) -> np.ndarray:
    return np.random.default_rng(i).random(CHUNK, dtype=np.float32)


def _through(location: str, endpoint: str) -> zl.Repo:
    return zl.Repo.open(location, storage_options=s3_options(endpoint))


def test_begin_write_commit_takes_six_sequential_round_trips(
    s3_location,
    s3_server,
    held_cleanup: threading.Event,  # noqa: F811 - the fixture
) -> None:
    held_cleanup.set()  # held only while a commit is counted
    location, options = s3_location
    base = zl.Repo.create(location, storage_options=options)
    s = base.create_session("main")
    zarr.create_array(s.store, name="a", shape=(8, *CHUNK), chunks=(1, *CHUNK), dtype="f4")
    s.commit("array a")
    base.close()
    host, port = s3_server.removeprefix("http://").split(":")
    with RelayProcess() as relays:
        # delayed 60 ms (the benchmark's 20 ms was seen to split one round in two on a
        # loaded machine, whose pool thread sent the second of two requests after the
        # first's reply): requests sent together are seen to overlap
        local = relays.add("S3", host, int(port), delay_ms=60)
        repo = _through(location, f"http://127.0.0.1:{local}")
        rounds, logs, requests = [], [], []
        for i in range(3):  # the first warms the process's caches (snapshot, array document)
            held_cleanup.clear()  # what the commit leaves to the background waits till counted
            relays.start(log=True)
            s = repo.create_session("main")
            zarr.open_array(s.store, path="a")[i] = _value(i)
            s.commit(f"chunk {i}")
            window = relays.window()
            rounds.append(window["S3_rounds"])
            requests.append(requests_of(window))
            logs.append("\n".join(format_log(window["log"])))
            held_cleanup.set()
            s._txn.wait()
        repo.close()
    print(*logs, sep="\n\n")  # shown if the assertion fails
    assert rounds[1:] == [ROUNDS, ROUNDS], rounds
    for seen in requests[1:]:  # `refs` read at begin and once in the commit, nothing refused
        assert seen["GET", "refs", "200"] == 2 and seen["PUT", "refs", "200"] == 1, seen
        assert not [k for k in seen if k[:2] == ("GET", "sessions")], seen  # its shard held
        assert sum(seen.values()) == REQUESTS, seen
        assert not [k for k in seen if k[2] == "412"], seen
    check = zl.Repo.open(location, storage_options=options)
    got = zarr.open_array(check.readonly_session("main").store, path="a", mode="r")[:3]
    assert np.array_equal(got, np.stack([_value(i) for i in range(3)]))
    check.close()


class HeldMarker(CountingMetaStore):
    """Holds the first write of a session's staged records (its unflushed-writes marker)
    until the base's commit record has been looked for, and notes whether it had."""

    def __init__(self, inner, looked: threading.Event) -> None:
        super().__init__(inner)
        self.looked = looked
        self.overlapped: list[bool] = []

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        if "/stage/" in partition and not self.overlapped:
            self.overlapped.append(self.looked.wait(10))
        super().set_many(partition, items)


class NotesLook(CountingObjectStore):
    """Notes when a commit record is looked for (the base check)."""

    def __init__(self, inner, looked: threading.Event) -> None:
        super().__init__(inner)
        self.looked = looked

    def exists(self, key: str) -> bool:
        if key.startswith("commits/"):
            self.looked.set()
        return super().exists(key)


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
def test_a_base_gone_is_refused_at_the_first_write_with_the_check_beside_it(
    any_metastore: dict,
) -> None:
    admin = zl.Repo.create(**any_metastore)
    s = admin.create_session()
    zarr.create_array(s.store, name="a", shape=(4, *CHUNK), chunks=(1, *CHUNK), dtype="f4")
    old = s.commit("array")
    s = admin.create_session()
    zarr.open_array(s.store, path="a")[0] = _value(0)
    s.commit("row 0")  # the base of the session below
    looked = threading.Event()
    worker = zl.Repo.open(**any_metastore)  # another process: nothing of the base cached
    ctx = worker._context
    meta = HeldMarker(ctx.meta, looked)
    repo = zl.Repo(
        RepoContext(
            ctx.spec,
            ctx.repo_id,
            NotesLook(ctx.object_store, looked),
            meta,
            hash=ctx.hash,
            format=ctx.format,
            session_shards=ctx.session_shards,
        )
    )
    t = repo.create_session()  # based on `gone`; no record stored yet
    admin.reset_branch("main", old)
    assert admin.gc(timedelta(0)).by_kind["commits"][0] == 1  # `gone`, the base of `t`
    with pytest.raises(NotFoundError, match=r"no longer exists: branch 'main' moved off it"):
        zarr.open_array(t.store, path="a")[1] = _value(1)
    assert meta.overlapped == [True]  # the marker went out beside the look, not after it
    sid = t._engine.id
    assert sid not in {r.id for r in admin._context.records.scan()}
    assert list(admin._context.meta.scan(admin._context.stage_partition(sid))) == []
    with pytest.raises(NotFoundError, match="start a new session on 'main'"):
        t.commit("never", allow_empty=True)  # refused for good, nothing stored again
    assert sid not in {r.id for r in admin._context.records.scan()}
    assert admin.log("main")[0].id == old  # no commit names the deleted base
    assert admin.fsck() == []
    u = repo.create_session()
    zarr.open_array(u.store, path="a")[1] = _value(1)
    u.commit("row 1 on the new head")
    rows = zarr.open_array(admin.readonly_session().store, path="a", mode="r")[:2]
    assert np.array_equal(rows[1], _value(1)) and not rows[0].any()
    repo.close()
    admin.close()
