"""zarrlake vs Icechunk vs plain zarr: runs the groups W1-W8, GC, S3PG and SPARK (and any
group module listed in GROUP_MODULES), writes bench-results/results.json and results.md,
and prints the table; with --record, appends the table to benchmarks/RESULTS.md.

Every workload runs in a fresh process (benchmarks/worker.py) and a fresh directory; for
each workload the engines alternate (A B C A B C ...) over the repetitions. Figures are
medians with min-max; ratios are of medians in this run. Targets: benchmarks/targets.toml.

    python -m benchmarks.run            # full sizes, 3 repetitions
    python -m benchmarks.run --quick    # small sizes, 1 repetition
    python -m benchmarks.run --only W1,W5 --reps 2
    python -m benchmarks.run --quick --only S3PG

S3PG starts moto's S3 server and a PostgreSQL server (zarrlake.testing.servers) for its own
duration and stops them by PID afterwards.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.groups import Group, Results, Step, run_group
from benchmarks.report import markdown_table

ZL, IC, ZR, FS, SPARK = "zarrlake", "icechunk", "zarr", "files", "spark"

FULL: dict[str, Any] = {
    "reps": 3,
    "w7_builds": 1,
    "w1_shape": [256, 512, 512],
    "w2_rows": 16384,
    "w5_commits": 300,
    "w5_window": 20,
    "w5_readers": 3,
    "w6_procs": 4,
    "w6_commits": 20,
    "w7_chunks": 200_000,
    "gc_garbage": 1000,
    "w8_shape": [256, 512, 512],
    "spark_t": 64,
    "spark_cells_t": 8,
    # S3PG (issue 15): W5 and W6 on moto's S3 server + PostgreSQL, and round-trip counts
    "s3_w5_commits": 100,
    "s3_w5_window": 20,
    "s3_w5_readers": 1,
    "s3_w6_commits": 20,
    "rt_warmup": 5,
    "rt_commits": 10,
    "rt_latency_commits": 5,
    "rt_s3_ms": 20.0,
    "rt_pg_ms": 1.0,
}
QUICK: dict[str, Any] = {
    **FULL,
    "reps": 1,
    "w1_shape": [64, 512, 512],
    "w2_rows": 2048,
    "w5_commits": 40,
    "w5_window": 10,
    "w5_readers": 1,
    "w6_commits": 5,
    "w7_chunks": 20_000,
    "w8_shape": [8, 512, 512],
    "spark_t": 8,
    "spark_cells_t": 2,
    "s3_w5_commits": 20,
    "s3_w5_window": 5,
    "s3_w6_commits": 5,
    "rt_warmup": 2,
    "rt_commits": 3,
    "rt_latency_commits": 3,
}


S3PG = {"backend": "s3pg"}  # engines.py: objects on S3, zarrlake's metastore on PostgreSQL


GROUP_MODULES: tuple[str, ...] = (
    "benchmarks.scale",
    "benchmarks.bucket",
    "benchmarks.virtual",
    "benchmarks.shard",
    "benchmarks.checks",
    "benchmarks.listing",
    "benchmarks.daily",
    "benchmarks.export",
    "benchmarks.chunk_check",
    "benchmarks.startup",
    "benchmarks.statistics",
)
"""Modules that add groups: each has `groups(cfg) -> list[Group]` and may have `SIZES`
({"full": {...}, "quick": {...}}, merged into the configuration) and `NOTE` (a line under
the table, {names} filled from the configuration). benchmarks/README.md."""


def plan(cfg: dict[str, Any]) -> list[Group]:
    """Every group of the run, the built-in ones first."""
    return builtin_groups(cfg) + [
        group for module in GROUP_MODULES for group in importlib.import_module(module).groups(cfg)
    ]


def module_notes(cfg: dict[str, Any], ran: set[str]) -> list[str]:
    """The `NOTE` of each group module one of whose groups ran."""
    out = []
    for name in GROUP_MODULES:
        module = importlib.import_module(name)
        note = getattr(module, "NOTE", None)
        if note and any(group.name in ran for group in module.groups(cfg)):
            out.append(note.format(**cfg))
    return out


def sizes(quick: bool) -> dict[str, Any]:
    """The configuration: built-in sizes, then each group module's."""
    cfg = dict(QUICK if quick else FULL)
    for module in GROUP_MODULES:
        extra = getattr(importlib.import_module(module), "SIZES", {})
        cfg.update(extra.get("quick" if quick else "full", {}))
    return cfg


def builtin_groups(cfg: dict[str, Any]) -> list[Group]:
    n7 = cfg["w7_chunks"]
    return [
        Group(
            "W1",
            [ZL, IC, ZR, FS],
            [Step("W1", "W1"), Step("W3", "W3"), Step("W4", "W4")],
        ),
        Group("W2", [ZL, IC, ZR, FS], [Step("W2", "W2")]),
        Group("W5", [ZL, IC, ZR], [Step("W5", "W5")]),
        Group("W6", [ZL, IC], [Step("W6", "W6")]),
        # issue 50: W5 and W6 again on tmpfs (/dev/shm), where the targets are
        Group("W5SHM", [ZL, IC, ZR], [Step("W5", "W5T")], tmpfs=True),
        Group("W6SHM", [ZL, IC], [Step("W6", "W6T")], tmpfs=True),
        Group(
            "W7",
            [ZL, IC],
            [
                Step("W7", "W7", "build."),
                Step("W7commit", "W7", "commit.", {"index": n7 // 2}),
                Step("W4", "W7", "read.", {"index": n7 // 3}),
            ],
            builds=cfg["w7_builds"],
        ),
        # issue 15: the many-machine deployment, zarrlake on S3 + PostgreSQL vs Icechunk on
        # the same S3 server (each step on a repository of its own: `loc`)
        Group(
            "S3PG",
            [ZL, IC],
            [
                Step(
                    "W5",
                    "S3W5",
                    params={
                        **S3PG,
                        "loc": "w5",
                        "w5_commits": cfg["s3_w5_commits"],
                        "w5_window": cfg["s3_w5_window"],
                        "w5_readers": cfg["s3_w5_readers"],
                    },
                ),
                Step(
                    "W6", "S3W6", params={**S3PG, "loc": "w6", "w6_commits": cfg["s3_w6_commits"]}
                ),
                Step("S3RT", "S3RT", params={**S3PG, "loc": "rt"}),
            ],
            servers=True,
        ),
        # issue 12: gc on a W7 build, zarrlake incremental and full against Icechunk's gc
        Group(
            "GC",
            [ZL, IC],
            [Step("W7", "GC", "build."), Step("GC", "GC", "gc.")],
            builds=cfg["w7_builds"],
        ),
        Group("W8", [SPARK, ZR], [Step("W8", "W8", params={"w1_shape": cfg["w8_shape"]})]),
        # issue 10: one local[2] application, plain zarr from the same process as reference
        Group("SPARK", [SPARK], [Step("SPARK", "SPARK")]),
    ]


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for mod in ("zarrlake", "icechunk", "zarr", "numpy", "pyspark"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": load,
        "versions": versions,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 repetition")
    ap.add_argument("--reps", type=int, help="repetitions (default 3, quick 1)")
    ap.add_argument("--only", help="comma-separated workload groups, e.g. W1,W5")
    ap.add_argument("--out", default="bench-results", help="output directory")
    ap.add_argument("--record", metavar="TITLE", help="append the table to benchmarks/RESULTS.md")
    args = ap.parse_args()
    cfg = sizes(args.quick)
    if args.reps:
        cfg["reps"] = args.reps
    cfg["w7_builds"] = min(cfg["w7_builds"], cfg["reps"])
    only = set(args.only.upper().split(",")) if args.only else None
    out = Path(args.out).resolve()
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    info = machine()
    print(f"zarrlake benchmarks ({'quick' if args.quick else 'full'}): {info}", flush=True)
    results: Results = {}
    log: list[str] = []
    ran: set[str] = set()
    t0 = time.monotonic()
    for group in plan(cfg):
        if only is None or group.name in only:
            run_group(group, cfg, work, results, log)
            ran.add(group.name)
    elapsed = time.monotonic() - t0
    shutil.rmtree(work, ignore_errors=True)
    info["loadavg_at_end"] = os.getloadavg()
    doc = {
        "mode": "quick" if args.quick else "full",
        "config": cfg,
        "machine": info,
        "elapsed_s": elapsed,
        "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.run", *sys.argv[1:]]),
        "failures": log,
        "notes": module_notes(cfg, ran),
        "results": results,
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    table = markdown_table(doc)
    (out / "results.md").write_text(table)
    print()
    print(table)
    print(f"wrote {out / 'results.json'} and {out / 'results.md'} in {elapsed:.0f}s")
    if args.record:
        record(args.record, table)


RESULTS_MD = Path(__file__).resolve().with_name("RESULTS.md")


def record(title: str, table: str) -> None:
    """Append a run's table to benchmarks/RESULTS.md under a dated heading."""
    heading = f"## {datetime.now(UTC):%Y-%m-%d}: {title}"
    body = table.replace("\n### ", "\n#### ").removeprefix("### ")
    with RESULTS_MD.open("a") as f:
        f.write(f"\n{heading}\n\n### {body}")
    print(f"appended to {RESULTS_MD}")


if __name__ == "__main__":
    main()
