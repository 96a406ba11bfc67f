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

SIZES = {
    "full": {
        "scale_points": [
            [100_000, 1024, 1],
            [1_000_000, 1024, 1],
            [100_000, 1024, 4],
            [1_000_000, 1024, 4],
            [5_000, 1 << 20, 1],
            [5_000, 1 << 20, 4],
        ]
    },
    "quick": {"scale_points": [[20_000, 1024, 1], [20_000, 1024, 4], [500, 1 << 20, 1]]},
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


def zarrlake_point(path: str, n: int, chunk_bytes: int, procs: int) -> dict[str, Any]:
    import zarrlake as zl

    requests = Requests()
    requests.install()
    repo = zl.Repo.create(path)
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
    t0 = time.perf_counter()
    s.commit("scale")
    commit_s = time.perf_counter() - t0
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


def icechunk_point(path: str, n: int, chunk_bytes: int, procs: int) -> dict[str, Any]:
    import icechunk as ic

    repo = ic.Repository.create(ic.local_filesystem_storage(path))
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
    t0 = time.perf_counter()
    s.commit("scale")
    commit_s = time.perf_counter() - t0
    return {
        "stage_s": stage_s,
        "chunks_per_s": n / stage_s,
        "commit_s": commit_s,
        "peak_rss_mb": peak_rss_mb(),
        "staging_rss_mb": rss_before,
        "disk_ratio": disk_bytes(path) / (n * chunk_bytes),
    }


def point(engine: Any, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """One (N, chunk bytes, processes) point in this fresh worker process."""
    n, chunk_bytes, procs = p["n"], p["chunk_bytes"], p["procs"]
    name = engine.name if engine is not None else p["engine"]
    path = str(Path(path) / f"{name}-{n}-{chunk_bytes}-{procs}")
    fn = zarrlake_point if name == "zarrlake" else icechunk_point
    return fn(path, n, chunk_bytes, procs)


def label(n: int, chunk_bytes: int, procs: int) -> str:
    size = "1KiB" if chunk_bytes == 1024 else "1MiB"
    return f"n{n}_{size}_p{procs}."


def groups(cfg: dict[str, Any]) -> list[Group]:
    steps = [
        Step(
            "benchmarks.scale:point",
            "SCALE",
            prefix=label(n, b, procs),
            params={"n": n, "chunk_bytes": b, "procs": procs},
        )
        for n, b, procs in cfg.get("scale_points", SIZES["quick"]["scale_points"])
    ]
    return [Group("SCALE", ["zarrlake", "icechunk"], steps)]


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
