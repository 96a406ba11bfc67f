"""Conformance suite: every metastore backend must pass the same tests."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import threading
import uuid
import warnings
from collections.abc import Iterator

import pytest

from zarrlake.errors import CASFailedError, InvalidInputError
from zarrlake.metastore import PAGE_SIZE, MetaStore, open_metastore, prefix_upper_bound

BACKENDS = ["memory", "sqlite", "postgres"]
P = "part"
ODD_KEYS = [b"\xff", b"ab", b"a\x00", b"", b"\x00", b"a", b"b", b"\x7f", b"\x80", b"\xff\xff"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path) -> str:
    if backend == "memory":
        return f"memory://test-{uuid.uuid4().hex}"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/meta.db"
    return request.getfixturevalue("pg_metastore_url")


@pytest.fixture
def store(store_url: str) -> Iterator[MetaStore]:
    meta = open_metastore(store_url)
    yield meta
    meta.close()


def keys(items) -> list[bytes]:
    return [k for k, _, _ in items]


# reads and writes ------------------------------------------------------------------------


def test_read_after_write(store: MetaStore):
    version = store.set(P, b"k", b"v1")
    assert isinstance(version, int)
    assert store.get(P, b"k") == (b"v1", version)
    v2 = store.set(P, b"k", b"v2")
    assert v2 != version
    assert store.get(P, b"k") == (b"v2", v2)


def test_get_missing_is_none(store: MetaStore):
    assert store.get(P, b"nope") is None
    assert store.get("no-such-partition", b"k") is None
    store.set(P, b"k", b"v")
    assert store.get(P, b"k\x00") is None
    assert store.get(P, b"") is None


def test_values_roundtrip_exactly(store: MetaStore):
    big = random.Random(1).randbytes(1 << 20)
    store.set(P, b"empty", b"")
    store.set(P, b"big", big)
    store.set(P, b"binary", bytes(range(256)))
    store.set(P, b"from-bytearray", bytearray(b"xyz"))
    store.set(P, b"", b"empty key")
    assert store.get(P, b"empty")[0] == b""
    assert store.get(P, b"big")[0] == big
    assert store.get(P, b"binary")[0] == bytes(range(256))
    got = store.get(P, b"from-bytearray")[0]
    assert got == b"xyz" and type(got) is bytes
    assert store.get(P, b"")[0] == b"empty key"


def test_two_handles_share_data(store_url: str, store: MetaStore):
    other = open_metastore(store_url)
    try:
        version = store.set(P, b"k", b"v")
        assert other.get(P, b"k") == (b"v", version)
        other.delete(P, b"k")
        assert store.get(P, b"k") is None
    finally:
        other.close()


def test_pickle_reopens_same_store(store: MetaStore):
    version = store.set(P, b"k", b"v")
    clone = pickle.loads(pickle.dumps(store))
    try:
        assert clone.get(P, b"k") == (b"v", version)
    finally:
        clone.close()


# scans -----------------------------------------------------------------------------------


def test_scan_is_in_byte_order(store: MetaStore):
    shuffled = ODD_KEYS[:]
    random.Random(7).shuffle(shuffled)
    versions = {k: store.set(P, k, b"v" + k) for k in shuffled}
    items = list(store.scan(P))
    assert keys(items) == sorted(ODD_KEYS)
    expected = [b"", b"\x00", b"a", b"a\x00", b"ab", b"b", b"\x7f", b"\x80", b"\xff", b"\xff\xff"]
    assert keys(items) == expected  # unsigned bytes: 0x80 and 0xff sort after ASCII
    assert all(v == b"v" + k and ver == versions[k] for k, v, ver in items)


def test_scan_from_start_key(store: MetaStore):
    for k in ODD_KEYS:
        store.set(P, k, b"x")
    ordered = sorted(ODD_KEYS)
    for start in [b"", b"\x00", b"a", b"a\x00", b"a\x01", b"\xff", b"\xff\xff\x00"]:
        assert keys(store.scan(P, start=start)) == [k for k in ordered if k >= start], start


def test_scan_prefix(store: MetaStore):
    for k in [*ODD_KEYS, b"\xff\x00", b"aa", b"b\xff"]:
        store.set(P, k, b"x")
    assert keys(store.scan(P, prefix=b"a")) == [b"a", b"a\x00", b"aa", b"ab"]
    assert keys(store.scan(P, prefix=b"a\x00")) == [b"a\x00"]
    assert keys(store.scan(P, prefix=b"\xff")) == [b"\xff", b"\xff\x00", b"\xff\xff"]
    assert keys(store.scan(P, prefix=b"\xff\xff")) == [b"\xff\xff"]
    assert keys(store.scan(P, prefix=b"b")) == [b"b", b"b\xff"]
    assert keys(store.scan(P, prefix=b"c")) == []
    assert len(keys(store.scan(P, prefix=b""))) == len(ODD_KEYS) + 3
    # start inside and before the prefix range
    assert keys(store.scan(P, start=b"a\x01", prefix=b"a")) == [b"aa", b"ab"]
    assert keys(store.scan(P, start=b"\x00", prefix=b"a")) == [b"a", b"a\x00", b"aa", b"ab"]
    assert keys(store.scan(P, start=b"z", prefix=b"a")) == []


def test_prefix_upper_bound():
    assert prefix_upper_bound(b"a") == b"b"
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"\xff\xff") is None
    assert prefix_upper_bound(b"") is None


def test_scan_limit(store: MetaStore):
    for k in ODD_KEYS:
        store.set(P, k, b"x")
    ordered = sorted(ODD_KEYS)
    assert list(store.scan(P, limit=0)) == []
    assert keys(store.scan(P, limit=3)) == ordered[:3]
    assert keys(store.scan(P, start=b"a", limit=2)) == [b"a", b"a\x00"]
    assert keys(store.scan(P, prefix=b"a", limit=2)) == [b"a", b"a\x00"]
    assert keys(store.scan(P, limit=100)) == ordered


def test_scan_streams_across_pages(store: MetaStore):
    n = PAGE_SIZE * 2 + 17
    store.set_many(P, [(f"k{i:06d}".encode(), str(i).encode()) for i in range(n)])
    items = store.scan(P)
    first = next(items)
    assert first[0] == b"k000000"
    # A suspended scan must not block writers (no cursor or transaction held open).
    store.set(P, b"zzz", b"written mid-scan")
    rest = list(items)
    assert len(rest) + 1 in (n, n + 1)
    assert keys(rest)[: n - 1] == [f"k{i:06d}".encode() for i in range(1, n)]
    assert keys(store.scan(P, limit=PAGE_SIZE + 5)) == [
        f"k{i:06d}".encode() for i in range(PAGE_SIZE + 5)
    ]
    assert len(list(store.scan(P, prefix=b"k"))) == n


def test_partitions_are_isolated(store: MetaStore):
    store.set("a", b"k", b"in a")
    store.set("a/b", b"k", b"in a/b")
    store.set("ab", b"k2", b"in ab")
    assert store.get("a", b"k")[0] == b"in a"
    assert store.get("a/b", b"k")[0] == b"in a/b"
    assert store.get("a", b"k2") is None
    assert [(k, v) for k, v, _ in store.scan("a")] == [(b"k", b"in a")]
    store.drop_partition("a")
    assert store.get("a", b"k") is None
    assert store.get("a/b", b"k")[0] == b"in a/b"
    assert keys(store.scan("ab")) == [b"k2"]


# batches, deletes, partitions ------------------------------------------------------------


def test_set_many_writes_and_deletes(store: MetaStore):
    store.set_many(P, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    store.set_many(P, [(b"a", None), (b"b", b"22"), (b"d", b"4"), (b"missing", None)])
    assert [(k, v) for k, v, _ in store.scan(P)] == [(b"b", b"22"), (b"c", b"3"), (b"d", b"4")]
    store.set_many(P, [])
    store.set_many(P, iter([(b"e", b"5")]))
    assert store.get(P, b"e")[0] == b"5"


def test_set_many_last_write_of_a_key_wins(store: MetaStore):
    store.set_many(P, [(b"k", b"first"), (b"k", b"second"), (b"gone", b"x"), (b"gone", None)])
    assert store.get(P, b"k")[0] == b"second"
    assert store.get(P, b"gone") is None


def test_set_many_gives_new_distinct_versions(store: MetaStore):
    old = store.set(P, b"a", b"0")
    store.set_many(P, [(b"a", b"1"), (b"b", b"2")])
    va, vb = store.get(P, b"a")[1], store.get(P, b"b")[1]
    assert len({old, va, vb}) == 3
    with pytest.raises(CASFailedError):
        store.set_if(P, b"a", b"x", old)
    assert store.set_if(P, b"a", b"x", va) not in (old, va, vb)


def test_set_many_with_a_bad_item_writes_nothing(store: MetaStore):
    store.set(P, b"a", b"old")
    with pytest.raises(InvalidInputError):
        store.set_many(P, [(b"a", b"new"), (b"b", b"2"), ("c", b"3")])
    assert store.get(P, b"a")[0] == b"old"
    assert store.get(P, b"b") is None


def test_set_many_is_atomic_to_readers(store_url: str, store: MetaStore):
    """A reader never sees a batch half applied."""
    n_keys, rounds = 50, 60
    batch_keys = [f"k{i:03d}".encode() for i in range(n_keys)]
    store.set_many(P, [(k, b"0") for k in batch_keys])
    reader = open_metastore(store_url)
    seen: list[set[bytes]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append({v for _, v, _ in reader.scan(P)})

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for r in range(1, rounds + 1):
            store.set_many(P, [(k, str(r).encode()) for k in batch_keys])
    finally:
        done.set()
        thread.join()
        reader.close()
    assert seen, "the reader never ran"
    assert all(len(values) == 1 for values in seen), [v for v in seen if len(v) > 1][:3]
    assert {v for _, v, _ in store.scan(P)} == {str(rounds).encode()}


def test_delete(store: MetaStore):
    store.set(P, b"k", b"v")
    store.set(P, b"k2", b"v")
    store.delete(P, b"k")
    assert store.get(P, b"k") is None
    assert keys(store.scan(P)) == [b"k2"]
    store.delete(P, b"k")  # deleting a missing key is fine
    store.delete("never-used", b"k")
    assert store.get(P, b"k2") is not None


def test_drop_partition(store: MetaStore):
    store.set_many("doomed", [(f"{i}".encode(), b"x") for i in range(PAGE_SIZE + 10)])
    store.set("kept", b"k", b"v")
    store.drop_partition("doomed")
    assert list(store.scan("doomed")) == []
    assert store.get("doomed", b"0") is None
    assert store.get("kept", b"k")[0] == b"v"
    store.drop_partition("doomed")  # dropping an empty partition is fine
    store.set("doomed", b"again", b"v")
    assert keys(store.scan("doomed")) == [b"again"]


# compare-and-swap and versions -----------------------------------------------------------


def test_cas_success_and_failure(store: MetaStore):
    v1 = store.set(P, b"k", b"1")
    v2 = store.set_if(P, b"k", b"2", v1)
    assert v2 != v1
    assert store.get(P, b"k") == (b"2", v2)
    with pytest.raises(CASFailedError):
        store.set_if(P, b"k", b"3", v1)  # stale version
    assert store.get(P, b"k") == (b"2", v2)
    with pytest.raises(CASFailedError):
        store.set_if(P, b"absent", b"x", v2)  # a version, but the key does not exist
    assert store.get(P, b"absent") is None


def test_cas_must_not_exist(store: MetaStore):
    v1 = store.set_if(P, b"k", b"first", None)
    assert store.get(P, b"k") == (b"first", v1)
    with pytest.raises(CASFailedError):
        store.set_if(P, b"k", b"second", None)
    assert store.get(P, b"k") == (b"first", v1)
    store.delete(P, b"k")
    v2 = store.set_if(P, b"k", b"third", None)
    assert v2 != v1
    assert store.get(P, b"k") == (b"third", v2)


def test_versions_change_on_every_write_and_are_never_reused(store: MetaStore):
    versions = [store.set(P, b"k", b"same")]
    versions.append(store.set(P, b"k", b"same"))  # same bytes, still a new version
    versions.append(store.set_if(P, b"k", b"same", versions[-1]))
    store.set_many(P, [(b"k", b"same")])
    versions.append(store.get(P, b"k")[1])
    store.delete(P, b"k")
    versions.append(store.set(P, b"k", b"same"))  # recreated: must not repeat an old version
    store.drop_partition(P)
    versions.append(store.set_if(P, b"k", b"same", None))
    versions.append(store.set("other", b"k", b"same"))
    assert len(set(versions)) == len(versions), versions
    for old in versions[:-2]:
        with pytest.raises(CASFailedError):  # no ABA: an old token never matches again
            store.set_if(P, b"k", b"late", old)


# races -----------------------------------------------------------------------------------

RACE_THREADS = 16
RACE_ROUNDS = 200
RACE_PROCESSES = 4
RACE_PROCESS_ROUNDS = 100


def _race_round(meta: MetaStore, partition: str, barrier) -> bool:
    """Read the counter, wait for every racer to have read it, then try to increment it."""
    barrier.wait()
    value, version = meta.get(partition, b"counter")
    barrier.wait()
    try:
        meta.set_if(partition, b"counter", str(int(value) + 1).encode(), version)
    except CASFailedError:
        return False
    return True


def test_cas_race_threads(store: MetaStore):
    store.set(P, b"counter", b"0")
    barrier = threading.Barrier(RACE_THREADS, timeout=60)
    wins: list[list[int]] = [[] for _ in range(RACE_THREADS)]
    errors: list[BaseException] = []

    def racer(i: int) -> None:
        try:
            for r in range(RACE_ROUNDS):
                if _race_round(store, P, barrier):
                    wins[i].append(r)
        except BaseException as e:
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(RACE_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    rounds_won = sorted(r for w in wins for r in w)
    assert rounds_won == list(range(RACE_ROUNDS)), "each round needs exactly one winner"
    assert int(store.get(P, b"counter")[0]) == RACE_ROUNDS


def race_process(url: str, partition: str, rounds: int, barrier, results, index: int) -> None:
    """One racing process (spawned): reports the rounds it won, or the error it hit."""
    meta = open_metastore(url)
    won: list[int] = []
    try:
        for r in range(rounds):
            if _race_round(meta, partition, barrier):
                won.append(r)
        results.put((index, won, None))
    except BaseException as e:
        barrier.abort()
        results.put((index, won, repr(e)))
    finally:
        meta.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_cas_race_processes(store_url: str, store: MetaStore):
    store.set(P, b"counter", b"0")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(RACE_PROCESSES, timeout=120)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=race_process,
            args=(store_url, P, RACE_PROCESS_ROUNDS, barrier, results, i),
        )
        for i in range(RACE_PROCESSES)
    ]
    try:
        for p in procs:
            p.start()
        reports = [results.get(timeout=180) for _ in procs]
        for p in procs:
            p.join(timeout=60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert [err for _, _, err in reports if err] == []
    assert all(p.exitcode == 0 for p in procs)
    rounds_won = sorted(r for _, won, _ in reports for r in won)
    assert rounds_won == list(range(RACE_PROCESS_ROUNDS)), "each round needs exactly one winner"
    successes = sum(len(won) for _, won, _ in reports)
    assert int(store.get(P, b"counter")[0]) == successes == RACE_PROCESS_ROUNDS


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_concurrent_first_opens_create_the_schema_once(store_url: str):
    """Many clients opening a brand-new database at once must not trip over each other."""
    n = 12
    barrier = threading.Barrier(n, timeout=60)
    opened: list[MetaStore] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def opener(i: int) -> None:
        try:
            barrier.wait()
            meta = open_metastore(store_url)
            with lock:
                opened.append(meta)
            meta.set(P, f"{i:02d}".encode(), b"v")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=opener, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert len(keys(opened[0].scan(P))) == n
    finally:
        for meta in opened:
            meta.close()


# fork safety -----------------------------------------------------------------------------


def _use_after_fork(meta: MetaStore) -> None:
    """Child of a fork: write with the inherited store, then close it."""
    meta.set(P, b"child", str(os.getpid()).encode())
    assert meta.get(P, b"child")[0] == str(os.getpid()).encode()
    meta.close()  # must leave the parent's connections alone


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_store_survives_fork(store: MetaStore):
    store.set(P, b"parent", b"before")  # the parent now holds open connections
    ctx = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded fork" notice
        child = ctx.Process(target=_use_after_fork, args=(store,))
        child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert store.get(P, b"child")[0] == str(child.pid).encode()
    # The parent's own connections still work after the child used and closed the store.
    for i in range(10):
        store.set(P, b"parent", str(i).encode())
    assert store.get(P, b"parent")[0] == b"9"


# SQLite specifics ------------------------------------------------------------------------


def _pragma(meta: MetaStore, name: str):
    return meta._conn().execute(f"PRAGMA {name}").fetchone()[0]  # type: ignore[attr-defined]


def test_sqlite_pragmas(tmp_path):
    normal = open_metastore(f"sqlite:///{tmp_path}/a.db")
    full = open_metastore(f"sqlite:///{tmp_path}/b.db?synchronous=full")
    try:
        assert _pragma(normal, "journal_mode") == "wal"
        assert _pragma(normal, "synchronous") == 1  # NORMAL
        assert _pragma(full, "synchronous") == 2  # FULL
        assert _pragma(normal, "busy_timeout") == 30000
    finally:
        normal.close()
        full.close()


def test_sqlite_relative_and_absolute_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = open_metastore("sqlite:///rel.db")
    try:
        version = rel.set(P, b"k", b"v")
        assert (tmp_path / "rel.db").exists()
        absolute = open_metastore(f"sqlite:///{tmp_path}/rel.db")  # four slashes
        assert absolute.get(P, b"k") == (b"v", version)
        absolute.close()
        monkeypatch.chdir("/")
        clone = pickle.loads(pickle.dumps(rel))  # reopens by absolute path
        assert clone.get(P, b"k") == (b"v", version)
        clone.close()
    finally:
        rel.close()


def test_sqlite_connection_per_thread(tmp_path):
    meta = open_metastore(f"sqlite:///{tmp_path}/t.db")
    try:
        conns = []
        t = threading.Thread(target=lambda: conns.append(meta._conn()))
        t.start()
        t.join()
        assert conns[0] is not meta._conn()
    finally:
        meta.close()
