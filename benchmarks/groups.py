"""How a benchmark group runs: `Group` and `Step`, and the runner that repeats a group's
steps in fresh worker processes, engines alternating (A B C A B C ...).

A group is either steps (workloads run by `python -m benchmarks.worker`, each in a process
and a directory of its own per engine and repetition) or a `run` function that does the
whole group itself and returns its records. See benchmarks/README.md, "Adding a group".
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.procs import WorkerFailed, run_worker

Results = dict[str, dict[str, list[dict[str, Any]]]]
"""table -> engine -> one record (metric name -> value) per repetition."""


@dataclass
class Step:
    """One worker process of a workload: its results go to `table` under `prefix`.
    `worker` is a name in workloads.WORKLOADS or "module:function"."""

    worker: str
    table: str
    prefix: str = ""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Group:
    """Workers that share one fresh directory per engine and repetition (e.g. W3 reads
    what W1 wrote), or a `run(cfg, work) -> Results` function that runs the group itself."""

    name: str
    engines: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    builds: int | None = None  # None: a fresh build per repetition
    servers: bool = False  # runs against S3 + PostgreSQL servers started for the group
    tmpfs: bool = False  # its directories on TMPFS (memory) instead of the run's work dir
    run: Callable[[dict[str, Any], Path], Results] | None = None


@contextlib.contextmanager
def remote_servers() -> Iterator[dict[str, Any]]:
    """moto S3 (one bucket) and PostgreSQL on 127.0.0.1; yields the settings workers need
    (`cfg["remote"]`, read by engines.py)."""
    from zarrlake.testing.servers import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, running_servers

    with running_servers(bucket="zarrlake-bench") as servers:
        yield {
            "s3_endpoint": servers.s3_endpoint,
            "bucket": servers.bucket,
            "region": REGION,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
            "pg_url": servers.admin_url,  # engines make a database per repository
        }


def run_group(
    group: Group, cfg: dict[str, Any], work: Path, results: Results, log: list[str]
) -> None:
    """All repetitions of one group; failures are logged, and the run goes on."""
    try:
        if group.servers:
            with remote_servers() as remote:
                port = remote["pg_url"].rsplit(":", 1)[1].split("/")[0]
                print(f"{group.name}: S3 {remote['s3_endpoint']}, PG port {port}", flush=True)
                _run(group, {**cfg, "remote": remote}, work, results, log)
        else:
            _run(group, cfg, work, results, log)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:
        msg = f"{group.name}: FAILED: {type(e).__name__}: {str(e).strip()[:500]}"
        print(msg, flush=True)
        log.append(msg)
    for path in _base(group, work).glob(f"{group.name}-*"):
        shutil.rmtree(path, ignore_errors=True)


TMPFS = Path("/dev/shm/zarrlake-bench")
"""Where groups with `tmpfs` keep their directories: no disk under the metastore's fsyncs."""


def _base(group: Group, work: Path) -> Path:
    """The directory a group's repositories are made in."""
    return TMPFS if group.tmpfs else work


def _run(group: Group, cfg: dict[str, Any], work: Path, results: Results, log: list[str]) -> None:
    if group.run is None:
        _run_reps(group, cfg, work, results, log)
        return
    path = work / f"{group.name}-run"
    path.mkdir(parents=True, exist_ok=True)
    for table, engines in group.run(cfg, path).items():
        for engine, records in engines.items():
            results.setdefault(table, {}).setdefault(engine, []).extend(records)


def _run_reps(
    group: Group, cfg: dict[str, Any], work: Path, results: Results, log: list[str]
) -> None:
    """Steps in worker processes. A group with `builds` builds its repository that many
    times and repeats only the later steps on it."""
    reps = cfg["reps"]
    builds = group.builds or reps
    _base(group, work).mkdir(parents=True, exist_ok=True)
    for rep in range(reps):
        for engine in group.engines:
            path = _base(group, work) / f"{group.name}-{engine}-{rep % builds}"
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
