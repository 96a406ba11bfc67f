"""The simulator in CI: 5,000 seeds, every invariant after every step.

The seeds run in `PARTS` ranges, one simulator process each, that `make test` hands to its
processes as separate units (the `spread` marker, tests/fixtures/schedule.py): one 5,000-seed
test kept one of the two processes for a quarter of the run. Each range asserts its own
failures and seed count; the range that finishes last adds up every range's summary and
asserts the figures over all 5,000 seeds, as one run of them printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = 5000
PARTS = 5
RANGES = [(SEEDS * i // PARTS, SEEDS * (i + 1) // PARTS) for i in range(PARTS)]
HEAD = re.compile(r"seeds: ([\d,]+)\s+steps: ([\d,]+)\s+commits verified: ([\d,]+)")
COUNT = re.compile(r"^\s+([\d,]+)\s+(\S.*)$", re.MULTILINE)
"""A figure line of the summary: `  1,234  kind`."""

CHECKS = (
    "deletes checked",
    "expiries checked",
    "fsck runs",
    "merge commits verified",
    "pinned reads checked",
    "ref moves explained",
    "revert commits verified",
    "session commits verified",
    "session reads checked",
    "session records checked",
    "metadata changes begun",
    "metastore heads' pages checked",
    "committers' leases checked",
    "seeds on the bucket metastore",
    "seeds with a host per process",
    "outcomes checked: reported failed",
    "commits that ran longer than a lease",
    "gc runs refused by a crashed collector's lock",
    "writes reusing a garbage object",
)
FAULTS = (
    "error before the call",
    "lost reply",
    "crash before the call",
    "clock jump",
    "clock jump of one process",
    "clock skew",
    "clock skew ahead",
    "clock skew behind",
    "pause",
    "crash with a write in flight",
)


def _run_seeds(start: int, stop: int) -> str:
    """The simulator's summary of seeds start..stop-1 (one process)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.simulator", "run", "--seeds", f"{start}:{stop}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def _totals(outputs: list[str]) -> tuple[tuple[int, int, int], Counter[str]]:
    """(seeds, steps, commits) and every figure, added up over the ranges' summaries."""
    head = [0, 0, 0]
    figures: Counter[str] = Counter()
    for out in outputs:
        found = HEAD.search(out)
        assert found is not None, out
        for i, g in enumerate(found.groups()):
            head[i] += int(g.replace(",", ""))
        for n, kind in COUNT.findall(out):
            figures[kind.strip()] += int(n.replace(",", ""))
    return (head[0], head[1], head[2]), figures


@pytest.fixture
def shared_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A directory this run's processes share: xdist gives each worker its own basetemp
    under the run's, which is new for every run."""
    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):
        base = base.parent
    path = base / "sim-seeds"
    path.mkdir(exist_ok=True)
    return path


@pytest.mark.spread
@pytest.mark.slow(seconds=60)  # each range; handed out early, so no process idles at the end
@pytest.mark.parametrize(("start", "stop"), RANGES, ids=[f"{a}-{b}" for a, b in RANGES])
def test_5000_seeds_hold_every_invariant(start: int, stop: int, shared_dir: Path):
    out = _run_seeds(start, stop)
    (seeds, steps, commits), _ = _totals([out])
    assert seeds == stop - start
    assert steps > 100 * seeds and commits > seeds  # the runs do something
    done = shared_dir / f"{start}-{stop}.txt"
    partial = done.with_suffix(".part")
    partial.write_text(out)
    os.replace(partial, done)  # whole or absent for the other ranges
    outputs = [shared_dir / f"{a}-{b}.txt" for a, b in RANGES]
    if not all(p.exists() for p in outputs):
        return  # a range still running adds up the figures when it ends
    (seeds, steps, commits), figures = _totals([p.read_text() for p in outputs])
    assert seeds == SEEDS
    assert steps > 100 * SEEDS and commits > SEEDS
    summary = "\n".join(f"  {n:,}  {kind}" for kind, n in sorted(figures.items()))
    for check in CHECKS:
        assert re.search(rf"[1-9][\d,]*\s+{check}", summary), f"no {check!r} in:\n{summary}"
    for fault in FAULTS:
        assert re.search(rf"[1-9][\d,]*\s+{fault}", summary), f"no {fault!r} injected:\n{summary}"
