"""Two expiries dooming one commit share its marker (soak seed 1000050): whichever order
the one deleting its record and the one taking the marker back (it saw an operation keep
the commit) act in, a commit whose record is gone keeps its marker, so the history below
a retained commit ends there instead of at a missing parent. Real SQLite metastore, local
object store; the other expiry's step is made at the point the race put it."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck
from zarrlake.lifecycle import expire as expiring

ZERO = timedelta(0)


def _history(repo: zl.Repo) -> tuple[str, str]:
    """(main's head's parent, main's head): with `expire(ZERO)` the parent, and the commit
    below it, are doomed; the head stays."""
    ids = []
    for i in range(3):
        s = repo.create_session("main")
        s.write(f"a/c/{i}", chunk(i))
        ids.append(s.commit(f"c{i}"))
        s.wait()
    return ids[1], ids[2]


def _marker(repo: zl.Repo, cid: str) -> bool:
    return repo._context.object_store.exists(f"expired/{cid}")


def test_a_marker_taken_back_after_another_expiry_deleted_the_record_is_put_again(
    repo: zl.Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, above = _history(repo)
    real = expiring.protected
    calls = []

    def protected(ctx, selected):
        keep = real(ctx, selected)
        calls.append(len(calls))
        if len(calls) == 2:  # its re-read after the markers
            ctx.object_store.delete(f"commits/{old}")  # the other expiry deleted the record
            keep |= {old}  # ...while this one saw an operation keep it (which then refused)
        return keep

    monkeypatch.setattr(expiring, "protected", protected)
    report = repo.expire(ZERO)
    assert report.commits_expired == 2 and len(calls) == 2  # the two commits below it went
    assert _marker(repo, old)
    assert repo.expired_at(old) is not None
    assert fsck(repo) == []
    repo._context.objects.forget(old)  # cached when this process read it; another deleted it
    assert [c for c, _ in repo._context.objects.history(above)][-1] == above


def test_a_marker_taken_back_before_the_record_was_deleted_is_put_again(
    repo: zl.Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, above = _history(repo)
    real = expiring.drop_check_results
    taken = []

    def drop_check_results(ctx, commits):
        real(ctx, commits)
        if old in commits:  # just before the records go: the other expiry takes it back
            ctx.object_store.delete(f"expired/{old}")
            taken.append(old)

    monkeypatch.setattr(expiring, "drop_check_results", drop_check_results)
    report = repo.expire(ZERO)
    assert report.commits_expired == 3 and taken == [old]  # with the repository's first
    assert _marker(repo, old)
    assert not repo._context.object_store.exists(f"commits/{old}")
    assert fsck(repo) == []
    assert [c for c, _ in repo._context.objects.history(above)][-1] == above
