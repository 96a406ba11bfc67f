"""The commit returns once its branch moved; on a remote metastore the session record's
`committed` goes out in the background (issue 34: one round trip less; on an embedded one
it is written in place, a handoff costing more than the write). The committing process
reads its own record committed; another reader that meets the record still `committing`
finds the attempt on the branch and records it committed itself."""

from __future__ import annotations

import threading

import pytest

import zarrlake as zl
from zarrlake.session_records import SessionRecord, SessionRecords


@pytest.fixture
def held(monkeypatch):
    """Background record writes wait for this event."""
    release = threading.Event()
    later = SessionRecords.later

    def held_later(self: SessionRecords, write):
        return later(self, lambda records: (release.wait(30), write(records))[1])

    monkeypatch.setattr(SessionRecords, "later", held_later)
    yield release
    release.set()


@pytest.mark.parametrize("any_metastore", ["s3-bucket", "s3-postgres"], indirect=True)
def test_a_reader_elsewhere_sees_a_returned_commit_committed(any_metastore, held) -> None:
    repo = zl.Repo.create(**any_metastore)
    s = repo.create_session(message="one")
    s.write("a/c/0", b"x" * 100)
    cid = s.commit()
    ctx = repo._context
    stored = SessionRecord.decode(ctx.meta.get(ctx.records.partition_of(s.id), s.id.encode())[0])
    assert stored.status == "committing" and cid in stored.attempts  # the finish is held
    other = zl.Repo.open(**any_metastore)  # another handle: it does not wait for ours
    info = other.session_info(s.id)
    assert (info.status, info.committed_as) == ("committed", cid)
    held.set()
    info = repo.session_info(s.id)  # this process waits for its own write
    assert (info.status, info.committed_as) == ("committed", cid)
    with pytest.raises(zl.SessionClosedError):
        other.join_session(s.id).write("a/c/1", b"y" * 100)
    other.close()
    repo.close()
