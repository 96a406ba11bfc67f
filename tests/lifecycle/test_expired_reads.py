"""A session gc expired and whose staged records it dropped reads none of its writes as
missing: a read of a key it flushed, or of a metadata document it staged, raises the
session's state (soak seed 1005178 read nothing where its own write was). Real SQLite
metastore, local object store."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk
from zarrlake.errors import SessionClosedError, SessionExpiredError

GROUP = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'


def _expired_by_gc(repo: zl.Repo) -> zl.Session:
    """A session with a flushed chunk and a staged group document, expired and swept up by
    gc while its handle stays."""
    now = [1_000_000.0]
    repo._context.clock = lambda: now[0]
    s = repo.create_session("main", expires_in=timedelta(minutes=2))
    s.write("a/c/5", chunk(5))
    s.write("g/zarr.json", GROUP)
    s.flush()
    assert s.read("a/c/5") == chunk(5)
    now[0] += 35 * 3600.0  # a long stall: the session expires, and gc drops its records
    report = repo.gc(timedelta(hours=1))
    assert report.sessions_expired == 1 and report.staged_records_deleted > 0
    return s


def test_reads_of_own_writes_raise_once_gc_dropped_them(repo: zl.Repo) -> None:
    s = _expired_by_gc(repo)
    with pytest.raises(SessionExpiredError, match="expired"):
        s.read("a/c/5")
    with pytest.raises(SessionExpiredError, match="expired"):
        s.read("g/zarr.json")
    with pytest.raises(SessionExpiredError):
        s.list_prefix("a/")
    assert repo.readonly_session("main").read("a/c/5") is None  # nothing landed


def test_reads_of_own_writes_after_an_abandon_by_another_handle_raise(repo: zl.Repo) -> None:
    s = repo.create_session("main")
    s.write("a/c/1", chunk(1))
    s.flush()
    other = repo.join_session(s.id)
    assert other.read("a/c/1") == chunk(1)  # another worker sees it while it is staged
    other.abandon()
    with pytest.raises(SessionClosedError, match="abandoned"):
        s.read("a/c/1")


def test_a_handle_that_wrote_nothing_reads_the_base_as_before(repo: zl.Repo) -> None:
    writer = repo.create_session("main")
    writer.write("a/c/2", chunk(2))
    writer.flush()
    reader = repo.join_session(writer.id)
    writer.abandon()
    assert reader.read("a/c/2") is None  # it staged nothing: nothing of its own is missing
