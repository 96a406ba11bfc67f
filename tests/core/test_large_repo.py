"""The cost model on a large repository: a one-chunk commit costs the same number of
metastore and object-store operations on an array of 200,000 chunks as on one of 2,000, and
opening a branch and reading a chunk costs the same after 1 or 200 commits. Operations are
counted (tests/core/counting.py), not timed; wall times are printed for -s only."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import zarr

import zarrlake as zl
from tests.core.counting import counted

LARGE = 200_000
SMALL = 2_000


def array_repo(path: Path, n: int) -> zl.Repo:
    """main holds int8 array `big` of n one-byte chunks (no compression), all written."""
    repo = zl.Repo.create(path)
    s = repo.create_session()
    root = zarr.open_group(s.store, mode="a")
    root.create_array("big", shape=(n,), chunks=(1,), dtype="i1", compressors=None, fill_value=0)
    s.write_many([(f"big/c/{i}", bytes([i % 100 + 1])) for i in range(n)])
    start = time.perf_counter()
    s.commit(f"{n} chunks")
    print(f"\n  commit of {n:,} chunks: {time.perf_counter() - start:.2f} s")
    return repo


@pytest.fixture(scope="module")
def large_and_small(tmp_path_factory) -> tuple[zl.Repo, zl.Repo]:
    base = tmp_path_factory.mktemp("large")
    return array_repo(base / "large", LARGE), array_repo(base / "small", SMALL)


def one_chunk_commit(repo: zl.Repo, key: str) -> tuple[Counter, Counter, float]:
    """Operation counts (object store, metastore) of session + write + commit of one chunk,
    on cold caches; and its wall time."""
    fresh, blobs, meta = counted(repo)
    start = time.perf_counter()
    s = fresh.create_session()
    s.write(key, b"\x7f")
    s.commit("one chunk")
    elapsed = time.perf_counter() - start
    s.wait()  # staged records are dropped in the background: count it too
    return blobs.calls, meta.calls, elapsed


@pytest.mark.slow
def test_one_chunk_commit_cost_is_independent_of_array_size(large_and_small):
    large, small = large_and_small
    key = "big/c/1234"
    large_blobs, large_meta, large_s = one_chunk_commit(large, key)
    small_blobs, small_meta, small_s = one_chunk_commit(small, key)
    print(f"\n  1-chunk commit on {LARGE:,} chunks: {large_s * 1000:.1f} ms")
    print(f"  1-chunk commit on {SMALL:,} chunks: {small_s * 1000:.1f} ms")
    print(f"  object store ops: {dict(large_blobs)}; metastore ops: {dict(large_meta)}")
    assert large_blobs == small_blobs
    assert large_meta == small_meta
    # Issue 15's counts, with issue 20's staging. Objects: the snapshot and the one manifest
    # range rewritten are read; range, snapshot, change set and commit record written (one
    # parallel round on a remote store; a fragment this small travels in its metastore
    # record). Metastore: session record; the unflushed-writes marker at the first write;
    # the fragment's registration; the seal with the reads sent alongside it, the staged
    # scan, the branch and record swaps, the cleanup (which also reads the session's upload
    # records, in the background: issue 29). Issue 47's fences: the session record is
    # written before the head is read and names it after (a fresh process has no head to
    # guess), the moved marker is read with the head, the landing fence with the gc
    # phase, and the branch swap checks both (write_if). Issue 50: the session record is
    # stored at the first write, naming the head create_session read (one set_if fewer),
    # and the base's expiry marker is looked for after it (one `exists`), so an expire that
    # dropped the base meanwhile is seen (txn/birth.py); with it, at once, the base's
    # commit record (one `exists` more), so a base a reset and gc deleted is seen too.
    assert large_blobs == Counter(get=2, put_if_absent=4, exists=2)
    assert large_meta == Counter(get=5, set_if=4, write_if=1, set_many=2, scan=4, drop_partition=1)
    for repo, n in ((large, LARGE), (small, SMALL)):
        ro = repo.readonly_session("main")
        assert ro.read(key) == b"\x7f"
        assert ro.read("big/c/1233") == bytes([1233 % 100 + 1])
        assert ro.read(f"big/c/{n - 1}") == bytes([(n - 1) % 100 + 1])
        assert repo.stats().chunks == n  # every chunk is still referenced


def open_and_read(repo: zl.Repo, key: str) -> tuple[Counter, Counter, bytes | None, float]:
    fresh, blobs, meta = counted(repo)
    start = time.perf_counter()
    data = fresh.readonly_session("main").read(key)
    return blobs.calls, meta.calls, data, time.perf_counter() - start


@pytest.mark.slow
def test_open_and_read_cost_is_independent_of_history_length(tmp_path, large_and_small):
    _, short = large_and_small  # one commit of the array on top of the initial one
    long = array_repo(tmp_path / "long", SMALL)
    for i in range(199):  # 200 commits of the array in all
        s = long.create_session()
        s.write(f"big/c/{i}", b"\x55")
        s.commit(f"commit {i}", allow_empty=True)  # big/c/84 already holds 0x55
    assert len(long.log("main")) == 201
    short_blobs, short_meta, short_data, short_s = open_and_read(short, "big/c/1500")
    long_blobs, long_meta, long_data, long_s = open_and_read(long, "big/c/1500")
    print(f"\n  open + read one chunk after 1 commit: {short_s * 1000:.1f} ms")
    print(f"  open + read one chunk after 200 commits: {long_s * 1000:.1f} ms")
    print(f"  object store ops: {dict(long_blobs)}; metastore ops: {dict(long_meta)}")
    assert short_data == long_data == bytes([1500 % 100 + 1])
    assert short_blobs == long_blobs
    assert short_meta == long_meta
    assert long_blobs == Counter(get=2)  # snapshot (named by the ref), manifest range
    assert long_meta == Counter(get=1)  # the branch
