"""Entry point of one benchmark process:
`python -m benchmarks.worker WORKLOAD ENGINE PATH PARAMS_JSON`.

WORKLOAD is a name in `benchmarks.workloads.WORKLOADS` or "module:function" (a group's own
workload, e.g. "benchmarks.virtual:write_refs"). Imports happen before any clock starts; the
workload times itself and this prints its result as one `RESULT {json}` line on stdout.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import engines, workloads
from benchmarks.procs import RESULT_TAG


def workload_function(name: str) -> Callable[[Any, str, dict], dict]:
    """The function a workload name stands for."""
    if ":" in name:
        module, function = name.split(":", 1)
        return getattr(importlib.import_module(module), function)
    return workloads.WORKLOADS[name]


def main(argv: list[str]) -> None:
    workload, engine_name, path, params = argv[1], argv[2], argv[3], json.loads(argv[4])
    fn = workload_function(workload)
    engine = None if engine_name in (engines.FILES, "spark") else engines.make(engine_name, params)
    params["engine"] = engine_name
    result = fn(engine, path, params)
    print(RESULT_TAG + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv)
