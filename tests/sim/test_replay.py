"""A seed replays exactly (in this process and in another with another hash seed), and the
replay command prints a short trace of a failure, shrunk to fewer actors and steps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.simulator import Config, run
from tests.simulator.planted import planted
from tests.simulator.shrink import shrink, signature
from tests.simulator.trace import Trace

ROOT = Path(__file__).resolve().parents[2]
TRACE = (
    "from tests.simulator import Config, run; "
    "from tests.simulator.trace import Trace; "
    "print(run(Config({seed}), trace=Trace(keep_all=True, calls=True)).trace)"
)


def _trace(seed: int) -> str:
    return run(Config(seed), trace=Trace(keep_all=True, calls=True)).trace


def _sim(*args: str, hash_seed: str = "0") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tests.simulator", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )


def test_a_seed_replays_exactly_here_and_in_another_process():
    here = [_trace(seed) for seed in (1, 2)]
    assert here == [_trace(seed) for seed in (1, 2)]
    assert len(here[0].splitlines()) > 50
    other = subprocess.run(
        [sys.executable, "-c", TRACE.format(seed=1)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout.rstrip("\n") == here[0]


def test_shrinking_keeps_the_failure_and_cuts_the_trace():
    with planted("merge_takes_theirs"):
        failing = next(r for r in (run(Config(s)) for s in range(600, 700)) if not r.ok)
        small = shrink(failing)
    assert signature(small.failure) == signature(failing.failure)
    assert small.steps <= failing.steps
    assert len(small.actors) * small.ops < len(failing.actors) * failing.ops


def test_replay_command_prints_the_shrunk_trace_and_how_to_replay_it():
    proc = _sim("replay", "612", "--bug", "merge_takes_theirs", "--shrink")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "conflicts on" in out and "FAILED" in out
    lines = [line for line in out.splitlines() if re.match(r"\s*\d+\s+[\d.]+s  ", line)]
    assert 5 < len(lines) < 150  # one line per operation, fault and crash: readable
    again = re.search(r"^replay: python -m tests.simulator (.*)$", out, re.M)
    assert again is not None
    replayed = _sim(*again.group(1).split(), hash_seed="99")
    assert replayed.returncode == 1
    assert replayed.stdout.split("\n\n")[0] == out.split("\n\n")[0]  # the same trace


def test_run_names_each_failure_with_its_replay_command():
    # (seed 612: one that catches the planted bug and shrinks, since stalls and
    # in-flight writes moved the interleavings)
    proc = _sim("run", "--seeds", "605:615", "--bug", "merge_takes_theirs", "--stop")
    assert proc.returncode == 1
    assert "FAILED seed 612" in proc.stdout
    assert "replay: python -m tests.simulator replay 612 --bug merge_takes_theirs" in proc.stdout
