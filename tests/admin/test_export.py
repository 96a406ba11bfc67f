"""Exporting a version as a plain Zarr v3 hierarchy, on each metastore: the copy opens with
zarr (and xarray) in a process that cannot import zarrlake, and matches numpy; sharded arrays
come out as valid shards; a damaged or purged chunk stops the export before the hierarchy
is readable; the destination must be empty, never the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.fixtures.s3 import s3_client, s3_options


def build(repo: zl.Repo) -> dict[str, np.ndarray]:
    """Two commits: a compressed array, a sharded one (one inner chunk rewritten later), a
    big-chunk one (chunk objects of their own) and group attributes. Returns main's data."""
    rng = np.random.default_rng(7)
    t = rng.random((20, 30), dtype="f4")
    sh = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    big = rng.random((64, 64))  # 32 KiB chunks, stored as objects of their own
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g.attrs["title"] = "exported"
    w = g.create_group("weather")
    w.create_array("t", shape=t.shape, chunks=(4, 7), dtype="f4", dimension_names=("y", "x"))[:] = t
    w.create_array(
        "sh", shape=sh.shape, chunks=(8, 8), shards=(32, 32), dtype="i4", dimension_names=("i", "j")
    )[:] = sh
    g.create_array("big", shape=big.shape, chunks=(32, 64), dtype="f8", compressors=None)[:] = big
    repo.create_tag("v1", at=s.commit("one"))
    s = repo.create_session()
    zarr.open_array(s.store, path="weather/sh")[0:8, 8:16] = -1
    s.commit("two")
    sh = sh.copy()
    sh[0:8, 8:16] = -1
    return {"weather/t": t, "weather/sh": sh, "big": big}


def read_without_zarrlake(location: str, arrays: list[str], storage: dict | None = None) -> dict:
    """Open the export with zarr and xarray in a process where `import zarrlake` fails."""
    code = f"""
import sys, json
sys.modules["zarrlake"] = None  # any import of zarrlake now raises ImportError
import numpy as np, zarr, xarray as xr
opts = json.loads({json.dumps(storage)!r})
if opts:
    import obstore
    from zarr.storage import ObjectStore
    bucket, _, prefix = {location!r}.removeprefix("s3://").partition("/")
    store = ObjectStore(obstore.store.S3Store(bucket, prefix=prefix, **opts), read_only=True)
else:
    store = {location!r}
g = zarr.open_group(store, mode="r")
out = {{"title": g.attrs["title"]}}
for path in {arrays!r}:
    out[path] = g[path][:].tolist()
ds = xr.open_zarr(store, group="weather", consolidated=False)
out["xarray_t_sum"] = float(ds["t"].sum())
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_an_export_opens_with_plain_zarr_and_xarray_and_matches_numpy(any_metastore, tmp_path):
    repo = zl.Repo.create(**any_metastore)
    expected = build(repo)
    report = repo.export("main", tmp_path / "out.zarr")
    assert report.arrays == 3 and report.documents == 5
    assert report.chunks == 25 + 4 + 2 and report.bytes > 0  # t: 5 x 5, sh: 2 x 2 shards, big: 2
    got = read_without_zarrlake(str(tmp_path / "out.zarr"), list(expected))
    assert got["title"] == "exported"
    for path, want in expected.items():
        np.testing.assert_array_equal(np.array(got[path], dtype=want.dtype), want)
    assert got["xarray_t_sum"] == pytest.approx(float(expected["weather/t"].sum(dtype="f8")), 1e-5)
    # the shards are zarr's own layout: zarr reads one inner chunk of one by range
    shard = (tmp_path / "out.zarr" / "weather" / "sh" / "c" / "0" / "0").read_bytes()
    direct = zarr.open_array(tmp_path / "out.zarr", path="weather/sh", mode="r")
    assert direct[0:8, 8:16].tolist() == [[-1] * 8] * 8 and len(shard) > 16 * 16


def count_tasks(monkeypatch, sizes: list[int] | None = None) -> list[int]:
    """[tasks submitted] by each export's thread pool from now on (and each pool's threads,
    into `sizes`)."""
    counts: list[int] = []

    class Counting(ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            counts.append(0)
            if sizes is not None:
                sizes.append(self._max_workers)

        def submit(self, fn, /, *args, **kwargs):
            counts[-1] += 1
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr("zarrlake.admin.export.ThreadPoolExecutor", Counting)
    return counts


def test_an_export_to_s3_of_a_tag_with_one_array(s3_server, tmp_path, monkeypatch):
    """Remote: a task per chunk (a batch's requests would wait one after another)."""
    repo = zl.Repo.create(tmp_path / "repo")
    expected = build(repo)
    bucket = f"export-{uuid.uuid4().hex[:12]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    options = s3_options(s3_server)
    dest = f"s3://{bucket}/copy"
    threads: list[int] = []
    tasks = count_tasks(monkeypatch, threads)
    report = repo.export("v1", dest, arrays=["weather"], storage_options=options)
    assert report.arrays == 2  # weather/t and weather/sh; big is left out
    assert tasks == [report.chunks] and report.chunks > 20
    assert threads == [16]  # every worker asked for: each waits on the network
    got = read_without_zarrlake(dest, ["weather/t", "weather/sh"], _obstore_options(options))
    np.testing.assert_array_equal(np.array(got["weather/t"], "f4"), expected["weather/t"])
    at_v1 = np.arange(64 * 64, dtype="i4").reshape(64, 64)  # before the rewrite
    np.testing.assert_array_equal(np.array(got["weather/sh"], "i4"), at_v1)
    keys = [o["Key"] for o in s3_client(s3_server).list_objects_v2(Bucket=bucket)["Contents"]]
    assert not any(k.startswith("copy/big") for k in keys)


def _obstore_options(options: dict) -> dict:
    return {
        "endpoint": options["endpoint_url"],
        "region": options["region"],
        "access_key_id": options["access_key_id"],
        "secret_access_key": options["secret_access_key"],
        "client_options": {"allow_http": True},
    }


def test_a_damaged_chunk_stops_the_export_before_the_hierarchy_is_readable(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    build(repo)
    victim = next((tmp_path / "repo" / "chunks").rglob("*"))
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(zl.CorruptionError, match="checksum"):
        repo.export("main", tmp_path / "out", arrays=["big"])
    assert not (tmp_path / "out" / "zarr.json").exists()
    assert not (tmp_path / "out" / "big" / "zarr.json").exists()


def test_the_destination_must_be_empty_and_not_a_repository(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    expected = build(repo)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "stale").write_bytes(b"x")
    with pytest.raises(zl.AlreadyExistsError, match="not empty"):
        repo.export("main", tmp_path / "full")
    repo.export("main", tmp_path / "full", overwrite=True, arrays=["big"])
    assert not (tmp_path / "full" / "stale").exists()
    got = zarr.open_array(tmp_path / "full", path="big", mode="r")[:]
    np.testing.assert_array_equal(got, expected["big"])
    with pytest.raises(zl.AlreadyExistsError, match="zarrlake repository"):
        repo.export("main", zl.Repo.create(tmp_path / "other").spec.location, overwrite=True)
    with pytest.raises(zl.InvalidInputError, match="repository itself"):
        repo.export("main", tmp_path / "repo" / "inside")
    with pytest.raises(zl.NotFoundError, match="no node"):
        repo.export("main", tmp_path / "none", arrays=["nope"])


def test_a_shard_whose_inner_chunks_straddle_manifest_ranges(tmp_path, monkeypatch):
    """Manifest ranges split at a fixed number of entries (32 here, 4,096 in use); shards of
    25 inner chunks do not divide them, so some shard's entries lie in two ranges: it is
    written once, whole."""
    monkeypatch.setattr("zarrlake.format.manifest.TARGET_ENTRIES", 32)
    repo = zl.Repo.create(tmp_path / "repo")
    data = np.arange(20 * 30, dtype="u1").reshape(20, 30)
    s = repo.create_session()
    a = zarr.create_array(
        s.store, name="s", shape=data.shape, chunks=(1, 1), shards=(5, 5), dtype="u1"
    )
    a[:] = data
    s.commit("many inner chunks")
    root = repo._snapshot_of(repo.resolve("main"))
    assert len(root.ranges) >= 8
    report = repo.export("main", tmp_path / "out", workers=4)
    assert report.chunks == (20 // 5) * (30 // 5)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out", path="s", mode="r")[:], data)


def test_small_chunks_go_in_batches_across_manifest_ranges_and_each_is_checked(
    tmp_path, monkeypatch
):
    """1 KiB chunks (ranges of packed objects) in several manifest ranges go to the workers
    four at a time, across the ranges' boundaries; every one is checked: one damaged byte in
    the middle of a batch stops the export."""
    monkeypatch.setattr("zarrlake.format.manifest.TARGET_ENTRIES", 32)
    monkeypatch.setattr("zarrlake.admin.export.BATCH_BYTES", 4096)
    tasks = count_tasks(monkeypatch)
    repo = zl.Repo.create(tmp_path / "repo")
    data = np.random.default_rng(3).random((160, 64))
    s = repo.create_session()
    a = zarr.create_array(
        s.store, name="a", shape=data.shape, chunks=(8, 16), dtype="f8", compressors=None
    )
    a[:] = data
    s.commit("80 chunks of 1 KiB")
    assert len(repo._snapshot_of(repo.resolve("main")).ranges) >= 3
    seen: list[tuple[int, int]] = []
    report = repo.export(
        "main", tmp_path / "out", workers=3, progress=lambda n, t: seen.append((n, t))
    )
    assert (report.chunks, report.bytes) == (80, 80 * 1024)
    assert tasks == [20]
    assert seen[-1] == (80 * 1024, 80 * 1024) and len(seen) == 80
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out", path="a", mode="r")[:], data)

    packed = [p for p in (tmp_path / "repo" / "fragments").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in packed) >= 80 * 1024 > 40 * 1024 * len(packed)
    victim = max(packed, key=lambda p: p.stat().st_size)
    held = bytearray(victim.read_bytes())
    held[len(held) // 2] ^= 0xFF
    victim.write_bytes(bytes(held))
    with pytest.raises(zl.CorruptionError, match="checksum"):
        repo.export("main", tmp_path / "bad", workers=3)
    assert not (tmp_path / "bad" / "zarr.json").exists()


def test_between_local_stores_at_most_two_threads_a_core_copy(tmp_path, monkeypatch):
    """A local copy is CPU work (memory copies and the hash): more workers than two a core
    are not started, however many are asked for; every chunk is still copied and checked."""
    monkeypatch.setattr("zarrlake.admin.export.BATCH_BYTES", 0)  # a task per chunk
    threads: list[int] = []
    tasks = count_tasks(monkeypatch, threads)
    repo = zl.Repo.create(tmp_path / "repo")
    expected = build(repo)
    report = repo.export("main", tmp_path / "out", workers=1000)
    cores = len(os.sched_getaffinity(0))
    assert threads == [min(1000, 2 * cores)] and tasks == [report.chunks]
    for path, data in expected.items():
        got = zarr.open_array(tmp_path / "out", path=path, mode="r")[:]
        np.testing.assert_array_equal(got, data)
    victim = next((tmp_path / "repo" / "chunks").rglob("*"))
    victim.write_bytes(victim.read_bytes()[:-1] + bytes([victim.read_bytes()[-1] ^ 1]))
    with pytest.raises(zl.CorruptionError, match=r"key 'big/c/\d/0': checksum mismatch"):
        repo.export("main", tmp_path / "bad", workers=1000, arrays=["big"])
    assert not (tmp_path / "bad" / "big" / "zarr.json").exists()
