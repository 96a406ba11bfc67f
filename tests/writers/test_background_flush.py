"""A background (idle) flush that finds the session closed keeps its error for the handle's
next call, unless the session is open again by then: `copy_metastore(switch=False)` closes
open sessions while it copies them and reopens them after, and a flush in that window used
to make the session's commit fail although its writes were staged."""

from __future__ import annotations

from dataclasses import replace

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk
from zarrlake.session_records import SessionRecord, Status


def _closed_meanwhile(repo: zl.Repo, s: zl.Session, status: str) -> tuple[bytes, int]:
    """Close the session as the copy does, run the handle's idle flush, return the record as
    it was and the closed record's version."""
    ctx = repo._context
    got = ctx.meta.get(ctx.records.partition, s.id.encode())
    assert got is not None
    rec = SessionRecord.decode(got[0])
    closed = ctx.records.swap(replace(rec, status=status, lease=ctx.clock() + 3600), got[1])
    writes = s._txn.writes
    writes.stop()  # its timer is an hour away: the idle flush runs now
    writes._last_write -= 3600
    writes._on_idle()
    assert writes._error is not None  # it met the closed session
    return got[0], closed


def test_a_flush_that_met_a_session_closed_for_a_while_does_not_fail_its_commit(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo", settings={"flush": {"idle": 3600}})
    s = repo.create_session()
    s.write("a/c/0", chunk(0))
    original, version = _closed_meanwhile(repo, s, Status.COMMITTING)
    repo._context.meta.set_if(repo._context.records.partition, s.id.encode(), original, version)
    s.write("a/c/1", chunk(1))
    s.commit("after the copy")
    assert repo.readonly_session().read("a/c/0") == chunk(0)
    assert repo.readonly_session().read("a/c/1") == chunk(1)
    repo.close()


def test_a_flush_that_met_a_session_still_closed_reports_it(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo", settings={"flush": {"idle": 3600}})
    s = repo.create_session()
    s.write("a/c/0", chunk(0))
    _closed_meanwhile(repo, s, Status.COMMITTING)
    with pytest.raises(zl.SessionClosedError, match="being committed"):
        s.commit("too late")
    s.close()
    repo.close()
