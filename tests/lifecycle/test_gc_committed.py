"""A commit's clean-up registers as gc candidates only the uploads its commit did not keep
(vc/gc_protocol.register_staged): what the commit keeps is found through the commit once
it is dropped or expired, so an incremental gc still reclaims everything, and no run reads
back the kept objects only to find them live."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck, unreachable
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.format.digest import DEFAULT, digest
from zarrlake.vc.gc_protocol import GcState, register_staged, uploads_partition

ZERO = timedelta(0)


def key(seed: int) -> str:
    return chunk_object_key(digest(DEFAULT, chunk(seed)))


def chunk_candidates(repo: zl.Repo) -> set[str]:
    return {k for k in GcState(repo._context).candidates() if k.startswith("chunks/")}


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_only_what_the_commit_did_not_keep_becomes_a_candidate(any_metastore: dict) -> None:
    repo = zl.Repo.create(**any_metastore)
    s = repo.create_session()
    s.write_many([("a/c/0", chunk(0)), ("a/c/1", chunk(1))])
    s.flush()
    s.write("a/c/0", chunk(2))  # overwrites an uploaded chunk in the same session
    s.commit("one")
    s.wait()
    assert chunk_candidates(repo) == {key(0)}
    assert not list(repo._context.meta.scan(uploads_partition(repo._context, s.id)))
    report = repo.gc(ZERO)
    assert report.by_kind["chunks"][0] == 1 and unreachable(repo) == set()
    assert repo.readonly_session().read("a/c/0") == chunk(2)
    assert repo.readonly_session().read("a/c/1") == chunk(1)
    repo.close()


@pytest.mark.parametrize("how", ["expire", "delete", "reset"])
def test_what_a_commit_kept_is_reclaimed_once_unreachable(tmp_path, how: str) -> None:
    """Overwritten and expired, or on a deleted or reset branch: an incremental run deletes
    the kept chunks without any candidate record of them."""
    repo = zl.Repo.create(tmp_path / "repo")
    branch = "main" if how == "expire" else "dev"
    if branch != "main":
        repo.create_branch(branch)
    for seed in (10, 11):
        s = repo.create_session(branch)
        s.write_many([("a/c/0", chunk(seed)), (f"a/c/{seed}", chunk(seed + 100))])
        s.commit(f"seed {seed}")
        s.wait()
    assert chunk_candidates(repo) == set()
    if how == "expire":
        repo.expire(ZERO)
    elif how == "delete":
        repo.delete_branch(branch)
    else:
        repo.reset_branch(branch, "main")
    garbage = unreachable(repo)
    assert key(10) in garbage
    report = repo.gc(ZERO)
    assert not report.full and report.objects_deleted == len(garbage)
    assert unreachable(repo) == set()
    assert fsck(repo) == []
    repo.close()


def test_an_unreadable_commit_registers_every_upload(tmp_path) -> None:
    """The clean-up cannot tell what a commit it cannot read kept (expired meanwhile, say):
    everything its session uploaded is registered, as before."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    s.write_many([("a/c/0", chunk(0)), ("a/c/1", chunk(1))])
    s.flush()
    assert register_staged(repo._context, s.id, committed="0" * 64) >= 2
    assert {key(0), key(1)} <= chunk_candidates(repo)
    s.close()
    repo.close()
