"""A new session's base check that could not look (the store did not answer as its first
write stored the session's record: txn/birth.py) is looked at again before any later write
of the session is acknowledged, and what that look meets is raised there: a base gone
refuses the write, another failure is raised by it, a base found lets it through. No write
is acknowledged on a session whose base was never checked (a chunk write buffered behind
the marker of the first write was, on the remote metastores, before the base was looked at
again).

On SQLite, on PostgreSQL and on the bucket metastore (S3 alone); the store fails the first
looks for the base's commit record, as an exhausted retry raises."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.refused_base import repo_to_reset
from zarrlake.connection import RepoContext
from zarrlake.errors import NotFoundError, TransientError
from zarrlake.storage.base import ObjectStore, WrapperObjectStore

GONE = "no longer exists: branch 'main' moved off it"
ROW = np.arange(64 * 64, dtype="f4").reshape(64, 64)


class FailsLooks(WrapperObjectStore):
    """Fails the next `fails` looks for a commit record."""

    def __init__(self, inner: ObjectStore, fails: int) -> None:
        super().__init__(inner)
        self.fails = fails

    def exists(self, key: str) -> bool:
        if key.startswith("commits/") and self.fails:
            self.fails -= 1
            raise TransientError("injected: the store did not answer")
        return super().exists(key)


def _failing(where: dict, fails: int) -> tuple[zl.Repo, FailsLooks]:
    """The repository at `where`, opened in this process with FailsLooks over its store."""
    ctx = zl.Repo.open(**where, settings={"flush": {"idle": None}})._context
    store = FailsLooks(ctx.object_store, fails)
    repo = zl.Repo(
        RepoContext(
            ctx.spec,
            ctx.repo_id,
            store,
            ctx.meta,
            hash=ctx.hash,
            format=ctx.format,
            session_shards=ctx.session_shards,
            settings=ctx.settings,
        )
    )
    return repo, store


def _sessions(repo: zl.Repo) -> set[str]:
    return {r.id for r in repo._context.records.scan()}


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-postgres", "s3-bucket"], indirect=True)
def test_a_write_after_a_failed_base_check_is_refused_when_the_base_is_gone(
    any_metastore: dict,
) -> None:
    old = repo_to_reset(any_metastore)
    admin = zl.Repo.open(**any_metastore)
    repo, _ = _failing(any_metastore, fails=1)
    t = repo.create_session()  # based on the head: no record stored yet
    admin.reset_branch("main", old)
    assert admin.gc(timedelta(0)).by_kind["commits"][0] == 1  # the base of `t`
    big = zarr.open_array(t.store, path="big")
    small = zarr.open_array(t.store, path="small")
    with pytest.raises(TransientError, match="did not answer"):
        big[1] = ROW  # the first write: its base check could not look
    with pytest.raises(NotFoundError, match=GONE):
        small[1] = 1  # buffered behind the first write's marker: looked at again first
    with pytest.raises(NotFoundError, match=GONE):
        small[2] = 2  # refused for good
    with pytest.raises(NotFoundError, match=GONE):
        t.commit("never")
    assert t._engine.id not in _sessions(admin)  # the refusal deleted its record
    assert admin.fsck() == []
    repo.close()
    admin.close()


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-postgres", "s3-bucket"], indirect=True)
@pytest.mark.parametrize("fails", [1, 2])
def test_a_write_after_a_failed_base_check_counts_once_the_base_is_found(
    any_metastore: dict, fails: int
) -> None:
    """`fails` looks fail: the first write's, then (2) the look again of the next write,
    which raises it; the write after finds the base and counts, as does the commit."""
    repo_to_reset(any_metastore)
    repo, store = _failing(any_metastore, fails)
    t = repo.create_session()
    big = zarr.open_array(t.store, path="big")
    small = zarr.open_array(t.store, path="small")
    with pytest.raises(TransientError, match="did not answer"):
        big[1] = ROW
    if fails == 2:
        with pytest.raises(TransientError, match="did not answer"):
            small[1] = 1  # its look again failed: raised here, not acknowledged
    assert store.fails == 0
    small[1] = 1
    big[2] = ROW
    t.commit("rows")
    reader = zl.Repo.open(**any_metastore)
    got = reader.readonly_session().store
    expected_small = np.zeros((4, 4), dtype="f4")
    expected_small[0:2] = 1
    np.testing.assert_array_equal(zarr.open_array(got, path="small", mode="r")[:], expected_small)
    expected_big = np.zeros((4, 64, 64), dtype="f4")
    expected_big[2] = ROW
    np.testing.assert_array_equal(zarr.open_array(got, path="big", mode="r")[:], expected_big)
    reader.close()
    repo.close()


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-postgres", "s3-bucket"], indirect=True)
def test_a_marker_stored_beside_a_failed_base_check_is_dropped_by_the_next_flush(
    any_metastore: dict,
) -> None:
    """The first write is a chunk staged inline: it stores its unflushed-writes marker,
    and on a remote metastore its base check beside it fails without undoing that. The
    writer keeps the marker as its batch's, and its flush drops it: another handle's
    commit then finds no unflushed writes of it to wait for (it waited, and refused
    naming this writer as holding writes it never flushed)."""
    repo_to_reset(any_metastore)
    repo, store = _failing(any_metastore, fails=1)
    t = repo.create_session()
    small = zarr.open_array(t.store, path="small")
    with pytest.raises(TransientError, match="did not answer"):
        small[1] = 1
    assert store.fails == 0
    small[2] = 2
    t.flush()
    other = zl.Repo.open(**any_metastore)
    joined = other.join_session(t.id)
    joined.commit("row 2")
    got = other.readonly_session().store
    expected = np.zeros((4, 4), dtype="f4")
    expected[0], expected[2] = 1, 2
    np.testing.assert_array_equal(zarr.open_array(got, path="small", mode="r")[:], expected)
    other.close()
    repo.close()
