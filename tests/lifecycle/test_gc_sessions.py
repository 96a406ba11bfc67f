"""What abandoned and expired sessions uploaded is reclaimed by the next incremental gc,
flushed or not, on SQLite, PostgreSQL and the bucket metastore; a writer killed mid-upload
leaves nothing after its session is abandoned; a live session's unflushed uploads survive
every gc. Writers that die are real processes.

Run as a module, this file is the writer that dies:
python -m tests.lifecycle.test_gc_sessions SPEC_JSON SESSION_ID flush|buffer|upload|burst|zarr-*
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.lifecycle import all_objects, chunk, fsck
from zarrlake.metastore.bucket.format import segment
from zarrlake.txn.uploads import UploadLog
from zarrlake.vc.gc_protocol import uploads_partition

ROOT = Path(__file__).resolve().parents[2]
ZERO = timedelta(0)
BIG = 64 << 10  # above Settings.stage_inline_max: each chunk is uploaded as its own object
N = 8


@pytest.fixture(params=["sqlite", "postgres", "bucket"])
def spec(request, tmp_path) -> dict:
    """Where a repository lives: {location, metastore, storage_options} for Repo.create."""
    if request.param == "sqlite":
        return {"location": str(tmp_path / "repo")}
    if request.param == "postgres":
        url = request.getfixturevalue("pg_metastore_url")
        return {"location": str(tmp_path / "repo"), "metastore": url}
    location, options = request.getfixturevalue("s3_location")
    return {"location": location, "storage_options": options}


@pytest.fixture
def repo(spec: dict):
    r = zl.Repo.create(**spec)
    yield r
    r.close()


def _items(seed: int) -> list[tuple[str, bytes]]:
    return [(f"b/c/{i}", chunk(seed + i, BIG)) for i in range(N)]


def _base(repo: zl.Repo) -> set[str]:
    """A committed array chunk (that must stay); the objects the repository holds then."""
    s = repo.create_session()
    s.write("a/c/0", chunk(0))
    s.commit("base")
    s.wait()
    repo.gc(ZERO)  # the commit's own clean-up settled: later runs count only the session's
    return all_objects(repo)


def _expire(repo: zl.Repo, session_id: str) -> None:
    repo._context.records.update(
        session_id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0})
    )


def _dies(spec: dict, session_id: str, how: str, crash_at: str | None = None) -> None:
    """Run a writer process that joins the session, writes, and is killed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    env.pop("ZARRLAKE_CRASH_AT", None)
    if crash_at:
        env["ZARRLAKE_CRASH_AT"] = crash_at
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.lifecycle.test_gc_sessions",
            json.dumps(spec),
            session_id,
            how,
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]


def _left(repo: zl.Repo, before: set[str]) -> set[str]:
    return all_objects(repo) - before


@pytest.mark.parametrize("flushed", [True, False], ids=["flushed", "buffered"])
def test_abandoned_session_is_reclaimed_by_an_incremental_gc(repo: zl.Repo, flushed: bool):
    before = _base(repo)
    s = repo.create_session()
    s.write_many(_items(10))
    if flushed:
        s.flush()
    assert len(_left(repo, before)) == N
    s.abandon()
    report = repo.gc(ZERO)
    assert not report.full
    assert _left(repo, before) == set()
    assert report.by_kind["chunks"] == (N, N * BIG)
    uploads = uploads_partition(repo._context, s.id)
    assert list(repo._context.meta.scan(uploads)) == []
    if repo.spec.metastore == "bucket":  # the partition's head and pages went too
        assert list(repo._context.object_store.list(f"meta/{segment(uploads)}/")) == []
    assert repo.readonly_session().read("a/c/0") == chunk(0)
    assert fsck(repo) == []


@pytest.mark.parametrize("flushed", [True, False], ids=["flushed", "buffered"])
def test_expired_session_is_reclaimed_by_an_incremental_gc(repo: zl.Repo, flushed: bool):
    """The handle stays alive (its process did not die): its buffered uploads count too."""
    before = _base(repo)
    s = repo.create_session()
    s.write_many(_items(20))
    if flushed:
        s.flush()
    _expire(repo, s.id)
    report = repo.gc(ZERO)
    assert report.sessions_expired == 1
    assert _left(repo, before) == set()
    assert repo.readonly_session().read("a/c/0") == chunk(0)
    with pytest.raises(zl.SessionExpiredError):
        s.commit("too late")
    assert _left(repo, before) == set()
    assert fsck(repo) == []


@pytest.mark.parametrize("how", ["buffer", "flush"])
@pytest.mark.parametrize("end", ["abandon", "expire"])
def test_a_dead_writers_uploads_are_reclaimed(spec: dict, repo: zl.Repo, end: str, how: str):
    """A worker that buffered its writes (uploaded, never flushed), or flushed them, and
    died: the session is then abandoned from another handle, or expires; an incremental gc
    reclaims its uploads."""
    before = _base(repo)
    s = repo.create_session()
    _dies(spec, s.id, how)
    assert len(_left(repo, before)) == N
    if end == "abandon":
        assert repo.abandon_sessions(ZERO) == [s.id]
    else:
        _expire(repo, s.id)
    repo.gc(ZERO)
    assert _left(repo, before) == set()
    assert fsck(repo) == []


def test_a_writer_killed_mid_upload_leaves_nothing(spec: dict, repo: zl.Repo):
    """Killed right after a chunk upload, before any reference to it was staged: once the
    session is abandoned, an incremental gc, and a full one, leave none of its objects."""
    before = _base(repo)
    s = repo.create_session()
    _dies(spec, s.id, "upload", crash_at="after_chunk_upload")
    assert _left(repo, before)  # at least the upload it was killed after
    s.abandon()
    repo.gc(ZERO)
    assert _left(repo, before) == set()
    repo.gc(ZERO, full=True)
    assert _left(repo, before) == set()
    assert fsck(repo) == []


@pytest.mark.parametrize("when", ["recorded", "uploading"])
def test_a_zarr_writer_killed_after_recording_leaves_what_gc_finds(
    spec: dict, repo: zl.Repo, when: str
):
    """A zarr array write records the objects of all its chunks in one metastore write
    before uploading any. Killed right after that write (before any upload) or after its
    first upload, the session's records name every object it uploaded, and once the
    session is abandoned an incremental gc leaves none of them."""
    before = _base(repo)
    s = repo.create_session()
    crash_at = "after_chunk_upload" if when == "uploading" else None
    _dies(spec, s.id, f"zarr-{when}", crash_at=crash_at)
    partition = uploads_partition(repo._context, s.id)
    recorded = {item[0].decode() for item in repo._context.meta.scan(partition)}
    assert len(recorded) == N  # every chunk of the write, in the one write it was killed after
    uploaded = _left(repo, before)
    assert uploaded <= recorded
    assert len(uploaded) >= 1 if when == "uploading" else uploaded == set()
    s.abandon()
    repo.gc(ZERO)
    assert _left(repo, before) == set()
    assert fsck(repo) == []


def _partials(repo: zl.Repo) -> list[str]:
    """Half-written object files (`<key>#<n>`) in a local repository directory."""
    root = Path(repo.spec.location)
    return [str(p) for p in root.rglob("*#*") if p.is_file()]


@pytest.mark.parametrize("spec", ["sqlite", "postgres"], indirect=True)
def test_full_gc_after_a_killed_writer_is_abandoned(spec: dict, repo: zl.Repo):
    """Killed while other uploads were half-written (in a local directory these are
    `<key>#<n>` files no listing shows): once the session is abandoned, a full run leaves
    none of its objects or files."""
    before = _base(repo)
    for _ in range(10):  # until the kill lands while a file is half-written
        s = repo.create_session()
        _dies(spec, s.id, "burst", crash_at="after_chunk_upload")
        s.abandon()
        if _partials(repo):
            break
    assert _partials(repo)
    report = repo.gc(ZERO, full=True)
    assert _left(repo, before) == set()
    assert _partials(repo) == []
    assert report.by_kind["chunks"][0] >= 1
    assert repo.readonly_session().read("a/c/0") == chunk(0)
    assert fsck(repo) == []


@pytest.mark.parametrize("spec", ["sqlite"], indirect=True)
def test_half_written_files_wait_for_their_grace(repo: zl.Repo):
    """A half-written file whose object is live (an upload in flight, or one another writer
    completed) stays unless it is an hour old; a dead one waits for the grace period."""
    _base(repo)
    live = next(iter(k for k in all_objects(repo) if k.startswith("chunks/")))
    root = Path(repo.spec.location)
    fresh_live, old_live = root / f"{live}#1", root / f"{live}#2"
    dead = root / "chunks" / f"{'ab' * 32}#1"
    for path in (fresh_live, old_live, dead):
        path.write_bytes(b"x" * 100)
    two_hours_ago = time.time() - 7200
    os.utime(old_live, (two_hours_ago, two_hours_ago))
    assert repo.gc(timedelta(hours=1), full=True).objects_deleted == 1  # old_live
    assert sorted(_partials(repo)) == sorted(map(str, (fresh_live, dead)))
    repo.gc(ZERO, full=True)
    assert _partials(repo) == [str(fresh_live)]
    assert repo.readonly_session().read("a/c/0") == chunk(0)


def test_live_unflushed_uploads_survive_every_gc(repo: zl.Repo):
    """An open session's buffered uploads are not deleted by an incremental or a full run
    (after another session was abandoned), and commit intact."""
    before = _base(repo)
    gone = repo.create_session()
    gone.write_many(_items(30))
    gone.abandon()
    s = repo.create_session()
    s.write_many(_items(40))  # buffered: no fragment names them yet
    repo.gc(ZERO)
    repo.gc(ZERO, full=True)
    assert len(_left(repo, before)) == N
    s.commit("late")
    head = repo.readonly_session()
    assert [head.read(k) for k, _ in _items(40)] == [d for _, d in _items(40)]
    repo.gc(ZERO, full=True)
    assert len(_left(repo, before)) >= N
    assert fsck(repo) == []


def _writer(spec: dict, session_id: str, how: str) -> None:
    """The process that dies: joins the session, writes, then is killed (by a crashpoint
    during the upload, or by itself once its writes are buffered or flushed)."""
    if how == "zarr-recorded":  # killed once the write's objects are recorded, before uploads
        record = UploadLog._write

        def record_then_die(log: UploadLog, items: list[tuple[str, int]]) -> None:
            record(log, items)
            if len(items) == N:
                os.kill(os.getpid(), signal.SIGKILL)

        UploadLog._write = record_then_die  # type: ignore[method-assign]
    s = zl.Repo.open(**spec).join_session(session_id)
    if how == "upload":
        for key, data in _items(50):
            s.write(key, data)
    elif how.startswith("zarr-"):  # one array write of N chunks through zarr
        shape = (N, 128, 128)  # chunks of 64 KiB: BIG
        arr = zarr.create_array(
            s.store, name="z", shape=shape, chunks=(1, 128, 128), dtype="f4", compressors=None
        )
        arr[...] = np.random.default_rng(7).random(shape, dtype="f4")
    elif how == "burst":  # many uploads at once: some are half-written when it is killed
        s.write_many([(f"c/c/{i}", chunk(70 + i, 4 << 20)) for i in range(16)])
    else:
        s.write_many(_items(60))
        if how == "flush":
            s.flush()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    _writer(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])
