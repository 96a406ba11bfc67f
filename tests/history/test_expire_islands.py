"""A commit `expire` kept while it dropped the commit above it (a tag since deleted, an open
session's base) is expired by a later `expire` once nothing keeps it, on every metastore.

Before islands were noted, no walk from a branch head reached such a commit again: its
record and objects stayed forever, and the kill soak saw an acknowledged commit that was
neither in `main`'s history nor expired."""

from __future__ import annotations

from datetime import timedelta

import zarr

import zarrlake as zl
from tests.helpers.history import CHUNK, NCHUNKS, commit_chunks, read
from zarrlake.lifecycle.islands import islands


def new_repo(args: dict) -> zl.Repo:
    """A repository whose main holds array `a` (10 chunks of 10 int64, all 0)."""
    repo = zl.Repo.create(**args)
    s = repo.create_session()
    arr = zarr.open_group(s.store, mode="a").create_array(
        "a", shape=(CHUNK * NCHUNKS,), chunks=(CHUNK,), dtype="i8", fill_value=0
    )
    arr[:] = 0
    s.commit("create a")
    return repo


def test_a_tagged_commit_is_expired_once_its_tag_is_deleted(any_metastore):
    repo = new_repo(any_metastore)
    c1 = commit_chunks(repo, "main", {1: 1})
    repo.create_tag("v1", at=c1)
    commit_chunks(repo, "main", {2: 2})  # expired: the commit above the tag
    head = commit_chunks(repo, "main", {3: 3})
    repo.expire(older_than=timedelta(0))
    assert repo.expired_at(c1) is None and read(repo, "v1")[CHUNK] == 1
    assert islands(repo._context) == [c1]

    repo.delete_tag("v1")
    second = repo.expire(older_than=timedelta(0))
    assert repo.expired_at(c1) is not None, "the untagged commit was left behind"
    assert second.commits_expired == 1
    assert islands(repo._context) == []
    assert repo.log("main")[-1].id == head and repo.fsck() == []
    repo.close()


def test_an_open_sessions_base_behind_an_expired_commit_is_expired_after_it_ends(
    any_metastore,
):
    """The kill soak's case: a session keeps its base, which is no longer on its branch's
    line (the branch was moved), while the commits above the base on `main` expire."""
    repo = new_repo(any_metastore)
    start = repo.resolve("main")
    base = commit_chunks(repo, "main", {1: 1})
    repo.create_branch("dev", at=base)
    waiting = repo.create_session("dev")  # based on `base`, and kept open
    assert waiting.id  # handed over: its record, naming `base`, is stored
    repo.reset_branch("dev", start)
    commit_chunks(repo, "main", {2: 2})  # expired: the commit above the base
    commit_chunks(repo, "main", {3: 3})
    repo.expire(older_than=timedelta(0))
    assert repo.expired_at(base) is None, "an open session's base was expired"
    assert islands(repo._context) == [base]

    waiting.abandon()
    repo.expire(older_than=timedelta(0))
    assert repo.expired_at(base) is not None, "the session's former base was left behind"
    assert islands(repo._context) == [] and repo.fsck() == []
    repo.close()
