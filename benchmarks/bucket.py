"""Issue 22: a bucket-only zarrlake repository (its metastore in the bucket) against Icechunk
2.3 on the same moto S3 server: requests, sequential round trips and wall time of a one-chunk
commit (begin + open array + write one chunk + commit, and the commit call alone) with a fixed
latency per round trip, of open + read one chunk in a new process, and W6 (processes making
one-chunk commits on one branch at once: commits/s, acknowledged writes lost).

Self-contained: it starts moto's S3 server (tests/fixtures/s3.py's launcher) and a counting
relay in front of it, and stops both. Counting as benchmarks/relay.py does: a request is a
client send that follows a reply (or opens a connection); a request sent while no other is
waiting for its reply opens a new sequential round trip. Latency delays each piece of data
by half the round trip in each direction; connection set-up is not charged (S3 keeps
connections open; moto closes them); counting happens with the latency on, so calls a
client makes together overlap as they would on S3. Requests zarrlake makes after the commit
returns (the staged records' clean-up, in a background thread) are counted apart.

    .venv-bench/bin/python benchmarks/bucket.py [--commits 10] [--rt-ms 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for tests/fixtures/s3.py's server launcher and options
SHAPE, CHUNK = (64, 64), (1, 64, 64)
REGION = "us-east-1"


# the counting relay ---------------------------------------------------------------------


class Relay:
    """A TCP relay that counts requests and sequential round trips and can add latency."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay = 0.0  # seconds each way
        self.lock = threading.Lock()
        self.waiting = 0  # requests sent and not yet answered
        self.events: list[tuple[float, bool]] = []  # (start, opened a round) per request
        self.lines: list[str] = []  # each request's first line
        self.server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            state = {"awaiting": False}
            threading.Thread(target=self._pump, args=(client, up, state, True), daemon=True).start()
            threading.Thread(
                target=self._pump, args=(up, client, state, False), daemon=True
            ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict, upward: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                with self.lock:
                    if upward and not state["awaiting"]:
                        state["awaiting"] = True
                        self.events.append((time.perf_counter(), self.waiting == 0))
                        line = data.split(b"\r\n", 1)[0][:120].decode(errors="replace")
                        self.lines.append(("NEW " if self.waiting == 0 else "    ") + line)
                        self.waiting += 1
                    elif not upward and state["awaiting"]:
                        state["awaiting"] = False
                        self.waiting -= 1
                if self.delay:
                    time.sleep(self.delay)  # the emulated latency itself
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with self.lock:
            if not upward and state["awaiting"]:  # closed without an answer
                state["awaiting"] = False
                self.waiting -= 1

    def mark(self) -> int:
        with self.lock:
            return len(self.events)

    def since(self, start: int, lo: float = 0.0, hi: float = float("inf")) -> dict[str, int]:
        with self.lock:
            picked = [e for e in self.events[start:] if lo <= e[0] <= hi]
        return {"requests": len(picked), "rounds": sum(r for _, r in picked)}


# engines --------------------------------------------------------------------------------


class Zarrlake:
    name = "zarrlake (bucket only)"

    def __init__(self, bucket: str, endpoint: str) -> None:
        import zarrlake
        import zarrlake.metastore.bucket_url  # loaded before any clock starts

        for name in ("Repo", "Session", "SessionStore"):  # the package loads these lazily
            getattr(zarrlake, name)
        self.zl = zarrlake
        self.location = f"s3://{bucket}/zarrlake"
        self.options = _options(endpoint)
        self.repo: Any = None
        self.session: Any = None

    def create(self) -> None:
        self.repo = self.zl.Repo.create(self.location, storage_options=self.options)

    def open(self, endpoint: str) -> None:
        self.repo = self.zl.Repo.open(self.location, storage_options=_options(endpoint))

    def begin(self) -> Any:
        self.session = self.repo.create_session("main")
        return self.session.store

    def commit(self, message: str, concurrent: bool = False) -> str:
        return self.session.commit(message)

    def retryable(self) -> tuple[type[BaseException], ...]:
        return (self.zl.ConflictError,)

    def log_ids(self) -> set[str]:
        return {c.id for c in self.repo.log()}

    def settle(self) -> None:
        """Wait for the staged records' clean-up the commit left running (internal)."""
        cleanup = getattr(getattr(self.session, "_txn", None), "cleanup", None)
        if cleanup is not None:
            cleanup.result()

    def reader(self) -> Any:
        return self.repo.readonly_session("main").store


class Icechunk:
    name = "Icechunk 2.3"

    def __init__(self, bucket: str, endpoint: str) -> None:
        import icechunk

        self.ic = icechunk
        self.bucket = bucket
        self.endpoint = endpoint
        self.repo: Any = None
        self.session: Any = None

    def _storage(self, endpoint: str) -> Any:
        return self.ic.s3_storage(
            bucket=self.bucket,
            prefix="icechunk",
            region=REGION,
            endpoint_url=endpoint,
            allow_http=True,
            force_path_style=True,
            access_key_id="test",
            secret_access_key="test",
        )

    def create(self) -> None:
        self.repo = self.ic.Repository.create(self._storage(self.endpoint))

    def open(self, endpoint: str) -> None:
        self.repo = self.ic.Repository.open(self._storage(endpoint))

    def begin(self) -> Any:
        self.session = self.repo.writable_session("main")
        return self.session.store

    def commit(self, message: str, concurrent: bool = False) -> str:
        if concurrent:  # rebase on conflict, as Icechunk's docs prescribe for parallel writers
            return self.session.commit(message, rebase_with=self.ic.ConflictDetector())
        return self.session.commit(message)

    def retryable(self) -> tuple[type[BaseException], ...]:
        return (self.ic.ConflictError, self.ic.RebaseFailedError)

    def log_ids(self) -> set[str]:
        return {s.id for s in self.repo.ancestry(branch="main")}

    def settle(self) -> None:
        pass

    def reader(self) -> Any:
        return self.repo.readonly_session(branch="main").store


ENGINES = {"zarrlake": Zarrlake, "icechunk": Icechunk}


def _options(endpoint: str) -> dict[str, Any]:
    from tests.fixtures.s3 import s3_options

    return s3_options(endpoint)


def value(k: int) -> np.ndarray:
    return np.random.default_rng(1000 + k).random(SHAPE, dtype=np.float32)


# the measurements -----------------------------------------------------------------------


def one_commit(engine: Any, k: int) -> tuple[float, float, float]:
    """Begin, open the array, write row k, commit: (start, commit called, returned)."""
    t0 = time.perf_counter()
    zarr.open_array(engine.begin(), path="a")[k] = value(k)
    called = time.perf_counter()
    engine.commit(f"row {k}")
    return t0, called, time.perf_counter()


def measure(kind: str, relay: Relay, upstream: str, bucket: str, args: Any) -> dict[str, Any]:
    engine = ENGINES[kind](bucket, upstream)
    engine.create()
    rows = args.warmup + args.commits + 1
    zarr.create_array(engine.begin(), name="a", shape=(rows, *SHAPE), chunks=CHUNK, dtype="f4")
    engine.commit("create")
    engine.settle()
    engine.open(relay.endpoint)
    k = 0
    for _ in range(args.warmup):
        one_commit(engine, k)
        engine.settle()
        k += 1
    counts: dict[str, list[float]] = {}
    relay.delay = args.rt_ms / 2000  # counted with latency: calls made together overlap
    for _ in range(args.commits):
        start = relay.mark()
        t0, called, returned = one_commit(engine, k)
        engine.settle()
        k += 1
        counts.setdefault(f"cycle ms @{args.rt_ms:g}ms", []).append((returned - t0) * 1000)
        counts.setdefault(f"commit ms @{args.rt_ms:g}ms", []).append((returned - called) * 1000)
        for label, lo, hi in (
            ("cycle", t0, returned),
            ("commit", called, returned),
            ("after", returned, float("inf")),
        ):
            for what, n in relay.since(start, lo, hi).items():
                counts.setdefault(f"{label} {what}", []).append(n)
    relay.delay = 0.0
    out: dict[str, Any] = {key: statistics.median(v) for key, v in counts.items()}
    if args.log:
        print(f"{engine.name}, the last counted cycle (NEW: opens a round trip):")
        print("\n".join(relay.lines[start:]))
    for rt in (0.0, args.rt_ms):
        reads = [read_in_new_process(kind, relay, bucket, k - 1, rt) for _ in range(args.reads)]
        suffix = f" @{rt:g}ms" if rt else ""
        out[f"read ms{suffix}"] = statistics.median(r["ms"] for r in reads)
        if rt:
            out["read requests"] = statistics.median(r["requests"] for r in reads)
            out["read rounds"] = statistics.median(r["rounds"] for r in reads)
    return out


def read_in_new_process(kind: str, relay: Relay, bucket: str, row: int, rt: float) -> dict:
    relay.delay = rt / 2000
    start = relay.mark()
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, bucket, relay.endpoint, str(row)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    relay.delay = 0.0
    return {**json.loads(done.stdout.strip().splitlines()[-1]), **relay.since(start)}


def child(kind: str, bucket: str, endpoint: str, row: int) -> None:
    """In a new process: open the repository and read one chunk (timed from the open)."""
    engine = ENGINES[kind](bucket, endpoint)
    t0 = time.perf_counter()
    engine.open(endpoint)
    got = zarr.open_array(engine.reader(), path="a", mode="r")[row]
    ms = (time.perf_counter() - t0) * 1000
    assert np.array_equal(got, value(row)), "read the wrong data"
    print(json.dumps({"ms": ms}))


def w6(kind: str, upstream: str, bucket: str, procs: int, per: int) -> dict[str, Any]:
    """W6: `procs` processes making `per` one-chunk commits each on main at once (a commit
    that meets a conflict starts again from the head); commits/s, and acknowledged writes
    missing from a fresh reader's head or commits missing from the history."""
    engine = ENGINES[kind](bucket, upstream)
    engine.create()
    zarr.create_array(
        engine.begin(), name="a", shape=(procs * per, *SHAPE), chunks=CHUNK, dtype="f4"
    )
    engine.commit("create")
    engine.settle()
    writers = [
        subprocess.Popen(
            [sys.executable, __file__, "--w6-writer", kind, bucket, upstream, str(i), str(per)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(procs)
    ]
    for w in writers:
        assert w.stdout is not None and w.stdout.readline().strip() == "READY"
    t0 = time.perf_counter()
    for w in writers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    outs = [json.loads(w.communicate(timeout=1200)[0].strip().splitlines()[-1]) for w in writers]
    wall = time.perf_counter() - t0
    acks = [a for o in outs for a in o["acks"]]
    engine.open(upstream)
    head = zarr.open_array(engine.reader(), path="a", mode="r")[...]
    history = engine.log_ids()
    return {
        "W6 commits/s": len(acks) / wall,
        "W6 acknowledged": len(acks),
        "W6 lost writes": sum(not np.array_equal(head[k], value(k)) for k, _ in acks),
        "W6 commits missing": sum(cid not in history for _, cid in acks),
        "W6 retries": sum(o["retries"] for o in outs),
    }


def w6_writer(kind: str, bucket: str, endpoint: str, me: int, per: int) -> None:
    engine = ENGINES[kind](bucket, endpoint)
    engine.open(endpoint)
    print("READY", flush=True)
    sys.stdin.readline()
    acks, retries = [], 0
    for j in range(per):
        k = me * per + j
        for _ in range(50):
            zarr.open_array(engine.begin(), path="a")[k] = value(k)
            try:
                acks.append([k, engine.commit(f"writer {me} row {k}", concurrent=True)])
                break
            except engine.retryable():
                retries += 1
    engine.settle()
    print(json.dumps({"acks": acks, "retries": retries}))


@contextlib.contextmanager
def moto() -> Iterator[str]:
    """moto's S3 server (tests/fixtures/s3.py's launcher, atomic conditional PUTs)."""
    from tests.fixtures.s3 import _LAUNCHER, _stop, _wait_ready

    log = Path(f"/tmp/zarrlake-bench-moto-{os.getpid()}.log")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, "-H", "127.0.0.1", "-p", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield _wait_ready(proc, log)
    finally:
        _stop(proc)
        log.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reads", type=int, default=3)
    parser.add_argument("--rt-ms", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--log", action="store_true", help="print one cycle's requests")
    parser.add_argument("--w6", default="4,20", help="W6 processes,commits (0,0: skip)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--w6-writer", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.w6_writer:
        kind, bucket, endpoint, me, per = args.w6_writer
        w6_writer(kind, bucket, endpoint, int(me), int(per))
        return
    if args.child:
        kind, bucket, endpoint, row = args.child
        child(kind, bucket, endpoint, int(row))
        return
    import boto3

    results: dict[str, dict[str, Any]] = {}
    with moto() as upstream:
        host, port = upstream.removeprefix("http://").split(":")
        relay = Relay((host, int(port)))
        s3 = boto3.client("s3", endpoint_url=upstream, region_name=REGION,
                          aws_access_key_id="test", aws_secret_access_key="test")  # fmt: skip
        for kind in ENGINES:
            bucket = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
            s3.create_bucket(Bucket=bucket)
            results[kind] = measure(kind, relay, upstream, bucket, args)
            procs, per = (int(x) for x in args.w6.split(","))
            if procs:
                bucket = f"bench-w6-{kind}-{uuid.uuid4().hex[:8]}"
                s3.create_bucket(Bucket=bucket)
                results[kind].update(w6(kind, upstream, bucket, procs, per))
    keys = list(results["zarrlake"])
    print(f"| metric | {' | '.join(ENGINES[k].name for k in results)} |")
    print(f"|---|{'---:|' * len(results)}")
    for key in keys:
        cells = " | ".join(f"{results[k].get(key, float('nan')):.4g}" for k in results)
        print(f"| {key} | {cells} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
