"""SHARD (issue 31): reading parts of a sharded array, plain zarr vs Icechunk vs zarrlake.

One float32 array of shape `shard_shape`, inner chunks `shard_chunks`, shards
`shard_shards` (default zarr codecs: zstd), values a smooth field plus noise quantised so
that it compresses to about a quarter (31 MB at full size). Each engine builds it once per
repetition; then, each in a new process (timed after imports, from before the open):

- one: open + read one inner chunk (the first);
- ten: open + read `shard_random` inner chunks picked at random (fixed seed), one at a time;
- all: open + read the whole array;
- rewrite (local directories): open, write one inner chunk, commit; MB the repository grew;
- coop (local directories, versioned engines): 4 worker processes of one session (Icechunk:
  4 forked sessions, merged) each write their own inner chunks of one shard, one zarr write
  (a read-modify-write of the whole shard) at a time; then one commit, and the shard's values
  checked: the failures are inner chunks read back wrong, plus one if the job did not end in
  exactly one commit.

Bytes read are the process's own: `rchar` of /proc/self/io (every byte read(2), pread(2) and
recv(2) returned, the page cache included) from before the open to the end.

SHARDS3 runs the same on a moto S3 server (zarrlake's metastore in the bucket), through a
counting relay (benchmarks/relay.py) that gives the bytes received and the requests; "one20"
and "ten20" read again with the relay delaying every request by 20 ms (10 ms each way), and
count the sequential rounds of requests (a round: a request that started while none other
was in flight).

    python -m benchmarks.run --quick --only SHARD
    python -m benchmarks.run --only SHARDS3
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from benchmarks.engines import Engine
from benchmarks.groups import Group, Step

ARRAY = "s"
SEED = 31

SIZES = {
    "full": {
        "shard_shape": [32, 1024, 1024],
        "shard_chunks": [1, 256, 256],
        "shard_shards": [16, 1024, 1024],
        "shard_random": 10,
    },
    "quick": {
        "shard_shape": [8, 1024, 1024],
        "shard_chunks": [1, 256, 256],
        "shard_shards": [4, 1024, 1024],
        "shard_random": 10,
    },
}
NOTE = (
    "SHARD (issue 31): float32 {shard_shape}, inner chunks {shard_chunks}, shards "
    "{shard_shards} (zstd). Open + read one inner chunk, {shard_random} random inner chunks "
    "and the whole array, each in a new process, timed from before the open; MB read = the "
    "process's rchar (/proc/self/io) over the same span (SHARDS3: bytes and requests through "
    "the relay; the 20 ms rows delay every S3 request by 20 ms). Rewrite: one inner chunk + "
    "commit, MB the repository grew. Cooperative: 4 processes of one session (Icechunk: 4 "
    "forked sessions, merged) each write 2 of the first 8 inner chunks of one shard (a zarr "
    "read-modify-write of the shard each), one commit; failures = inner chunks read back "
    "wrong + 1 unless exactly one commit."
)


def values(shape: tuple[int, ...]) -> np.ndarray:
    """A smooth field plus noise, quantised to 1/8: zstd keeps about 24% of it."""
    rng = np.random.default_rng(SEED)
    t, y, x = (np.arange(n, dtype="f4") for n in shape)
    field = np.sin(y / 97)[None, :, None] + np.cos(x / 61)[None, None, :] + t[:, None, None]
    noise = rng.normal(0, 0.5, shape).astype("f4")
    return (np.round((field + noise) * 8) / 8).astype("f4")


def rchar() -> int:
    """Bytes this process has read through system calls so far."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def build(engine: Engine, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """Write the array and commit it."""
    shape = tuple(p["shard_shape"])
    data = values(shape)
    engine.create(path)
    t0 = time.perf_counter()
    arr = zarr.create_array(
        engine.begin(),
        name=ARRAY,
        shape=shape,
        dtype="f4",
        chunks=tuple(p["shard_chunks"]),
        shards=tuple(p["shard_shards"]),
    )
    arr[:] = data
    engine.commit("sharded array")
    return {"seconds": time.perf_counter() - t0}


def _inner_chunks(p: dict[str, Any]) -> list[tuple[slice, ...]]:
    shape, chunks = p["shard_shape"], p["shard_chunks"]
    grid = [s // c for s, c in zip(shape, chunks, strict=True)]
    rng = np.random.default_rng(SEED)
    picks = [tuple(int(rng.integers(g)) for g in grid) for _ in range(p["shard_random"])]
    return [
        tuple(slice(i * c, (i + 1) * c) for i, c in zip(pick, chunks, strict=True))
        for pick in picks
    ]


def read(engine: Engine, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """Open + read `p["what"]` ("one", "ten" or "all") in this new process. On S3 the bytes
    and requests are counted by a relay in front of the server (benchmarks/relay.py): rchar
    does not see the reads of Rust clients' sockets."""
    if engine.remote is None:
        before = rchar()
        out = _read(engine, path, p)
        return {**out, "mb_read": (rchar() - before) / 2**20}
    from benchmarks.s3pg import relayed

    with relayed(engine, s3_ms=p.get("rtt_ms", 0.0)) as relays:
        relays.start()
        out = _read(engine, path, p)
        window = relays.window()
    return {
        **out,
        "mb_read": window["S3_bytes_down"] / 2**20,
        "requests": window["S3_requests"],
        "rounds": window["S3_rounds"],
    }


def _read(engine: Engine, path: str, p: dict[str, Any]) -> dict[str, Any]:
    what = p["what"]
    chunks = p["shard_chunks"]
    first = tuple(slice(0, c) for c in chunks)
    picks = {"one": [first], "ten": _inner_chunks(p), "all": [(...,)]}[what]
    t0 = time.perf_counter()
    engine.open(path)
    arr = zarr.open_array(engine.reader(), path=ARRAY, mode="r")
    got = [arr[pick] for pick in picks]
    seconds = time.perf_counter() - t0
    expect = values(tuple(p["shard_shape"]))
    for pick, g in zip(picks, got, strict=True):
        if not np.array_equal(g, expect[pick]):
            raise AssertionError(f"SHARD {what}: read different data at {pick}")
    out = {"seconds": seconds}
    if what == "all":
        out["mb_s"] = expect.nbytes / 2**20 / seconds
    return out


def _stored_bytes(path: str) -> int:
    """Bytes of the files below `path`, less SQLite's transient log and shared memory."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            if not name.endswith(("-wal", "-shm")):
                total += os.path.getsize(os.path.join(root, name))
    return total


def rewrite(engine: Engine, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """Open, write other values into one inner chunk (the first), commit: the seconds and
    the MB the repository grew by (local directories only; runs after the reads, which
    check the values as built)."""
    engine.open(path)
    engine.settle()
    before = _stored_bytes(path)
    first = tuple(slice(0, c) for c in p["shard_chunks"])
    new = values(tuple(p["shard_shape"]))[first] + 1  # made before the clock starts
    t0 = time.perf_counter()
    arr = zarr.open_array(engine.begin(), path=ARRAY, mode="r+")
    arr[first] = new
    engine.commit("one inner chunk")
    seconds = time.perf_counter() - t0
    engine.settle()
    return {"seconds": seconds, "mb_added": (_stored_bytes(path) - before) / 2**20}


COOP_WORKERS = 4
COOP_INNER = 8
"""Inner chunks of the first shard the cooperative workers write, interleaved."""


def _coop_picks(p: dict[str, Any], worker: int) -> list[tuple[slice, ...]]:
    """The inner chunks (as selections) worker `worker` writes: every COOP_WORKERS-th of the
    first COOP_INNER inner chunks of the first shard, in C order."""
    chunks, shards = p["shard_chunks"], p["shard_shards"]
    grid = [s // c for s, c in zip(shards, chunks, strict=True)]
    coords = np.unravel_index(np.arange(COOP_INNER), grid)
    sizes = list(zip(coords, chunks, strict=True))
    return [
        tuple(slice(int(k[i]) * c, (int(k[i]) + 1) * c) for k, c in sizes)
        for i in range(worker, COOP_INNER, COOP_WORKERS)
    ]


def _coop_values(p: dict[str, Any], pick: tuple[slice, ...]) -> np.ndarray:
    """What the workers write at `pick`: a value of its own per inner chunk, cheap to make
    (the built values would cost the whole array's generation in every worker)."""
    shape = tuple(s.stop - s.start for s in pick)
    tag = sum(s.start * (i + 1) for i, s in enumerate(pick))
    return np.full(shape, -1.0 - tag, dtype="f4")


def _coop_child(blob_file: str, params_json: str, worker: int) -> None:
    """One cooperative worker: joins the session from its pickle, writes its inner chunks one
    zarr write at a time, hands the session back (zarrlake: flushed by pickling; Icechunk:
    the forked session with its changes)."""
    p = json.loads(params_json)
    session = pickle.loads(Path(blob_file).read_bytes())
    arr = zarr.open_array(session.store, path=ARRAY, mode="r+")
    for pick in _coop_picks(p, worker):
        arr[pick] = _coop_values(p, pick)
    Path(f"{blob_file}.{worker}").write_bytes(pickle.dumps(session))


def coop(engine: Engine, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """COOP_WORKERS processes of one session write disjoint inner chunks of one shard, then
    one commit: the seconds, the commits it took and the inner chunks read back wrong."""
    if not engine.versioned:
        return {}
    engine.open(path)
    before = len(engine.log_ids())
    blob = Path(path).parent / f"{Path(path).name}.coop-session"
    t0 = time.perf_counter()
    error = ""
    if engine.name == "zarrlake":
        session = engine.repo.create_session("main")
        blob.write_bytes(pickle.dumps(session))
    else:
        session = engine.repo.writable_session("main")
        blob.write_bytes(pickle.dumps(session.fork()))
    args = [sys.executable, "-m", "benchmarks.shard", "--coop", str(blob), json.dumps(p)]
    procs = [subprocess.Popen([*args, str(w)]) for w in range(COOP_WORKERS)]
    for proc in procs:
        if proc.wait(timeout=3600) != 0:
            raise RuntimeError(f"a cooperative {engine.name} worker exited {proc.returncode}")
    try:
        if engine.name != "zarrlake":
            forks = [pickle.loads(Path(f"{blob}.{w}").read_bytes()) for w in range(COOP_WORKERS)]
            session.merge(*forks)
        session.commit("cooperative inner chunks")
    except Exception as e:  # the peer may refuse the merge: that is the measured outcome
        error = f"{type(e).__name__}: {e}"[:200]
    seconds = time.perf_counter() - t0
    engine.close()
    engine.open(path)
    commits = len(engine.log_ids()) - before
    arr = zarr.open_array(engine.reader(), path=ARRAY, mode="r")
    wrong = sum(
        not np.array_equal(arr[pick], _coop_values(p, pick))
        for w in range(COOP_WORKERS)
        for pick in _coop_picks(p, w)
    )
    if error:
        print(f"SHARD coop, {engine.name}: {error}", flush=True)
    return {"seconds": seconds, "commits": commits, "failures": wrong + (commits != 1)}


def _steps(table: str, params: dict[str, Any], rewrites: bool = False) -> list[Step]:
    steps = [Step("benchmarks.shard:build", table, "build.", params)]
    steps += [
        Step("benchmarks.shard:read", table, f"{what}.", {**params, "what": what})
        for what in ("one", "ten", "all")
    ]
    if rewrites:
        steps.append(Step("benchmarks.shard:rewrite", table, "rewrite.", params))
        steps.append(Step("benchmarks.shard:coop", table, "coop.", params))
    else:
        steps += [
            Step(
                "benchmarks.shard:read",
                table,
                f"{what}{RTT_MS}.",
                {**params, "what": what, "rtt_ms": RTT_MS},
            )
            for what in ("one", "ten")
        ]
    return steps


RTT_MS = 20
"""The round trip the latency relay adds to every S3 request in the one20/ten20 reads."""


def groups(cfg: dict[str, Any]) -> list[Group]:
    """SHARD on local directories; SHARDS3 on a moto S3 server (zarrlake with its metastore
    in the bucket, Icechunk on s3_storage; plain zarr has no S3 engine here)."""
    return [
        Group("SHARD", ["zarr", "icechunk", "zarrlake"], _steps("SHARD", {}, rewrites=True)),
        Group(
            "SHARDS3",
            ["icechunk", "zarrlake"],
            _steps("SHARDS3", {"backend": "bucket", "loc": "shard"}),
            servers=True,
        ),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--coop"]:
        _coop_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
