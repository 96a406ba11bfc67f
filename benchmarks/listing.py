"""LIST (issue 34): listing many objects on moto's S3 server, in one sequence of requests
(`ObjectStore.list`) and 32 key ranges at once (`ObjectStore.list_parallel`, what a full gc
lists with), each timed and its S3 requests counted through the harness's relay
(relay.py). The objects are `chunks/<sha-256 hex>` of one byte, put once by the group.

The issue asks for 1,000,000 objects. moto is one Python process that answers each
listing request by going over the bucket's keys, and stores each put in Python (about
120 puts/s on this shared machine under load): building a million objects and listing
them would take hours, so the full size is `list_objects` (20,000) and the rows print the
size they ran at. On moto, ranges at once cost more requests and more time than one
sequence (its server does the work of every request in turn); they are for S3 itself,
where Icechunk's 32-way listing cut 2.8 M objects from 299 s to 15 s.

    python -m benchmarks.run --quick --only LIST
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.groups import Group, Results
from benchmarks.relay import RelayProcess
from benchmarks.s3pg import _hostport, _with_port

SIZES = {"full": {"list_objects": 20_000}, "quick": {"list_objects": 2_000}}
NOTE = (
    "LIST (issue 34): {list_objects:,} objects on moto S3, listed in sequence and 32 key "
    "ranges at once (time, S3 requests through the counting relay)."
)
WAYS = 32


def _store(remote: dict[str, Any], endpoint: str) -> Any:
    from zarrlake.storage import open_storage

    return open_storage(
        f"s3://{remote['bucket']}/listing",
        endpoint_url=endpoint,
        region=remote["region"],
        access_key_id=remote["access_key_id"],
        secret_access_key=remote["secret_access_key"],
        allow_http=True,
    )


def run(cfg: dict[str, Any], work: Path) -> Results:
    """Build the objects once, then list them `reps` times each way (alternating)."""
    remote, n = cfg["remote"], cfg["list_objects"]
    keys = [f"chunks/{hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(n)]
    direct = _store(remote, remote["s3_endpoint"])
    t0 = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda k: direct.put(k, b"x"), keys))
    print(f"LIST: {n:,} objects put in {time.perf_counter() - t0:.0f} s", flush=True)
    records: list[dict[str, Any]] = []
    with RelayProcess() as relays:
        port = relays.add("S3", *_hostport(remote["s3_endpoint"]))
        store = _store(remote, _with_port(remote["s3_endpoint"], port))
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
    return {"LIST": {"zarrlake": records}}


def groups(cfg: dict[str, Any]) -> list[Group]:
    return [Group("LIST", ["zarrlake"], servers=True, run=run)]
