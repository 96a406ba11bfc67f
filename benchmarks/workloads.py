"""Workloads W1-W7 of issue 5, each the body of one worker process.

Every function takes (engine, path, params), times only its own work (no interpreter start,
no imports; repository creation is excluded where the workload says "write"), and returns a
flat dict of figures. Data is float32 from a seeded numpy generator; arrays use zarr's
default codecs. `engine` is None for the plain-files baseline.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from benchmarks.arrays import (
    ARRAY,
    MIB,
    SEED,
    W5_CHUNK,
    chunk_value,
    generate,
    new_array,
    peak_rss_mb,
)
from benchmarks.engines import Engine
from benchmarks.procs import command, parse_result, run_worker

# plain files: one raw file per chunk, no codec, no versioning ----------------------------


def _chunk_file(path: str, i: int) -> str:
    return os.path.join(path, ARRAY, "c", str(i))


def files_write(path: str, data: np.ndarray) -> None:
    os.makedirs(os.path.join(path, ARRAY, "c"), exist_ok=True)
    for i in range(data.shape[0]):
        data[i].tofile(_chunk_file(path, i))


def files_read(path: str, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, np.float32)
    for i in range(shape[0]):
        out[i] = np.fromfile(_chunk_file(path, i), np.float32).reshape(shape[1:])
    return out


# W1, W2: ingest through zarr ------------------------------------------------------------


def _ingest(engine: Engine | None, path: str, shape: tuple[int, ...]) -> tuple[float, float]:
    """Write a seeded array chunked along its first axis, then commit: (seconds, MB)."""
    data = generate(shape)
    chunks = (1, *shape[1:])
    if engine is None:
        t0 = time.perf_counter()
        files_write(path, data)
        return time.perf_counter() - t0, data.nbytes / MIB
    engine.create(path)
    t0 = time.perf_counter()
    store = engine.begin()
    new_array(store, shape, chunks)[...] = data
    engine.commit("ingest")
    return time.perf_counter() - t0, data.nbytes / MIB


def w1_ingest_large(engine: Engine | None, path: str, p: dict) -> dict:
    seconds, mb = _ingest(engine, path, tuple(p["w1_shape"]))
    return {"seconds": seconds, "mb_s": mb / seconds, "rss_mb": peak_rss_mb()}


def w2_ingest_small(engine: Engine | None, path: str, p: dict) -> dict:
    shape = (p["w2_rows"], 256)
    seconds, _ = _ingest(engine, path, shape)
    return {"seconds": seconds, "chunks_s": shape[0] / seconds, "rss_mb": peak_rss_mb()}


# W3, W4: reads in a new process ----------------------------------------------------------


def _open_array(engine: Engine, path: str) -> zarr.Array:
    engine.open(path)
    return zarr.open_array(engine.reader(), path=ARRAY, mode="r")


def w3_read_full(engine: Engine | None, path: str, p: dict) -> dict:
    shape = tuple(p["w1_shape"])
    t0 = time.perf_counter()
    got = files_read(path, shape) if engine is None else _open_array(engine, path)[...]
    seconds = time.perf_counter() - t0
    if not np.array_equal(got, generate(shape)):
        raise AssertionError("W3 read back different data than W1 wrote")
    return {"seconds": seconds, "mb_s": got.nbytes / MIB / seconds, "rss_mb": peak_rss_mb()}


def w4_first_byte(engine: Engine | None, path: str, p: dict) -> dict:
    """Open + read one chunk (the row `index` of the array), from before the open."""
    index = p.get("index", 0)
    t0 = time.perf_counter()
    if engine is None:
        got = np.fromfile(_chunk_file(path, index), np.float32)
    else:
        got = _open_array(engine, path)[index]
    ms = (time.perf_counter() - t0) * 1000
    if "expect_seed" in p and not np.array_equal(got, chunk_value(p["expect_seed"], got.shape)):
        raise AssertionError(f"W4 read wrong data for row {index}")
    return {"ms": ms, "rss_mb": peak_rss_mb()}


def _readers(engine: Engine, path: str, index: int, times: int, **extra: Any) -> float:
    """Median open+read-one-chunk ms over `times` fresh reader processes."""
    params = {**engine.spawn_params(), "index": index, **extra}
    return statistics.median(
        run_worker("W4", engine.name, path, params)["ms"] for _ in range(times)
    )


# W5: history --------------------------------------------------------------------------------


def w5_history(engine: Engine, path: str, p: dict) -> dict:
    n, window = p["w5_commits"], p["w5_window"]
    engine.create(path)
    new_array(engine.begin(), (n, *W5_CHUNK), (1, *W5_CHUNK))
    engine.commit("create")
    commit_ms, total_ms = [], []
    read_after_first = 0.0
    for i in range(n):
        value = chunk_value(i, W5_CHUNK)
        t0 = time.perf_counter()
        array = zarr.open_array(engine.begin(), path=ARRAY)
        array[i] = value
        t1 = time.perf_counter()
        engine.commit(f"commit {i + 1}")
        t2 = time.perf_counter()
        commit_ms.append((t2 - t1) * 1000)
        total_ms.append((t2 - t0) * 1000)
        if i == 0:
            read_after_first = _readers(engine, path, 0, p["w5_readers"], expect_seed=0)
    read_after_last = _readers(engine, path, 0, p["w5_readers"], expect_seed=0)
    early, late = statistics.median(commit_ms[:window]), statistics.median(commit_ms[-window:])
    return {
        "commit_early_ms": early,
        "commit_late_ms": late,
        "commit_late_early": late / early,
        "total_early_ms": statistics.median(total_ms[:window]),
        "total_late_ms": statistics.median(total_ms[-window:]),
        "read_first_ms": read_after_first,
        "read_last_ms": read_after_last,
        "read_late_early": read_after_last / read_after_first,
        "rss_mb": peak_rss_mb(),
    }


# W6: concurrent writers ----------------------------------------------------------------------

W6_CHUNK = (64, 64)


def w6_concurrent(engine: Engine, path: str, p: dict) -> dict:
    procs, per = p["w6_procs"], p["w6_commits"]
    engine.create(path)
    new_array(engine.begin(), (procs * per, *W6_CHUNK), (1, *W6_CHUNK))
    engine.commit("create")
    children = [
        subprocess.Popen(
            command("W6writer", engine.name, path, {**p, "proc": i}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(procs)
    ]
    try:
        for child in children:  # every writer has imported and opened the repository
            assert child.stdout is not None
            if child.stdout.readline().strip() != "READY":
                raise RuntimeError("a W6 writer failed to start: " + child.stderr.read()[-2000:])
        t0 = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=1200) for child in children]
        wall = time.perf_counter() - t0
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    results = []
    for child, (out, err) in zip(children, outputs, strict=True):
        res = parse_result(out)
        if child.returncode != 0 or res is None:
            raise RuntimeError(f"a W6 writer exited {child.returncode}: {err[-2000:]}")
        results.append(res)
    acks = [a for r in results for a in r["acks"]]
    acks_file = os.path.join(path, "w6-acks.json")
    Path(acks_file).write_text(json.dumps(acks))
    check = run_worker("W6check", engine.name, path, {**p, "acks_file": acks_file})
    return {
        "wall_s": wall,
        "commits_s": len(acks) / wall,
        "acked": len(acks),
        "retries": sum(r["retries"] for r in results),
        "gave_up": sum(r["gave_up"] for r in results),
        **check,
    }


def w6_writer(engine: Engine, path: str, p: dict) -> dict:
    """One of W6's writers: waits for "go" on stdin, then makes its one-chunk commits,
    starting again from the branch head whenever the engine reports a conflict."""
    me, per, max_tries = p["proc"], p["w6_commits"], p.get("w6_max_tries", 50)
    engine.open(path)
    print("READY", flush=True)
    sys.stdin.readline()
    acks, retries, gave_up = [], 0, 0
    for j in range(per):
        k = me * per + j
        value = chunk_value(k, W6_CHUNK)
        for _ in range(max_tries):
            array = zarr.open_array(engine.begin(), path=ARRAY)
            array[k] = value
            try:
                acks.append([k, engine.commit(f"writer {me} chunk {k}", concurrent=True)])
                break
            except engine.retryable():
                retries += 1
        else:
            gave_up += 1
    return {"acks": acks, "retries": retries, "gave_up": gave_up}


def w6_check(engine: Engine, path: str, p: dict) -> dict:
    """A fresh reader at the head: acknowledged writes whose data is not there, and
    acknowledged commits not in the branch's history."""
    acks = json.loads(Path(p["acks_file"]).read_text())
    array = _open_array(engine, path)
    head = array[...]
    lost = sum(not np.array_equal(head[k], chunk_value(k, W6_CHUNK)) for k, _ in acks)
    history = set(engine.log_ids())
    missing = sum(cid not in history for _, cid in acks)
    return {"lost_writes": lost, "missing_commits": missing}


# W7: big manifest -------------------------------------------------------------------------------

W7_ROW = 256  # 1 KiB chunks, as in W2
W7_SLAB = 10_000


def _encode(rows: np.ndarray) -> list[Any]:
    """Chunk buffers as zarr's default codecs for float32 make them (bytes + zstd level 0)."""
    from numcodecs import Zstd
    from zarr.core.buffer import default_buffer_prototype

    codec, buf = Zstd(level=0), default_buffer_prototype().buffer
    return [buf.from_bytes(codec.encode(row.tobytes())) for row in rows]


async def _put(store: Any, chunks: list[Any], start: int, batch: int = 1000) -> None:
    for lo in range(0, len(chunks), batch):
        part = chunks[lo : lo + batch]
        await asyncio.gather(
            *(store.set(f"{ARRAY}/c/{start + lo + i}/0", v) for i, v in enumerate(part))
        )


def w7_build(engine: Engine, path: str, p: dict) -> dict:
    """Commit an array of `w7_chunks` 1 KiB chunks. Chunks are encoded (untimed) exactly as
    zarr's default codecs would and handed to the engine's zarr store with `store.set`,
    skipping zarr's per-chunk Python codec pipeline so the build stays short."""
    n = p["w7_chunks"]
    engine.create(path)
    t0 = time.perf_counter()
    store = engine.begin()
    new_array(store, (n, W7_ROW), (1, W7_ROW))
    writing = time.perf_counter() - t0
    for start in range(0, n, W7_SLAB):
        chunks = _encode(generate((min(W7_SLAB, n - start), W7_ROW), SEED + 7 + start))
        t1 = time.perf_counter()
        asyncio.run(_put(store, chunks, start))
        writing += time.perf_counter() - t1
    t1 = time.perf_counter()
    engine.commit("big manifest")
    committing = time.perf_counter() - t1
    check = _open_array(engine, path)
    for row in (0, n - 1):
        slab = row - row % W7_SLAB
        want = generate((min(W7_SLAB, n - slab), W7_ROW), SEED + 7 + slab)[row - slab]
        if not np.array_equal(check[row], want):
            raise AssertionError(f"W7 build: row {row} reads back wrong")
    return {
        "build_s": writing + committing,
        "build_chunks_s": n / (writing + committing),
        "build_commit_s": committing,
        "rss_mb": peak_rss_mb(),
    }


def w7_commit(engine: Engine, path: str, p: dict) -> dict:
    """In a new process: open, write one chunk, commit; the commit call is `commit_ms`."""
    k = p["index"]
    value = chunk_value(k, (W7_ROW,))
    t0 = time.perf_counter()
    engine.open(path)
    array = zarr.open_array(engine.begin(), path=ARRAY)
    array[k] = value
    t1 = time.perf_counter()
    engine.commit("one chunk")
    t2 = time.perf_counter()
    return {"commit_ms": (t2 - t1) * 1000, "total_ms": (t2 - t0) * 1000, "rss_mb": peak_rss_mb()}


def _w8(engine: Engine | None, path: str, p: dict) -> dict:
    from benchmarks.spark_ingest import w8_spark_ingest

    return w8_spark_ingest(engine, path, p)


def _gc(engine: Engine | None, path: str, p: dict) -> dict:
    """Issue 12: gc on the W7 build (gc_bench.py)."""
    from benchmarks.gc_bench import gc_step

    return gc_step(engine, path, p)


def _spark_arrays(engine: Engine | None, path: str, p: dict) -> dict:
    """Issue 10's Spark figures at real sizes (spark_arrays.py), in one process."""
    from benchmarks import spark_arrays

    Path(path).mkdir(parents=True, exist_ok=True)
    return spark_arrays.run(p["spark_t"], Path(path), cells_t=p["spark_cells_t"])


def _s3_round_trips(engine: Engine | None, path: str, p: dict) -> dict:
    """Issue 15: requests and round trips per one-chunk commit on S3 + PostgreSQL (s3pg.py)."""
    from benchmarks.s3pg import rt_count

    assert engine is not None
    return rt_count(engine, path, p)


def _s3_read(engine: Engine | None, path: str, p: dict) -> dict:
    from benchmarks.s3pg import rt_read

    assert engine is not None
    return rt_read(engine, path, p)


WORKLOADS: dict[str, Callable[[Engine | None, str, dict], dict]] = {
    "W1": w1_ingest_large,
    "W2": w2_ingest_small,
    "W3": w3_read_full,
    "W4": w4_first_byte,
    "W5": w5_history,
    "W6": w6_concurrent,
    "W6writer": w6_writer,
    "W6check": w6_check,
    "W7": w7_build,
    "W7commit": w7_commit,
    "W8": _w8,
    "GC": _gc,
    "SPARK": _spark_arrays,
    "S3RT": _s3_round_trips,
    "S3RTread": _s3_read,
}
