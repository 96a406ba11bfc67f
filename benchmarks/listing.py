"""LIST (issue 34): listing a million objects on moto's S3 server, in one sequence of
requests (`ObjectStore.list`) and 32 key ranges at once (`ObjectStore.list_parallel`, what a
full gc lists with), each timed and its S3 requests counted through the harness's relay
(relay.py). The objects are `listing/chunks/<sha-256 hex>` of one byte.

The group runs its own moto server (benchmarks/listserver.py, a child process this module
starts and stops by PID), because the shared one cannot hold a million objects in useful
time: moto stores each PUT request in Python (about 120 a second on this shared machine)
and answers each list request by walking, filtering and sorting every key of the bucket.
That server (1) fills the bucket by calling moto's backend `put_object` in its own process,
not over HTTP, and (2) answers a listing without a delimiter from a sorted index of the
bucket's keys (bisected per request), so each page of 1,000 keys costs what a page costs on
S3 rather than a sort of the whole bucket; pages, tokens and XML are moto's own. What is
measured is our client: its requests, their number and their parallelism, against a server
whose per-page cost no longer grows with the bucket. moto still renders each page in
Python on one process (two cores here), so 32 ranges at once gain less than on S3, where
Icechunk's 32-way listing cut 2.8 M objects from 299 s to 15 s.

    python -m benchmarks.run --quick --only LIST
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.groups import Group, Results
from benchmarks.listserver import REGION
from benchmarks.procs import child_env, stop
from benchmarks.relay import RelayProcess

SIZES = {"full": {"list_objects": 1_000_000}, "quick": {"list_objects": 2_000}}
NOTE = (
    "LIST (issue 34): {list_objects:,} objects on a moto S3 server of the group's own, filled "
    "through moto's backend in its process (not over HTTP) and listing from a sorted index of "
    "the bucket's keys (a page costs what an S3 page costs, not a sort of the bucket; "
    "benchmarks/listserver.py); listed in sequence and as 32 key ranges at once (time, S3 "
    "requests through the counting relay)."
)
WAYS = 32
BUCKET = "listing-bench"


class ListServer:
    """benchmarks/listserver.py in a child process: `port`, `fill_s` and `rss` once the
    bucket is filled; stopped by PID on close (it also exits when its stdin closes)."""

    def __init__(self, n: int, log: Path) -> None:
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.listserver", BUCKET, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=child_env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError(f"the listing server exited ({self.proc.poll()}); see {log}")
        info = json.loads(line)
        self.port: int = info["port"]
        self.fill_s: float = info["fill_s"]
        self.rss: int = info["rss"]

    def close(self) -> None:
        stop(self.proc)
        self.log.close()


def _store(port: int) -> Any:
    from zarrlake.storage import open_storage

    return open_storage(
        f"s3://{BUCKET}/listing",
        endpoint_url=f"http://127.0.0.1:{port}",
        region=REGION,
        access_key_id="test",
        secret_access_key="test",
        allow_http=True,
    )


def run(cfg: dict[str, Any], work: Path) -> Results:
    """Fill the bucket once, then list it `reps` times each way (alternating)."""
    n = cfg["list_objects"]
    server = ListServer(n, work / "listserver.log")
    try:
        print(
            f"LIST: {n:,} objects put through moto's backend in {server.fill_s:.0f} s "
            f"(server RSS {server.rss / 2**30:.1f} GiB)",
            flush=True,
        )
        records: list[dict[str, Any]] = []
        with RelayProcess() as relays:
            store = _store(relays.add("S3", "127.0.0.1", server.port))
            list(store.list("warm-up/"))  # moto builds its request routing at the first
            for _ in range(cfg["reps"]):
                record: dict[str, Any] = {"objects": n}
                for how, listing in (
                    ("sequential", lambda: list(store.list("chunks/"))),
                    ("parallel", lambda: list(store.list_parallel("chunks/", WAYS))),
                ):
                    relays.start()
                    t0 = time.perf_counter()
                    got = listing()
                    seconds = time.perf_counter() - t0
                    window = relays.window()
                    if len(got) != n or len(set(got)) != n:
                        raise AssertionError(f"LIST {how}: {len(got)} keys listed, {n} put")
                    record[f"{how}_s"] = seconds
                    record[f"{how}_requests"] = window["S3_requests"]
                record["speedup"] = record["sequential_s"] / record["parallel_s"]
                print(f"LIST: {record}", flush=True)
                records.append(record)
    finally:
        server.close()
    return {"LIST": {"zarrlake": records}}


def groups(cfg: dict[str, Any]) -> list[Group]:
    return [Group("LIST", ["zarrlake"], run=run)]
