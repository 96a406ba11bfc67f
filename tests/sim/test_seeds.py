"""The simulator in CI: 5,000 seeds, every invariant after every step, in two processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = 5000


@pytest.mark.slow(seconds=250)  # handed out early: it ran last and ended make test
def test_5000_seeds_hold_every_invariant():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "zarrlake.testing.sim",
            "run",
            "--seeds",
            f"0:{SEEDS}",
            "--jobs",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    head = re.search(r"seeds: ([\d,]+)\s+steps: ([\d,]+)\s+commits verified: ([\d,]+)", out)
    assert head is not None, out
    seeds, steps, commits = (int(g.replace(",", "")) for g in head.groups())
    assert seeds == SEEDS
    assert steps > 100 * SEEDS and commits > SEEDS  # the runs do something
    for check in (
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
    ):
        assert re.search(rf"[1-9][\d,]*\s+{check}", out), f"no {check!r} in:\n{out}"
    for fault in (
        "error before the call",
        "lost reply",
        "crash before the call",
        "clock jump",
        "clock jump of one process",
        "clock skew",
    ):
        assert re.search(rf"[1-9][\d,]*\s+{fault}", out), f"no {fault!r} injected:\n{out}"
