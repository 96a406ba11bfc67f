"""A worker whose writes could not be finished at process exit ends with a non-zero exit
status and says why on stderr: job runners (Spark, Dask, batch schedulers) go by the
status. The store goes away under a real worker process: its own moto server, stopped."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import zarr

import zarrlake as zl
from tests.fixtures.s3 import s3_options
from tests.writers.workers import COLS, ROWS
from zarrlake.testing import servers
from zarrlake.txn.writers import EXIT_BUDGET, EXIT_STATUS

WORKER = """
import json, sys
import zarr
import zarrlake as zl
where, session_id = json.loads(sys.argv[1])
repo = zl.Repo.open(**where, settings={"flush": {"idle": None}})  # only exit flushes
arr = zarr.open_array(repo.join_session(session_id).store, path="t", mode="r+")
arr[0] = 1
print("written", flush=True)
sys.stdin.read()  # the test stops the store, then closes stdin: exit
"""


def _worker_after_store_stops(where_of) -> subprocess.CompletedProcess:
    """Run WORKER on a repository of a moto server of its own, stopping the server once the
    worker wrote (unflushed); returns the finished worker."""
    with servers.running_moto() as endpoint:
        bucket = f"zarrlake-exit-{uuid.uuid4().hex[:12]}"
        servers.s3_client(endpoint).create_bucket(Bucket=bucket)
        where = where_of(endpoint, bucket)
        repo = zl.Repo.create(**where)
        s = repo.create_session()
        zarr.create_array(s.store, name="t", shape=(ROWS, COLS), chunks=(1, COLS), dtype="i8")
        session_id = s.id
        s.close()  # this process's handle finishes while the server runs
        s.wait()
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps([where, session_id])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline() == "written\n", worker.communicate(timeout=60)
        except BaseException:
            worker.kill()
            worker.wait()
            raise
    try:  # the server is stopped (its port closed): the worker's exit finish cannot reach
        # it, and its retries, nested in layers, end within the exit budget
        out, err = worker.communicate("", timeout=EXIT_BUDGET + 15)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    return subprocess.CompletedProcess(worker.args, worker.returncode, out, err)


def test_a_worker_whose_exit_finish_fails_exits_non_zero_in_bounded_time_saying_why():
    done = _worker_after_store_stops(
        lambda endpoint, bucket: {
            "location": f"s3://{bucket}/repo",
            "storage_options": s3_options(endpoint),
        }
    )
    assert done.returncode == EXIT_STATUS, done.stderr
    assert "zarrlake: this process's writes may not count" in done.stderr
    assert f"Exit status {EXIT_STATUS}" in done.stderr
    assert "cannot reach the server" in done.stderr  # the store's error, not a time-out
