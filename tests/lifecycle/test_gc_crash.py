"""A collector (or an expiry) SIGKILLed at each of its fault points, in a real process: the
repository opens, checks clean, reads its data, and a second run completes the job.

Run as a module, this file is the process that is killed:
python -m tests.lifecycle.test_gc_crash DIR gc|expire
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck, unreachable
from zarrlake._util.crashpoints import GC_POINTS

ROOT = Path(__file__).resolve().parents[2]
POINTS = [("expire" if p.startswith("expire") else "gc", p) for p in GC_POINTS]


def setup(location: Path) -> zl.Repo:
    repo = zl.Repo.create(location)
    for i in range(3):
        s = repo.create_session()
        s.write_many([(f"a/c/{j}", chunk(10 * i + j)) for j in range(3)] + [("b/c/0", b"s" * 900)])
        s.commit(f"c{i}")
    s = repo.create_session()
    s.write_many([(f"x/c/{j}", chunk(100 + j)) for j in range(4)])
    repo._context.records.update(s.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0}))
    s = repo.create_session()
    s.write_many([(f"y/c/{j}", chunk(200 + j)) for j in range(300)])  # > one delete batch
    s.abandon()
    return repo


def run(location: str, what: str) -> None:
    repo = zl.Repo.open(location)
    if what == "gc":
        repo.expire(timedelta(0))
        repo.gc(timedelta(0), full=True)
    else:
        repo.expire(timedelta(0))


@pytest.mark.parametrize(("what", "point"), POINTS)
def test_killed_collector_leaves_a_valid_repository(tmp_path, what: str, point: str) -> None:
    location = tmp_path / "repo"
    setup(location).close()
    env = {
        **os.environ,
        "ZARRLAKE_CRASH_AT": point,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.lifecycle.test_gc_crash", str(location), what],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    repo = zl.Repo.open(location)
    assert fsck(repo) == []
    head = repo.readonly_session()
    assert head.read("a/c/1") == chunk(21)
    assert head.read("b/c/0") == b"s" * 900
    report = repo.gc(timedelta(0), full=True)  # takes over the dead collector's lock
    assert report.seconds >= 0
    repo.expire(timedelta(0))
    repo.gc(timedelta(0), full=True)
    assert unreachable(repo) == set()
    assert fsck(repo) == []
    assert repo.readonly_session().read("a/c/2") == chunk(22)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
