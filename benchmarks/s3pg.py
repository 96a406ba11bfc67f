"""Issue 15, the many-machine deployment: requests and sequential round trips per one-chunk
commit, zarrlake on S3 + PostgreSQL against Icechunk on S3, counted by relays (relay.py)
between each engine and each server, and the wall time of a commit when every S3 round trip
costs `rt_s3_ms` and every PostgreSQL one `rt_pg_ms`.

`rt_count` (worker "S3RT"): creates the repository and a W5-shaped array straight on the
servers, then opens it again through the relays and makes `rt_commits` one-chunk commits,
counting each (a) whole: begin a session, open the array, write one chunk, commit; (b) the
commit call alone. It checks the relays against known counts first, and for zarrlake counts
the object-store and metastore calls of one commit in-process too. Requests that start after
the commit returns (zarrlake drops the session's staged records in a background thread) are
counted apart ("after_"; `Engine.settle` waits for them), split by time: the relays stamp
each request with time.perf_counter(), the same clock as this process's. Then the same commit with
the relays delaying every byte (half a round trip each way), and open + read one chunk in
fresh processes (worker "S3RTread"), with and without the delay. The same workers measure a
bucket-only zarrlake (`backend="bucket"`, benchmarks/bucket.py): its metastore requests are
S3 requests too, and it has no PostgreSQL counts.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import zarr

from benchmarks.arrays import ARRAY, W5_CHUNK, chunk_value, new_array, peak_rss_mb
from benchmarks.engines import ZARRLAKE, Engine
from benchmarks.procs import run_worker
from benchmarks.relay import RelayProcess
from benchmarks.wire import add_marks, format_log, split

COUNTED = ("requests", "rounds", "connections")


def _hostport(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}"
    return urlunsplit(parts._replace(netloc=netloc))


@contextlib.contextmanager
def relayed(engine: Engine, s3_ms: float = 0.0, pg_ms: float = 0.0) -> Iterator[RelayProcess]:
    """Relays "S3" and "PG" in front of the engine's servers, each delaying every piece of
    data by half the given round-trip time in each direction; the engine's next open goes
    through them."""
    assert engine.remote is not None
    with RelayProcess() as relays:
        s3 = relays.add("S3", *_hostport(engine.remote["s3_endpoint"]), s3_ms / 2)
        pg = relays.add("PG", *_hostport(engine.remote["pg_url"]), pg_ms / 2)
        engine.via(_with_port(engine.remote["s3_endpoint"], s3),
                   _with_port(engine.remote["pg_url"], pg))  # fmt: skip
        try:
            yield relays
        finally:
            engine.close()
            engine.via()


def _counts(window: dict[str, Any], prefix: str, pg: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    for what in COUNTED:
        out[f"{prefix}s3_{what}"] = window[f"S3_{what}"]
        if pg:
            out[f"{prefix}pg_{what}"] = window[f"PG_{what}"]
    if pg:
        out[f"{prefix}all_rounds"] = window["all_rounds"]
    return out


# checking the relays against known counts ---------------------------------------------------


def _http_get(url: str) -> None:
    with contextlib.suppress(urllib.error.HTTPError):  # a 404 is an answer
        urllib.request.urlopen(url, timeout=30).read()


def check_relays(relays: RelayProcess, s3: str, pg_url: str, bucket: str) -> dict[str, int]:
    """Known counts through the relays: 3 sequential HTTP GETs (3 requests, 3 rounds, one
    connection each), 4 GETs in parallel threads with 25 ms each way (4 requests, at most
    2 rounds), 3 sequential `SELECT 1` on one PostgreSQL connection (3 requests, 3 rounds).
    Raises if the relays count otherwise."""
    import psycopg

    out: dict[str, int] = {}
    relays.start()
    for i in range(3):
        _http_get(f"{s3}/{bucket}/relay-check-{i}")
    w = relays.window()
    out.update(seq_requests=w["S3_requests"], seq_rounds=w["S3_rounds"])
    relays.delay("S3", 25)
    relays.start()
    threads = [
        threading.Thread(target=_http_get, args=(f"{s3}/{bucket}/relay-check-{i}",))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    relays.delay("S3", 0)
    w = relays.window()
    out.update(par_requests=w["S3_requests"], par_rounds=w["S3_rounds"])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        relays.start()
        for _ in range(3):
            conn.execute("SELECT 1").fetchall()
        w = relays.window()
    out.update(pg_requests=w["PG_requests"], pg_rounds=w["PG_rounds"])
    want = {"seq_requests": 3, "seq_rounds": 3, "par_requests": 4, "pg_requests": 3}
    bad = {k: out[k] for k, v in want.items() if out[k] != v}
    if bad or not 1 <= out["par_rounds"] <= 2 or out["pg_rounds"] != 3:
        raise AssertionError(f"the relays miscount known traffic: {out}")
    return out


def measured_round_trips(s3: str, pg_url: str, bucket: str, times: int = 5) -> dict[str, float]:
    """Median ms of one HTTP GET (a 404, on a new connection) and of one `SELECT 1` through
    the relays as they are set: what a round trip costs with the emulated latency."""
    import psycopg

    s3_ms, pg_ms = [], []
    for i in range(times):
        t0 = time.perf_counter()
        _http_get(f"{s3}/{bucket}/relay-check-{i}")
        s3_ms.append((time.perf_counter() - t0) * 1000)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for _ in range(times):
            t0 = time.perf_counter()
            conn.execute("SELECT 1").fetchall()
            pg_ms.append((time.perf_counter() - t0) * 1000)
    return {"s3_get_ms": statistics.median(s3_ms), "pg_select_ms": statistics.median(pg_ms)}


# in-process counts (zarrlake) -----------------------------------------------------------------


def count_calls(obj: Any) -> Counter[str]:
    """Count every call of `obj`'s public methods (patched on the instance, so whoever
    holds `obj` is counted); returns the live counter."""
    calls: Counter[str] = Counter()
    for name in dir(type(obj)):
        if name.startswith("_") or name in ("close",):
            continue
        method = getattr(obj, name, None)
        if not callable(method):
            continue

        def counted(*args: Any, _name: str = name, _method: Any = method, **kw: Any) -> Any:
            calls[_name] += 1
            return _method(*args, **kw)

        setattr(obj, name, counted)
    return calls


# the workload ---------------------------------------------------------------------------------


def _one_commit(engine: Engine, k: int, message: str) -> tuple[float, float]:
    """Begin, open the array, write chunk k, commit: (whole ms, commit ms)."""
    t0 = time.perf_counter()
    array = zarr.open_array(engine.begin(), path=ARRAY)
    array[k] = chunk_value(k, W5_CHUNK)
    t1 = time.perf_counter()
    engine.commit(message)
    t2 = time.perf_counter()
    return (t2 - t0) * 1000, (t2 - t1) * 1000


def rt_count(engine: Engine, path: str, p: dict) -> dict:
    n, warm, nlat = p["rt_commits"], p["rt_warmup"], p["rt_latency_commits"]
    s3_ms, pg_ms = p["rt_s3_ms"], p["rt_pg_ms"]
    zl, pg = engine.name == ZARRLAKE, engine.uses_pg
    engine.create(path)
    new_array(engine.begin(), (warm + n + 1 + nlat, *W5_CHUNK), (1, *W5_CHUNK))
    engine.commit("create")
    engine.close()
    out: dict[str, Any] = {}
    per: dict[str, list[float]] = {}
    k = 0
    with relayed(engine) as relays:
        assert engine.remote is not None
        checks = check_relays(relays, engine.s3_endpoint, engine.pg_url, engine.remote["bucket"])
        out.update({f"check_{key}": v for key, v in checks.items()})
        engine.open(path)
        for _ in range(warm):  # connections, caches and prepared statements warm
            _one_commit(engine, k, "warm-up")
            engine.settle()
            k += 1
        for i in range(n):
            log = i == n - 1
            relays.start(log=log)
            array = zarr.open_array(engine.begin(), path=ARRAY)
            array[k] = chunk_value(k, W5_CHUNK)
            called = time.perf_counter()
            engine.commit(f"counted {k}")
            returned = time.perf_counter()
            engine.settle()  # work it left running in the background: counted apart
            window = relays.window()
            k += 1
            for key, v in {
                **_counts(split(window, hi=returned), "whole_", pg),
                **_counts(split(window, called, returned), "commit_", pg),
                **_counts(split(window, returned), "after_", pg),
            }.items():
                per.setdefault(key, []).append(v)
            if log:
                marks = {"commit called": called, "commit returned": returned}
                out["log_commit"] = format_log(add_marks(window, marks))
        if zl:  # the same commit counted in-process, to check what the S3 relay saw
            ctx = engine.repo._context
            store_calls, meta_calls = count_calls(ctx.object_store), count_calls(ctx.meta)
            relays.start()
            _one_commit(engine, k, "counted in-process")
            engine.settle()
            k += 1
            w = relays.window()
            out.update(
                inproc_store_calls=sum(store_calls.values()),
                inproc_meta_calls=sum(meta_calls.values()),
                inproc_relay_s3_requests=w["S3_requests"],
                inproc_relay_pg_requests=w["PG_requests"],
                inproc_detail=f"object store {dict(store_calls)}, metastore {dict(meta_calls)}",
            )
        bucket = engine.remote["bucket"]
        for key, v in measured_round_trips(engine.s3_endpoint, engine.pg_url, bucket).items():
            out[f"check_{key}"] = v
        relays.delay("S3", s3_ms / 2)
        relays.delay("PG", pg_ms / 2)
        for key, v in measured_round_trips(engine.s3_endpoint, engine.pg_url, bucket).items():
            out[f"check_lat_{key}"] = v
        whole, commit = [], []
        for _ in range(nlat):
            w_ms, c_ms = _one_commit(engine, k, "with latency")
            engine.settle()
            k += 1
            whole.append(w_ms)
            commit.append(c_ms)
        out.update(lat_whole_ms=statistics.median(whole), lat_commit_ms=statistics.median(commit))
    out.update({key: statistics.median(v) for key, v in per.items()})
    spawn = {**engine.spawn_params(), "index": k - 1, "expect_seed": k - 1}
    for prefix, extra in (("read_", {}), ("lat_read_", {"s3_ms": s3_ms, "pg_ms": pg_ms})):
        got = run_worker("S3RTread", engine.name, path, {**spawn, **extra})
        out.update({prefix + key: v for key, v in got.items() if not key.startswith("log")})
        if prefix == "read_":
            out["log_read"] = got.get("log", [])
    out["rss_mb"] = peak_rss_mb()
    return out


def rt_read(engine: Engine, path: str, p: dict) -> dict:
    """In a fresh process, through relays: open the repository, read one chunk."""
    index = p["index"]
    with relayed(engine, p.get("s3_ms", 0.0), p.get("pg_ms", 0.0)) as relays:
        relays.start(log=True)
        t0 = time.perf_counter()
        engine.open(path)
        got = zarr.open_array(engine.reader(), path=ARRAY, mode="r")[index]
        ms = (time.perf_counter() - t0) * 1000
        window = relays.window()
    if not np.array_equal(got, chunk_value(p["expect_seed"], W5_CHUNK)):
        raise AssertionError(f"read wrong data for row {index}")
    return {"ms": ms, **_counts(window, "", engine.uses_pg),
            "log": format_log(window["log"])}  # fmt: skip
