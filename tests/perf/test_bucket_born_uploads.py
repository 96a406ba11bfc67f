"""A new session's first upload on the bucket-only metastore goes out right after its
record, which carries the upload's record (txn/birth.py): gc must count the object from the
record alone, live while the session is open and a candidate once it is finished, and then
clear the record's copy. The copy to the uploads partition is made to fail here, so the
record is the only place that names the object."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.core.counting import CountingMetaStore
from zarrlake.connection import RepoContext
from zarrlake.errors import TransientError
from zarrlake.format.chunk_ref import chunk_object_key

CHUNK = (64, 64)  # 16 KiB of float32: uploaded, not staged inline


class LosesUploadRecords(CountingMetaStore):
    """Refuses every write to a session's uploads partition (the copy of the record's)."""

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        if "/uploads/" in partition:
            raise TransientError("the uploads partition is unreachable (a test)")
        super().set_many(partition, items)


def _losing(repo: zl.Repo) -> zl.Repo:
    ctx = repo._context
    return zl.Repo(
        RepoContext(
            ctx.spec,
            ctx.repo_id,
            ctx.object_store,
            LosesUploadRecords(ctx.meta),
            hash=ctx.hash,
            format=ctx.format,
            session_shards=ctx.session_shards,
        )
    )


def _chunk_key(value: np.ndarray, repo: zl.Repo) -> str:
    return chunk_object_key(repo._context.objects.digest(value.tobytes()))


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
def test_an_upload_only_the_record_names_is_live_then_collected(any_metastore: dict) -> None:
    admin = zl.Repo.create(**any_metastore)
    s = admin.create_session()
    zarr.create_array(
        s.store, name="a", shape=(4, *CHUNK), chunks=(1, *CHUNK), dtype="f4", compressors=None
    )
    s.commit("array")
    worker = zl.Repo.open(**any_metastore)
    repo = _losing(worker)
    value = np.random.default_rng(1).random(CHUNK, dtype=np.float32)
    t = repo.create_session()
    zarr.open_array(t.store, path="a")[1] = value  # its copy lost: the write still returns
    key = _chunk_key(value, admin)
    sid = t._engine.id
    rec = admin._context.records.get(sid)[0]
    assert [k for k, _ in rec.uploads] == [key]
    assert admin._context.object_store.exists(key)
    uploads = admin._context.stage_partition(sid).replace("/stage/", "/uploads/")
    assert list(admin._context.meta.scan(uploads)) == []  # named by the record alone
    t._txn.fail("given up")  # its write never flushed: no fragment, no marker names it
    admin.gc(timedelta(0), full=True)  # the session is open: its upload is live
    assert admin._context.object_store.exists(key)
    assert admin.abandon_sessions(timedelta(0)) == [sid]
    admin.gc(timedelta(0))  # incremental: found through the record, no listing
    assert not admin._context.object_store.exists(key)
    assert admin._context.records.get(sid)[0].uploads == ()  # registered, then cleared
    assert admin.fsck() == []
    worker.close()
    admin.close()


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
def test_the_seal_clears_the_record_copy_only_once_the_partition_holds_it(
    any_metastore: dict,
) -> None:
    admin = zl.Repo.create(**any_metastore)
    s = admin.create_session()
    zarr.create_array(
        s.store, name="a", shape=(4, *CHUNK), chunks=(1, *CHUNK), dtype="f4", compressors=None
    )
    s.commit("array")
    rows = [np.random.default_rng(i).random(CHUNK, dtype=np.float32) for i in range(2)]
    t = admin.create_session()  # its copy lands: the seal clears the record's
    zarr.open_array(t.store, path="a")[0] = rows[0]
    assert len(admin._context.records.get(t._engine.id)[0].uploads) == 1
    t.commit("row 0")
    assert admin._context.records.get(t._engine.id)[0].uploads == ()
    worker = zl.Repo.open(**any_metastore)
    u = _losing(worker).create_session()  # its copy lost: the record keeps it past the seal
    zarr.open_array(u.store, path="a")[1] = rows[1]
    u.commit("row 1")
    u._txn.wait()
    assert len(admin._context.records.get(u._engine.id)[0].uploads) == 1
    admin.gc(timedelta(0))  # registered (the commit keeps the object), then cleared
    assert admin._context.records.get(u._engine.id)[0].uploads == ()
    got = zarr.open_array(admin.readonly_session().store, path="a", mode="r")[:2]
    assert np.array_equal(got, np.stack(rows))
    assert admin.fsck() == []
    worker.close()
    admin.close()
