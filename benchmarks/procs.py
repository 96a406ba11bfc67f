"""Running one workload in a fresh Python process and collecting the JSON it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().with_name("worker.py")
RESULT_TAG = "RESULT "


class WorkerFailed(RuntimeError):
    """A worker process exited non-zero or printed no result."""


def command(workload: str, engine: str, path: str, params: dict[str, Any]) -> list[str]:
    return [sys.executable, str(WORKER), workload, engine, path, json.dumps(params)]


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
    )
    result = parse_result(proc.stdout)
    if proc.returncode != 0 or result is None:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise WorkerFailed(f"{workload}/{engine} exited {proc.returncode}:\n{tail}")
    return result
