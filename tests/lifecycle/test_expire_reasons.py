"""`expire` says why it kept commits older than the cutoff on the branches it was given:
shared with another branch, tagged, a branch head, needed by an open session; in
`ExpireReport.kept` and on the command line."""

from __future__ import annotations

from datetime import timedelta

import zarr

import zarrlake as zl
from tests.helpers.cli import ok


def history(repo: zl.Repo, n: int) -> list[str]:
    """`n` commits on main; their ids, oldest first."""
    out = []
    for i in range(n):
        s = repo.create_session()
        zarr.create_array(s.store, name=f"a{i}", shape=(2,), dtype="i1")
        out.append(s.commit(f"c{i}"))
    return out


def test_what_expire_keeps_it_explains(repo):
    c = history(repo, 4)
    repo.create_branch("dev", at=c[1])
    repo.create_tag("v1", at=c[2])
    s = repo.create_session()  # open: needs main's head down to its base
    assert s.id  # handed over: its record is stored (at its first write or hand-over)
    report = repo.expire(timedelta(0), branches=["main"])
    root = repo.log()[-1].id  # (the initial commit)
    assert report.commits_expired == 0
    assert report.kept == {
        c[3]: ["head of branch 'main'", f"needed by open session {s.id} on 'main'"],
        c[2]: ["tagged 'v1'"],
        c[1]: ["head of branch 'dev'"],
        c[0]: ["shared with branch 'dev'"],
        root: ["shared with branch 'dev'"],
    }
    assert report.reasons()[0] == ("shared with branch 'dev'", 2)


def test_a_commit_expired_is_not_listed_as_kept(repo):
    c = history(repo, 3)
    repo.create_tag("v1", at=c[1])
    report = repo.expire(timedelta(0), branches=["main"])
    assert report.commits_expired == 2  # c[0] and the initial commit
    assert report.kept == {c[2]: ["head of branch 'main'"], c[1]: ["tagged 'v1'"]}


def test_the_command_line_prints_the_reasons(repo):
    c = history(repo, 3)
    repo.create_branch("dev", at=c[2])
    where = repo.spec.location
    out = ok("-r", where, "expire", "--older-than", "0s", "--branch", "main").stdout
    assert "expired 0 commit(s)" in out
    assert "kept 4 commit(s) older than that, because:" in out
    assert "  3 shared with branch 'dev'" in out
    assert "  1 head of branch 'dev'" in out and "  1 head of branch 'main'" in out
    doc = ok("-r", where, "expire", "--older-than", "0s", "--branch", "main", "--json").json()
    assert doc["kept"][c[2]] == ["head of branch 'dev'", "head of branch 'main'"]  # type: ignore[index]
