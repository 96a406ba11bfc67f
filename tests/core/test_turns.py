"""Committers on the embedded metastore take turns (issue 15, W6): a commit's swap of the
branch then never loses to another process, so no attempt's objects are written in vain;
the turn is advisory, and a holder that waits for another committer never deadlocks."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import zarrlake as zl
from zarrlake.metastore import open_metastore
from zarrlake.metastore.filelock import file_lock

WRITER = """
import sys
import zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
me = int(sys.argv[2])
for j in range(5):
    s = repo.create_session()
    s.write(f"a/c/{me}.{j}", bytes([me, j]) * 5000)
    s.commit(f"writer {me} commit {j}")
"""


def test_concurrent_processes_waste_no_commit_attempt(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "repo"), str(i)])
        for i in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    history = repo.log("main")
    assert len(history) == 21  # the initial commit and 4 x 5
    # one commit record per commit: no attempt lost a swap and left its objects behind
    assert len(list((tmp_path / "repo" / "commits").iterdir())) == 21
    head = repo.readonly_session("main")
    assert all(
        head.read(f"a/c/{i}.{j}") == bytes([i, j]) * 5000 for i in range(4) for j in range(5)
    )


HOLDER_PROBE = """
import sys
import zarrlake.metastore.sqlite as backend
backend.TURN_TIMEOUT = 0.2
meta = backend.SqliteMetaStore(sys.argv[1])
with meta.take_turns("x") as taken:
    print(taken)
"""


def test_a_turn_held_elsewhere_is_waited_for_then_gone_without(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.sqlite'}"
    meta = open_metastore(url)
    probe = [sys.executable, "-c", HOLDER_PROBE, url]
    with meta.take_turns("x") as taken:
        assert taken
        other = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "False", other.stderr  # another process: waits, goes on
        seen: list[bool] = []

        def thread_probe() -> None:
            lock = file_lock(str(tmp_path / "meta.sqlite") + "-turns")
            seen.append(lock.acquire(timeout=0.1))

        t = threading.Thread(target=thread_probe)
        t.start()
        t.join()
        assert seen == [False]  # another thread of this process too
    after = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    assert after.stdout.strip() == "True", after.stderr
