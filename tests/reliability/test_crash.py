"""Suite 3: crash safety. A real writer process SIGKILLs itself at each fault point of the
write and commit paths (ZARRLAKE_CRASH_AT); a fresh repository handle then verifies that the
repository opens, every reachable object is intact (check_repo), committed data reads back,
and the interrupted session committed fully or not at all, its record recovering from
"committing" once its lease is past (the lease is rewritten into the past, not waited for).

Run as a module, this file is the writer: python -m tests.reliability.test_crash DIR SESSION_ID
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.reliability import size
from zarrlake._util.crashpoints import POINTS
from zarrlake.session_records import SessionRecord

ROOT = Path(__file__).resolve().parents[2]
# big: 16 KiB chunk objects; mid: 800-byte chunks packed per commit; tiny: inline in manifests
ARRAYS = {"big": (4096, 2048), "mid": (400, 100), "tiny": (8, 4), "other": (4, 4)}
OLD = {name: np.arange(n, dtype="<i8") for name, (n, _) in ARRAYS.items()}
NEW = {
    name: np.arange(n, dtype="<i8") * 7 + 1 for name, (n, _) in ARRAYS.items() if name != "other"
}
INTERLOPER = np.full(4, 99, dtype="<i8")

# Where each point leaves the branch, and the session's status after lease recovery. On
# SQLite the fence, the branch swap and the record's finish are one transaction: a kill
# at after_branch_cas (between the swap and the finish) leaves the state before it, as a
# kill at before_branch_cas does (SQLITE_OUTCOME); on PostgreSQL the branch has moved.
OUTCOME = {
    "after_chunk_upload": (False, "open"),
    "after_staging": (False, "open"),
    "after_seal": (False, "open"),
    "after_objects_written": (False, "open"),
    "before_branch_cas": (False, "open"),
    "after_branch_cas": (True, "committed"),
    "after_session_committed": (True, "committed"),
}
SQLITE_OUTCOME = {**OUTCOME, "after_branch_cas": (False, "open")}


def write_arrays(store, values: dict[str, np.ndarray], attrs: dict | None = None) -> None:
    root = zarr.open_group(store, mode="a")
    for name, data in values.items():
        n, c = ARRAYS[name]
        arr = root.require_array(name, shape=(n,), chunks=(c,), dtype="<i8", compressors=None)
        arr[:] = data
        if attrs:
            arr.attrs.update(attrs)


def read_arrays(repo: zl.Repo, ref: str) -> dict[str, np.ndarray]:
    root = zarr.open_group(repo.readonly_session(ref).store, mode="r")
    return {name: root[name][:] for name in ARRAYS}


def writer(location: str, sid: str, meta: str | None = None) -> None:
    """The process that is killed: joins the session, writes every array, commits."""
    s = zl.Repo.open(location, metastore=meta).join_session(sid)
    write_arrays(s.store, NEW, attrs={"run": "crash"})
    s.commit()


def _recover(repo: zl.Repo, sid: str) -> SessionRecord:
    """Rewrite a "committing" record's lease into the past, then let a reader recover it."""
    records = repo._context.records
    rec, _ = records.get(sid)
    if rec.status == "committing":
        records.update(sid, lambda r: replace(r, lease=time.time() - 1))
        with contextlib.suppress(zl.SessionClosedError):
            repo.join_session(sid)
    return records.get(sid)[0]


CASES = [(p, r, k, "sqlite") for k in range(size(1, 3)) for p in POINTS for r in (False, True)]
BETWEEN = ("before_branch_cas", "after_branch_cas")
"""The points between the fence, the branch swap and the record's finish: a state of its
own on PostgreSQL (and the bucket metastore), inside one transaction on SQLite."""
CASES += [(p, r, 0, "postgres") for p in BETWEEN for r in (False, True)]


@pytest.mark.parametrize(("point", "rebase", "round_", "store"), CASES)
def test_crash_at_every_point(point, rebase, round_, store, tmp_path, figures, request):
    meta = request.getfixturevalue("pg_metastore_url") if store == "postgres" else None
    location = str(tmp_path / "repo")
    repo = zl.Repo.create(location, metastore=meta)
    s = repo.create_session()
    write_arrays(s.store, OLD)
    base = s.commit("base")
    sid = repo.create_session(message="interrupted").id
    if rebase:  # the branch moves after the session began: its commit must rebase
        other = repo.create_session()
        write_arrays(other.store, {"other": INTERLOPER})
        other.commit("interloper")

    env = {**os.environ, "ZARRLAKE_CRASH_AT": point}
    env.pop("ZARRLAKE_FAULTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability.test_crash", location, sid, meta or ""],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    figures["crash: kills performed"] += 1

    fresh = zl.Repo.open(location, metastore=meta)
    assert fresh.fsck() == []
    moved, status = (OUTCOME if meta else SQLITE_OUTCOME)[point]
    head = fresh.resolve("main")
    log = fresh.log("main")
    assert (log[0].session_id == sid) is moved
    earlier = log[1:] if moved else log
    if rebase:
        assert earlier[0].message == "interloper" and earlier[1].id == base
    else:
        assert earlier[0].id == base

    rec = _recover(fresh, sid)
    assert rec.status == status
    old = {**OLD, "other": INTERLOPER} if rebase else OLD
    got = read_arrays(fresh, "main")
    if moved:
        assert rec.commit == head
        for name in NEW:
            np.testing.assert_array_equal(got[name], NEW[name])
        np.testing.assert_array_equal(got["other"], old["other"])
        assert fresh.log("main")[0].message == "interrupted"
        return
    for name in ARRAYS:
        np.testing.assert_array_equal(got[name], old[name])

    # Not committed: the session is open again and a fresh process can finish it. Writes
    # the killed worker never flushed are not left out silently: the commit names it.
    resumed = fresh.join_session(sid)
    staged = dict(resumed._staged_changes())
    try:
        cid = resumed.commit("resumed")
    except zl.UnfinishedWritersError as e:  # the killed worker is gone
        assert point in ("after_chunk_upload", "after_staging")
        assert "gone" in str(e) and len(e.workers) == 1
        figures["crash: dead workers' unflushed writes named"] += 1
        if not staged:  # nothing the killed worker wrote became durable: no change
            with pytest.raises(zl.NoChangesError):
                resumed.commit("resumed", unflushed="discard")
            figures["crash: empty resumed commits refused"] += 1
            return
        cid = resumed.commit("resumed", unflushed="discard")
    assert fresh.resolve("main") == cid
    assert fresh.fsck() == []
    after = read_arrays(fresh, "main")
    if point not in ("after_chunk_upload", "after_staging"):  # every write was staged
        for name in NEW:
            np.testing.assert_array_equal(after[name], NEW[name])
    else:
        for key, ref in staged.items():
            assert fresh.readonly_session("main").read(key) == (
                None if ref is None else fresh._context.objects.read_ref(ref, key)
            )


if __name__ == "__main__":
    writer(sys.argv[1], sys.argv[2], sys.argv[3] or None)
