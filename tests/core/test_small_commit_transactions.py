"""The metastore transactions of a small commit whose only writer is the committing handle,
on SQLite (the embedded default), counted call by call. Each write is one metastore call
(the commit's are two SQLite write transactions, `MetaStore.batch`: counted in
tests/perf/test_commit_statements.py); each read one query. The protocol's needs, in order:

- create_session: the branch head and the metastore's move marker (2 reads); the session's
  record is not stored yet (txn/birth.py);
- the first write: the session record, stored before anything of the session is (write),
  the writer's "unflushed writes" mark (write); the staging partition's metadata lookup
  is answered without I/O, as nobody else can have staged in a session nobody knows;
- commit: the final flush's fragment registration (write), the branch's protection rules
  and checks, the branch head (reads), the seal (write), the gc phase, the writers'
  states, the landing fence (reads), the commit id recorded on the sealed record (write),
  the branch swap with its landing fence in one `write_if` (write);
- the record's committed status (write; on SQLite in the branch swap's transaction), and
  in the background after the commit returns the staged records' gc registration (2
  reads) and the staging partition dropped (write).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import zarr

import zarrlake as zl
from tests.core.counting import counted

WRITES = {"set", "set_many", "delete", "set_if", "delete_if", "write_if", "drop_partition"}


def split(calls: Counter[str]) -> tuple[int, int]:
    """(write transactions, reads) among counted metastore calls."""
    writes = sum(n for name, n in calls.items() if name in WRITES)
    return writes, sum(calls.values()) - writes


def test_a_one_writer_small_commit_on_sqlite_takes_the_protocols_transactions(
    tmp_path: Path,
) -> None:
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=(4, 8), chunks=(1, 8), dtype="i4")
    s.commit("array")
    repo, _, meta = counted(repo)

    def step(action: object) -> tuple[int, int]:
        before = Counter(meta.calls)
        action() if callable(action) else None
        return split(meta.calls - before)

    session: list[zl.Session] = []
    assert step(lambda: session.append(repo.create_session())) == (0, 2)
    s = session[0]
    assert step(lambda: zarr.open_array(s.store, path="a").__setitem__(1, 7)) == (2, 0)
    # the commit's 4 writes and 5 reads, and the background's 2 and 2 (counted together:
    # the background part may run before commit returns)
    assert step(lambda: (s.commit("one chunk"), s.wait())) == (6, 7)
    assert zarr.open_array(repo.readonly_session().store, path="a")[1].tolist() == [7] * 8
