"""Byte-range reads: only the blocks covering a range are fetched, each checked against the
chunk object's block table; nearby ranges share a request; requests in flight are bounded;
objects without a table (older repositories) are read whole and checked as before."""

from __future__ import annotations

import os
import secrets
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import zarrlake as zl
from zarrlake.connection import RepoContext, Settings
from zarrlake.errors import InvalidInputError, StaleVirtualChunkError
from zarrlake.format.blocks import BLOCK, TABLE_MIN, BlockTable, block_size, table_key
from zarrlake.format.chunk_ref import ChunkRef, chunk_object_key
from zarrlake.format.digest import Hash, digest
from zarrlake.format.shard import ShardRef
from zarrlake.storage.base import ByteRange, ObjectStore, WrapperObjectStore
from zarrlake.vc.ranges import Span, coalesce

KEY = "a/c/0"
SIZE = 5 * BLOCK + 1234  # six blocks, the last one short


class Recording(WrapperObjectStore):
    """Records every read (key, range, bytes returned) and how many ran at once. With
    `hold` set, each read waits (bounded by a timeout) until that many are in flight, so a
    test sees whether reads overlap without sleeping."""

    def __init__(self, inner: ObjectStore, hold: int = 0) -> None:
        super().__init__(inner)
        self.reads: list[tuple[str, ByteRange | None, int]] = []
        self.lock = threading.Condition()
        self.in_flight = 0
        self.most = 0
        self.hold = hold

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.lock.notify_all()
            if self.hold and key.startswith("chunks/"):
                self.lock.wait_for(lambda: self.in_flight >= self.hold, timeout=5)
        data = b""
        try:
            data = self.inner.get(key, byte_range)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.reads.append((key, byte_range, len(data)))  # failed reads too
        return data

    def of(self, prefix: str) -> list[tuple[str, ByteRange | None, int]]:
        return [r for r in self.reads if r[0].startswith(prefix)]

    def bytes_read(self, prefix: str = "") -> int:
        return sum(n for _, _, n in self.of(prefix))


def reopened(repo: zl.Repo, hold: int = 0, **settings: Any) -> tuple[zl.Repo, Recording]:
    """The same repository through a recording store, with cold caches and `settings`."""
    rec = Recording(repo._context.object_store, hold)
    ctx = RepoContext(
        repo.spec,
        repo.repo_id,
        rec,
        repo._context.meta,
        settings=Settings(**settings),
        hash=repo._context.hash,
        format=repo._context.format,
    )
    return zl.Repo(ctx), rec


@pytest.fixture(params=["local", "memory", "s3"])
def any_repo(request: pytest.FixtureRequest, tmp_path: Path) -> zl.Repo:
    if request.param == "local":
        return zl.Repo.create(tmp_path / "repo")
    if request.param == "memory":
        return zl.Repo.create(f"memory://{secrets.token_hex(6)}")
    from tests.fixtures.s3 import s3_client, s3_options

    endpoint = request.getfixturevalue("s3_server")
    bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    return zl.Repo.create(f"s3://{bucket}/repo", storage_options=s3_options(endpoint))


def committed(repo: zl.Repo, data: bytes, key: str = KEY) -> str:
    s = repo.create_session()
    s.write("a/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    s.write(key, data)
    return s.commit("data")


def get(store: Any, key: str, byte_range: Any) -> bytes | None:
    got = sync(store.get(key, default_buffer_prototype(), byte_range))
    return None if got is None else got.to_bytes()


def payload(n: int = SIZE) -> bytes:
    return np.random.default_rng(7).bytes(n)


REQUESTS = [
    RangeByteRequest(0, 10),
    RangeByteRequest(BLOCK - 5, BLOCK + 5),  # across a block boundary
    RangeByteRequest(3 * BLOCK, 3 * BLOCK),  # empty
    RangeByteRequest(SIZE - 3, SIZE + 100),  # past the end: clamped
    RangeByteRequest(SIZE + 10, SIZE + 20),  # wholly past the end
    OffsetByteRequest(4 * BLOCK + 17),
    SuffixByteRequest(70_000),
    SuffixByteRequest(0),
    SuffixByteRequest(SIZE + 5),
]


def expected(data: bytes, r: Any) -> bytes:
    match r:
        case RangeByteRequest(start, end):
            return data[start:end]
        case OffsetByteRequest(offset):
            return data[offset:]
        case SuffixByteRequest(suffix):
            return data[max(len(data) - suffix, 0) :] if suffix else b""
    raise AssertionError(r)


def test_ranges_return_exactly_the_bytes(any_repo: zl.Repo) -> None:
    data = payload()
    committed(any_repo, data)
    repo, rec = reopened(any_repo)
    store = repo.readonly_session("main").store
    for r in REQUESTS:
        assert get(store, KEY, r) == expected(data, r), r
    assert get(store, "a/c/9", RangeByteRequest(0, 4)) is None
    many = sync(store.get_partial_values(default_buffer_prototype(), [(KEY, r) for r in REQUESTS]))
    assert [b.to_bytes() for b in many] == [expected(data, r) for r in REQUESTS]
    # never the whole object: each chunk read is of whole blocks, far less than the object
    chunk_reads = rec.of("chunks/")
    assert chunk_reads and all(r[1] is not None for r in chunk_reads)
    assert rec.bytes_read("chunks/") < 4 * SIZE  # 18 ranges, most of a block or two


def test_ranges_inside_a_session_and_sync(any_repo: zl.Repo) -> None:
    """Staged (uncommitted) chunks read by range too, through the async and sync paths."""
    data = payload()
    s = any_repo.create_session()
    s.write(KEY, data)
    for r in REQUESTS:
        assert get(s.store, KEY, r) == expected(data, r), r
        got = s.store.get_sync(KEY, byte_range=r)
        assert got is not None and got.to_bytes() == expected(data, r)


def test_a_range_reads_only_its_blocks_and_the_table_once(tmp_path: Path) -> None:
    data = payload()
    committed(zl.Repo.create(tmp_path / "repo"), data)
    repo, rec = reopened(zl.Repo.open(tmp_path / "repo"))
    store = repo.readonly_session("main").store
    assert (
        get(store, KEY, RangeByteRequest(2 * BLOCK + 100, 2 * BLOCK + 200))
        == data[2 * BLOCK + 100 : 2 * BLOCK + 200]
    )
    assert [(r[1], r[2]) for r in rec.of("chunks/")] == [((2 * BLOCK, 3 * BLOCK), BLOCK)]
    assert len(rec.of("blocks/")) == 1
    assert get(store, KEY, RangeByteRequest(10, 20)) == data[10:20]
    assert len(rec.of("blocks/")) == 1  # cached
    assert rec.of("chunks/")[-1][1] == (0, BLOCK)


@pytest.fixture
def local(tmp_path: Path) -> tuple[Path, bytes]:
    """A local repository holding one committed chunk object with a table; (root, bytes)."""
    data = payload()
    committed(zl.Repo.create(tmp_path / "repo"), data)
    return tmp_path / "repo", data


def flip(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def object_path(root: Path, data: bytes, algo: Hash = Hash.BLAKE3) -> Path:
    return root / chunk_object_key(digest(algo, data))


def test_corruption_inside_the_range_is_detected(local: tuple[Path, bytes]) -> None:
    root, data = local
    flip(object_path(root, data), 3 * BLOCK + 9)  # same block as the range, not in it
    store = zl.Repo.open(root).readonly_session("main").store
    with pytest.raises(zl.CorruptionError, match="block 3"):
        get(store, KEY, RangeByteRequest(3 * BLOCK + 100, 3 * BLOCK + 110))
    with pytest.raises(zl.CorruptionError):
        get(store, KEY, None)  # the whole value is checked against its digest, as before


def test_corruption_outside_the_range_does_not_fail_it(local: tuple[Path, bytes]) -> None:
    root, data = local
    flip(object_path(root, data), 5 * BLOCK + 9)
    store = zl.Repo.open(root).readonly_session("main").store
    r = RangeByteRequest(BLOCK + 3, 2 * BLOCK + 3)
    assert get(store, KEY, r) == expected(data, r)


def test_a_damaged_or_foreign_table_is_detected(local: tuple[Path, bytes]) -> None:
    root, data = local
    tpath = root / table_key(digest(Hash.BLAKE3, data))
    flip(tpath, 40)
    store = zl.Repo.open(root).readonly_session("main").store
    with pytest.raises(zl.CorruptionError, match="block table"):
        get(store, KEY, RangeByteRequest(0, 10))
    other = payload(SIZE + 1)
    tpath.write_bytes(BlockTable.build(Hash.BLAKE3, other, digest(Hash.BLAKE3, other)).encode())
    store = zl.Repo.open(root).readonly_session("main").store
    with pytest.raises(zl.CorruptionError, match="another object"):
        get(store, KEY, RangeByteRequest(0, 10))


def test_a_truncated_object_is_detected(local: tuple[Path, bytes]) -> None:
    root, data = local
    path = object_path(root, data)
    path.write_bytes(path.read_bytes()[: 4 * BLOCK])  # ends on a block boundary
    store = zl.Repo.open(root).readonly_session("main").store
    with pytest.raises(zl.CorruptionError, match="truncated"):
        get(store, KEY, OffsetByteRequest(3 * BLOCK))


def test_objects_without_a_table_are_read_whole_and_checked(local: tuple[Path, bytes]) -> None:
    """As written before tables existed (or by older zarrlake): the whole object is read and
    checked against its digest, so corruption anywhere in it fails a ranged read."""
    root, data = local
    (root / table_key(digest(Hash.BLAKE3, data))).unlink()
    repo, rec = reopened(zl.Repo.open(root))
    store = repo.readonly_session("main").store
    r = RangeByteRequest(BLOCK, BLOCK + 50)
    assert get(store, KEY, r) == expected(data, r)
    assert get(store, KEY, SuffixByteRequest(9)) == data[-9:]
    assert rec.bytes_read("chunks/") >= SIZE  # read whole (blocks fetched alongside the table)
    assert len(rec.of("blocks/")) == 1  # its absence is remembered
    flip(object_path(root, data), 5 * BLOCK + 9)
    store = zl.Repo.open(root).readonly_session("main").store
    with pytest.raises(zl.CorruptionError, match="checksum mismatch"):
        get(store, KEY, r)


def test_sha256_repositories_get_tables_too(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo", content_hash="sha256")
    data = payload()
    committed(repo, data)
    assert (tmp_path / "repo" / table_key(digest(Hash.SHA256, data))).exists()
    flip(object_path(tmp_path / "repo", data, Hash.SHA256), 9)
    store = zl.Repo.open(tmp_path / "repo").readonly_session("main").store
    assert get(store, KEY, OffsetByteRequest(BLOCK)) == data[BLOCK:]
    with pytest.raises(zl.CorruptionError):
        get(store, KEY, RangeByteRequest(0, 1))


def test_small_objects_have_no_table_and_read_whole(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    data = payload(TABLE_MIN - 1)
    committed(repo, data)
    assert not (tmp_path / "repo" / "blocks").exists()
    repo, rec = reopened(repo)
    assert get(repo.readonly_session().store, KEY, RangeByteRequest(5, 9)) == data[5:9]
    assert rec.of("blocks/") == [] and rec.bytes_read("chunks/") == len(data)


def test_nearby_ranges_share_a_request(tmp_path: Path) -> None:
    data = payload()
    committed(zl.Repo.create(tmp_path / "repo"), data)
    ranges = [RangeByteRequest(10, 20), RangeByteRequest(BLOCK + 1, BLOCK + 2)]
    far = [RangeByteRequest(2 * BLOCK, 2 * BLOCK + 1), RangeByteRequest(5 * BLOCK, 5 * BLOCK + 1)]
    repo, rec = reopened(zl.Repo.open(tmp_path / "repo"), read_coalesce_gap=BLOCK)
    store = repo.readonly_session().store
    got = sync(store.get_partial_values(default_buffer_prototype(), [(KEY, r) for r in ranges]))
    assert [b.to_bytes() for b in got] == [expected(data, r) for r in ranges]
    assert [r[1] for r in rec.of("chunks/")] == [(0, 2 * BLOCK)]
    rec.reads.clear()
    got = sync(store.get_partial_values(default_buffer_prototype(), [(KEY, r) for r in far]))
    assert [b.to_bytes() for b in got] == [expected(data, r) for r in far]
    assert sorted(r[1] for r in rec.of("chunks/")) == [(2 * BLOCK, 3 * BLOCK), (5 * BLOCK, SIZE)]


@pytest.mark.parametrize("bound", [1, 3])
def test_requests_in_flight_are_bounded(any_repo_s3: zl.Repo, bound: int) -> None:
    """Six blocks apart from each other, on S3: never more than `bound` requests at once, and
    that many do run together (each read waits until `bound` are in flight)."""
    data = payload(12 * BLOCK)
    committed(any_repo_s3, data)
    repo, rec = reopened(any_repo_s3, hold=bound, read_concurrency=bound, read_coalesce_gap=0)
    store = repo.readonly_session().store
    ranges = [RangeByteRequest(i * BLOCK, i * BLOCK + 1) for i in range(0, 12, 2)]
    got = sync(store.get_partial_values(default_buffer_prototype(), [(KEY, r) for r in ranges]))
    assert [b.to_bytes() for b in got] == [expected(data, r) for r in ranges]
    assert len(rec.of("chunks/")) == 6
    assert rec.most == bound


def test_coalesce() -> None:
    assert coalesce([(50, 60), (0, 10), (12, 20), (30, 30)], 2, 100) == [(0, 20), (50, 60)]
    assert coalesce([(0, 10), (5, 50)], 0, 20) == [(0, 50)]  # overlaps always merge
    assert coalesce([(0, 10), (10, 30)], 0, 20) == [(0, 10), (10, 30)]  # too long merged
    assert Span(suffix=5).resolve(3) == (0, 3) and Span(7, 9).resolve(8) == (7, 8)
    with pytest.raises(InvalidInputError):
        Span(5, 2)
    assert block_size(BLOCK * 4096) == BLOCK and block_size(BLOCK * 4096 + 1) == 2 * BLOCK


# an end-to-end read of one inner chunk of a sharded array ---------------------------------


def sharded(repo: zl.Repo) -> np.ndarray:
    values = np.random.default_rng(3).random((4, 256, 256), dtype="f4")
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="v", shape=values.shape, dtype="f4", chunks=(1, 32, 32), shards=(2, 256, 256)
    )
    arr[:] = values
    s.commit("sharded")
    return values


@pytest.mark.parametrize("where", ["local", "s3"])
def test_one_inner_chunk_of_a_shard_reads_little(
    where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if where == "local":
        base = zl.Repo.create(tmp_path / "repo")
    else:
        base = request.getfixturevalue("any_repo_s3")
    values = sharded(base)
    shard_bytes = max(n for _, _, n in reopened_whole(base))
    assert shard_bytes > 7 * BLOCK  # ~0.5 MB of random floats per shard
    repo, rec = reopened(base)
    arr = zarr.open_array(repo.readonly_session().store, path="v", mode="r")
    np.testing.assert_array_equal(arr[1, 32:64, 64:96], values[1, 32:64, 64:96])
    # the index from the entries (no read), the inner chunk's own bytes in one read, checked
    # against its own digest: no block table, no block around it
    shard = repo.readonly_session()._engine.lookup("v/c/0/0/0")
    assert isinstance(shard, ShardRef)
    inner = shard.parts[shard.names.index("1.1.2")]  # [1, 32:64, 64:96]: (1, 1, 2) in it
    assert [n for _, _, n in rec.of("chunks/")] == [inner.length] and rec.of("blocks/") == []
    np.testing.assert_array_equal(arr[:], values)  # and the whole array still reads


def reopened_whole(repo: zl.Repo) -> list[tuple[str, ByteRange | None, int]]:
    """The chunk objects of the array, read whole through a recording store."""
    again, rec = reopened(repo)
    zarr.open_array(again.readonly_session().store, path="v", mode="r")[:]
    return rec.of("chunks/")


@pytest.fixture
def any_repo_s3(s3_server: str) -> zl.Repo:
    from tests.fixtures.s3 import s3_client, s3_options

    bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    return zl.Repo.create(f"s3://{bucket}/repo", storage_options=s3_options(s3_server))


def test_get_ranges_reads_a_key_in_one_batch(tmp_path: Path) -> None:
    """zarr's get_ranges (used by its sharding codec): every range of a key in one batch, its
    blocks fetched once; an absent key raises FileNotFoundError in a group, as zarr's does."""
    data = payload()
    committed(zl.Repo.create(tmp_path / "repo"), data)
    repo, rec = reopened(zl.Repo.open(tmp_path / "repo"))
    store = repo.readonly_session().store
    proto = default_buffer_prototype()
    ranges = [RangeByteRequest(BLOCK + 7, BLOCK + 9), None, SuffixByteRequest(3)]

    async def collect(key: str) -> list[tuple[int, Any]]:
        return [
            item async for batch in store.get_ranges(key, ranges, prototype=proto) for item in batch
        ]

    got = sync(collect(KEY))
    assert [(i, b.to_bytes()) for i, b in got] == [
        (0, data[BLOCK + 7 : BLOCK + 9]),
        (1, data),
        (2, data[-3:]),
    ]
    assert len(rec.of("chunks/")) == 1  # the whole value covers the others: one request
    synced = store.get_ranges_sync(KEY, ranges, prototype=proto)
    assert [(i, b.to_bytes()) for i, b in synced] == [(i, b.to_bytes()) for i, b in got]
    with pytest.raises(ExceptionGroup) as caught:
        sync(collect("a/c/404"))
    assert caught.group_contains(FileNotFoundError)
    with pytest.raises(ExceptionGroup):
        store.get_ranges_sync("a/c/404", ranges, prototype=proto)


def test_virtual_chunks_read_only_the_ranges_asked(tmp_path: Path) -> None:
    """A virtual chunk's ranges are read from its source (offset into the file) and checked
    against the source's identity, like whole reads."""
    source = tmp_path / "source.bin"
    data = payload()
    source.write_bytes(b"x" * 100 + data)
    objects = zl.Repo.create(tmp_path / "repo").context.objects
    url = source.as_uri()
    ref = ChunkRef.virtual(url, 100, len(data), objects.sources.identity(url))
    spans = [Span(5, 9), Span(suffix=4), Span(2 * BLOCK, 2 * BLOCK + 3)]
    got = objects._read_ranges(ref, "v", spans)
    assert got == [data[5:9], data[-4:], data[2 * BLOCK : 2 * BLOCK + 3]]
    source.write_bytes(b"y" * 100 + data)  # same size, new mtime: another version
    os.utime(source, ns=(1, 1))
    with pytest.raises(StaleVirtualChunkError):
        objects._read_ranges(ref, "v", spans)


def test_small_reads_of_verified_blocks_are_served_from_memory(tmp_path: Path) -> None:
    """zarr reads a shard's index again for every partial read: the verified last block is
    kept, so the second read of it costs no request; large reads are not kept."""
    data = payload()
    committed(zl.Repo.create(tmp_path / "repo"), data)
    repo, rec = reopened(zl.Repo.open(tmp_path / "repo"))
    store = repo.readonly_session().store
    assert get(store, KEY, SuffixByteRequest(100)) == data[-100:]
    assert get(store, KEY, SuffixByteRequest(40)) == data[-40:]
    assert get(store, KEY, RangeByteRequest(SIZE - 1000, SIZE - 990)) == data[-1000:-990]
    assert len(rec.of("chunks/")) == 1
    assert get(store, KEY, RangeByteRequest(0, 3 * BLOCK)) == data[: 3 * BLOCK]
    assert get(store, KEY, RangeByteRequest(BLOCK, BLOCK + 1)) == data[BLOCK : BLOCK + 1]
    assert len(rec.of("chunks/")) == 3  # the three-block read was not kept
