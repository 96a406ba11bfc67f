"""STARTUP (issue 50): what a new process pays before its first byte.

- open: a new interpreter imports zarr and numpy (untimed, as every workload's imports),
  then, timed, `import zarrlake` + `Repo.open` of a local repository (Icechunk: `import
  icechunk` + `Repository.open`); the modules zarrlake loaded for it are counted.
- log: `zarrlake log --limit 1` on a local repository as a whole process (the console
  script, interpreter start to exit), less `python -c pass` measured beside it.

Each figure is the median of `startup_runs` new processes, alternating with the baseline
where there is one. Bytecode must be compiled (`make bench` compiles src/ first).

    python -m benchmarks.run --only STARTUP
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.engines import Engine
from benchmarks.groups import Group, Step
from benchmarks.procs import child_env

SIZES = {"full": {"startup_runs": 15}, "quick": {"startup_runs": 5}}
NOTE = (
    "STARTUP (issue 50): medians of {startup_runs} new processes. Open: after `import zarr, "
    "numpy`, `import zarrlake` + `Repo.open` (local) vs `import icechunk` + "
    "`Repository.open`. Log: `zarrlake log --limit 1` as a whole process minus `python -c "
    "pass` run alternately beside it."
)

OPEN = """
import json, resource, sys, time
import zarr, numpy
def cpu():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime
before = set(sys.modules)
c0, t0 = cpu(), time.perf_counter()
if sys.argv[1] == "zarrlake":
    import zarrlake
    zarrlake.Repo.open(sys.argv[2])
else:
    import icechunk
    icechunk.Repository.open(icechunk.local_filesystem_storage(sys.argv[2]))
ms, cpu_ms = (time.perf_counter() - t0) * 1000, (cpu() - c0) * 1000
new = set(sys.modules) - before
own = sum(m.startswith("zarrlake") for m in new)
print(json.dumps({"ms": ms, "cpu_ms": cpu_ms, "modules": len(new), "own": own}))
"""


def _python(code: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        env=child_env(),
        timeout=120,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def open_cost(engine: Engine, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """Import + open a local repository in new processes (medians)."""
    engine.create(path)
    engine.close()
    runs = [_python(OPEN, engine.name, path) for _ in range(p["startup_runs"])]
    return {
        "open_ms": statistics.median(r["ms"] for r in runs),
        "open_cpu_ms": statistics.median(r["cpu_ms"] for r in runs),
        "modules": statistics.median(r["modules"] for r in runs),
        "own_modules": statistics.median(r["own"] for r in runs),
    }


def _wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, env=child_env(), timeout=120)
    return (time.perf_counter() - t0) * 1000


def log_cost(engine: Engine, path: str, p: dict[str, Any]) -> dict[str, Any]:
    """`zarrlake log --limit 1` on the repository `open_cost` made, as a whole process, and
    `python -c pass` beside it."""
    if engine.name != "zarrlake":
        return {}
    script = str(Path(sys.executable).with_name("zarrlake"))
    log, bare = [], []
    for _ in range(p["startup_runs"]):
        bare.append(_wall([sys.executable, "-c", "pass"]))
        log.append(_wall([script, "-r", path, "log", "--limit", "1"]))
    return {
        "log_ms": statistics.median(log),
        "python_ms": statistics.median(bare),
        "log_over_python_ms": statistics.median(log) - statistics.median(bare),
    }


def groups(cfg: dict[str, Any]) -> list[Group]:
    return [
        Group(
            "STARTUP",
            ["zarrlake", "icechunk"],
            [
                Step("benchmarks.startup:open_cost", "STARTUP", "open."),
                Step("benchmarks.startup:log_cost", "STARTUP", "log."),
            ],
        )
    ]
