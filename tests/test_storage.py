"""One conformance suite for every object-storage backend: local directory, memory and S3
(moto's real HTTP server). Every backend must behave identically."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import zarrlake.storage.obstore
from zarrlake.errors import InvalidInputError, NotFoundError, StorageError
from zarrlake.storage import ObjectStore, open_storage
from zarrlake.storage.obstore import ObstoreObjectStore
from zarrlake.storage.retrying import RetryingObjectStore

BACKENDS = ["local", "memory", "s3"]


@dataclass
class Backend:
    """A backend under test: how to open it again (in another process), and an open store."""

    kind: str
    location: str
    options: dict[str, Any] = field(default_factory=dict)
    store: ObjectStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = open_storage(self.location, retry_policy=None, **self.options)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return Backend("local", str(tmp_path / "objects"))
    if request.param == "memory":
        return Backend("memory", f"memory://conformance-{uuid.uuid4().hex}")
    location, options = request.getfixturevalue("s3_location")
    return Backend("s3", location, options)


@pytest.fixture
def store(backend: Backend) -> ObjectStore:
    assert isinstance(backend.store, ObstoreObjectStore)
    return backend.store


# -- reads and writes -------------------------------------------------------------------------


def test_read_after_write(store: ObjectStore) -> None:
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


def test_overwrite_via_put(store: ObjectStore) -> None:
    store.put("ref", b"first version")
    store.put("ref", b"second")
    assert store.get("ref") == b"second"
    store.put("ref", b"")
    assert store.get("ref") == b""


DATA = b"0123456789"


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 10), (2, 5), (0, 1), (9, 10), (5, 100), (0, 11), (10, 12), (15, 20), (3, 3), (10, 10)],
)
def test_byte_ranges(store: ObjectStore, start: int, end: int) -> None:
    """Half-open ranges; a range past the end is clamped to what exists (b"" beyond it)."""
    store.put("ten", DATA)
    assert store.get("ten", (start, end)) == DATA[start:end]


@pytest.mark.parametrize(("start", "end"), [(0, 0), (0, 5), (3, 7)])
def test_byte_ranges_of_empty_object(store: ObjectStore, start: int, end: int) -> None:
    store.put("empty", b"")
    assert store.get("empty", (start, end)) == b""


def test_byte_range_within_large_object(store: ObjectStore) -> None:
    big = os.urandom(2 * 1024 * 1024)
    store.put("big", big)
    assert store.get("big", (1_000_000, 1_500_000)) == big[1_000_000:1_500_000]
    assert store.get("big", (len(big) - 3, len(big) + 100)) == big[-3:]


@pytest.mark.parametrize("byte_range", [None, (0, 4), (0, 0), (7, 9)])
def test_missing_key_raises_not_found_naming_key(
    store: ObjectStore, byte_range: tuple[int, int] | None
) -> None:
    with pytest.raises(NotFoundError) as info:
        store.get("no/such/key", byte_range)
    assert "no/such/key" in str(info.value)
    assert store.url in str(info.value)
    assert isinstance(info.value, KeyError)  # callers may catch KeyError too


@pytest.mark.parametrize("byte_range", [(5, 2), (-1, 3), (1,)])
def test_invalid_byte_range(store: ObjectStore, byte_range: Any) -> None:
    store.put("ten", DATA)
    with pytest.raises(InvalidInputError, match="byte range"):
        store.get("ten", byte_range)


# -- conditional create, delete, exists --------------------------------------------------------


def test_put_if_absent_creates_once_and_never_overwrites(store: ObjectStore) -> None:
    assert store.put_if_absent("refs/main", b"first") is True
    assert store.put_if_absent("refs/main", b"second") is False
    assert store.put_if_absent("refs/main", b"first") is False
    assert store.get("refs/main") == b"first"
    store.delete("refs/main")
    assert store.put_if_absent("refs/main", b"third") is True
    assert store.get("refs/main") == b"third"


def test_delete(store: ObjectStore) -> None:
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


def test_exists(store: ObjectStore) -> None:
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


# -- listing ----------------------------------------------------------------------------------

KEYS = ["abc/x", "ab/y", "ab.txt", "abd", "b/ab/z", "a/b/c", "a/bc", "zarr.json"]


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
def test_list_prefixes(store: ObjectStore, prefix: str, expected: list[str]) -> None:
    """A prefix matches by string, not only on whole path segments ("ab" matches "abc/x")."""
    for key in KEYS:
        store.put(key, key.encode())
    assert sorted(store.list(prefix)) == sorted(expected)


def test_object_and_directory_clash(backend: Backend) -> None:
    """Object stores allow both "k" and "k/x"; a local directory cannot, and says so clearly."""
    store = backend.store
    store.put("k", b"1")
    store.put("d/x", b"2")
    if backend.kind != "local":
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


def test_list_many(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listings spanning many batches are complete (batches shrunk so S3 stays quick)."""
    monkeypatch.setattr(zarrlake.storage.obstore, "LIST_CHUNK", 16)
    keys = {f"chunks/{i:04d}" for i in range(150)}
    for key in keys:
        store.put(key, b"")
    assert set(store.list("chunks/")) == keys
    assert set(store.list("chunks/00")) == {k for k in keys if k.startswith("chunks/00")}


# -- async ------------------------------------------------------------------------------------


async def test_async_variants(store: ObjectStore) -> None:
    await store.put_async("a/x", DATA)
    assert await store.get_async("a/x") == DATA
    assert await store.get_async("a/x", (2, 5)) == b"234"
    assert await store.get_async("a/x", (8, 20)) == b"89"
    assert await store.get_async("a/x", (12, 20)) == b""
    assert await store.get_async("a/x", (4, 4)) == b""
    assert await store.exists_async("a/x") is True
    assert await store.exists_async("a/y") is False
    assert await store.put_if_absent_async("a/y", b"first") is True
    assert await store.put_if_absent_async("a/y", b"second") is False
    assert store.get("a/y") == b"first"
    await store.delete_async("a/x")
    await store.delete_async("a/x")
    assert await store.exists_async("a/x") is False
    with pytest.raises(NotFoundError, match="a/x"):
        await store.get_async("a/x")
    with pytest.raises(NotFoundError, match="a/x"):
        await store.get_async("a/x", (0, 1))
    with pytest.raises(InvalidInputError, match="a//x"):
        await store.put_async("a//x", b"")


async def test_async_variants_are_native(store: ObjectStore) -> None:
    """The obstore backend overrides every async method (no to_thread round trip)."""
    for name in ("get_async", "put_async", "put_if_absent_async", "delete_async", "exists_async"):
        assert getattr(type(store), name) is not getattr(ObjectStore, name), name


async def test_async_concurrent_gather(store: ObjectStore) -> None:
    blobs = {f"c/{i}": os.urandom(1000 + i) for i in range(64)}
    await asyncio.gather(*(store.put_async(k, v) for k, v in blobs.items()))
    got = await asyncio.gather(*(store.get_async(k) for k in blobs))
    assert dict(zip(blobs, got, strict=True)) == blobs
    assert set(store.list("c/")) == set(blobs)


async def test_async_put_if_absent_race(store: ObjectStore) -> None:
    for round_ in range(10):
        key = f"race/async/{round_}"
        payloads = [f"writer {i}".encode() for i in range(8)]
        results = await asyncio.gather(*(store.put_if_absent_async(key, p) for p in payloads))
        assert results.count(True) == 1
        assert store.get(key) == payloads[results.index(True)]


# -- invalid keys -----------------------------------------------------------------------------

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


@pytest.mark.parametrize("key", BAD_KEYS)
@pytest.mark.parametrize("op", ["get", "range", "put", "put_if_absent", "delete", "exists"])
def test_invalid_keys_rejected(store: ObjectStore, key: str, op: str) -> None:
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


@pytest.mark.parametrize("key", ["/abs", "a//b", "a/../b"])
async def test_invalid_keys_rejected_async(store: ObjectStore, key: str) -> None:
    for call in (
        lambda: store.get_async(key),
        lambda: store.put_async(key, b"x"),
        lambda: store.put_if_absent_async(key, b"x"),
        lambda: store.delete_async(key),
        lambda: store.exists_async(key),
    ):
        with pytest.raises(InvalidInputError, match="invalid object key"):
            await call()


@pytest.mark.parametrize("prefix", ["/a", "a//", "../x", "a\x01"])
def test_invalid_list_prefix_rejected(store: ObjectStore, prefix: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid list prefix"):
        list(store.list(prefix))


@pytest.mark.parametrize("key", ["a b", "ü/ñ", "a%20b", "a:b", "a+b=c&d", "#1/x", ".hidden", "~x"])
def test_unusual_but_valid_keys_round_trip(store: ObjectStore, key: str) -> None:
    store.put(key, key.encode())
    assert store.get(key) == key.encode()
    assert list(store.list()) == [key]
    assert store.exists(key)


# -- races ------------------------------------------------------------------------------------


def test_put_if_absent_race_threads(store: ObjectStore) -> None:
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


@pytest.mark.parametrize("backend", ["local", "s3"], indirect=True)
def test_put_if_absent_race_processes(backend: Backend) -> None:
    """4 spawned processes create the same keys: exactly one winner per key, its bytes stored."""
    procs, rounds = 4, 10
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_race_process,
            args=(backend.location, backend.options, i, rounds, barrier, results),
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
        assert backend.store.get(f"race/{r}") == f"process {winners[0]} round {r}".encode()


# -- open_storage -----------------------------------------------------------------------------


def test_memory_stores_are_shared_by_name() -> None:
    name = f"memory://shared-{uuid.uuid4().hex}"
    first, second = open_storage(name), open_storage(name)
    first.put("k", b"v")
    assert second.get("k") == b"v"
    other = open_storage(f"memory://other-{uuid.uuid4().hex}")
    assert not other.exists("k")


def test_local_directory_created_and_file_url_equivalent(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "repo dir"
    store = open_storage(str(root))
    assert root.is_dir()
    store.put("a/b", b"x")
    assert (root / "a" / "b").read_bytes() == b"x"
    again = open_storage(root.as_uri())
    assert again.get("a/b") == b"x"
    assert again.url == store.url == root.as_uri()


def test_open_storage_retries_by_default(tmp_path: Path) -> None:
    store = open_storage(str(tmp_path))
    assert isinstance(store, RetryingObjectStore)
    assert isinstance(store.inner, ObstoreObjectStore)
    assert isinstance(open_storage(str(tmp_path), retry_policy=None), ObstoreObjectStore)


def test_s3_prefix_isolates_repositories(s3_location: tuple[str, dict[str, Any]]) -> None:
    location, options = s3_location
    bucket_root = location.rsplit("/", 1)[0]
    repo = open_storage(location, **options)
    other = open_storage(bucket_root + "/other", **options)
    root = open_storage(bucket_root, **options)
    repo.put("k", b"repo")
    other.put("k", b"other")
    assert repo.get("k") == b"repo"
    assert sorted(root.list()) == ["other/k", "repo/k"]


def test_moto_enforces_if_none_match(s3_location: tuple[str, dict[str, Any]]) -> None:
    """moto's server honours If-None-Match: *, so the S3 put_if_absent tests mean something."""
    from botocore.exceptions import ClientError

    from tests.fixtures.s3 import s3_client

    location, options = s3_location
    bucket = location.removeprefix("s3://").split("/")[0]
    client = s3_client(options["endpoint_url"])
    client.put_object(Bucket=bucket, Key="direct", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=bucket, Key="direct", Body=b"2", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    store = open_storage(location, **options)
    assert store.put_if_absent("k", b"1") is True
    assert store.put_if_absent("k", b"2") is False
    assert client.get_object(Bucket=bucket, Key="repo/k")["Body"].read() == b"1"
