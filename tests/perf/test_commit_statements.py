"""The SQLite statements of a one-chunk commit call on a local repository (the W5 and W6
rows of the benchmarks), counted by SQLite's trace hook. Counts, not seconds: each
statement costs a few microseconds of the driver's Python and C, and each write
transaction holds the database's write lock, which W6's writer processes queue for.

The commit call's five writes (the final flush's registration, the seal, the fence, the
branch swap, the record's finish) are the protocol's, each still written; on SQLite the
first two are one write transaction (`MetaStore.batch`) and the last three another, so two
in all. What is pinned here is what each costs: a compare-and-swap is its conditional
write (no read of the version first), a guarded write of one key checks the others in
its `UPDATE` (a branch swap's fences as conditions of the branch's compare-and-swap),
a write transaction bumps the version counter once for all its writes (versions then
grow in the order writes happen, across threads and processes: staging takes the
latest of several workers' records by them), and the look at the branch, the
session's landing fence and the protection rules is one SELECT."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.statements import count_statements


@pytest.fixture
def statements(monkeypatch) -> Counter[str]:
    """The statements run on this thread's connections opened from now on, by their first
    word (BEGIN, SELECT, ...)."""
    me = threading.get_ident()
    return count_statements(monkeypatch, lambda: threading.get_ident() == me)


def test_a_one_chunk_commit_call_runs_17_statements_on_sqlite(
    statements: Counter[str], one_chunk_repo: zl.Repo
) -> None:  # (statements first: it traces the connections the repository opens)
    repo = one_chunk_repo
    for i in range(3):  # the count is the same for every commit, not only the first
        s = repo.create_session()
        zarr.open_array(s.store, path="a")[i] = np.full((64, 64), i + 1, np.float32)
        s.wait()  # (the zarr write's own calls run on zarr's thread, not counted here)
        statements.clear()
        s.commit(f"chunk {i}")
        assert statements == {
            "BEGIN": 2,  # the flush and the seal; the fence, the swap and the finish
            "COMMIT": 2,
            "UPDATE": 6,  # a version reservation per transaction, 3 compare-and-swaps,
            # the branch swap with its checks
            "INSERT": 2,  # the flush's 2 staged records
            "DELETE": 1,  # the flush's marker
            "SELECT": 4,  # the gc phase, the gather's scan, the branch with its landing
            # fence and rules, the branch again under the turn
        }, statements
        s.wait()
    head = zarr.open_array(repo.readonly_session().store, path="a")
    for i in range(3):
        np.testing.assert_array_equal(head[i], np.full((64, 64), i + 1, np.float32))
