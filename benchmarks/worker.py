"""Entry point of one benchmark process: `worker.py WORKLOAD ENGINE PATH PARAMS_JSON`.

Imports happen before any clock starts; the workload times itself and this prints its
result as one `RESULT {json}` line on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engines
import workloads
from procs import RESULT_TAG


def main(argv: list[str]) -> None:
    workload, engine_name, path, params = argv[1], argv[2], argv[3], json.loads(argv[4])
    fn = workloads.WORKLOADS[workload]
    engine = None if engine_name in (engines.FILES, "spark") else engines.make(engine_name, params)
    params["engine"] = engine_name
    result = fn(engine, path, params)
    print(RESULT_TAG + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv)
