"""The markdown table of a benchmark run: medians (min-max) per engine, ratios of medians
to Icechunk, and whether zarrlake meets each target (benchmarks/targets.toml), followed by
the request logs of one S3PG (and S3BUCKET) commit and read when that group ran."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime
from typing import Any

from benchmarks.targets import ratio, rows, spark_rows

ZL, IC, ZR, FS, SPARK = "zarrlake", "icechunk", "zarr", "files", "spark"
COLUMNS = (ZL, IC, ZR, FS)


GROUP_NAMES = {
    "S3W5": "S3PG W5",
    "S3W6": "S3PG W6",
    "S3RT": "S3PG",
    "BKRT": "S3 bucket",
    "BKW6": "S3 bucket W6",
    "W5T": "W5 tmpfs",
    "W6T": "W6 tmpfs",
}
"""The first column of tables whose name is not their group's."""


def _group(table: str) -> str:
    """The first column: the workload, with S3PG's tables under one name."""
    return GROUP_NAMES.get(table, table)


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
        "target (issue 15's, or the issue its group names in the notes; targets marked (5) are "
        "issue 5's, (34) issue 34's, (50) issue 50's). S3PG rows: zarrlake on S3 + "
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
        ratios = [fmt(ratio(medians, c, IC)) for c in (ZL, ZR)]
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
    lines += request_logs(doc, "S3RT") + request_logs(doc, "BKRT")
    return "\n".join(lines) + "\n"


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
    for row in spark_rows():
        values = collect(records, row.metric)
        met = "-"
        if row.check is not None and values:
            met = "yes" if row.check(statistics.median(values)) else "**no**"
        lines.append(f"| {row.label} | {_cell(values, records)} | {row.target} | {met} |")
    return lines


def request_logs(doc: dict[str, Any], name: str) -> list[str]:
    """S3PG (table S3RT) or S3BUCKET (BKRT): the relays' logs of the last counted commit and
    of one read, per engine."""
    table = doc["results"].get(name, {})
    out: list[str] = []
    for engine in (ZL, IC):
        records = [r for r in table.get(engine, []) if "log_commit" in r]
        if not records:
            continue
        rec = records[-1]
        if not out:
            out += [
                "",
                f"#### {_group(name)}: the requests of one one-chunk commit and of one read",
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
        "group (zarrlake.testing.servers); zarrlake = s3://bucket/prefix + postgresql:// "
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
    out += doc.get("notes", [])
    if doc.get("failures"):
        out += ["", "Failures:", *(f"- {f.splitlines()[0]}" for f in doc["failures"])]
    return out
