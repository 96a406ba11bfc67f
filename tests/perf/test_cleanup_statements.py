"""The SQLite statements of the clean-up a one-chunk commit leaves (its staged fragment and
upload records read, both partitions dropped in one write transaction), counted by
SQLite's trace hook: one incremental vacuum for the two drops, as the transaction ends.
On SQLite the clean-up waits for the process's next call (here `wait`) and runs on its
thread (txn/cleanup.py). What the clean-up registers is checked too: the commit kept its
one upload, so no gc candidate is written."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.statements import count_statements
from zarrlake.vc.gc_protocol import GcState, uploads_partition


@pytest.fixture
def all_statements(monkeypatch) -> Counter[str]:
    """The statements run on connections of every thread opened from now on, by their
    first word (BEGIN, SELECT, ...)."""
    return count_statements(monkeypatch, lambda: True)


def test_a_one_chunk_commit_s_clean_up_runs_7_statements_on_sqlite(
    all_statements: Counter[str], one_chunk_repo: zl.Repo
) -> None:  # (all_statements first: it traces the connections the repository opens)
    repo = one_chunk_repo
    ctx = repo._context
    for i in range(3):  # the same for every commit
        s = repo.create_session()
        value = np.random.default_rng(i).random((64, 64), dtype=np.float32)  # uploaded
        zarr.open_array(s.store, path="a")[i] = value
        s.wait()
        assert list(ctx.meta.scan(uploads_partition(ctx, s.id)))  # (a chunk was uploaded)
        s.commit(f"chunk {i}")
        assert list(ctx.meta.scan(ctx.stage_partition(s.id)))  # left to the next call
        all_statements.clear()
        s.wait()
        assert all_statements == {
            "SELECT": 2,  # the staged fragment records, the upload records
            "BEGIN": 1,
            "DELETE": 2,  # the uploads partition, the staging partition
            "PRAGMA": 1,  # one incremental vacuum for both
            "COMMIT": 1,
        }, all_statements
        assert not list(ctx.meta.scan(uploads_partition(ctx, s.id)))
        assert not list(ctx.meta.scan(ctx.stage_partition(s.id)))
    assert not [k for k in GcState(ctx).candidates() if k.startswith("chunks/")]
    head = zarr.open_array(repo.readonly_session().store, path="a")
    for i in range(3):
        expected = np.random.default_rng(i).random((64, 64), dtype=np.float32)
        np.testing.assert_array_equal(head[i], expected)
