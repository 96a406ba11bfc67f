"""The bucket metastore under faults of its conditional writes: replies lost after the write
landed, failures before it ran (as a 5xx), writes still in flight when the writer reads back
(as after a timeout), refusals whose reply is lost, and reads that fail while the writer
reads back. Scripted cases first, each naming the hazard; then seeded random faults from
many threads, on memory and on moto's S3 server: no acknowledged write lost, none applied
twice, no false conflict, and every write settled (none given up while it may still land).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from zarrlake.errors import CASFailedError, TransientError
from zarrlake.metastore.bucket import RECENT, BucketMetaStore
from zarrlake.storage import ObjectStore, WrapperObjectStore, open_storage
from zarrlake.testing.faults import FaultyObjectStore

P = "part"


class Scripted(WrapperObjectStore):
    """Object storage whose conditional writes of partition heads follow `script`: "ok",
    "fail" (refused before it runs, as a 503), "lost" (runs, then the reply is lost; a
    refusal's reply too), "late:N" (does not run now but N store calls later, as a request
    stuck in the network). `interlude`, if set, runs once before the next head write;
    `failing_reads` makes that many reads fail."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.script: list[str] = []
        self.interlude: Callable[[], Any] | None = None
        self.failing_reads = 0
        self.landed = 0
        self._in_flight: list[list[Any]] = []

    def _tick(self) -> None:
        for late in list(self._in_flight):
            late[0] -= 1
            if late[0] <= 0:
                self._in_flight.remove(late)
                try:
                    self.inner.put_if(*late[1:])
                    self.landed += 1
                except CASFailedError:
                    pass  # its condition was gone by the time it arrived

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        self._tick()
        if self.failing_reads:
            self.failing_reads -= 1
            raise TransientError("injected: read failed")
        return self.inner.get_tagged(key)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        self._tick()
        if not key.endswith("/head"):
            return self.inner.put_if(key, data, tag)
        action = self.script.pop(0) if self.script else "ok"
        if self.interlude is not None:
            interlude, self.interlude = self.interlude, None
            interlude()
        if action == "fail":
            raise TransientError("injected: 503, the write did not run")
        if action.startswith("late:"):
            self._in_flight.append([int(action.split(":")[1]), key, data, tag])
            raise TransientError("injected: timed out, the write is still in flight")
        try:
            new = self.inner.put_if(key, data, tag)
        except CASFailedError:
            if action == "lost":
                raise TransientError("injected: the refusal's reply was lost") from None
            raise
        self.landed += 1
        if action == "lost":
            raise TransientError("injected: the reply was lost after the write landed")
        return new


@pytest.fixture
def stores() -> tuple[BucketMetaStore, Scripted, BucketMetaStore]:
    """(the store under test, its scripted storage, another writer on the same storage)."""
    location = f"memory://faults-{uuid.uuid4().hex}"
    scripted = Scripted(open_storage(location, retry_policy=None))
    other = BucketMetaStore.open(location, {})
    return BucketMetaStore(scripted, f"bucket+{location}"), scripted, other


def test_lost_reply_of_a_create_is_not_a_false_conflict(stores):
    meta, storage, _ = stores
    storage.script = ["lost"]
    version = meta.set_if(P, b"k", b"v", None)
    assert meta.get(P, b"k") == (b"v", version)
    assert storage.landed == 1


def test_lost_reply_of_a_swap_is_not_a_false_conflict(stores):
    meta, storage, _ = stores
    first = meta.set(P, b"k", b"one")
    storage.script = ["lost", "lost"]
    second = meta.set_if(P, b"k", b"two", first)
    third = meta.set_if(P, b"k", b"three", second)
    assert meta.get(P, b"k") == (b"three", third)
    assert storage.landed == 3


def test_failure_before_the_write_ran_is_retried_once(stores):
    meta, storage, _ = stores
    storage.script = ["fail", "fail", "fail"]
    version = meta.set_if(P, b"k", b"v", None)
    meta.set_many(P, [(b"a", b"1"), (b"b", b"2")])
    assert meta.get(P, b"k") == (b"v", version)
    assert storage.landed == 2  # one head write per call, nothing twice


def test_write_still_in_flight_when_read_back_lands_once(stores):
    """The read-back finds nothing changed, so the same write is sent again on the same
    condition; the stuck one arrives first: the resend is refused, and the read-back after
    that finds the write in. It counts once, and the call reports it landed."""
    meta, storage, _ = stores
    base = meta.set(P, b"k", b"0")
    storage.script = ["late:2"]  # arrives after the read-back, just before the resend
    version = meta.set_if(P, b"k", b"1", base)
    assert meta.get(P, b"k") == (b"1", version)
    assert storage.landed == 2  # the first set and the stuck write; the resend was refused


def test_write_still_in_flight_after_a_resend_is_refused(stores):
    meta, storage, _ = stores
    base = meta.set(P, b"k", b"0")
    storage.script = ["late:5"]  # arrives only after the resend landed
    version = meta.set_if(P, b"k", b"1", base)
    assert meta.get(P, b"k") == (b"1", version)
    meta.set(P, b"other", b"x")  # gives the stuck write its chance to arrive
    meta.set(P, b"other", b"y")
    assert meta.get(P, b"k") == (b"1", version)
    assert storage.landed == 4  # two sets, the resend and the first set: stuck one refused


def test_lost_refusal_is_planned_again_on_the_new_head(stores):
    """Another writer changed the head after we read it, and the refusal's reply was lost:
    the read-back shows our write is not in and never will be; a swap of a key the other
    writer left alone then succeeds (no false conflict), one of a key it changed fails."""
    meta, storage, other = stores
    mine = meta.set(P, b"mine", b"0")
    meta.set(P, b"theirs", b"0")
    storage.script = ["lost"]
    storage.interlude = lambda: other.set(P, b"theirs", b"1")
    version = meta.set_if(P, b"mine", b"1", mine)
    assert meta.get(P, b"mine") == (b"1", version)
    theirs = meta.get(P, b"theirs")[1]
    storage.script = ["lost"]
    storage.interlude = lambda: other.set(P, b"theirs", b"2")
    with pytest.raises(CASFailedError):
        meta.set_if(P, b"theirs", b"mine", theirs)
    assert meta.get(P, b"theirs")[0] == b"2"


def _land_then(storage: Scripted, then: Callable[[], Any]) -> None:
    """Make the next conditional write land, run `then`, and lose the write's reply."""
    original = storage.put_if

    def put_if(key: str, data: bytes, tag: str | None) -> str:
        storage.put_if = original  # type: ignore[method-assign]
        original(key, data, tag)
        then()
        raise TransientError("injected: the reply was lost after the write landed")

    storage.put_if = put_if  # type: ignore[method-assign]


def test_lost_reply_then_other_writes_still_counts_as_landed(stores):
    meta, storage, other = stores
    base = meta.set(P, b"k", b"0")
    _land_then(storage, lambda: [other.set(P, b"noise", str(i).encode()) for i in range(5)])
    version = meta.set_if(P, b"k", b"1", base)
    assert meta.get(P, b"k") == (b"1", version)


def test_read_back_keeps_trying_while_reads_fail(stores):
    meta, storage, _ = stores
    storage.script = ["lost"]
    storage.failing_reads = 9  # more than the 8 attempts of an ordinary read
    version = meta.set_if(P, b"k", b"v", None)
    assert meta.get(P, b"k") == (b"v", version)
    assert storage.landed == 1


@pytest.mark.parametrize("overwritten", [False, True])
def test_lost_reply_behind_more_writes_than_the_head_remembers(stores, overwritten):
    """More than RECENT writes landed after ours before the read-back: its id is gone from
    the head. The key still holding our version proves it landed; if it was overwritten
    too, the outcome is unknown and said so (TransientError), never guessed."""
    meta, storage, other = stores
    base = meta.set(P, b"k", b"0")

    def others() -> None:
        for i in range(RECENT + 2):
            other.set(P, b"k" if overwritten and i == 0 else b"noise", str(i).encode())

    _land_then(storage, others)
    if overwritten:
        with pytest.raises(TransientError, match="cannot tell"):
            meta.set_if(P, b"k", b"1", base)
    else:
        version = meta.set_if(P, b"k", b"1", base)
        assert meta.get(P, b"k") == (b"1", version)


def _pages(meta: BucketMetaStore) -> list[str]:
    return [k for k in meta.store.list("meta/") if "/pages/" in k]


def test_lost_reply_of_a_flush_keeps_its_pages(stores):
    meta, storage, _ = stores
    big = [(f"k{i:04d}".encode(), bytes(200)) for i in range(400)]  # > the inline limit
    storage.script = ["lost", "lost"]  # the head's pageless mark cleared, then the flush
    meta.set_many(P, big)
    assert [k for k, _, _ in meta.scan(P)] == [k for k, _ in big]
    assert len(_pages(meta)) >= 1
    assert storage.landed == 2


def test_refused_flush_leaves_no_pages_behind(stores):
    meta, storage, other = stores
    meta.set(P, b"k", b"0")
    big = [(f"k{i:04d}".encode(), bytes(200)) for i in range(400)]
    storage.interlude = lambda: other.set(P, b"x", b"1")  # our first attempt is refused
    meta.set_many(P, big)
    referenced = {k for k in _pages(meta)}
    assert len(referenced) >= 1
    assert meta.get(P, b"x")[0] == b"1" and meta.get(P, b"k0399")[0] == bytes(200)
    # only the pages of the landed attempt remain: the refused attempt's were deleted
    meta.set_many(P, [(f"z{i:04d}".encode(), bytes(200)) for i in range(400)])
    assert len(_pages(meta)) <= 2


def _increment_until_done(meta, partition: str, n: int, counts: list[int], errors: list) -> None:
    try:
        done = 0
        while done < n:
            got = meta.get(partition, b"counter")
            value, version = (int(got[0]), got[1]) if got else (0, None)
            try:
                meta.set_if(partition, b"counter", str(value + 1).encode(), version)
            except CASFailedError:
                continue
            done += 1
            meta.set_many(partition, [(f"blind{done % 7}".encode(), b"x" * (done % 50))])
        counts.append(done)
    except BaseException as e:
        errors.append(e)


@pytest.mark.parametrize("where", ["memory", "s3"])
def test_random_faults_from_threads_lose_nothing(where, request):
    """Seeded faults on every request below the metastore (failures before a write ran and
    replies lost after it landed, conditional writes included), from 6 threads incrementing
    one counter by compare-and-swap: the counter ends at exactly the acknowledged increments
    and no call fails with anything but a real conflict."""
    remote = where == "s3"
    if remote:
        location, options = request.getfixturevalue("s3_location")
        threads, each = 4, 15
    else:
        location, options = f"memory://random-{uuid.uuid4().hex}", {}
        threads, each = 6, 40
    raw = open_storage(location, retry_policy=None, **options)
    faulty = FaultyObjectStore(
        raw, seed=11, error_rate=0.08, lost_response_rate=0.08, latency=0.002 if remote else 0
    )
    meta = BucketMetaStore(faulty, f"bucket+{location}")
    counts: list[int] = []
    errors: list[BaseException] = []
    workers = [
        threading.Thread(target=_increment_until_done, args=(meta, P, each, counts, errors))
        for _ in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    assert sum(counts) == threads * each
    clean = BucketMetaStore.open(location, options)
    assert clean.get(P, b"counter")[0] == str(threads * each).encode()
    assert faulty.errors_injected > 0 and faulty.responses_lost > 0


def test_concurrent_writers_on_a_flaky_bucket_only_repository(s3_location, tmp_path, figures):
    """The multi-process workload of the flaky-storage suite on a repository whose metastore
    is its bucket (moto's S3 server), with faults injected into every storage request, the
    metastore's own conditional writes included: the branch history is exactly the
    acknowledged commits, and the state after each is their serial replay."""
    from tests.helpers.reliability import size
    from tests.reliability.workers import check_history, run_workers, setup_repo

    location, options = s3_location
    procs, txns = size(3, 4), size(6, 30)
    repo = setup_repo(location, storage_options=options)
    head = repo.resolve("main")
    faults = "error_rate=0.05,lost_response_rate=0.05"
    results = run_workers(location, None, procs, txns, tmp_path, faults, storage_options=options)
    found = check_history(repo, results, head)
    assert found["commits acknowledged"] == procs * txns
    assert sum(r["faults"]["below_meta_lost"] for r in results) > 0
    figures["flaky: processes"] += procs
    figures["flaky: transactions run"] += procs * txns + found["attempts failed by conflict"]
    figures["lost commits"] += found["lost"]
    figures["phantom commits"] += found["phantom"]


@pytest.fixture
def proxied(s3_server):
    """(a FaultyProxy in front of the S3 server, s3:// location and options through it)."""
    from tests.fixtures.faulty_http import FaultyProxy
    from tests.fixtures.s3 import s3_client, s3_options

    proxy = FaultyProxy(s3_server)
    bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    options = {**s3_options(proxy.endpoint), "request_timeout": 0.5}
    try:
        yield proxy, f"s3://{bucket}/repo", options
    finally:
        proxy.close()


@pytest.mark.parametrize("fault", ["drop", "503", "hang"])
def test_http_faults_on_every_conditional_write(proxied, fault):
    """Each kind of conditional write (create, swap, batch, flush into pages, delete) meets
    a real fault on its first attempt: a connection closed after the write ran, a 503
    before it ran, or no answer until the client's timeout. Each lands exactly once (the
    partition's first flush into pages is two head writes, the pageless mark cleared and
    then the flush, and each meets the fault)."""
    proxy, location, options = proxied
    meta = BucketMetaStore.open(location, options)
    writes = [
        (lambda: meta.set_if(P, b"k", b"1", None), 1),
        (lambda: meta.set_if(P, b"k", b"2", meta.get(P, b"k")[1]), 1),
        (lambda: meta.set_many(P, [(b"a", b"1"), (b"b", b"2"), (b"k", None)]), 1),
        (lambda: meta.set_many(P, [(f"big{i:04d}".encode(), bytes(200)) for i in range(400)]), 2),
        (lambda: meta.delete(P, b"a"), 1),
    ]
    for write, heads in writes:
        proxy.script = [fault] * heads
        before = proxy.landed
        write()
        assert proxy.landed == before + heads, "a write was lost or applied twice"
    assert proxy.faults == sum(heads for _, heads in writes)
    assert meta.get(P, b"k") is None and meta.get(P, b"a") is None
    assert meta.get(P, b"b")[0] == b"2"
    assert len(list(meta.scan(P, prefix=b"big"))) == 400


def test_commits_with_every_other_conditional_write_dropped(proxied):
    """A bucket-only repository committing while every other conditional write (metastore
    heads, and put-if-absent of immutable objects) loses its reply: no false conflict,
    every commit in the log once, the data as written."""
    import zarr

    import zarrlake as zl

    proxy, location, options = proxied
    repo = zl.Repo.create(location, storage_options=options)
    s = repo.create_session()
    zarr.open_group(s.store, mode="a").create_array("a", shape=(4,), chunks=(1,), dtype="i8")
    s.commit("create a")
    proxy.script = ["drop", "pass"] * 500
    ids = []
    for i in range(4):
        s = repo.create_session()
        zarr.open_array(s.store, path="a")[i] = i + 1
        ids.append(s.commit(f"write {i}"))
    assert proxy.faults > 8
    log = zl.Repo.open(location, storage_options=options).log()
    assert [c.id for c in log[:4]] == ids[::-1]
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:]
    assert got.tolist() == [1, 2, 3, 4]
