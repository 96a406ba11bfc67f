"""The object-storage conformance suite (as zarr.testing.store.StoreTests): a backend's tests
subclass `ObjectStoreTests` and supply a `location` fixture, (location, storage options) of a
fresh, empty store for open_storage. Stores shared by processes add `SharedObjectStoreTests`;
`RetriedObjectStoreTests` (zarrlake.testing.storage_retries) checks the retrying wrapper
under injected faults on the backend.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import zarrlake.storage.obstore
from zarrlake.errors import InvalidInputError, NotFoundError, StorageError
from zarrlake.storage import ObjectStore, open_storage

DATA = b"0123456789"
KEYS = ["abc/x", "ab/y", "ab.txt", "abd", "b/ab/z", "a/b/c", "a/bc", "zarr.json"]

BAD_KEYS = [
    "",
    "/abs",
    "a//b",
    "a/",
    "a/../b",
    "..",
    "./a",
    "a/./b",
    "a\x00b",
    "a\nb",
    "x\x7f",
    "t#12",
]


class ObjectStoreTests:
    """Every object-storage backend must pass these."""

    object_and_prefix_may_share_a_name = True
    """False for a local directory: a file cannot also be a directory."""

    @pytest.fixture
    def location(self) -> tuple[str, dict[str, Any]]:
        """(location, storage options) of the store under test; a subclass must supply this
        fixture."""
        raise NotImplementedError("an ObjectStoreTests subclass supplies the location fixture")

    @pytest.fixture
    def store(self, location: tuple[str, dict[str, Any]]) -> ObjectStore:
        """The store at `location`, opened without retries so faults show."""
        where, options = location
        return open_storage(where, retry_policy=None, **options)

    def test_read_after_write(self, store: ObjectStore) -> None:
        """Objects read back byte for byte at once: every byte value, 3 MiB, empty."""
        every_byte = bytes(range(256)) * 4
        big = os.urandom(3 * 1024 * 1024 + 17)
        store.put("zarr.json", b'{"zarr_format": 3}')
        store.put("c/0/0", every_byte)
        store.put("chunks/big", big)
        store.put("empty", b"")
        assert store.get("zarr.json") == b'{"zarr_format": 3}'
        assert store.get("c/0/0") == every_byte
        assert store.get("chunks/big") == big
        assert store.get("empty") == b""
        assert type(store.get("c/0/0")) is bytes

    def test_overwrite_via_put(self, store: ObjectStore) -> None:
        """`put` replaces an existing object, also with empty bytes."""
        store.put("ref", b"first version")
        store.put("ref", b"second")
        assert store.get("ref") == b"second"
        store.put("ref", b"")
        assert store.get("ref") == b""

    @pytest.mark.parametrize(
        ("start", "end"),
        [(0, 10), (2, 5), (0, 1), (9, 10), (5, 100), (0, 11), (10, 12), (15, 20), (3, 3), (10, 10)],
    )
    def test_byte_ranges(self, store: ObjectStore, start: int, end: int) -> None:
        """Half-open ranges; a range past the end is clamped to what exists (b"" beyond it)."""
        store.put("ten", DATA)
        assert store.get("ten", (start, end)) == DATA[start:end]

    @pytest.mark.parametrize(("start", "end"), [(0, 0), (0, 5), (3, 7)])
    def test_byte_ranges_of_empty_object(self, store: ObjectStore, start: int, end: int) -> None:
        """Any byte range of an empty object reads as empty."""
        store.put("empty", b"")
        assert store.get("empty", (start, end)) == b""

    def test_byte_range_within_large_object(self, store: ObjectStore) -> None:
        """A byte range reads that slice; one past the end is clipped."""
        big = os.urandom(2 * 1024 * 1024)
        store.put("big", big)
        assert store.get("big", (1_000_000, 1_500_000)) == big[1_000_000:1_500_000]
        assert store.get("big", (len(big) - 3, len(big) + 100)) == big[-3:]

    @pytest.mark.parametrize("byte_range", [None, (0, 4), (0, 0), (7, 9)])
    def test_missing_key_raises_not_found_naming_key(
        self, store: ObjectStore, byte_range: tuple[int, int] | None
    ) -> None:
        """Reading a missing key raises NotFoundError (a KeyError) naming the key and store."""
        with pytest.raises(NotFoundError) as info:
            store.get("no/such/key", byte_range)
        assert "no/such/key" in str(info.value)
        assert store.url in str(info.value)
        assert isinstance(info.value, KeyError)  # callers may catch KeyError too

    @pytest.mark.parametrize("byte_range", [(5, 2), (-1, 3), (1,)])
    def test_invalid_byte_range(self, store: ObjectStore, byte_range: Any) -> None:
        """A malformed byte range raises InvalidInputError."""
        store.put("ten", DATA)
        with pytest.raises(InvalidInputError, match="byte range"):
            store.get("ten", byte_range)

    def test_put_if_absent_creates_once_and_never_overwrites(self, store: ObjectStore) -> None:
        """`put_if_absent` creates a missing key only, and again after a delete."""
        assert store.put_if_absent("refs/main", b"first") is True
        assert store.put_if_absent("refs/main", b"second") is False
        assert store.put_if_absent("refs/main", b"first") is False
        assert store.get("refs/main") == b"first"
        store.delete("refs/main")
        assert store.put_if_absent("refs/main", b"third") is True
        assert store.get("refs/main") == b"third"

    def test_delete(self, store: ObjectStore) -> None:
        """Delete removes one object only; deleting a missing key is fine."""
        store.put("a/b", b"x")
        store.put("a/c", b"y")
        store.delete("a/b")
        assert not store.exists("a/b")
        with pytest.raises(NotFoundError):
            store.get("a/b")
        assert store.get("a/c") == b"y"
        store.delete("a/b")  # already gone: fine
        store.delete("never/existed")
        assert sorted(store.list()) == ["a/c"]

    def test_exists(self, store: ObjectStore) -> None:
        """`exists` is true for objects only, not for prefixes ("directories")."""
        assert store.exists("k") is False
        store.put("k", b"")
        assert store.exists("k") is True
        assert store.exists("k/child") is False
        store.put("dir/file", b"1")
        assert store.exists("dir") is False  # directories are not objects
        with pytest.raises(NotFoundError):
            store.get("k/child")
        with pytest.raises(NotFoundError):
            store.get("dir", (0, 1))
        store.delete("k/child")
        store.delete("dir")
        assert sorted(store.list()) == ["dir/file", "k"]

    @pytest.mark.parametrize(
        ("prefix", "expected"),
        [
            ("", KEYS),
            ("ab", ["abc/x", "ab/y", "ab.txt", "abd"]),
            ("ab.", ["ab.txt"]),
            ("ab/", ["ab/y"]),
            ("abc", ["abc/x"]),
            ("a/b", ["a/b/c", "a/bc"]),
            ("a/b/", ["a/b/c"]),
            ("a/b/c", ["a/b/c"]),
            ("b/a", ["b/ab/z"]),
            ("zarr", ["zarr.json"]),
            ("zz", []),
            ("q/r/", []),
        ],
    )
    def test_list_prefixes(self, store: ObjectStore, prefix: str, expected: list[str]) -> None:
        """A prefix matches by string, not only on whole path segments ("ab" matches "abc/x")."""
        for key in KEYS:
            store.put(key, key.encode())
        assert sorted(store.list(prefix)) == sorted(expected)

    def test_object_and_directory_clash(self, store: ObjectStore) -> None:
        """Object stores allow both "k" and "k/x"; a local directory cannot, and says so clearly."""
        store.put("k", b"1")
        store.put("d/x", b"2")
        if self.object_and_prefix_may_share_a_name:
            store.put("k/x", b"3")
            assert store.put_if_absent("d", b"4") is True
            assert sorted(store.list()) == ["d", "d/x", "k", "k/x"]
            return
        for call in (
            lambda: store.put("k/x", b"3"),
            lambda: store.put_if_absent("k/x", b"3"),
            lambda: store.put("d", b"4"),
            lambda: store.put_if_absent("d", b"4"),
        ):
            with pytest.raises(StorageError, match="cannot hold both an object and objects below"):
                call()
        assert sorted(store.list()) == ["d/x", "k"]

    def test_list_many(self, store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
        """Listings spanning many batches are complete (batches shrunk so S3 stays quick)."""
        monkeypatch.setattr(zarrlake.storage.obstore, "LIST_CHUNK", 16)
        keys = {f"chunks/{i:04d}" for i in range(150)}
        for key in keys:
            store.put(key, b"")
        assert set(store.list("chunks/")) == keys
        assert set(store.list("chunks/00")) == {k for k in keys if k.startswith("chunks/00")}

    @pytest.mark.parametrize("key", BAD_KEYS)
    @pytest.mark.parametrize("op", ["get", "range", "put", "put_if_absent", "delete", "exists"])
    def test_invalid_keys_rejected(self, store: ObjectStore, key: str, op: str) -> None:
        """Every operation refuses an invalid key with InvalidInputError."""
        calls = {
            "get": lambda: store.get(key),
            "range": lambda: store.get(key, (0, 1)),
            "put": lambda: store.put(key, b"x"),
            "put_if_absent": lambda: store.put_if_absent(key, b"x"),
            "delete": lambda: store.delete(key),
            "exists": lambda: store.exists(key),
        }
        with pytest.raises(InvalidInputError) as info:
            calls[op]()
        assert repr(key) in str(info.value)
        assert list(store.list()) == []  # nothing was written anywhere

    @pytest.mark.parametrize("prefix", ["/a", "a//", "../x", "a\x01"])
    def test_invalid_list_prefix_rejected(self, store: ObjectStore, prefix: str) -> None:
        """Listing refuses an invalid prefix with InvalidInputError."""
        with pytest.raises(InvalidInputError, match="invalid list prefix"):
            list(store.list(prefix))

    @pytest.mark.parametrize(
        "key", ["a b", "ü/ñ", "a%20b", "a:b", "a+b=c&d", "#1/x", ".hidden", "~x"]
    )
    def test_unusual_but_valid_keys_round_trip(self, store: ObjectStore, key: str) -> None:
        """Valid keys with unusual characters are stored, listed and read back unchanged."""
        store.put(key, key.encode())
        assert store.get(key) == key.encode()
        assert list(store.list()) == [key]
        assert store.exists(key)

    def test_put_if_absent_race_threads(self, store: ObjectStore) -> None:
        """8 threads create the same key with different bytes: one wins, its bytes are stored."""
        writers, rounds = 8, 20
        barrier = threading.Barrier(writers)

        def writer(i: int) -> list[bool]:
            results = []
            for r in range(rounds):
                barrier.wait(timeout=60)
                results.append(store.put_if_absent(f"race/{r}", f"thread {i} round {r}".encode()))
            return results

        with ThreadPoolExecutor(writers) as pool:
            outcome = list(pool.map(writer, range(writers)))
        for r in range(rounds):
            winners = [i for i in range(writers) if outcome[i][r]]
            assert len(winners) == 1, f"round {r}: winners {winners}"
            assert store.get(f"race/{r}") == f"thread {winners[0]} round {r}".encode()


def _race_process(
    location: str, options: dict[str, Any], index: int, rounds: int, barrier: Any, results: Any
) -> None:
    """Child process body: open the store afresh and race put_if_absent round by round."""
    store = open_storage(location, retry_policy=None, **options)
    for r in range(rounds):
        barrier.wait(timeout=120)
        won = store.put_if_absent(f"race/{r}", f"process {index} round {r}".encode())
        results.put((index, r, won))


class SharedObjectStoreTests:
    """For stores that processes share; needs ObjectStoreTests' fixtures."""

    def test_put_if_absent_race_processes(
        self, location: tuple[str, dict[str, Any]], store: ObjectStore
    ) -> None:
        """4 spawned processes create the same keys: one winner per key, its bytes stored."""
        procs, rounds = 4, 10
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(procs)
        results = ctx.Queue()
        workers = [
            ctx.Process(
                target=_race_process,
                args=(*location, i, rounds, barrier, results),
            )
            for i in range(procs)
        ]
        try:
            for worker in workers:
                worker.start()
            outcome = [results.get(timeout=120) for _ in range(procs * rounds)]
            for worker in workers:
                worker.join(timeout=60)
                assert worker.exitcode == 0
        finally:
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()
                    worker.join(timeout=10)
        for r in range(rounds):
            winners = [i for (i, rr, won) in outcome if rr == r and won]
            assert len(winners) == 1, f"round {r}: winners {winners}"
            assert store.get(f"race/{r}") == f"process {winners[0]} round {r}".encode()


def _use_after_fork(store: ObjectStore) -> None:
    """Child of a fork: write and read with the inherited store."""
    store.put("fork/child", str(os.getpid()).encode())
    assert store.get("fork/child") == str(os.getpid()).encode()


class ForkedObjectStoreTests:
    """A child forked after the parent used the store can use it too (obstore's I/O
    runtime does not survive fork, see zarrlake.storage.forked), and the parent's store
    keeps working. Needs ObjectStoreTests' fixtures."""

    def test_store_survives_fork(self, store: ObjectStore) -> None:
        """A forked child can use its parent's store, and the parent still can afterwards."""
        import warnings

        store.put("fork/parent", b"before")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded fork" notice
            child = multiprocessing.get_context("fork").Process(
                target=_use_after_fork, args=(store,)
            )
            child.start()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            child.join()
        assert child.exitcode == 0
        assert store.get("fork/child") == str(child.pid).encode()
        for i in range(5):
            store.put("fork/parent", str(i).encode())
        assert store.get("fork/parent") == b"4"
