"""A history operation paused past its keep record (vc/keep.py `KEEP_TTL`) must not point a
ref at a commit `expire` dropped meanwhile: gc and `expire` count a lapsed record while it
exists (and delete it), and the operation's fence before its ref move renews its record, or
writes it again and re-checks, refusing a dropped commit. Real repositories on SQLite; the
clocks (the library's runtime clock, which dates commits, and the metastore's, which times
keep records) are stepped past the record's time."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zarrlake as zl
from tests.simulator import Config, run
from zarrlake._util import runtime
from zarrlake.errors import ExpiredHistoryError
from zarrlake.metastore.sqlite import SqliteMetaStore
from zarrlake.vc import refs
from zarrlake.vc.keep import KEEP_TTL

START = 1_767_225_600.0


@pytest.fixture
def clock(monkeypatch):
    """The library's clock and the metastore's, set by the test."""
    now = [START]
    monkeypatch.setattr(SqliteMetaStore, "clock", lambda self: now[0])
    token = runtime.use(runtime.Runtime(now=lambda: now[0]))
    yield now
    runtime.reset(token)


def _history(tmp_path, clock) -> tuple[zl.Repo, str]:
    """A repository whose main holds an old commit (returned) below a newer head."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session("main")
    s.write("a/c/0", b"old")
    old = s.commit("old")
    clock[0] += 100.0
    s = repo.create_session("main")
    s.write("a/c/0", b"new")
    s.commit("new")
    clock[0] += 100.0
    return repo, old


def _pause_before_tag(monkeypatch, clock, expiries: int, path) -> None:
    """Make the tag's ref creation wait past its keep record while `expire` runs
    `expiries` times (from another handle) before it swaps."""
    original = refs.Refs.create

    def create(self, kind, name, commit_id):
        if kind == refs.TAG:
            clock[0] += 2 * KEEP_TTL
            other = zl.Repo.open(path)
            for _ in range(expiries):
                other.expire(older_than=timedelta(seconds=1))
        original(self, kind, name, commit_id)

    monkeypatch.setattr(refs.Refs, "create", create)


def test_one_expiry_during_the_pause_keeps_the_commit(tmp_path, clock, monkeypatch):
    repo, old = _history(tmp_path, clock)
    _pause_before_tag(monkeypatch, clock, 1, tmp_path / "repo")
    assert repo.create_tag("t", old) == old
    assert repo.commit_info("t").id == old  # its record is still there
    assert repo.fsck() == []


def test_a_second_expiry_drops_it_and_the_tag_is_refused(tmp_path, clock, monkeypatch):
    repo, old = _history(tmp_path, clock)
    _pause_before_tag(monkeypatch, clock, 2, tmp_path / "repo")
    with pytest.raises(ExpiredHistoryError):
        repo.create_tag("t", old)
    assert "t" not in repo.list_tags()
    assert repo.fsck() == []


def test_seed_1235_with_stuck_reads_holds_every_invariant():
    """A reset paused past its keep record by a clock jump: `expire` ignored the lapsed
    record and deleted the commit record the reset then pointed `dev` at."""
    result = run(Config(1235, stuck_reads=True))
    assert result.ok, result.failure
