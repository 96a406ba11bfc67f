"""A worker's flush that registered its writes and then found the session closed raised;
a later flush of that worker, with nothing left to write, raises too until the session is
open again. Returning would tell the worker that writes its session's commit left out are
part of it (found by the simulator: seed 40478 on the bucket metastore)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.writers.conftest import rows_at
from tests.writers.workers import COLS
from zarrlake._util import runtime
from zarrlake.session_records import Status


def _set_status(repo: zl.Repo, sid: str, **fields) -> None:
    repo._context.records.update(sid, lambda rec: replace(rec, **fields))


@pytest.mark.parametrize("any_metastore", ["sqlite"], indirect=True)
def test_a_flush_after_one_that_found_the_session_committing_raises(where) -> None:
    repo = zl.Repo.open(**where)
    s = repo.create_session(message="job")
    worker = repo.join_session(s.id)
    zarr.open_array(worker.store, path="t")[2] = np.full(COLS, 3)  # buffered
    lease = runtime.now() + 600
    _set_status(repo, s.id, status=Status.COMMITTING, lease=lease, seal="x")
    with pytest.raises(zl.SessionClosedError, match="being committed"):
        worker.flush()  # registered, then found the seal
    with pytest.raises(zl.SessionClosedError, match="being committed"):
        worker.flush()  # nothing left to write, and still not open
    _set_status(repo, s.id, status=Status.COMMITTED, commit=repo.resolve("main"), lease=None)
    with pytest.raises(zl.SessionClosedError):
        worker.flush()
    assert rows_at(repo) == []


@pytest.mark.parametrize("any_metastore", ["sqlite"], indirect=True)
def test_a_flush_returns_once_the_session_is_open_again(where) -> None:
    repo = zl.Repo.open(**where)
    s = repo.create_session(message="job")
    worker = repo.join_session(s.id)
    zarr.open_array(worker.store, path="t")[2] = np.full(COLS, 3)
    _set_status(repo, s.id, status=Status.COMMITTING, lease=runtime.now() + 600, seal="x")
    with pytest.raises(zl.SessionClosedError):
        worker.flush()
    _set_status(repo, s.id, status=Status.OPEN, lease=None, seal=None)  # that commit failed
    worker.flush()  # what it registered is staged: the next commit counts it
    worker.close()
    s.commit()
    assert rows_at(repo) == [2]
