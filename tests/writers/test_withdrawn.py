"""A handle whose own writes a flush withdrew (a purge removed the object its write reused
before the write was staged) cannot commit without them by accident: its commit refuses
(as PostgreSQL refuses to commit after a failed statement) until it writes them again, or
until the caller chooses `unfinished=` to commit its other writes without them."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.format.chunk_ref import RefKind

SECRET = np.arange(64 * 64, dtype="f8").reshape(64, 64) + 0.5  # 32 KiB chunks: objects
BASE = np.full((64, 64), 7.0)


def _read(repo: zl.Repo, ref: str) -> np.ndarray:
    return zarr.open_array(repo.readonly_session(ref).store, path="copy", mode="r")[:]


def _withdrawn(repo: zl.Repo) -> tuple[zl.Session, np.ndarray]:
    """A session whose handle flushed one chunk of `copy`, then had its write of chunk
    (0, 0) withdrawn by a purge, then buffered a write of chunk (1, 0) again; returns it
    with what its other writes make of `copy`."""
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g.create_array("secret", shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = (
        SECRET
    )
    g.create_array("copy", shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = BASE
    s.commit("with the leak")
    s = repo.create_session()
    del zarr.open_group(s.store)["secret"]
    s.commit("drop the leak")

    s = repo.create_session()
    copy = zarr.open_array(s.store, path="copy")
    expected = BASE.copy()
    copy[32:] = expected[32:] = 1.0
    s.flush()
    key, ref = s._engine.prepare("copy/c/0/0", SECRET[:32].tobytes())  # a dedup hit
    assert ref is not None and ref.kind == RefKind.OBJECT
    repo.purge(["secret"], reason="leak", by="me")
    s._engine.stage([(key, ref)])
    with pytest.raises(zl.ZarrLakeError, match=r"purge removed 1 chunk object.*write those"):
        s.flush()
    copy[32:] = expected[32:] = 2.0  # buffered: the commit flushes it
    return s, expected


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_a_commit_after_withdrawn_writes_refuses_unless_told(any_metastore):
    repo = zl.Repo.create(**any_metastore)
    s, expected = _withdrawn(repo)
    before = repo.resolve("main")
    session_view = zarr.open_array(s.store, path="copy")[:]  # the handle reads without them
    np.testing.assert_array_equal(session_view[:32], BASE[:32])
    with pytest.raises(zl.UnfinishedWritersError, match="this handle were withdrawn") as e:
        s.commit("without the withdrawn chunk?")
    assert "purge removed 1 chunk object" in str(e.value)
    assert "unfinished='include'" in str(e.value)
    assert e.value.workers and e.value.workers[0].startswith("this handle")
    assert repo.resolve("main") == before  # nothing was committed
    done = s.commit("without it, on purpose", unfinished="include")
    np.testing.assert_array_equal(_read(repo, done), expected)  # (0, 0) as the base has it
    np.testing.assert_array_equal(_read(repo, done)[:32], BASE[:32])
    s.wait()  # the commit's clean-up, before the S3 server may stop


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_discard_keeps_the_handles_other_writes(any_metastore):
    repo = zl.Repo.create(**any_metastore)
    s, expected = _withdrawn(repo)
    done = s.commit("without it", unfinished="discard")
    np.testing.assert_array_equal(_read(repo, done), expected)
    s.wait()  # the commit's clean-up, before the S3 server may stop


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_withdrawn_writes_written_again_commit_without_a_choice(any_metastore):
    repo = zl.Repo.create(**any_metastore)
    s, expected = _withdrawn(repo)
    with pytest.raises(zl.UnfinishedWritersError):
        s.commit("refused")
    copy = zarr.open_array(s.store, path="copy")
    copy[:32] = expected[:32] = 3.0  # the withdrawn chunk written again
    s.flush()
    done = s.commit("with it written again")
    np.testing.assert_array_equal(_read(repo, done), expected)
    s.wait()  # the commit's clean-up, before the S3 server may stop


@pytest.mark.parametrize("any_metastore", ["sqlite", "s3-bucket"], indirect=True)
def test_two_withdrawn_batches_without_markers_each_keep_their_error(any_metastore):
    """A batch flushed while an upload was still unstaged hands its unflushed marker to the
    next batch, so it has none of its own; two such batches withdrawn each leave an error
    marker of their own (they shared generation 0: the second's replaced the first's)."""
    repo = zl.Repo.create(**any_metastore)
    other = SECRET + 1000.0
    s = repo.create_session()
    g = zarr.open_group(s.store)
    for name, values in (("one", SECRET), ("two", other)):
        g.create_array(name, shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = (
            values
        )
    g.create_array("copy", shape=(64, 64), chunks=(32, 64), dtype="f8", compressors=None)[:] = BASE
    s.commit("with the leaks")
    s = repo.create_session()
    del zarr.open_group(s.store)["one"]
    del zarr.open_group(s.store)["two"]
    s.commit("drop the leaks")

    s = repo.create_session()
    engine = s._engine
    engine.prepare("copy/c/1/0", np.full((32, 64), 9.5).tobytes())  # uploaded, never staged
    lost = []
    for name, key, values in (("one", "copy/c/0/0", SECRET), ("two", "copy/c/1/0", other)):
        key, ref = engine.prepare(key, values[:32].tobytes())  # a dedup hit
        assert ref is not None and ref.kind == RefKind.OBJECT
        lost.append(ref.digest)
        engine.stage([(key, ref)])
        repo.purge([name], reason="leak", by="me")
        with pytest.raises(zl.ZarrLakeError, match=r"purge removed 1 chunk object"):
            s.flush()
    with pytest.raises(zl.UnfinishedWritersError, match="this handle were withdrawn") as e:
        s.commit("without the withdrawn chunks?")
    named = [d.hex() for d in lost if d.hex() in str(e.value)]
    assert len(named) == 2, str(e.value)  # each withdrawal names the object it lost
