"""The seeds' pattern: workers join a session by id, write their region and end, without
flushing or committing; the driver commits once and every row is there. For every way a
Python job starts workers: multiprocessing in each start method, process pools, separate
programs that only know the session id, threads; on SQLite, PostgreSQL and the bucket."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from concurrent.futures import ProcessPoolExecutor

import pytest

import zarrlake as zl
from tests.writers.conftest import rows_at
from tests.writers.workers import ROWS, write_rows

ALL = list(range(ROWS))


def parts(session_id: str, where: dict, n: int = 4) -> list[tuple[dict, str, list[int]]]:
    return [(where, session_id, ALL[i::n]) for i in range(n)]


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_multiprocessing_pool_of_workers_that_just_end(where, method):
    repo = zl.Repo.open(**where)
    s = repo.create_session(message="job")
    pool = multiprocessing.get_context(method).Pool(2)
    pool.map(write_rows, parts(s.id, where))
    pool.close()  # the workers end normally (leaving a `with` block would terminate them)
    pool.join()
    s.commit("job")
    assert rows_at(repo) == ALL


def test_processes_started_one_by_one(where):
    repo = zl.Repo.open(**where)
    s = repo.create_session()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=write_rows, args=(p,)) for p in parts(s.id, where)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * 4
    s.commit("job")
    assert rows_at(repo) == ALL


@pytest.mark.parametrize("commit_inside", [False, True])
def test_a_process_pool_executor(where, commit_inside):
    # inside the block the workers live on, idle: their tasks' handles finished
    repo = zl.Repo.open(**where)
    s = repo.create_session()
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(write_rows, parts(s.id, where)))
        if commit_inside:
            s.commit("job")
    if not commit_inside:
        s.commit("job")
    assert rows_at(repo) == ALL


def test_separate_programs_that_only_know_the_session_id(where):
    repo = zl.Repo.open(**where)
    s = repo.create_session()
    code = (
        "import sys, json; from tests.writers.workers import write_rows; "
        "write_rows((json.loads(sys.argv[1]), sys.argv[2], [int(r) for r in sys.argv[3:]]))"
    )
    import json

    for _, sid, rows in parts(s.id, where, n=2):
        subprocess.run(
            [sys.executable, "-c", code, json.dumps(where), sid, *map(str, rows)],
            check=True,
        )
    s.commit("job")
    assert rows_at(repo) == ALL


def test_threads_that_join_by_id(where):
    repo = zl.Repo.open(**where)
    s = repo.create_session()
    threads = [threading.Thread(target=write_rows, args=(p,)) for p in parts(s.id, where)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s.commit("job")
    assert rows_at(repo) == ALL
