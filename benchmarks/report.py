"""The markdown table of a benchmark run: medians (min-max) per engine, ratios of medians
to Icechunk, and whether zarrlake meets each target of issue 5."""

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


def rows(cfg: dict[str, Any]) -> list[Row]:
    n5, w = cfg["w5_commits"], cfg["w5_window"]
    early, late = f"{1}-{w}", f"{n5 - w + 1}-{n5}"
    n7 = f"{cfg['w7_chunks']:,}"
    ng = f"{cfg.get('gc_garbage', 1000):,}"
    return [
        Row("W1", "ingest-large, write all + commit (MB/s)", "mb_s", ">= 1.1x IC", at_least(1.1)),
        Row("W2", "ingest-small (chunks/s)", "chunks_s", ">= 1.5x IC", at_least(1.5)),
        Row("W2", "ingest-small, peak RSS (MB)", "rss_mb"),
        Row(
            "W3",
            "read-full, new process (MB/s)",
            "mb_s",
            ">= 1.5x IC and >= 0.9x zarr",
            lambda m, v: at_least(1.5)(m, v) and at_least(0.9, ZR)(m, v),
        ),
        Row("W4", "first-byte: open + read 1 chunk (ms)", "ms", "<= 0.7x IC", at_most(0.7)),
        Row("W5", f"commit latency, commits {early} (ms)", "commit_early_ms", "<= IC", at_most(1)),
        Row("W5", f"commit latency, commits {late} (ms)", "commit_late_ms", "<= IC", at_most(1)),
        Row("W5", "commit latency, late / early", "commit_late_early", "<= 1.1", below(1.1)),
        Row("W5", f"session + write + commit, commits {early} (ms)", "total_early_ms"),
        Row("W5", f"session + write + commit, commits {late} (ms)", "total_late_ms"),
        Row("W5", "open + read 1 chunk after commit 1 (ms)", "read_first_ms"),
        Row("W5", f"open + read 1 chunk after commit {n5} (ms)", "read_last_ms"),
        Row("W5", "open + read, late / early", "read_late_early", "<= 1.1", below(1.1)),
        Row("W6", "wall time (s)", "wall_s"),
        Row("W6", "commits/s", "commits_s", ">= 2x IC", at_least(2)),
        Row("W6", "lost writes (fresh reader at head)", "lost_writes", "0", zero_always),
        Row("W6", "acknowledged commits missing from log", "missing_commits", "0", zero_always),
        Row("W6", "retries after a conflict", "retries"),
        Row("W6", "commits given up", "gave_up"),
        Row("W7", f"build: {n7} chunks written + committed (chunks/s)", "build.build_chunks_s"),
        Row("W7", "build: the commit itself (s)", "build.build_commit_s"),
        Row("W7", "one-chunk commit (ms)", "commit.commit_ms", "<= 1/15 IC", at_most(1 / 15)),
        Row("W7", "open + write 1 chunk + commit (ms)", "commit.total_ms"),
        Row("W7", "new process: open + read 1 chunk (ms)", "read.ms", "<= 1/8 IC", at_most(1 / 8)),
        Row("W7", "peak RSS, build process (MB)", "build.rss_mb"),
        Row("W7", "peak RSS, one-chunk-commit process (MB)", "commit.rss_mb"),
        Row("W7", "peak RSS, reader process (MB)", "read.rss_mb"),
        Row("W7", "peak RSS, max of the three (MB)", _peak_rss, "<= IC", at_most(1)),
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


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or abs(x) >= 100:
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
        "Medians (min-max over repetitions). Ratios are of medians; Met = zarrlake meets the "
        "issue-5 target.",
        "",
        "| | Metric | zarrlake | Icechunk | zarr | files | zarrlake / IC | zarr / IC "
        "| Target | Met |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows(cfg):
        table = results.get(row.table)
        if not table:
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
            f"| {row.table} | {row.label} | " + " | ".join(cells) + " | "
            f"{' | '.join(ratios)} | {row.target} | {met} |"
        )
    if not any(results.get(row.table) for row in rows(cfg)):
        del lines[-4:]  # only the Spark section ran: no issue-5 table
    lines += spark_table(doc)
    lines += ["", *notes(doc)]
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
        "W8: DataFrame rows (t, y, x, a) generated per chunk by mapInArrow on the executors "
        "(chunk-aligned partitions), written with df.write.format('zarrlake'); plain zarr "
        "writes the same data from the driver. Spark start-up is not timed.",
    ]
    if doc.get("failures"):
        out += ["", "Failures:", *(f"- {f.splitlines()[0]}" for f in doc["failures"])]
    return out
