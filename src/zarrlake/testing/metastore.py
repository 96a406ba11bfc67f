"""The metastore conformance suite (as zarr.testing.store.StoreTests): a backend's tests
subclass `MetaStoreTests` and supply a `store_url` fixture naming a fresh, empty store.

    class TestMyMetaStore(MetaStoreTests):
        @pytest.fixture
        def store_url(self, tmp_path) -> str:
            return f"mine:///{tmp_path}/meta"

Backends shared by processes add `SharedMetaStoreTests` (zarrlake.testing.metastore_shared).
"""

from __future__ import annotations

import contextlib
import pickle
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from zarrlake.errors import CASFailedError, ConfigurationError, InvalidInputError, ZarrLakeError
from zarrlake.metastore import PAGE_SIZE, MetaStore, open_metastore
from zarrlake.testing.metastore_retries import RetriedMetaStoreTests, stored

P = "part"
ODD_KEYS = [b"\xff", b"ab", b"a\x00", b"", b"\x00", b"a", b"b", b"\x7f", b"\x80", b"\xff\xff"]
RACE_THREADS = 16
RACE_ROUNDS = 200


def keys(items) -> list[bytes]:
    """The keys of scanned (key, value, version) items."""
    return [k for k, _, _ in items]


def race_round(meta: MetaStore, partition: str, barrier) -> bool:
    """Read the counter, wait for every racer to have read it, then try to increment it."""
    barrier.wait()
    value, version = stored(meta.get(partition, b"counter"))
    barrier.wait()
    try:
        meta.set_if(partition, b"counter", str(int(value) + 1).encode(), version)
    except CASFailedError:
        return False
    return True


BAD_CALLS = {
    "str key to get": (lambda m: m.get("p", "key"), "must be bytes, not str"),
    "str key to set": (lambda m: m.set("p", "key", b"v"), "must be bytes, not str"),
    "str value": (lambda m: m.set("p", b"key", "value"), "value must be bytes, not str"),
    "int key to delete": (lambda m: m.delete("p", 5), "must be bytes, not int"),
    "str key to set_if": (lambda m: m.set_if("p", "k", b"v", None), "must be bytes, not str"),
    "str version": (lambda m: m.set_if("p", b"k", b"v", "1"), "expected version"),
    "bool version": (lambda m: m.set_if("p", b"k", b"v", True), "expected version"),
    "str key in batch": (lambda m: m.set_many("p", [("k", b"v")]), "must be bytes, not str"),
    "not pairs": (lambda m: m.set_many("p", [b"kv"]), "pairs"),
    "not iterable": (lambda m: m.set_many("p", 5), "iterable"),
    "str scan start": (lambda m: list(m.scan("p", start="a")), "scan start must be bytes"),
    "str scan prefix": (lambda m: list(m.scan("p", prefix="a")), "scan prefix must be bytes"),
    "negative limit": (lambda m: list(m.scan("p", limit=-1)), "limit"),
    "bytes partition": (lambda m: m.get(b"p", b"k"), "partition must be a str"),
    "NUL in partition": (lambda m: m.get("p\x00q", b"k"), "NUL"),
    "huge key": (lambda m: m.set("p", b"k" * 5000, b"v"), "limit is 2048"),
    "bad partition drop": (lambda m: m.drop_partition(None), "partition must be a str"),
}


class MetaStoreTests(RetriedMetaStoreTests):
    """Every metastore backend must pass these."""

    race_rounds = RACE_ROUNDS
    """Rounds of `test_cas_race_threads`; a backend over a slow server may run fewer."""

    @pytest.fixture
    def store_url(self) -> str:
        """The URL of the store under test; a subclass must supply this fixture."""
        raise NotImplementedError("a MetaStoreTests subclass supplies the store_url fixture")

    @pytest.fixture
    def store(self, store_url: str) -> Iterator[MetaStore]:
        """A store opened from `store_url`, closed after the test."""
        meta = open_metastore(store_url)
        yield meta
        meta.close()

    def test_read_after_write(self, store: MetaStore):
        """A write is read back at once with its version; rewriting gives a new version."""
        version = store.set(P, b"k", b"v1")
        assert isinstance(version, int)
        assert store.get(P, b"k") == (b"v1", version)
        v2 = store.set(P, b"k", b"v2")
        assert v2 != version
        assert store.get(P, b"k") == (b"v2", v2)

    def test_get_missing_is_none(self, store: MetaStore):
        """A missing key (or partition) reads as None, with no prefix matching."""
        assert store.get(P, b"nope") is None
        assert store.get("no-such-partition", b"k") is None
        store.set(P, b"k", b"v")
        assert store.get(P, b"k\x00") is None
        assert store.get(P, b"") is None

    def test_values_roundtrip_exactly(self, store: MetaStore):
        """Values come back byte for byte: empty, 1 MiB, every byte value, an empty key."""
        big = random.Random(1).randbytes(1 << 20)
        store.set(P, b"empty", b"")
        store.set(P, b"big", big)
        store.set(P, b"binary", bytes(range(256)))
        store.set(P, b"from-bytearray", bytearray(b"xyz"))  # type: ignore[arg-type]  # (bytes-like)
        store.set(P, b"", b"empty key")
        assert stored(store.get(P, b"empty"))[0] == b""
        assert stored(store.get(P, b"big"))[0] == big
        assert stored(store.get(P, b"binary"))[0] == bytes(range(256))
        got = stored(store.get(P, b"from-bytearray"))[0]
        assert got == b"xyz" and type(got) is bytes
        assert stored(store.get(P, b""))[0] == b"empty key"

    def test_two_handles_share_data(self, store_url: str, store: MetaStore):
        """Two handles on one URL see each other's writes and deletes."""
        other = open_metastore(store_url)
        try:
            version = store.set(P, b"k", b"v")
            assert other.get(P, b"k") == (b"v", version)
            other.delete(P, b"k")
            assert store.get(P, b"k") is None
        finally:
            other.close()

    def test_pickle_reopens_same_store(self, store: MetaStore):
        """An unpickled store reopens the same data."""
        version = store.set(P, b"k", b"v")
        clone = pickle.loads(pickle.dumps(store))
        try:
            assert clone.get(P, b"k") == (b"v", version)
        finally:
            clone.close()

    def test_scan_is_in_byte_order(self, store: MetaStore):
        """Scans yield keys in byte order, with each key's value and version."""
        shuffled = ODD_KEYS[:]
        random.Random(7).shuffle(shuffled)
        versions = {k: store.set(P, k, b"v" + k) for k in shuffled}
        items = list(store.scan(P))
        assert keys(items) == sorted(ODD_KEYS)
        expected = [
            b"",
            b"\x00",
            b"a",
            b"a\x00",
            b"ab",
            b"b",
            b"\x7f",
            b"\x80",
            b"\xff",
            b"\xff\xff",
        ]
        assert keys(items) == expected  # unsigned bytes: 0x80 and 0xff sort after ASCII
        assert all(v == b"v" + k and ver == versions[k] for k, v, ver in items)

    def test_scan_from_start_key(self, store: MetaStore):
        """A scan from `start` yields exactly the keys >= start."""
        for k in ODD_KEYS:
            store.set(P, k, b"x")
        ordered = sorted(ODD_KEYS)
        for start in [b"", b"\x00", b"a", b"a\x00", b"a\x01", b"\xff", b"\xff\xff\x00"]:
            assert keys(store.scan(P, start=start)) == [k for k in ordered if k >= start], start

    def test_scan_prefix(self, store: MetaStore):
        """A prefix scan yields exactly the keys with that prefix, 0xff bytes included."""
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

    def test_scan_limit(self, store: MetaStore):
        """A scan stops after `limit` items, with start and prefix too."""
        for k in ODD_KEYS:
            store.set(P, k, b"x")
        ordered = sorted(ODD_KEYS)
        assert list(store.scan(P, limit=0)) == []
        assert keys(store.scan(P, limit=3)) == ordered[:3]
        assert keys(store.scan(P, start=b"a", limit=2)) == [b"a", b"a\x00"]
        assert keys(store.scan(P, prefix=b"a", limit=2)) == [b"a", b"a\x00"]
        assert keys(store.scan(P, limit=100)) == ordered

    def test_scan_streams_across_pages(self, store: MetaStore):
        """A scan longer than a page streams, and a suspended scan does not block writers."""
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

    def test_partitions_are_isolated(self, store: MetaStore):
        """Keys of one partition never show in another, even one whose name it prefixes."""
        store.set("a", b"k", b"in a")
        store.set("a/b", b"k", b"in a/b")
        store.set("ab", b"k2", b"in ab")
        assert stored(store.get("a", b"k"))[0] == b"in a"
        assert stored(store.get("a/b", b"k"))[0] == b"in a/b"
        assert store.get("a", b"k2") is None
        assert [(k, v) for k, v, _ in store.scan("a")] == [(b"k", b"in a")]
        store.drop_partition("a")
        assert store.get("a", b"k") is None
        assert stored(store.get("a/b", b"k"))[0] == b"in a/b"
        assert keys(store.scan("ab")) == [b"k2"]

    def test_set_many_writes_and_deletes(self, store: MetaStore):
        """`set_many` writes and deletes (None) in one call; empty batches and iterators work."""
        store.set_many(P, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
        store.set_many(P, [(b"a", None), (b"b", b"22"), (b"d", b"4"), (b"missing", None)])
        assert [(k, v) for k, v, _ in store.scan(P)] == [(b"b", b"22"), (b"c", b"3"), (b"d", b"4")]
        store.set_many(P, [])
        store.set_many(P, iter([(b"e", b"5")]))
        assert stored(store.get(P, b"e"))[0] == b"5"

    def test_set_many_last_write_of_a_key_wins(self, store: MetaStore):
        """A batch naming a key twice keeps its last value (or deletion)."""
        store.set_many(P, [(b"k", b"first"), (b"k", b"second"), (b"gone", b"x"), (b"gone", None)])
        assert stored(store.get(P, b"k"))[0] == b"second"
        assert store.get(P, b"gone") is None

    def test_set_many_gives_new_distinct_versions(self, store: MetaStore):
        """Every key a batch writes gets a new version, which `set_if` then compares against."""
        old = store.set(P, b"a", b"0")
        store.set_many(P, [(b"a", b"1"), (b"b", b"2")])
        va, vb = stored(store.get(P, b"a"))[1], stored(store.get(P, b"b"))[1]
        assert len({old, va, vb}) == 3
        with pytest.raises(CASFailedError):
            store.set_if(P, b"a", b"x", old)
        assert store.set_if(P, b"a", b"x", va) not in (old, va, vb)

    def test_set_many_with_a_bad_item_writes_nothing(self, store: MetaStore):
        """A batch with an invalid item is refused whole."""
        store.set(P, b"a", b"old")
        with pytest.raises(InvalidInputError):
            store.set_many(P, [(b"a", b"new"), (b"b", b"2"), ("c", b"3")])  # type: ignore[list-item]
        assert stored(store.get(P, b"a"))[0] == b"old"
        assert store.get(P, b"b") is None

    def test_set_many_is_atomic_to_readers(self, store_url: str, store: MetaStore):
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

    def test_delete(self, store: MetaStore):
        """Delete removes a key; deleting a missing key (or in an unused partition) is fine."""
        store.set(P, b"k", b"v")
        store.set(P, b"k2", b"v")
        store.delete(P, b"k")
        assert store.get(P, b"k") is None
        assert keys(store.scan(P)) == [b"k2"]
        store.delete(P, b"k")  # deleting a missing key is fine
        store.delete("never-used", b"k")
        assert store.get(P, b"k2") is not None

    def test_delete_if(self, store: MetaStore):
        """A compare-and-delete removes only the version it names, never one made anew."""
        v1 = store.set_if(P, b"k", b"1", None)
        v2 = store.set_if(P, b"k", b"2", v1)
        with pytest.raises(CASFailedError):
            store.delete_if(P, b"k", v1)  # stale version: nothing deleted
        assert store.get(P, b"k") == (b"2", v2)
        store.delete_if(P, b"k", v2)
        assert store.get(P, b"k") is None
        with pytest.raises(CASFailedError):
            store.delete_if(P, b"k", v2)  # absent
        v3 = store.set_if(P, b"k", b"anew", None)  # created again: a new version
        with pytest.raises(CASFailedError):
            store.delete_if(P, b"k", v2)  # a late retry of the delete keeps the new key
        assert store.get(P, b"k") == (b"anew", v3)
        with pytest.raises(InvalidInputError, match=r"expected version|version to expect"):
            store.delete_if(P, b"k", None)  # type: ignore[arg-type]

    def test_drop_partition(self, store: MetaStore):
        """Dropping a partition removes all its keys (over pages) and no other's; it can be
        reused."""
        store.set_many("doomed", [(f"{i}".encode(), b"x") for i in range(PAGE_SIZE + 10)])
        store.set("kept", b"k", b"v")
        store.drop_partition("doomed")
        assert list(store.scan("doomed")) == []
        assert store.get("doomed", b"0") is None
        assert stored(store.get("kept", b"k"))[0] == b"v"
        store.drop_partition("doomed")  # dropping an empty partition is fine
        store.set("doomed", b"again", b"v")
        assert keys(store.scan("doomed")) == [b"again"]

    def test_cas_success_and_failure(self, store: MetaStore):
        """`set_if` succeeds only against the current version and leaves the value alone
        otherwise."""
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

    def test_cas_must_not_exist(self, store: MetaStore):
        """`set_if(..., None)` creates a key only if it does not exist (again after a delete)."""
        v1 = store.set_if(P, b"k", b"first", None)
        assert store.get(P, b"k") == (b"first", v1)
        with pytest.raises(CASFailedError):
            store.set_if(P, b"k", b"second", None)
        assert store.get(P, b"k") == (b"first", v1)
        store.delete(P, b"k")
        v2 = store.set_if(P, b"k", b"third", None)
        assert v2 != v1
        assert store.get(P, b"k") == (b"third", v2)

    def test_versions_change_on_every_write_and_are_never_reused(self, store: MetaStore):
        """Every write gives a new version, never one the key had before, even after delete or
        drop."""
        versions = [store.set(P, b"k", b"same")]
        versions.append(store.set(P, b"k", b"same"))  # same bytes, still a new version
        versions.append(store.set_if(P, b"k", b"same", versions[-1]))
        store.set_many(P, [(b"k", b"same")])
        versions.append(stored(store.get(P, b"k"))[1])
        store.delete(P, b"k")
        versions.append(store.set(P, b"k", b"same"))  # recreated: must not repeat an old version
        store.drop_partition(P)
        versions.append(store.set_if(P, b"k", b"same", None))
        versions.append(store.set("other", b"k", b"same"))
        assert len(set(versions)) == len(versions), versions
        for old in versions[:-2]:
            with pytest.raises(CASFailedError):  # no ABA: an old token never matches again
                store.set_if(P, b"k", b"late", old)

    def test_a_write_after_another_has_a_greater_version(self, store_url: str, store: MetaStore):
        """Versions grow in the order writes happen, across threads and handles: a write
        begun after another returned gets a greater version (a session's staging takes
        the latest of several workers' records of one document by its version)."""
        other = open_metastore(store_url)
        threads = [ThreadPoolExecutor(1) for _ in range(2)]

        def write(handle: MetaStore, key: bytes) -> int:
            handle.set_many(P, [(b"batch", b"x")])
            handle.set(P, key, b"x")
            return stored(handle.get(P, key))[1]

        try:
            order = [(0, store), (1, other), (0, store), (1, store), (0, other), (1, other)]
            versions = [threads[t].submit(write, h, b"doc").result() for t, h in order]
        finally:
            for pool in threads:
                pool.shutdown()
            other.close()
        assert versions == sorted(set(versions)), versions

    def test_cas_race_threads(self, store: MetaStore):
        """Threads racing compare-and-swap increments of one counter never lose an update."""
        store.set(P, b"counter", b"0")
        barrier = threading.Barrier(RACE_THREADS, timeout=60)
        wins: list[list[int]] = [[] for _ in range(RACE_THREADS)]
        errors: list[BaseException] = []

        def racer(i: int) -> None:
            try:
                for r in range(self.race_rounds):
                    if race_round(store, P, barrier):
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
        assert rounds_won == list(range(self.race_rounds)), "each round needs one winner"
        assert int(stored(store.get(P, b"counter"))[0]) == self.race_rounds

    def test_write_if_checks_then_writes_in_one_step(self, store: MetaStore):
        """`write_if` writes (and deletes) only while every checked key is at its version
        (None: absent); otherwise it raises and changes nothing."""
        v = store.set(P, b"branch", b"a")
        new = store.write_if(P, [(b"branch", b"b"), (b"gone", None)], {b"branch": v, b"f": None})
        assert store.get(P, b"branch") == (b"b", new[0]) and new[1] == 0
        for checks in ({b"branch": v}, {b"branch": new[0], b"f": 12345}):
            with pytest.raises(CASFailedError):
                store.write_if(P, [(b"branch", b"c")], checks)
        fence = store.set(P, b"f", b"revoked")
        with pytest.raises(CASFailedError):  # the fence changed: refused whatever else holds
            store.write_if(P, [(b"branch", b"c")], {b"branch": new[0], b"f": None})
        assert store.get(P, b"branch") == (b"b", new[0])
        done = store.write_if(P, [(b"branch", b"c")], {b"branch": new[0], b"f": fence})
        assert store.get(P, b"branch") == (b"c", done[0])
        assert store.get(P, b"f") == (b"revoked", fence)  # checked, not written

    def test_read_gives_keys_and_prefixes_as_get_and_scan_do(self, store: MetaStore):
        """`read` answers several keys and whole prefixes of one partition as `get` and
        `scan` would; a refused `write_if` may say what it found (`found`), and if it does,
        it is each checked key as `get` gives it."""
        v = store.set(P, b"branch/main", b"c1")
        store.set_many(P, [(b"protect/a", b"1"), (b"protect/b", b"2"), (b"q", b"3")])
        keys_, prefixes = [b"branch/main", b"moved", b"q"], [b"protect/", b"none/"]
        got, items = store.read(P, keys_, prefixes)
        assert got == [store.get(P, k) for k in keys_] and got[1] is None
        assert items == [list(store.scan(P, prefix=p)) for p in prefixes]
        assert [k for k, _, _ in items[0]] == [b"protect/a", b"protect/b"] and items[1] == []
        assert store.read("other", keys_, prefixes) == ([None] * 3, [[], []])
        w = store.set(P, b"branch/main", b"c2")
        with pytest.raises(CASFailedError) as refused:
            store.write_if(P, [(b"branch/main", b"c3")], {b"branch/main": v, b"moved": None})
        if refused.value.found is not None:
            assert refused.value.found == {b"branch/main": (b"c2", w), b"moved": None}

    def test_write_if_and_a_fence_write_never_both_win(self, store: MetaStore):
        """Threads racing: each round one moves a key while its fence is absent, another
        writes the fence; afterwards the move landed only if it came first (the fence write
        saw nothing of it later): never a move after the fence."""
        barrier = threading.Barrier(2, timeout=60)
        for r in range(self.race_rounds):
            key, fence = f"k{r}".encode(), f"f{r}".encode()
            v = store.set(P, key, b"old")
            order: list[str] = []

            def move() -> None:
                barrier.wait()
                with contextlib.suppress(CASFailedError):
                    store.write_if(P, [(key, b"moved")], {key: v, fence: None})  # noqa: B023
                    order.append("move")  # noqa: B023

            def revoke() -> None:
                barrier.wait()
                store.write_if(P, [(fence, b"revoked")], {fence: None})  # noqa: B023
                seen = stored(store.get(P, key))  # noqa: B023
                order.append("fence saw move" if seen[0] == b"moved" else "fence first")  # noqa: B023

            threads = [threading.Thread(target=move), threading.Thread(target=revoke)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            moved = stored(store.get(P, key))[0] == b"moved"
            assert not moved or "fence saw move" in order, (r, order)

    def test_clock_is_one_clock_near_this_hosts(self, store: MetaStore):
        """The metastore's clock reads like the epoch's seconds, close to this host's (the
        tests run beside the server), and does not go back."""
        first = store.clock()
        assert abs(first - time.time()) < 30.0
        assert store.clock() >= first - 1.0

    @pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
    def test_bad_arguments_are_invalid_input(self, store: MetaStore, call):
        """Invalid arguments raise InvalidInputError (a ValueError) and write nothing."""
        fn, complaint = call
        with pytest.raises(InvalidInputError, match=complaint) as info:
            fn(store)
        assert isinstance(info.value, ZarrLakeError) and isinstance(info.value, ValueError)
        assert list(store.scan("p")) == []  # nothing was written

    def test_closed_store_says_so(self, store: MetaStore):
        """A call on a closed store raises ConfigurationError saying it is closed."""
        store.set("p", b"k", b"v")
        store.close()
        with pytest.raises(ConfigurationError, match="closed"):
            store.get("p", b"k")
