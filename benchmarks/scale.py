"""SCALE (issue 20): one job, one commit, at production scale.

One session stages N chunks through zarr (1 KiB or 1 MiB, incompressible, no codec) from one
process or from 4 (zarrlake: a cooperative session joined by pickling; Icechunk: forked
sessions merged, its distributed pattern), then commits. Each point runs in fresh
processes; the figures are the staging throughput, the commit call, the peak RSS of the
committing process, zarrlake's metastore requests and bytes (counted in every process
through a registry hook), the clean-up after the commit and the disk the job used.

`python -m benchmarks.scale --n 1000000 --engine zarrlake` runs one point by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from benchmarks.groups import Group, Step

ARRAY = "a"
SEED = 20261125
SLAB = 1 << 26  # bytes of chunks handed to zarr per assignment

POINTS_FULL = {
    "s1": [100_000, 1024, 1],
    "s4": [100_000, 1024, 4],
    "l1": [1_000_000, 1024, 1],
    "l4": [1_000_000, 1024, 4],
    "m1": [5_000, 1 << 20, 1],
    "m4": [5_000, 1 << 20, 4],
}
POINTS_QUICK = {
    "s1": [10_000, 1024, 1],
    "s4": [10_000, 1024, 4],
    "l1": [50_000, 1024, 1],
    "l4": [50_000, 1024, 4],
    "m1": [200, 1 << 20, 1],
    "m4": [200, 1 << 20, 4],
}
X10M = os.environ.get("ZARRLAKE_BENCH_10M") == "1"
"""The ten-million-chunk point (one zarrlake process, about 30 minutes and 12 GB of disk) runs
only when asked: ZARRLAKE_BENCH_10M=1 make bench BENCH_ARGS="--only SCALE"."""

SIZES = {
    "full": {
        "scale_points": POINTS_FULL | ({"x1": [10_000_000, 1024, 1]} if X10M else {}),
        "scale_s3_n": 1_000_000,
        "scale_spark_n": 1_000_000,
        "scale_gc_n": 100_000,
    },
    "quick": {
        "scale_points": POINTS_QUICK,
        "scale_s3_n": 20_000,
        "scale_spark_n": 20_000,
        "scale_gc_n": 5_000,
    },
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def disk_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total


# metastore requests -----------------------------------------------------------------------


class Requests:
    """Counts a zarrlake process's metastore requests and the bytes it writes there."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.written = 0

    def install(self) -> None:
        import zarrlake.metastore as metastores
        from zarrlake.metastore.base import WrapperMetaStore

        counter = self

        class Counting(WrapperMetaStore):
            def get(self, *a: Any, **k: Any) -> Any:
                counter.calls["get"] += 1
                return self.inner.get(*a, **k)

            def scan(self, *a: Any, **k: Any) -> Any:
                counter.calls["scan"] += 1
                return self.inner.scan(*a, **k)

            def set(self, partition: str, key: bytes, value: bytes) -> int:
                counter.calls["set"] += 1
                counter.written += len(key) + len(value)
                return self.inner.set(partition, key, value)

            def set_many(self, partition: str, items: Any) -> None:
                items = list(items)
                counter.calls["set_many"] += 1
                counter.written += sum(len(k) + len(v or b"") for k, v in items)
                self.inner.set_many(partition, items)

            def set_if(self, partition: str, key: bytes, value: bytes, expected: Any) -> int:
                counter.calls["set_if"] += 1
                counter.written += len(key) + len(value)
                return self.inner.set_if(partition, key, value, expected)

            def delete(self, partition: str, key: bytes) -> None:
                counter.calls["delete"] += 1
                self.inner.delete(partition, key)

            def drop_partition(self, partition: str) -> None:
                counter.calls["drop_partition"] += 1
                self.inner.drop_partition(partition)

        metastores.registry.add_hook(Counting)

    def snapshot(self) -> tuple[int, int]:
        return sum(self.calls.values()), self.written


# the data --------------------------------------------------------------------------------


def chunk_rows(chunk_bytes: int) -> int:
    return chunk_bytes // 4


def write_part(store: Any, n: int, chunk_bytes: int, part: int, parts: int) -> int:
    """Write chunks [part*n/parts, (part+1)*n/parts) of the array: chunk-aligned slabs of
    seeded float32 (each slab's values differ, so every chunk is distinct)."""
    rows = chunk_rows(chunk_bytes)
    arr = zarr.open_array(store, path=ARRAY, mode="r+")
    lo, hi = part * n // parts, (part + 1) * n // parts
    per_slab = max(1, SLAB // chunk_bytes)
    rng = np.random.default_rng(SEED + part)
    for start in range(lo, hi, per_slab):
        stop = min(hi, start + per_slab)
        data = rng.random((stop - start) * rows, dtype=np.float32)
        arr[start * rows : stop * rows] = data
    return hi - lo


def create_array(store: Any, n: int, chunk_bytes: int) -> None:
    rows = chunk_rows(chunk_bytes)
    zarr.create_array(
        store,
        name=ARRAY,
        shape=(n * rows,),
        chunks=(rows,),
        dtype="float32",
        compressors=None,
        fill_value=0.0,
        dimension_names=["x"],
    )


# zarrlake ----------------------------------------------------------------------------------


def _child(engine: str, blob_file: str, n: int, chunk_bytes: int, part: int, parts: int) -> None:
    """A cooperative worker: joins the session from its pickle, writes its part, hands the
    session back (zarrlake: flushed by pickling; Icechunk: the forked session)."""
    requests = Requests()
    if engine == "zarrlake":
        requests.install()
    session = pickle.loads(Path(blob_file).read_bytes())
    write_part(session.store, n, chunk_bytes, part, parts)
    back = pickle.dumps(session)  # zarrlake flushes; Icechunk sends its changes back
    Path(f"{blob_file}.{part}").write_bytes(back)
    calls, written = requests.snapshot()
    print(json.dumps({"requests": calls, "written": written, "rss_mb": peak_rss_mb()}))


def _run_children(engine: str, blob_file: str, n: int, chunk_bytes: int, parts: int) -> list:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.scale",
                "--child",
                engine,
                blob_file,
                str(n),
                str(chunk_bytes),
                str(part),
                str(parts),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for part in range(parts)
    ]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"a {engine} worker exited {p.returncode}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def zarrlake_point(engine: Any, path: str, n: int, chunk_bytes: int, procs: int) -> dict[str, Any]:
    requests = Requests()
    requests.install()
    engine.create(path)
    repo = engine.repo
    s = repo.create_session()
    create_array(s.store, n, chunk_bytes)
    before = requests.snapshot()
    t0 = time.perf_counter()
    if procs == 1:
        write_part(s.store, n, chunk_bytes, 0, 1)
        s.flush()
        stage_s = time.perf_counter() - t0
        staged = requests.snapshot()
        children: list = []
    else:
        blob = Path(path).parent / f"{Path(path).name}.session"
        blob.write_bytes(pickle.dumps(s))
        children = _run_children("zarrlake", str(blob), n, chunk_bytes, procs)
        stage_s = time.perf_counter() - t0
        staged = requests.snapshot()
    stage_requests = staged[0] - before[0] + sum(c["requests"] for c in children)
    stage_written = staged[1] - before[1] + sum(c["written"] for c in children)
    rss_before = peak_rss_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    s.commit("scale")
    commit_s, commit_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    rss = peak_rss_mb()
    after = requests.snapshot()
    t0 = time.perf_counter()
    s.wait()  # the clean-up of staged records, in the background after the commit
    cleanup_s = time.perf_counter() - t0
    meta = Path(path, "metastore.sqlite")
    meta_bytes = sum(os.path.getsize(p) for p in (meta, Path(f"{meta}-wal")) if os.path.exists(p))
    check = zarr.open_array(repo.readonly_session().store, path=ARRAY, mode="r")
    rows = chunk_rows(chunk_bytes)
    assert check[(n - 1) * rows :].shape == (rows,) and check[:rows].any()
    repo.close()
    return {
        "stage_s": stage_s,
        "chunks_per_s": n / stage_s,
        "commit_s": commit_s,
        "commit_cpu_s": commit_cpu_s,
        "peak_rss_mb": rss,
        "staging_rss_mb": rss_before,
        "stage_requests": stage_requests,
        "requests_per_100": 100 * stage_requests / n,
        "stage_meta_bytes": stage_written,
        "commit_requests": after[0] - staged[0],
        "cleanup_s": cleanup_s,
        "metastore_file_mb": meta_bytes / 1e6,
        "disk_ratio": disk_bytes(path) / (n * chunk_bytes),
    }


def icechunk_point(engine: Any, path: str, n: int, chunk_bytes: int, procs: int) -> dict[str, Any]:
    engine.create(path)
    repo = engine.repo
    s = repo.writable_session("main")
    create_array(s.store, n, chunk_bytes)
    s.commit("array")
    s = repo.writable_session("main")
    t0 = time.perf_counter()
    if procs == 1:
        write_part(s.store, n, chunk_bytes, 0, 1)
        stage_s = time.perf_counter() - t0
    else:
        blob = Path(path).parent / f"{Path(path).name}.session"
        blob.write_bytes(pickle.dumps(s.fork()))
        _run_children("icechunk", str(blob), n, chunk_bytes, procs)
        s.merge(*[pickle.loads(Path(f"{blob}.{i}").read_bytes()) for i in range(procs)])
        stage_s = time.perf_counter() - t0
    rss_before = peak_rss_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    s.commit("scale")
    commit_s, commit_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return {
        "stage_s": stage_s,
        "chunks_per_s": n / stage_s,
        "commit_s": commit_s,
        "commit_cpu_s": commit_cpu_s,
        "peak_rss_mb": peak_rss_mb(),
        "staging_rss_mb": rss_before,
        "disk_ratio": disk_bytes(path) / (n * chunk_bytes),
    }


def point(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """One (N, chunk bytes, processes) point in this fresh worker process."""
    n, chunk_bytes, procs = p["n"], p["chunk_bytes"], p["procs"]
    if engine is None:
        from benchmarks.engines import make

        engine = make(p["engine"])
    path = str(Path(path) / f"{engine.name}-{n}-{chunk_bytes}-{procs}")
    fn = zarrlake_point if engine.name == "zarrlake" else icechunk_point
    return fn(engine, path, n, chunk_bytes, procs)


def spark_jobs(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """map_regions and the chunk layout each writing N 1 KiB chunks on local[2]: the driver's
    commit after the last task (map_regions: the commit call; the data source: its commit
    step, timed inside the writer)."""
    import zarrlake as zl
    from benchmarks.spark_arrays import spark_session

    n, rows = p["scale_spark_n"], chunk_rows(1024)
    spark = spark_session("zarrlake-bench-scale")
    out: dict[str, Any] = {}
    try:
        repo = zl.Repo.create(Path(path) / "regions")
        s = repo.create_session()
        create_array(s.store, n, 1024)
        regions = [(lo, min(n, lo + 10_000)) for lo in range(0, n, 10_000)]

        def fill(session: Any, region: tuple[int, int]) -> int:
            arr = zarr.open_array(session.store, path=ARRAY, mode="r+")
            lo, hi = region
            arr[lo * rows : hi * rows] = np.random.default_rng(lo).random(
                (hi - lo) * rows, np.float32
            )
            return hi - lo

        t0 = time.perf_counter()
        assert sum(zl.spark.map_regions(spark, s, regions, fill)) == n
        out["map_regions_tasks_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        s.commit("map_regions")
        out["map_regions_commit_s"] = time.perf_counter() - t0
        repo.close()

        location = str(Path(path) / "chunks")
        repo = zl.Repo.create(location)
        s = repo.create_session()
        zarr.create_array(
            s.store,
            name=ARRAY,
            shape=(n * rows,),
            chunks=(rows,),
            dtype="float32",
            compressors=None,
            dimension_names=["x"],
        )
        s.commit("array")
        df = spark.range(n, numPartitions=8).selectExpr(
            "id AS x", f"unhex(repeat(lpad(hex(id % 256), 2, '0'), {4 * rows})) AS a"
        )
        t0 = time.perf_counter()
        zl.spark.write_array(df, repo=location, array=ARRAY, layout="chunks", values="binary")
        out["chunks_job_s"] = time.perf_counter() - t0
        # The data source commits in a Python worker of its own: the commit step is read off
        # the files, from the last task's flush (its fragment) to the commit record.
        out["chunks_commit_s"] = _after_last_task(Path(location), zl.Repo.open(location))
    finally:
        spark.stop()
    return out


def gc_overwritten(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """N 16 KiB chunk objects committed, then every one overwritten by a second commit;
    `expire` of the first commit's history, then gc (zarrlake: incremental, or `full` as a
    listing mark-and-sweep) deletes the N old objects. Icechunk: expire_snapshots then
    garbage_collect."""
    from datetime import UTC, datetime, timedelta

    n, full = p["scale_gc_n"], p.get("full", False)
    rows = 4096  # 16 KiB of float32

    def fill(store: Any, seed: int) -> None:
        arr = zarr.open_array(store, path=ARRAY, mode="r+")
        per = 4096
        for lo in range(0, n, per):
            hi = min(n, lo + per)
            rng = np.random.default_rng(seed * 1_000_003 + lo)
            arr[lo * rows : hi * rows] = rng.random((hi - lo) * rows, dtype=np.float32)

    engine.create(str(Path(path) / f"gc-{engine.name}-{int(full)}"))
    store = engine.begin()
    create_array(store, n, rows * 4)
    engine.commit("array")
    for seed in (1, 2):
        fill(engine.begin(), seed)
        engine.commit(f"fill {seed}")
    if engine.name == "zarrlake":
        repo = engine.repo
        engine.settle()
        t0 = time.perf_counter()
        expired = repo.expire(timedelta(0))
        expire_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = repo.gc(timedelta(0), full=full)
        gc_s = time.perf_counter() - t0
        assert report.by_kind.get("chunks", (0, 0))[0] == n, report.by_kind
        return {"expire_s": expire_s, "gc_s": gc_s, "commits_expired": expired.commits_expired}
    repo = engine.repo
    t0 = time.perf_counter()
    repo.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1))
    expire_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary = repo.garbage_collect(datetime.now(UTC) + timedelta(seconds=1))
    gc_s = time.perf_counter() - t0
    assert summary.chunks_deleted >= n, summary
    return {"expire_s": expire_s, "gc_s": gc_s}


def _after_last_task(path: Path, repo: Any) -> float:
    """Seconds from the last fragment a task flushed to the head commit's record (fragments
    small enough to travel in their records are written by the committer: left out)."""
    from zarrlake.format.fragment import RECORD_MAX

    flushed = [p.stat() for p in (path / "fragments").iterdir()]
    last_task = max(st.st_mtime for st in flushed if st.st_size > RECORD_MAX)
    head = repo.resolve("main")
    return (path / "commits" / head).stat().st_mtime - last_task


def groups(cfg: dict[str, Any]) -> list[Group]:
    points = cfg.get("scale_points", POINTS_QUICK)
    steps = [
        Step(
            "benchmarks.scale:point",
            "SCALE",
            prefix=f"{name}.",
            params={"n": n, "chunk_bytes": b, "procs": procs},
        )
        for name, (n, b, procs) in points.items()
        if name != "x1"
    ]
    out = [Group("SCALE", ["zarrlake", "icechunk"], steps)]
    if "x1" in points:
        n, b, procs = points["x1"]
        out.append(
            Group(
                "SCALE10M",
                ["zarrlake"],
                [
                    Step(
                        "benchmarks.scale:point",
                        "SCALE",
                        prefix="x1.",
                        params={"n": n, "chunk_bytes": b, "procs": procs},
                    )
                ],
            )
        )
    n = cfg.get("scale_s3_n", 20_000)
    out.append(
        Group(
            "SCALES3",
            ["zarrlake"],
            [
                Step(
                    "benchmarks.scale:point",
                    "SCALE",
                    prefix="s3.",
                    params={"n": n, "chunk_bytes": 1024, "procs": 4, "backend": "s3pg"},
                )
            ],
            servers=True,
        )
    )
    out.append(Group("SCALESPARK", ["spark"], [Step("benchmarks.scale:spark_jobs", "SCALE")]))
    out.append(
        Group(
            "SCALEGC",
            ["zarrlake", "icechunk"],
            [
                Step("benchmarks.scale:gc_overwritten", "SCALE", prefix="gc."),
                Step(
                    "benchmarks.scale:gc_overwritten",
                    "SCALE",
                    prefix="gcfull.",
                    params={"full": True},
                ),
            ],
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=6)
    parser.add_argument("--engine", default="zarrlake")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--chunk-bytes", type=int, default=1024)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--dir", default="/tmp/zarrlake-scale")
    args = parser.parse_args()
    if args.child:
        engine, blob, n, b, part, parts = args.child
        _child(engine, blob, int(n), int(b), int(part), int(parts))
        return
    import shutil

    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    p = {"n": args.n, "chunk_bytes": args.chunk_bytes, "procs": args.procs, "engine": args.engine}
    print(json.dumps(point(None, args.dir, p), indent=1))
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
