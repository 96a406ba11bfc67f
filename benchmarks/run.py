"""zarrlake vs Icechunk vs plain zarr (issues 5 and 15): runs W1-W8, GC (issue 12) and
S3PG (issue 15: W5, W6 and request / round-trip counts on a local S3 server with PostgreSQL),
writes bench-results/results.json and results.md, and prints the table.

Every workload runs in a fresh process (benchmarks/worker.py) and a fresh directory; for
each workload the engines alternate (A B C A B C ...) over the repetitions. Figures are
medians with min-max; ratios are of medians in this run.

    python benchmarks/run.py            # full sizes, 3 repetitions
    python benchmarks/run.py --quick    # small sizes, 1 repetition (under 3 minutes)
    python benchmarks/run.py --only W1,W5 --reps 2
    python benchmarks/run.py --quick --only S3PG

S3PG starts moto's S3 server and a PostgreSQL server (benchmarks/servers.py) for its own
duration and stops them by PID afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from procs import WorkerFailed, run_worker
from report import markdown_table
from servers import remote_servers

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


@dataclass
class Step:
    """One worker process of a workload: its results go to `table` under `prefix`."""

    worker: str
    table: str
    prefix: str = ""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Group:
    """Workers that share one fresh directory per engine and repetition (e.g. W3 reads
    what W1 wrote)."""

    name: str
    engines: list[str]
    steps: list[Step]
    builds: int | None = None  # None: a fresh build per repetition
    servers: bool = False  # runs against S3 + PostgreSQL servers started for the group


S3PG = {"backend": "s3pg"}  # engines.py: objects on S3, zarrlake's metastore on PostgreSQL


def plan(cfg: dict[str, Any]) -> list[Group]:
    n7 = cfg["w7_chunks"]
    return [
        Group(
            "W1",
            [ZL, IC, ZR, FS],
            [Step("W1", "W1"), Step("W3", "W3"), Step("W4", "W4")],
        ),
        Group("W2", [ZL, IC, ZR, FS], [Step("W2", "W2")]),
        Group("W5", [ZL, IC], [Step("W5", "W5")]),
        Group("W6", [ZL, IC], [Step("W6", "W6")]),
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


def run_group(group: Group, cfg: dict[str, Any], work: Path, results: dict, log: list[str]) -> None:
    """All repetitions of one workload group, engines alternating. A group with `builds`
    builds its repository that many times and repeats only the later steps on it."""
    if group.servers:
        try:
            with remote_servers() as remote:
                port = remote["pg_url"].rsplit(":", 1)[1].split("/")[0]
                print(f"{group.name}: S3 {remote['s3_endpoint']}, PG port {port}", flush=True)
                _run_reps(group, {**cfg, "remote": remote}, work, results, log)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # tests/fixtures fail with pytest's Failed (a BaseException)
            msg = f"{group.name}: FAILED, servers: {str(e).strip()[:500]}"
            print(msg, flush=True)
            log.append(msg)
    else:
        _run_reps(group, cfg, work, results, log)
    for path in work.glob(f"{group.name}-*"):
        shutil.rmtree(path, ignore_errors=True)


def _run_reps(group: Group, cfg: dict[str, Any], work: Path, results: dict, log: list[str]) -> None:
    reps = cfg["reps"]
    builds = group.builds or reps
    for rep in range(reps):
        for engine in group.engines:
            path = work / f"{group.name}-{engine}-{rep % builds}"
            fresh = rep < builds
            if fresh:
                shutil.rmtree(path, ignore_errors=True)
            steps = [s for s in group.steps if fresh or s.prefix != "build."]
            records: dict[str, dict[str, Any]] = {}
            for step in steps:
                t0 = time.monotonic()
                try:
                    out = run_worker(step.worker, engine, str(path), {**cfg, **step.params})
                except (WorkerFailed, subprocess.TimeoutExpired) as e:
                    msg = f"{group.name} rep {rep + 1} {engine} {step.worker}: FAILED {e}"
                    print(msg, flush=True)
                    log.append(msg)
                    out = {"error": str(e).strip().splitlines()[-1][:300]}
                tag = f"{group.name} rep {rep + 1}/{reps} {engine:<8} {step.worker:<8}"
                print(f"{tag} {time.monotonic() - t0:6.1f}s  {_brief(out)}", flush=True)
                record = records.setdefault(step.table, {})
                record.update({step.prefix + k: v for k, v in out.items()})
                if "error" in out:
                    break
            for table, record in records.items():
                results.setdefault(table, {}).setdefault(engine, []).append(record)
            if group.builds is None:
                shutil.rmtree(path, ignore_errors=True)


def _brief(out: dict[str, Any]) -> str:
    items = [
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in out.items()
        if not isinstance(v, list | dict)  # request logs
    ]
    return " ".join(items)[:160]


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
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    if args.reps:
        cfg["reps"] = args.reps
    cfg["w7_builds"] = min(cfg["w7_builds"], cfg["reps"])
    only = set(args.only.upper().split(",")) if args.only else None
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    info = machine()
    print(f"zarrlake benchmarks ({'quick' if args.quick else 'full'}): {info}", flush=True)
    results: dict[str, Any] = {}
    log: list[str] = []
    t0 = time.monotonic()
    for group in plan(cfg):
        if only is None or group.name in only:
            run_group(group, cfg, work, results, log)
    elapsed = time.monotonic() - t0
    shutil.rmtree(work, ignore_errors=True)
    info["loadavg_at_end"] = os.getloadavg()
    doc = {
        "mode": "quick" if args.quick else "full",
        "config": cfg,
        "machine": info,
        "elapsed_s": elapsed,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "failures": log,
        "results": results,
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    table = markdown_table(doc)
    (out / "results.md").write_text(table)
    print()
    print(table)
    print(f"wrote {out / 'results.json'} and {out / 'results.md'} in {elapsed:.0f}s")


if __name__ == "__main__":
    main()
