"""The markdown table of a benchmark run: medians (min-max) per engine, ratios of medians
to Icechunk, and whether zarrlake meets each target of issue 15 (a few kept from issue 5),
followed by the request logs of one S3PG commit and read when that group ran."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

ZL, IC, ZR, FS, SPARK = "zarrlake", "icechunk", "zarr", "files", "spark"
COLUMNS = (ZL, IC, ZR, FS)

Medians = dict[str, float]
Values = dict[str, list[float]]


@dataclass
class Row:
    table: str
    label: str
    metric: str | Callable[[dict[str, Any]], float | None]
    target: str = ""
    check: Callable[[Medians, Values], bool] | None = None
    always: bool = False  # issue 15's table: shown as "not run" when its workload did not run


def _ratio(m: Medians, a: str, b: str) -> float | None:
    if a in m and b in m and m[b]:
        return m[a] / m[b]
    return None


def at_least(factor: float, of: str = IC) -> Callable[[Medians, Values], bool]:
    return lambda m, _: (r := _ratio(m, ZL, of)) is not None and r >= factor


def at_most(factor: float, of: str = IC) -> Callable[[Medians, Values], bool]:
    return lambda m, _: (r := _ratio(m, ZL, of)) is not None and r <= factor


def below(limit: float) -> Callable[[Medians, Values], bool]:
    return lambda m, _: ZL in m and m[ZL] <= limit


def zero_always(_: Medians, v: Values) -> bool:
    return bool(v.get(ZL)) and max(v[ZL]) == 0


def _peak_rss(rec: dict[str, Any]) -> float | None:
    """Largest of W7's three processes, in repetitions that built the array."""
    if "build.rss_mb" not in rec:
        return None
    return max(rec.get(k, 0.0) for k in ("build.rss_mb", "commit.rss_mb", "read.rss_mb"))


def _mib(key: str, built: bool = False) -> Callable[[dict[str, Any]], float | None]:
    """Bytes figure `key` in MiB; with `built`, only from repetitions that built the array."""

    def get(rec: dict[str, Any]) -> float | None:
        if key not in rec or (built and "build.build_s" not in rec):
            return None
        return rec[key] / 2**20

    return get


def _sum(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    """The sum of the figures `keys` (missing ones count 0; None if the first is missing)."""

    def get(rec: dict[str, Any]) -> float | None:
        if keys[0] not in rec:
            return None
        return float(sum(rec.get(k, 0) for k in keys))

    return get


def _first(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    """The first of the figures `keys` the record has."""
    return lambda rec: next((rec[k] for k in keys if k in rec), None)


def _minus(a: str, b: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda rec: rec[a] - rec[b] if a in rec and b in rec else None


def _relay_minus_inproc(rec: dict[str, Any]) -> float | None:
    if "inproc_store_calls" not in rec:
        return None
    return rec["inproc_relay_s3_requests"] - rec["inproc_store_calls"]


def fewer() -> Callable[[Medians, Values], bool]:
    return lambda m, _: (r := _ratio(m, ZL, IC)) is not None and r < 1


def both(*checks: Callable[[Medians, Values], bool]) -> Callable[[Medians, Values], bool]:
    return lambda m, v: all(c(m, v) for c in checks)


def rows(cfg: dict[str, Any]) -> list[Row]:
    """Rows with `always` are issue 15's table: printed, as "not run", even when their
    workload did not run. Targets are issue 15's; "(5)" marks one kept from issue 5."""
    n5, w = cfg["w5_commits"], cfg["w5_window"]
    early, late = f"{1}-{w}", f"{n5 - w + 1}-{n5}"
    n7 = f"{cfg['w7_chunks']:,}"
    ng = f"{cfg.get('gc_garbage', 1000):,}"
    n1, n2 = cfg["w1_shape"][0], f"{cfg['w2_rows']:,}"
    w6 = f"{cfg['w6_procs']} processes x {cfg['w6_commits']} commits"
    s5, sw = cfg.get("s3_w5_commits", 0), cfg.get("s3_w5_window", 0)
    s_early, s_late = f"{1}-{sw}", f"{s5 - sw + 1}-{s5}"
    s6 = f"{cfg['w6_procs']} processes x {cfg.get('s3_w6_commits', 0)} commits"
    lat = f"{cfg.get('rt_s3_ms', 20):g} ms per S3 / {cfg.get('rt_pg_ms', 1):g} ms per PG round trip"
    whole, call = "begin + open array + write 1 chunk + commit", "the commit call alone"
    out = [
        Row(
            "W1",
            f"ingest {n1} x 1 MiB chunks, write all + commit (MB/s)",
            "mb_s",
            ">= 1.2x IC and >= 0.95x zarr",
            both(at_least(1.2), at_least(0.95, ZR)),
            True,
        ),
        Row(
            "W2",
            f"ingest {n2} x 1 KiB chunks (chunks/s)",
            "chunks_s",
            ">= 2x IC",
            at_least(2),
            True,
        ),
        Row("W2", "ingest-small, peak RSS (MB)", "rss_mb"),
        Row(
            "W3",
            "read all in a new process (MB/s)",
            "mb_s",
            ">= 1.8x IC and >= 0.95x zarr",
            both(at_least(1.8), at_least(0.95, ZR)),
            True,
        ),
        Row("W4", "open -> first chunk, new process (ms)", "ms", "<= 0.5x IC", at_most(0.5), True),
        Row(
            "W5",
            f"one-chunk commit, commits {early} (ms)",
            "commit_early_ms",
            "<= 0.6x IC",
            at_most(0.6),
            True,
        ),
        Row(
            "W5",
            f"one-chunk commit, commits {late} (ms)",
            "commit_late_ms",
            "<= 0.6x IC",
            at_most(0.6),
            True,
        ),
        Row("W5", "commit latency, late / early", "commit_late_early", "<= 1.1 (5)", below(1.1)),
        Row("W5", f"session + write + commit, commits {early} (ms)", "total_early_ms"),
        Row("W5", f"session + write + commit, commits {late} (ms)", "total_late_ms"),
        Row(
            "W5",
            "open + read one chunk after commit 1, new process (ms)",
            "read_first_ms",
            "<= 0.7x IC",
            at_most(0.7),
            True,
        ),
        Row(
            "W5",
            f"open + read one chunk after commit {n5}, new process (ms)",
            "read_last_ms",
            "<= 0.7x IC",
            at_most(0.7),
            True,
        ),
        Row("W5", "open + read, late / early", "read_late_early", "<= 1.1 (5)", below(1.1)),
        Row("W6", "wall time (s)", "wall_s"),
        Row("W6", f"{w6} (commits/s)", "commits_s", ">= 2x IC", at_least(2), True),
        Row("W6", "lost writes (fresh reader at head)", "lost_writes", "0", zero_always, True),
        Row("W6", "acknowledged commits missing from log", "missing_commits", "0", zero_always),
        Row("W6", "retries after a conflict", "retries"),
        Row("W6", "commits given up", "gave_up"),
        Row("W7", f"build: {n7} chunks written + committed (chunks/s)", "build.build_chunks_s"),
        Row("W7", "build: the commit itself (s)", "build.build_commit_s"),
        Row("W7", "one-chunk commit (ms)", "commit.commit_ms", "<= 1/15 IC (5)", at_most(1 / 15)),
        Row("W7", "open + write 1 chunk + commit (ms)", "commit.total_ms"),
        Row(
            "W7",
            f"open + read one chunk of {n7}, new process (ms)",
            "read.ms",
            "<= 0.05x IC",
            at_most(0.05),
            True,
        ),
        Row("W7", "peak RSS, build process (MB)", "build.rss_mb"),
        Row("W7", "peak RSS, one-chunk-commit process (MB)", "commit.rss_mb"),
        Row("W7", "peak RSS, reader process (MB)", "read.rss_mb"),
        Row("W7", "peak RSS, max of the three (MB)", _peak_rss, "<= IC (5)", at_most(1)),
        # issue 15: zarrlake on S3 + PostgreSQL, Icechunk on the same S3 server
        Row(
            "S3W5",
            f"S3+PG: one-chunk commit, commits {s_early} (ms)",
            "commit_early_ms",
            "<= 0.6x IC",
            at_most(0.6),
            True,
        ),
        Row(
            "S3W5",
            f"S3+PG: one-chunk commit, commits {s_late} (ms)",
            "commit_late_ms",
            "<= 0.6x IC",
            at_most(0.6),
            True,
        ),
        Row("S3W5", f"S3+PG: session + write + commit, commits {s_late} (ms)", "total_late_ms"),
        Row(
            "S3W5",
            f"S3+PG: open + read one chunk after commit {s5}, new process (ms)",
            "read_last_ms",
            "<= 0.7x IC",
            at_most(0.7),
            True,
        ),
        Row("S3W6", f"S3+PG: {s6} (commits/s)", "commits_s", ">= 2x IC", at_least(2), True),
        Row(
            "S3W6",
            "S3+PG: lost writes (fresh reader at head)",
            "lost_writes",
            "0",
            zero_always,
            True,
        ),
        Row("S3W6", "S3+PG: retries after a conflict", "retries"),
    ]
    for what, p in ((whole, "whole_"), (call, "commit_")):
        out += [
            Row("S3RT", f"{what}: S3 requests", p + "s3_requests", always=True),
            Row("S3RT", f"{what}: S3 sequential round trips", p + "s3_rounds", always=True),
            Row("S3RT", f"{what}: PostgreSQL round trips", p + "pg_rounds", always=True),
            Row(
                "S3RT",
                f"{what}: S3 + PG sequential round trips",
                _sum(p + "s3_rounds", p + "pg_rounds"),
                "< IC",
                fewer(),
                True,
            ),
            Row(
                "S3RT",
                f"{what}: S3 + PG round trips, overlapping ones once",
                _first(p + "all_rounds", p + "s3_rounds"),
            ),
        ]
    out += [
        Row("S3RT", "after the commit returns, in the background: PG round trips",
            "after_pg_rounds"),
        Row("S3RT", "after the commit returns, in the background: S3 requests",
            "after_s3_requests"),
        Row("S3RT", f"one-chunk commit, {whole}, with {lat} (ms)", "lat_whole_ms",
            always=True),
        Row("S3RT", f"one-chunk commit, {call}, with {lat} (ms)", "lat_commit_ms",
            always=True),
        Row("S3RT", "open + read one chunk, new process: S3 requests", "read_s3_requests",
            always=True),
        Row("S3RT", "open + read one chunk, new process: S3 sequential round trips",
            "read_s3_rounds", always=True),
        Row("S3RT", "open + read one chunk, new process: PostgreSQL round trips",
            "read_pg_rounds", always=True),
        Row("S3RT", "open + read one chunk, new process: PostgreSQL connections opened",
            "read_pg_connections"),
        Row("S3RT", "open + read one chunk, new process: S3 + PG sequential round trips",
            _sum("read_s3_rounds", "read_pg_rounds"), "< IC", fewer()),
        Row("S3RT", f"open + read one chunk, new process, with {lat} (ms)", "lat_read_ms",
            always=True),
        Row("S3RT", "check: zarrlake object-store calls per commit, in-process",
            "inproc_store_calls"),
        Row("S3RT", "check: zarrlake metastore calls per commit, in-process",
            "inproc_meta_calls"),
        Row("S3RT", "check: PG requests the relay saw for those metastore calls",
            "inproc_relay_pg_requests"),
        Row("S3RT", "check: S3 requests relayed - object-store calls in-process",
            _relay_minus_inproc, "0", zero_always),
        Row("S3RT", "check: round-trip time the S3 relay adds, measured on a GET (ms)",
            _minus("check_lat_s3_get_ms", "check_s3_get_ms")),
        Row("S3RT", "check: round-trip time the PG relay adds, measured on SELECT 1 (ms)",
            _minus("check_lat_pg_select_ms", "check_pg_select_ms")),
    ]  # fmt: skip
    out += [
        Row("GC", f"incremental gc deleting {ng} known garbage chunks (s)", "gc.gc_incremental_s"),
        Row("GC", f"full gc (lists every object) deleting {ng} chunks (s)", "gc.gc_full_s"),
        Row("GC", "full / incremental", "gc.full_over_incremental"),
        Row("GC", "first gc after the build, vacuums the metastore (s)", "gc.first_gc_s"),
        Row(
            "GC",
            f"bytes on disk after the {n7}-chunk build (MiB)",
            _mib("gc.bytes_before_gc", True),
        ),
        Row(
            "GC",
            "bytes on disk after gc (MiB)",
            _mib("gc.bytes_after_gc"),
            "<= 1.5x IC",
            at_most(1.5),
        ),
        Row(
            "W8",
            "W1 array: Spark local[2] via data source [zarrlake col.] vs driver zarr (MB/s)",
            "mb_s",
            "Spark time <= 1.5x zarr",
            lambda m, _: ZL in m and ZR in m and m[ZR] / m[ZL] <= 1.5,
        ),
    ]
    return out


def _group(table: str) -> str:
    """The first column: the workload, with S3PG's tables under one name."""
    return {"S3W5": "S3PG W5", "S3W6": "S3PG W6", "S3RT": "S3PG"}.get(table, table)


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or abs(x) >= 100 or float(x).is_integer():
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if abs(x) >= 0.01 else f"{x:.2g}"


def collect(records: list[dict[str, Any]], metric: Any) -> list[float]:
    out = []
    for rec in records:
        value = metric(rec) if callable(metric) else rec.get(metric)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _cell(values: list[float], records: list[dict[str, Any]]) -> str:
    if not values:
        if any(r.get("available") is False for r in records):
            return "not available"
        if any(k.endswith("error") for r in records for k in r):
            return "error"
        return ""
    med = statistics.median(values)
    if len(values) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(min(values))}-{fmt(max(values))})"


def markdown_table(doc: dict[str, Any]) -> str:
    cfg, results, mach = doc["config"], doc["results"], doc["machine"]
    lines = [
        f"### zarrlake benchmarks ({doc['mode']}, {cfg['reps']} repetition(s))",
        "",
        f"Machine: {mach['nproc']} CPUs, {mach['cpu']}; Python {mach['python']}; "
        + ", ".join(f"{k} {v}" for k, v in mach["versions"].items() if v)
        + f"; load average at start {_load(mach.get('loadavg_at_start'))}, "
        f"at end {_load(mach.get('loadavg_at_end'))}.",
        f"Command: `{doc['command']}`; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
        f"{doc['elapsed_s'] / 60:.1f} min.",
        "",
    ]
    header = len(lines)
    lines += [
        "Medians (min-max over repetitions). Ratios are of medians; Met = zarrlake meets the "
        "issue-15 target (targets marked (5) are issue 5's). S3PG rows: zarrlake on S3 + "
        "PostgreSQL, Icechunk on the same S3 server; counts are per one-chunk commit.",
        "",
        "| | Metric | zarrlake | Icechunk | zarr | files | zarrlake / IC | zarr / IC "
        "| Target | Met |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows(cfg):
        table = results.get(row.table)
        if not table:
            if row.always:
                cells = " | ".join(["not run", "not run", "", ""])
                lines.append(
                    f"| {_group(row.table)} | {row.label} | {cells} | - | - | {row.target} "
                    "| not run |"
                )
            continue
        per = {
            col: table.get(SPARK if row.table == "W8" and col == ZL else col, []) for col in COLUMNS
        }
        values = {c: collect(r, row.metric) for c, r in per.items()}
        medians = {c: statistics.median(v) for c, v in values.items() if v}
        cells = [_cell(values[c], per[c]) for c in COLUMNS]
        ratios = [fmt(_ratio(medians, c, IC)) for c in (ZL, ZR)]
        met = "-"
        if row.check is not None and medians.get(ZL) is not None:
            met = "yes" if row.check(medians, values) else "**no**"
        lines.append(
            f"| {_group(row.table)} | {row.label} | " + " | ".join(cells) + " | "
            f"{' | '.join(ratios)} | {row.target} | {met} |"
        )
    if not any(results.get(row.table) for row in rows(cfg)):
        del lines[header:]  # only the Spark section ran: no W1-W8 table
    lines += spark_table(doc)
    lines += ["", *notes(doc)]
    lines += request_logs(doc)
    return "\n".join(lines) + "\n"


SPARK_ROWS = [
    # (label, metric, target text, check of the median)
    ("plain zarr, one process, a[t] = plane (MB/s)", "zarr_mb_s", "reference", None),
    ("map_regions, one task per chunk, one commit (MB/s)", "map_regions_mb_s", "", None),
    ("map_regions / plain zarr", "map_regions_vs_zarr", ">= 1.3", lambda v: v >= 1.3),
    ('layout "chunks" write, one commit (MB/s)', "chunks_write_mb_s", "", None),
    ('layout "chunks" write / plain zarr', "chunks_write_vs_zarr", ">= 1.3", lambda v: v >= 1.3),
    ('layout "chunks" read, all values (MB/s)', "chunks_read_mb_s", "", None),
    ('layout "chunks", values "binary": write (MB/s)', "chunks_bin_write_mb_s", "", None),
    (
        'layout "chunks", values "binary": write / plain zarr',
        "chunks_bin_write_vs_zarr",
        ">= 1.3",
        lambda v: v >= 1.3,
    ),
    ('layout "chunks", values "binary": read (MB/s)', "chunks_bin_read_mb_s", "", None),
    (
        "Spark alone: cell rows JVM -> Python Arrow (M rows/s)",
        "cells_transfer_mrows_s",
        "ceiling",
        None,
    ),
    ("cell-row write, df.write (M rows/s)", "cells_write_mrows_s", ">= 5", lambda v: v >= 5),
    ("cell-row read + sum (M rows/s)", "cells_read_sum_mrows_s", ">= 10", lambda v: v >= 10),
    ("join the job's session, warm worker (ms)", "join_ms", "<= 5", lambda v: v <= 5),
]


def spark_table(doc: dict[str, Any]) -> list[str]:
    """Issue 10: Spark local[2] at real sizes against plain zarr in the same process."""
    records = doc["results"].get("SPARK", {}).get(SPARK, [])
    if not records:
        return []
    cfg = doc["config"]
    lines = [
        "",
        f"#### Spark, local[2]: {cfg['spark_t']}x1024x1024 float32 "
        f"({cfg['spark_t'] * 4} MiB), chunks (1, 1024, 1024); "
        f"{cfg['spark_cells_t'] * 1024 * 1024:,} cell rows",
        "",
        "| Metric | Median (min-max) | Target (issue 10) | Met |",
        "|---|---:|---|---|",
    ]
    for label, metric, target, check in SPARK_ROWS:
        values = collect(records, metric)
        met = "-"
        if check is not None and values:
            met = "yes" if check(statistics.median(values)) else "**no**"
        lines.append(f"| {label} | {_cell(values, records)} | {target} | {met} |")
    return lines


def request_logs(doc: dict[str, Any]) -> list[str]:
    """S3PG: the relays' logs of the last counted commit and of one read, per engine."""
    table = doc["results"].get("S3RT", {})
    out: list[str] = []
    for engine in (ZL, IC):
        records = [r for r in table.get(engine, []) if "log_commit" in r]
        if not records:
            continue
        rec = records[-1]
        if not out:
            out += [
                "",
                "#### S3PG: the requests of one one-chunk commit and of one read",
                "",
                "From the relays (benchmarks/relay.py), last repetition: time since the window "
                "opened, round (* = a new sequential round trip; S3 and PG together), relay, "
                "connection, request -> reply (time to the reply's first byte). moto's server "
                "closes every connection after its reply, so each S3 request shows a new one.",
            ]
        out += ["", f"{engine}: begin + open array + write 1 chunk + commit", "", "```"]
        out += [*rec["log_commit"], "```"]
        if rec.get("inproc_detail"):
            out += [
                "",
                f"{engine}: calls counted in-process for one commit: {rec['inproc_detail']}",
            ]
        out += ["", f"{engine}: open + read 1 chunk in a new process", "", "```"]
        out += [*rec.get("log_read", []), "```"]
    return out


def _load(load: Any) -> str:
    return "/".join(f"{x:.1f}" for x in load) if load else "?"


def notes(doc: dict[str, Any]) -> list[str]:
    cfg = doc["config"]
    w1 = "x".join(map(str, cfg["w1_shape"]))
    out = [
        "Sizes: "
        f"W1/W3/W4 ({w1}) float32, chunks (1, {cfg['w1_shape'][1]}, {cfg['w1_shape'][2]}); "
        f"W2 ({cfg['w2_rows']}, 256), 1 KiB chunks; W5 {cfg['w5_commits']} one-chunk commits "
        f"of 16 KiB, open + read = median of {cfg['w5_readers']} fresh reader process(es); "
        f"W6 {cfg['w6_procs']} processes x {cfg['w6_commits']} one-chunk commits; "
        f"W7 {cfg['w7_chunks']:,} chunks of 1 KiB; W8 "
        f"({'x'.join(map(str, cfg['w8_shape']))}).",
    ]
    if doc["mode"] == "quick":
        out.append(
            f"**QUICK run**: smaller sizes, {cfg['reps']} repetition(s); not comparable with "
            "the issue's full-size figures."
        )
    out += [
        "Engines: zarrlake = local directory + SQLite (Repo.create(path)); Icechunk = "
        "local_filesystem_storage; zarr = zarr.storage.LocalStore (no commit); files = one raw "
        "file per chunk, no codec (W1-W4 only).",
        f"W7: the {cfg['w7_chunks']:,}-chunk array is built {cfg['w7_builds']} time(s) per "
        "engine (chunks pre-encoded with zarr's default codecs, bytes + zstd level 0, and "
        "handed to the engine's zarr store with store.set); the one-chunk commit and the "
        "reader then run in fresh processes each repetition.",
        "W6: zarrlake writers start again from the branch head on ConflictError; Icechunk "
        "writers commit with rebase_with=ConflictDetector() (its documented way for "
        "concurrent writers) and start again from the head if that still fails. Lost writes "
        "are acknowledged chunks a fresh reader at the head does not see.",
        "GC (issue 12): on a fresh W7 build; zarrlake runs a first gc (vacuums the metastore "
        "the build staged into), then an incremental gc deleting the chunks of an expired "
        "session (known to the metastore), then a full gc (full=True, lists every object) "
        "deleting as many chunks nobody recorded; Icechunk has one gc, which lists every "
        "chunk: garbage_collect(now) deleting the chunks of a dropped session. Its time is in "
        "both gc rows. Bytes on disk are after all gcs, for both.",
        "S3PG (issue 15): moto's S3 server and PostgreSQL 15 on 127.0.0.1, started for the "
        "group (benchmarks/servers.py); zarrlake = s3://bucket/prefix + postgresql:// "
        "metastore (a database per repository); Icechunk = s3_storage on the same server. W5 "
        f"{cfg.get('s3_w5_commits')} one-chunk commits, W6 {cfg['w6_procs']} processes x "
        f"{cfg.get('s3_w6_commits')} commits, straight to the servers. Requests and round "
        "trips are counted by a TCP relay in front of each server (benchmarks/relay.py): a "
        "request is a client send that follows a server reply (or opens a connection); a "
        "request that starts while no other is waiting for its reply opens a new sequential "
        "round trip; median over "
        f"{cfg.get('rt_commits')} one-chunk commits after {cfg.get('rt_warmup')} warm-up ones, "
        "with the repository open and the array created. Work an engine leaves running after "
        "the commit returns is counted apart (background). With latency, the relays delay "
        "every byte by half the round trip each way (connection set-up is not charged: real "
        "S3 keeps connections open, moto closes them). The relays are checked against known "
        "traffic each run, and zarrlake's S3 requests against its object-store calls counted "
        "in-process.",
        "W8: DataFrame rows (t, y, x, a) generated per chunk by mapInArrow on the executors "
        "(chunk-aligned partitions), written with df.write.format('zarrlake'); plain zarr "
        "writes the same data from the driver. Spark start-up is not timed.",
    ]
    if doc.get("failures"):
        out += ["", "Failures:", *(f"- {f.splitlines()[0]}" for f in doc["failures"])]
    return out
