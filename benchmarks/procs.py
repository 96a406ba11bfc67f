"""Running one workload in a fresh Python process and collecting the JSON it prints.

Child processes run `python -m benchmarks.worker` with the repository root on their
PYTHONPATH (`child_env`), so they import this package wherever they start; their own children
(W6's writers, the relays, Spark's Python workers) inherit it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULT_TAG = "RESULT "


class WorkerFailed(RuntimeError):
    """A worker process exited non-zero or printed no result."""


def stop(proc: subprocess.Popen, farewell: str = "") -> None:
    """End a helper process that serves until its stdin closes: say `farewell` on stdin
    and close it, wait up to 10 s, then kill it (by its PID); closes its stdout."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            if farewell:
                proc.stdin.write(farewell)
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def child_env() -> dict[str, str]:
    """This process's environment with the repository root first on PYTHONPATH."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def command(workload: str, engine: str, path: str, params: dict[str, Any]) -> list[str]:
    """The argv of a worker: `workload` is a name in workloads.WORKLOADS or "module:function"."""
    return [sys.executable, "-m", "benchmarks.worker", workload, engine, path, json.dumps(params)]


def parse_result(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    return None


def run_worker(
    workload: str, engine: str, path: str, params: dict[str, Any], timeout: float = 1800
) -> dict[str, Any]:
    """Run `workload` for `engine` on `path` in a new interpreter; its result dict."""
    proc = subprocess.run(
        command(workload, engine, path, params),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
    )
    result = parse_result(proc.stdout)
    if proc.returncode != 0 or result is None:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise WorkerFailed(f"{workload}/{engine} exited {proc.returncode}:\n{tail}")
    return result
