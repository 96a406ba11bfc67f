"""STATS: what chunk statistics cost and what they save, zarrlake against itself with
statistics off (or ignored) in the same process, alternating.

- write: W1's ingest ({w1_shape} float32, 1 MiB chunks) and W2's (small chunks), each
  written + committed with `Settings.chunk_statistics` on and off, alternating; the
  overhead in % of the median wall time and of the median CPU time of the process (user +
  system, all threads: what the statistics cost, which a loaded machine's wall time
  hides in noise), and the manifests' bytes of the W1 array with and without, for the
  benchmark's random data and for a temperature-like field (`field`).
- spark_write: the Spark chunk layout's ingest of `stats_spark_write_chunks` chunks of
  1 KiB (W2's), generated on the executors, written with statistics on and off,
  alternating: the job's seconds (local[2]), and the CPU time of the task's code
  (ChunkSink) run in this process on the same chunks (the executors' CPU is not this
  process's to measure).
- spark: an array of `stats_spark_chunks` chunks whose filter matches 1% of them, read
  with option `where` by Spark (local[2]) with `statistics` "use" and "ignore": seconds
  of each, the same sum from both, checked against numpy; one Spark session for all three
  arrays. The target applies to 256 KiB chunks (65,536 float32 values; users store 1 MiB
  and more, as the other rows do; 10,000 of them are 2.5 GiB to write and scan three
  times a run). A query pruned to 100 chunks costs about what any Spark query through a
  Python data source costs (a schema worker, a planning worker, the scan's task, adaptive
  execution's re-plan and the final aggregation's job: ~0.2 s on a quiet machine,
  whatever the data source does), so the ratio shows what statistics save only where the
  chunks they skip cost more than that: the unpruned scan is ~40 MB at 4 KiB chunks and
  ~650 MB at 64 KiB. Both are measured beside the target's array, without a target.
- checks: a commit writing `stats_check_chunks` chunks, MaxNaNFraction + ValueRange +
  NoDeletedChunks on it: chunks read and bytes the process read (/proc/self/io rchar),
  with statistics known and unknown.
- chunk: one chunk's statistics as the writer takes them (`of_chunk`), thread CPU per
  chunk: 1 KiB of float32 (W2's), 1 MiB (W1's) in cache and out of it (a new chunk each
  call, 256 MiB of them), and 1 MiB with 30% of its values NaN, scattered (a land mask);
  and per chunk of W2's 16,384 chunks of 1 KiB taken together (`of_tiles`: how a write's
  whole small chunks get them).
- scale: an array of `stats_scale_chunks` tiny chunks (one commit): `Repo.chunk_stats`
  and the pruning of `select` on it, per chunk, and the write+commit with statistics on
  against off (per chunk); `Repo.chunk_stats` of a sharded array of as many inner chunks.

    python -m benchmarks.run --only STATS [--quick]
"""

from __future__ import annotations

import resource
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from benchmarks.arrays import ARRAY, MIB, SEED, generate, new_array
from benchmarks.groups import Group, Step

SIZES = {
    "full": {
        "stats_reps": 3,
        "stats_write_reps": 5,
        "stats_spark_chunks": 10_000,
        "stats_spark_write_chunks": 16_384,
        "stats_check_chunks": 1_000,
        "stats_scale_chunks": 1_000_000,
    },
    "quick": {
        "stats_reps": 2,
        "stats_write_reps": 3,
        "stats_spark_chunks": 2_000,
        "stats_spark_write_chunks": 4_096,
        "stats_check_chunks": 1_000,
        "stats_scale_chunks": 100_000,
    },
}
NOTE = (
    "STATS: statistics on vs off in one process, alternating, median of {stats_write_reps} "
    "(writes) or {stats_reps}; Spark chunk-layout ingest of {stats_spark_write_chunks:,} "
    "1 KiB chunks; Spark "
    "where-filter matching 1% of {stats_spark_chunks:,} chunks (256 KiB; 64 and 4 KiB), "
    "statistics use vs ignore, one local[2] session; "
    "checks on a {stats_check_chunks:,}-chunk commit; chunk_stats / pruning / writes at "
    "{stats_scale_chunks:,} chunks."
)
SPARK_ROWS = {"": 65_536, "mid_": 16_384, "small_": 1_024}
"""float32 values per chunk of the Spark arrays (256 KiB, the target's; 64 KiB; 4 KiB), by
the prefix of their result keys."""


def _repo(path: str, on: bool) -> Any:
    import zarrlake as zl

    return zl.Repo.create(path, settings={"chunk_statistics": on})


def _ingest(path: str, on: bool, shape: tuple[int, ...], data: np.ndarray | None = None) -> float:
    """W1/W2's ingest: write the seeded array (or `data`) chunked along axis 0, commit;
    seconds."""
    return _timed_ingest(path, on, shape, data)[0]


def _timed_ingest(
    path: str, on: bool, shape: tuple[int, ...], data: np.ndarray | None = None
) -> tuple[float, float]:
    """`_ingest`: (seconds, CPU seconds of the process, user + system, all threads)."""
    repo = _repo(path, on)
    data = generate(shape) if data is None else data
    t0, c0 = time.perf_counter(), _cpu()
    s = repo.create_session()
    new_array(s.store, shape, (1, *shape[1:]))[...] = data
    s.commit("ingest")
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    repo.close()
    return seconds, cpu


def _cpu() -> float:
    """CPU seconds this process used so far (user + system, all threads)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def field(shape: tuple[int, ...], seed: int = 7) -> np.ndarray:
    """A temperature-like float32 field (K) of `shape` (time, lat, lon): a climatology by
    latitude, a daily cycle moving with longitude, and weather (large-scale waves whose
    amplitudes and phases wander in time): smooth in space, no two time steps alike."""
    rng = np.random.default_rng(seed)
    n, ny, nx = shape
    lat = np.radians(np.linspace(-90, 90, ny))[:, None]
    lon = np.radians(np.linspace(0, 360, nx, endpoint=False))[None, :]
    clim = 250 + 45 * np.cos(lat) ** 2
    out = np.empty(shape, np.float32)
    amp, phase = rng.normal(0, 3, 6), rng.uniform(0, 2 * np.pi, 6)
    waves = list(zip(rng.integers(1, 8, 6), rng.integers(1, 6, 6), strict=True))
    for t in range(n):
        amp = 0.9 * amp + rng.normal(0, 1.3, 6)
        phase = phase + rng.normal(0.2, 0.05, 6)
        weather = sum(
            a * np.sin(k * lon + p) * np.cos(m * lat)
            for a, p, (k, m) in zip(amp, phase, waves, strict=True)
        )
        out[t] = clim + 8 * np.cos(lat) * np.cos(lon - 2 * np.pi * t / 24) + weather
    return out


def _manifest_bytes(path: str) -> int:
    """Bytes of the repository's manifest objects."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if "manifests" in f.parts)


def write(engine: Any, path: str, p: dict) -> dict:
    """W1 and W2 ingests with statistics on and off, alternating."""
    out: dict[str, Any] = {}
    for name, shape in (("w1", tuple(p["w1_shape"])), ("w2", (p["w2_rows"], 256))):
        times: dict[bool, list[float]] = {True: [], False: []}
        cpus: dict[bool, list[float]] = {True: [], False: []}
        for on in (True, False):  # untimed: the first ingest of a process pays its imports
            _ingest(f"{path}/{name}-warm-{on}", on, (2, *shape[1:]))
        for r in range(p["stats_write_reps"]):
            for on in (r % 2 == 0, r % 2 == 1):  # alternate which goes first
                where = f"{path}/{name}-{on}-{r}"
                seconds, cpu = _timed_ingest(where, on, shape)
                times[on].append(seconds)
                cpus[on].append(cpu)
                if name == "w1" and r == 0:
                    out[f"manifest_bytes_{'on' if on else 'off'}"] = _manifest_bytes(where)
                shutil.rmtree(where)  # (W1's 256 MiB a repetition: the disk, not a figure)
        on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
        out[f"{name}_on_s"], out[f"{name}_off_s"] = on_s, off_s
        out[f"{name}_overhead_pct"] = 100 * (on_s / off_s - 1)
        out[f"{name}_us_per_chunk"] = 1e6 * (on_s - off_s) / shape[0]
        on_c, off_c = statistics.median(cpus[True]), statistics.median(cpus[False])
        out[f"{name}_cpu_on_s"], out[f"{name}_cpu_off_s"] = on_c, off_c
        out[f"{name}_cpu_overhead_pct"] = 100 * (on_c / off_c - 1)
        out[f"{name}_cpu_us_per_chunk"] = 1e6 * (on_c - off_c) / shape[0]
    shape = tuple(p["w1_shape"])
    smooth = field(shape)
    for on in (True, False):
        where = f"{path}/field-{on}"
        _ingest(where, on, shape, smooth)
        out[f"field_manifest_bytes_{'on' if on else 'off'}"] = _manifest_bytes(where)
    for data in ("", "field_"):
        on, off = out[f"{data}manifest_bytes_on"], out[f"{data}manifest_bytes_off"]
        out[f"{data}manifest_pct"] = 100 * (on / off - 1)
        out[f"{data}manifest_stats_bytes_per_chunk"] = (on - off) / shape[0]
        out[f"{data}manifest_bytes_per_chunk_off"] = off / shape[0]
    return out


def _spark_array(loc: str, n: int, row: int) -> tuple[float, float]:
    """A repository at `loc` holding ARRAY (n, row) float32, chunks (1, row), chunk k
    holding values in [k, k + 1), written 64 MiB at a time; (the threshold 1% of the
    chunks reach, numpy's sum of the values at or above it)."""
    repo = _repo(loc, True)
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name=ARRAY, shape=(n, row), chunks=(1, row), dtype="f4",
        dimension_names=["k", "i"],
    )  # fmt: skip
    threshold, want = float(n - n // 100), 0.0
    step = max(1, (64 * MIB) // (4 * row))
    for at in range(0, n, step):
        stop = min(at + step, n)
        block = np.arange(at, stop, dtype="f4")[:, None] + generate((stop - at, row), SEED + at)
        arr[at:stop] = block
        want += float(block[block >= threshold].astype("f8").sum())
    s.commit("values")
    repo.close()
    return threshold, want


def spark(engine: Any, path: str, p: dict) -> dict:
    """A Spark read filtered to 1% of the chunks, statistics used vs ignored, at 256 KiB,
    64 KiB and 4 KiB chunks, in one Spark session."""
    from pyspark.sql import functions as F

    from benchmarks.spark_arrays import spark_session

    n = p["stats_spark_chunks"]
    arrays = {
        key: (f"{path}/spark{row}", *_spark_array(f"{path}/spark{row}", n, row))
        for key, row in SPARK_ROWS.items()
    }
    session = spark_session("zarrlake-bench-stats")
    out: dict[str, Any] = {"chunks": n}
    try:
        for key, (loc, threshold, want) in arrays.items():
            # untimed: the first query of an array warms the JVM and the Python workers,
            # including the planning worker's first read of statistics (its imports)
            session.read.format("zarrlake").option("repo", loc).option("array", ARRAY).option(
                "isel", "k=0"
            ).option("where", f"{ARRAY} >= {threshold}").load().count()
            times: dict[str, list[float]] = {"use": [], "ignore": []}
            for r in range(p["stats_reps"]):
                for mode in ("use", "ignore") if r % 2 == 0 else ("ignore", "use"):
                    t0 = time.perf_counter()
                    got = (
                        session.read.format("zarrlake")
                        .option("repo", loc)
                        .option("array", ARRAY)
                        .option("where", f"{ARRAY} >= {threshold}")
                        .option("statistics", mode)
                        .load()
                        .agg(F.sum(ARRAY))
                        .first()[0]
                    )
                    times[mode].append(time.perf_counter() - t0)
                    if abs(got - want) > 1e-6 * abs(want):
                        raise AssertionError(f"statistics={mode}: sum {got} != numpy's {want}")
            use_s, ignore_s = statistics.median(times["use"]), statistics.median(times["ignore"])
            out[f"{key}use_s"], out[f"{key}ignore_s"] = use_s, ignore_s
            out[f"{key}speedup"] = ignore_s / use_s
    finally:
        session.stop()
    return out


SPARK_WRITE_ROW = 256
"""float32 values per chunk of the Spark chunk-layout ingest (W2's 1 KiB chunks)."""


def _chunk_rows(batches: Any) -> Any:
    """mapInArrow: one chunk-layout row (k, i, values) per id, seeded by it (executors)."""
    import pyarrow as pa

    for batch in batches:
        ids = batch.column("id").to_numpy()
        if not len(ids):
            continue
        values = np.concatenate([generate((1, SPARK_WRITE_ROW), SEED + int(k)) for k in ids])
        offsets = pa.array(np.arange(len(ids) + 1, dtype=np.int32) * SPARK_WRITE_ROW)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(ids, pa.int64()),
                pa.array(np.zeros(len(ids), np.int64)),
                pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1))),
            ],
            names=["k", "i", ARRAY],
        )


def _spark_ingest(spark: Any, loc: str, on: bool, n: int) -> float:
    """A chunk-layout ingest of `n` chunks of (1, SPARK_WRITE_ROW) float32 generated on
    the executors, into a new repository with statistics `on`: seconds of the job."""
    repo = _repo(loc, on)
    repo.close()
    df = spark.range(0, n, numPartitions=4).mapInArrow(
        _chunk_rows, f"k long, i long, {ARRAY} array<float>"
    )
    t0 = time.perf_counter()
    df.write.format("zarrlake").mode("overwrite").options(
        repo=loc, array=ARRAY, layout="chunks", shape=f"{n},{SPARK_WRITE_ROW}",
        chunks=f"1,{SPARK_WRITE_ROW}", dtype="float32", dims="k,i",
    ).save()  # fmt: skip
    return time.perf_counter() - t0


def _sink_cpu(loc: str, on: bool, n: int) -> float:
    """The chunk layout's task code (ChunkSink) writing `n` chunks of (1, SPARK_WRITE_ROW)
    float32 in this process, batches of 1,024 rows, into a new repository with statistics
    `on`: CPU seconds of the process (all threads), the flush included."""
    import zarrlake.spark.layout as layout
    from zarrlake.spark.arrays import ArrayInfo

    repo = _repo(loc, on)
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name=ARRAY, shape=(n, SPARK_WRITE_ROW), chunks=(1, SPARK_WRITE_ROW),
        dtype="f4", dimension_names=["k", "i"],
    )  # fmt: skip
    info = ArrayInfo.of(arr, ARRAY)
    data = generate((n, SPARK_WRITE_ROW))
    batches = [
        layout.chunk_batch(info, [((k, 0), data[k : k + 1]) for k in range(at, min(at + 1024, n))])
        for at in range(0, n, 1024)
    ]
    c0 = _cpu()
    sink = layout.ChunkSink(arr, info)
    try:
        for batch in batches:
            sink.add(batch)
    finally:
        sink.stop()
    s.flush()
    cpu = _cpu() - c0
    s.commit("chunks")
    repo.close()
    return cpu


def spark_write(engine: Any, path: str, p: dict) -> dict:
    """The Spark chunk layout's ingest of W2-sized chunks with statistics on and off,
    alternating: the job's seconds through Spark (local[2]), and the CPU of its task code
    (ChunkSink) run in this process (what the statistics cost, which the job's wall time
    on a loaded machine hides)."""
    from benchmarks.spark_arrays import spark_session

    n = p["stats_spark_write_chunks"]
    session = spark_session("zarrlake-bench-stats-write")
    out: dict[str, Any] = {"chunks": n}
    times: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    try:
        for on in (True, False):  # untimed: warms the JVM, the Python workers, the imports
            _spark_ingest(session, f"{path}/sw-warm-{on}", on, 64)
            _sink_cpu(f"{path}/sk-warm-{on}", on, 64)
        for r in range(p["stats_write_reps"]):
            for on in (r % 2 == 0, r % 2 == 1):
                times[on].append(_spark_ingest(session, f"{path}/sw-{on}-{r}", on, n))
                cpus[on].append(_sink_cpu(f"{path}/sk-{on}-{r}", on, n))
                shutil.rmtree(f"{path}/sw-{on}-{r}")
                shutil.rmtree(f"{path}/sk-{on}-{r}")
    finally:
        session.stop()
    on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
    out["on_s"], out["off_s"] = on_s, off_s
    out["overhead_pct"] = 100 * (on_s / off_s - 1)
    on_c, off_c = statistics.median(cpus[True]), statistics.median(cpus[False])
    out["sink_cpu_on_s"], out["sink_cpu_off_s"] = on_c, off_c
    out["sink_cpu_overhead_pct"] = 100 * (on_c / off_c - 1)
    out["sink_cpu_us_per_chunk"] = 1e6 * (on_c - off_c) / n
    return out


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def checks(engine: Any, path: str, p: dict) -> dict:
    """The checks of a commit writing `stats_check_chunks` chunks: chunks and bytes read."""
    import zarrlake as zl
    from zarrlake.checks import MaxNaNFraction, NoDeletedChunks, ValueRange

    n, out = p["stats_check_chunks"], {}
    for on in (True, False):
        loc = f"{path}/checks-{on}"
        repo = _repo(loc, on)
        s = repo.create_session()
        arr = zarr.create_array(s.store, name=ARRAY, shape=(n, 8192), chunks=(1, 8192), dtype="f8")
        s.commit("empty")
        s = repo.create_session()
        arr = zarr.open_array(s.store, path=ARRAY)
        arr[:] = np.round(np.random.default_rng(1).normal(280, 5, (n, 8192)), 1)
        cid = s.commit(f"{n} chunks")
        repo.add_check("nan", MaxNaNFraction(ARRAY, 0.1), branches=("nowhere",))
        repo.add_check("range", ValueRange(ARRAY, 150, 350), branches=("nowhere",))
        repo.add_check("nodel", NoDeletedChunks(), branches=("nowhere",))
        repo.close()
        fresh = zl.Repo.open(loc)  # a reviewer's process: cold caches
        before, t0 = _rchar(), time.perf_counter()
        res = fresh.run_checks(cid, reuse=False)
        seconds, read = time.perf_counter() - t0, _rchar() - before
        assert all(r.passed for r in res), [str(r) for r in res if not r.passed]
        key = "known" if on else "unknown"
        out[f"{key}_chunks_read"] = sum(r.chunks_read for r in res)
        out[f"{key}_from_stats"] = sum(r.chunks_from_stats for r in res)
        out[f"{key}_mb_read"] = read / MIB
        out[f"{key}_s"] = seconds
        fresh.close()
    return out


def _thread_us(f: Any, items: list, reps: int = 5) -> float:
    """Best thread CPU per item of `f` over `items` (us), of `reps` rounds."""
    best = float("inf")
    for _ in range(reps):
        c0 = time.thread_time()
        for item in items:
            f(item)
        best = min(best, (time.thread_time() - c0) / len(items))
    return 1e6 * best


def chunk(engine: Any, path: str, p: dict) -> dict:
    """One chunk's statistics (`of_chunk`, the writer's call for a large chunk or one zarr
    merged): thread CPU per chunk; and per chunk of W2's 16,384 1 KiB chunks taken
    together (`of_tiles`, the writer's call for a write's whole small chunks)."""
    from zarrlake.vc.statistics import of_chunk, of_tiles

    rng = np.random.default_rng(SEED)
    small = rng.random((1, 256), dtype=np.float32)
    big = [rng.random((1, 512, 512), dtype=np.float32) for _ in range(256)]
    holes = rng.normal(280, 30, (1, 512, 512)).astype(np.float32)
    holes[rng.random(holes.shape) < 0.3] = np.nan

    def stats(v: np.ndarray) -> Any:
        return of_chunk(v, 0.0)

    rows = rng.random((16_384, 256), dtype=np.float32)
    starts = np.stack([np.arange(len(rows)), np.zeros(len(rows), np.int64)], axis=1)

    def together(v: np.ndarray) -> Any:
        return of_tiles(v, (1, 256), starts, 0.0)

    return {
        "small_us": _thread_us(stats, [small] * 20_000),
        "small_together_us": _thread_us(together, [rows]) / len(rows),
        "hot_us": _thread_us(stats, [big[0]] * 256),
        "cold_us": _thread_us(stats, big),
        "nan_us": _thread_us(stats, [holes] * 64),
    }


def scale(engine: Any, path: str, p: dict) -> dict:
    """`stats_scale_chunks` chunks of 4 float32 values: writes with statistics on vs off,
    chunk_stats and select's pruning, per chunk."""
    import zarrlake as zl
    from zarrlake.query import value_names
    from zarrlake.vc import where as filters

    n, out = p["stats_scale_chunks"], {}
    values = np.arange(n * 4, dtype="<f4")
    for on in (True, False):
        repo = _repo(f"{path}/scale-{on}", on)
        s = repo.create_session()
        zarr.create_array(
            s.store, name=ARRAY, shape=(n * 4,), chunks=(4,), dtype="f4", compressors=None,
            fill_value=-1,
        )  # fmt: skip
        s.commit("array")
        t0 = time.perf_counter()
        s = repo.create_session()
        for at in range(0, n, 50_000):
            stop = min(at + 50_000, n)
            s.write_many(
                [(f"{ARRAY}/c/{k}", values[4 * k : 4 * k + 4].tobytes()) for k in range(at, stop)]
            )
        s.commit(f"{n} chunks")
        out[f"write_{'on' if on else 'off'}_s"] = time.perf_counter() - t0
        repo.close()
    out["write_us_per_chunk"] = 1e6 * (out["write_on_s"] - out["write_off_s"]) / n
    out["write_overhead_pct"] = 100 * (out["write_on_s"] / out["write_off_s"] - 1)
    repo = zl.Repo.open(f"{path}/scale-True")
    times, prune = [], []
    for _ in range(p["stats_reps"]):
        t0 = time.perf_counter()
        table = repo.chunk_stats(ARRAY)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        node = filters.parse(f"{ARRAY} >= {4 * (n - n // 100)}", value_names(ARRAY, (None,)))
        keep = node.may_match(filters.Chunks.of_table(table))
        prune.append(time.perf_counter() - t0)
        assert table.num_rows == n and int(keep.sum()) == n // 100, int(keep.sum())
    repo.close()
    out["chunk_stats_s"] = statistics.median(times)
    out["chunk_stats_us_per_chunk"] = 1e6 * out["chunk_stats_s"] / n
    out["prune_s"] = statistics.median(prune)
    out["chunks"] = n
    out.update(_sharded_chunk_stats(f"{path}/scale-sharded", n, p["stats_reps"]))
    return out


def _sharded_chunk_stats(path: str, n: int, reps: int) -> dict:
    """`Repo.chunk_stats` of a sharded array of `n` inner chunks of 4 float32 values
    (1,000 per shard): seconds (median) and per chunk.

    The first shard is written through zarr; the others are its bytes with their own
    values (every shard has the same index: all inner chunks present, 16 bytes each, in
    order), set through the session store as a writer handing shard bytes would. zarr's
    sharding codec costs about 150 us of CPU an inner chunk here, which at 1,000,000 took
    this step past its limit; this row measures `chunk_stats`, not zarr's encoding."""
    import zarrlake as zl

    repo = _repo(path, True)
    s = repo.create_session()
    per_shard = 1000
    arr = zarr.create_array(
        s.store, name=ARRAY, shape=(n * 4,), chunks=(4,), shards=(4 * per_shard,),
        dtype="f4", compressors=None, fill_value=-1,
    )  # fmt: skip
    values = np.arange(n * 4, dtype="<f4")
    arr[: 4 * per_shard] = values[: 4 * per_shard]
    first = bytes(s.read(f"{ARRAY}/c/0") or b"")
    data = values[: 4 * per_shard].tobytes()
    assert first[: len(data)] == data, "shard layout changed"
    index = first[len(data) :]
    shards = -(-n // per_shard)
    for at in range(1, shards, 100):
        s.write_many(
            [
                (
                    f"{ARRAY}/c/{k}",
                    values[4 * per_shard * k : 4 * per_shard * (k + 1)].tobytes() + index,
                )
                for k in range(at, min(at + 100, shards))
            ]
        )
    s.commit(f"{n} inner chunks")
    repo.close()
    repo = zl.Repo.open(path)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        table = repo.chunk_stats(ARRAY)
        times.append(time.perf_counter() - t0)
        assert table.num_rows == n and table["min"][1].as_py() == 4.0
        assert table["max"][n - 1].as_py() == 4 * n - 1
    repo.close()
    seconds = statistics.median(times)
    return {"sharded_chunk_stats_s": seconds, "sharded_chunk_stats_us_per_chunk": 1e6 * seconds / n}


def groups(cfg: dict[str, Any]) -> list[Group]:
    """STATS: zarrlake only (its peer is itself without statistics)."""
    del cfg
    return [
        Group(
            "STATS",
            ["zarrlake"],
            [
                Step("benchmarks.statistics:write", "STATS", "write."),
                Step("benchmarks.statistics:chunk", "STATS", "chunk."),
                Step("benchmarks.statistics:spark_write", "STATS", "spark_write."),
                Step("benchmarks.statistics:spark", "STATS", "spark."),
                Step("benchmarks.statistics:checks", "STATS", "checks."),
                Step("benchmarks.statistics:scale", "STATS", "scale."),
            ],
        )
    ]
