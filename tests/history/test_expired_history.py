"""History after `expire`: every command works on every retained commit, walks that reach
the expiry boundary stop there and say so, and merges whose common ancestor expired fail
saying exactly that."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.cli import fails, ok
from tests.helpers.history import commit_chunks
from zarrlake.errors import ExpiredHistoryError

ENDED = "history before {} was expired on "


@dataclass
class Expired:
    repo: zl.Repo
    path: str
    report: object
    c1: str  # "create a", tagged v1, also dev's fork point
    c2: str  # expired: between the tag and the head
    c3: str  # main's head
    d1: str  # dev's head


@pytest.fixture
def expired(repo) -> Expired:
    """main: initial, c1 (tag v1), c2, c3; dev: c1, d1. After expire(0), main's log is c3
    alone, v1 and dev keep c1, and the initial commit and c2 are gone."""
    c1 = repo.resolve("main")
    repo.create_tag("v1", at=c1)
    repo.create_branch("dev", at=c1)
    d1 = commit_chunks(repo, "dev", {5: 50})
    c2 = commit_chunks(repo, "main", {1: 1})
    c3 = commit_chunks(repo, "main", {0: 3})
    report = repo.expire(older_than=timedelta(0))
    return Expired(repo, repo.spec.location, report, c1, c2, c3, d1)


def test_the_report_names_the_commit_each_log_ends_at(expired):
    repo = expired.repo
    assert expired.report.commits_expired == 2
    assert expired.report.oldest_retained == {"main": expired.c3, "dev": expired.c1}
    for branch, oldest in expired.report.oldest_retained.items():
        assert repo.log(branch)[-1].id == oldest
    assert repo.expired_at(expired.c2) is not None and repo.expired_at(expired.c3) is None


def test_walks_stop_at_the_boundary_and_say_so(expired):
    repo, c3 = expired.repo, expired.c3
    ended = ENDED.format(c3[:12])
    with pytest.raises(ExpiredHistoryError, match="'main~1': " + ended):
        repo.resolve("main~1")
    with pytest.raises(ExpiredHistoryError, match=f"last written before {c3[:12]}; {ended}"):
        repo.blame("a", (1,))  # written by c2 (expired)
    assert repo.blame("a", (0,)).id == c3
    assert repo.commit_changes("main").chunks_written == {"a": {(0,)}}
    assert repo.commit_changes("v1").nodes_added == {"", "a"}  # from its change set


def test_merge_with_an_expired_common_ancestor_says_so(expired):
    repo = expired.repo
    for call in (lambda: repo.merge_base("main", "dev"), lambda: repo.merge("dev")):
        with pytest.raises(ExpiredHistoryError) as e:
            call()
        text = str(e.value)
        assert "common history was expired" in text and ENDED.format(expired.c3[:12]) in text
        assert "zarrlake expire --branch" in text and "missing" not in text
    assert repo.resolve("main") == expired.c3


def test_fsck_tells_expired_history_from_missing_objects(expired):
    repo = expired.repo
    ends: list = []
    assert repo.fsck(on_expired=ends.append) == []
    assert {(e.commit, str(e).startswith(ENDED.format(e.commit[:12]))) for e in ends} == {
        (expired.c3, True),
        (expired.c1, True),
    }
    repo._context.object_store.delete(f"commits/{expired.d1}")  # now something is missing
    [problem] = repo.fsck()
    assert problem.kind == "missing" and problem.object == f"commits/{expired.d1}"


def test_every_command_works_on_retained_commits(expired):
    r, c3 = expired.path, expired.c3
    ended = ENDED.format(c3[:12])
    for ref in ("main", "v1", expired.c3, "dev"):
        show = ok("-r", r, "show", ref).stdout
        assert "(expired on " in show or ref == "dev"
        assert ok("-r", r, "ls", ref).code == 0 and ok("-r", r, "cat", ref, "a").code == 0
    assert ended in ok("-r", r, "log", "main").stdout.splitlines()[-1]
    graph = ok("-r", r, "log", "--graph").stdout.splitlines()
    assert graph[0].startswith(f"* {c3[:12]}") and graph[-1].startswith(ended)
    assert "expired" in fails("-r", r, "blame", "a", "1")
    assert fails("-r", r, "cat", "main~2", "a").startswith("'main~2': " + ended)
    for args in (("merge-base", "main", "dev"), ("merge", "dev")):
        assert "common history was expired" in fails("-r", r, *args)
    out = ok("-r", r, "fsck").stdout
    assert ended in out and "not a problem" in out
    assert ok("-r", r, "diff", "v1", "main").code == 0


def test_after_gc_the_retained_commits_still_show(expired):
    """gc reclaims the expired commits' snapshots; show reads the change set instead."""
    repo = expired.repo
    repo.gc(older_than=timedelta(0))
    assert not repo._context.object_store.exists(f"commits/{expired.c2}")
    assert "a " in ok("-r", expired.path, "show", "main").stdout
    assert repo.fsck() == []
