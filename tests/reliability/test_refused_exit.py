"""A process whose session was refused for good (a reset and gc deleted its base before its
first write stored its record: txn/birth.py) exits normally once the refusal was raised to
it and it holds no write it was told had succeeded: it knows its writes did not count.
A refusal met first at process exit still ends the process with the warning and the exit
status job runners go by (txn/writers.py), naming the gone base: the exit's finish hands
nothing to a thread pool, which interpreter exit shut before (txn/birth.py `in_turn`).
No write is acknowledged before the base was checked: a write after a failed look looks
again, and meets the refusal itself.

Real worker processes, on SQLite, and on the remote metastores (PostgreSQL, and the bucket
metastore: S3 alone), where a first write that uploads a chunk takes a path of its own: it
uploads beside the base check (txn/birth.py).
A refusal is met at exit only where the first write's base check can fail without undoing
what the write stored, which is the remote metastores' path: there the worker's store
fails the first look for the base's commit record (a fault, as an exhausted retry raises)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.refused_base import repo_to_reset
from zarrlake.txn.writers import EXIT_STATUS

WORKER = """
import concurrent.futures.thread, json, sys, threading
from datetime import timedelta
import numpy as np
import zarr
import zarrlake as zl
from zarrlake.connection import RepoContext
from zarrlake.errors import NotFoundError, TransientError
from zarrlake.storage.base import WrapperObjectStore
where, then = json.loads(sys.argv[1])


if then == "exit, pools shut first":
    # Interpreter exit shuts the thread pools (concurrent.futures' `_python_exit`, run by
    # `threading._shutdown` before any `atexit` hook) and only then puts its sentinel in
    # their queues: a queue of ours among them says the pools are shut.
    shut = threading.Event()

    class SaysShut:
        def put(self, item):
            shut.set()

    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    concurrent.futures.thread._threads_queues[ended] = SaysShut()


class FailsFirstLook(WrapperObjectStore):
    # The first look for a commit record fails, as an exhausted retry would.
    failed = False

    @property
    def remote(self):
        # A look for the base begun on a thread of a pool after the failed one (a look
        # again in the background) goes on once interpreter exit has shut the pools: as a
        # loaded machine may schedule it.
        if then == "exit, pools shut first" and self.failed:
            if threading.current_thread().name.startswith("zarrlake-birth"):
                shut.wait()
        return super().remote

    def exists(self, key):
        if key.startswith("commits/") and not self.failed:
            self.failed = True
            raise TransientError("injected: the store did not answer")
        return super().exists(key)


admin = zl.Repo.open(**where)
repo = zl.Repo.open(**where, settings={"flush": {"idle": None}})  # only calls flush
if then != "caught":
    ctx = repo._context
    repo = zl.Repo(RepoContext(
        ctx.spec, ctx.repo_id, FailsFirstLook(ctx.object_store), ctx.meta, hash=ctx.hash,
        format=ctx.format, session_shards=ctx.session_shards, settings=ctx.settings,
    ))
t = repo.create_session()  # based on the head: no record stored yet
admin.reset_branch("main", sys.argv[2])
assert admin.gc(timedelta(0)).by_kind["commits"][0] == 1  # the base of `t`
big = zarr.open_array(t.store, path="big")  # a chunk uploaded, not staged inline
small = zarr.open_array(t.store, path="small")  # a chunk staged inline
row = np.arange(64 * 64, dtype="f4").reshape(64, 64)
try:
    big[1] = row
except NotFoundError as e:
    print("refused:", e, flush=True)
except TransientError as e:
    print("not checked:", e, flush=True)
if then == "caught":
    try:
        small[1] = 1  # refused for good: every later write too
    except NotFoundError:
        print("refused again", flush=True)
if then == "written again":
    try:
        small[1] = 1  # buffered behind the first write's marker: its base looked at again
        print("acknowledged", flush=True)
    except NotFoundError as e:
        print("refused:", e, flush=True)
if then == "told":
    try:
        t.flush()
    except NotFoundError as e:
        print("refused:", e, flush=True)
print("went on", flush=True)
"""

GONE = "no longer exists: branch 'main' moved off it"
WARNING = "zarrlake: this process's writes may not count"
SHUT_DOWN = "cannot schedule new futures after shutdown"


def _run(where: dict, then: str) -> subprocess.CompletedProcess:
    """A repository at `where` whose head is a commit a reset leaves behind; WORKER (doing
    `then`) on a session based on that head, which the worker's admin resets and gc deletes."""
    old = repo_to_reset(where)
    return subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps([where, then]), old],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-postgres", "s3-bucket"], indirect=True)
def test_a_process_that_caught_a_base_gone_refusal_exits_normally(any_metastore: dict) -> None:
    done = _run(any_metastore, "caught")
    assert done.stdout.splitlines()[0].startswith("refused:"), done
    assert GONE in done.stdout, done
    assert done.stdout.splitlines()[1:] == ["refused again", "went on"], done
    assert done.returncode == 0, done.stderr
    assert WARNING not in done.stderr, done.stderr
    assert "could not finish" not in done.stderr, done.stderr


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
@pytest.mark.parametrize("then", ["exit", "exit, pools shut first"])
def test_a_refusal_met_first_at_exit_still_warns_and_exits_non_zero(
    any_metastore: dict, then: str
) -> None:
    """The base is looked at again at exit, and found gone. "pools shut first": a look
    begun in the background after the failed one would reach a thread pool only after
    interpreter exit shut it (as on a loaded machine; forced here): the exit's finish must
    depend on no pool, so the warning names the gone base, not a pool's refusal."""
    done = _run(any_metastore, then)
    assert done.stdout.splitlines() == [
        "not checked: injected: the store did not answer",
        "went on",
    ], done
    assert done.returncode == EXIT_STATUS, done.stderr
    assert WARNING in done.stderr, done.stderr
    assert GONE in done.stderr, done.stderr
    assert SHUT_DOWN not in done.stderr, done.stderr
    assert f"Exit status {EXIT_STATUS}" in done.stderr, done.stderr


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
@pytest.mark.parametrize("then", ["told", "written again"])
def test_a_refusal_raised_to_a_later_call_lets_the_process_exit_normally(
    any_metastore: dict, then: str
) -> None:
    """With "written again", a chunk write after the failed look is not acknowledged before the
    base is looked at again (txn/birth.py): the refusal is raised to it, so no write the
    process was told had succeeded is voided."""
    done = _run(any_metastore, then)
    lines = done.stdout.splitlines()
    assert lines[0] == "not checked: injected: the store did not answer", done
    assert lines[1].startswith("refused:") and GONE in lines[1], done
    assert lines[2:] == ["went on"], done
    assert done.returncode == 0, done.stderr
    assert WARNING not in done.stderr, done.stderr
