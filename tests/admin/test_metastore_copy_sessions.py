"""`metastore copy` after ordinary flows: finished sessions never block it, open sessions are
copied along (closed in the old metastore, open in the new one), a session being committed
makes it refuse by name; copying back into a metastore the repository used before needs
`--replace` (SQLite -> bucket -> PostgreSQL -> SQLite -> bucket, through the CLI too).

Run as a module, this file is a cooperative worker:
python -m tests.admin.test_metastore_copy_sessions LOCATION METASTORE OPTIONS SESSION_ID N
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck
from zarrlake.errors import AlreadyExistsError
from zarrlake.vc.gc_protocol import GcState
from zarrlake.vc.refs import RepositoryMovedError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3_repo(s3_location, tmp_path) -> Iterator[tuple[zl.Repo, str, dict]]:
    """A repository on S3 with a SQLite metastore."""
    location, options = s3_location
    sqlite = f"sqlite:///{tmp_path}/metastore.sqlite"
    repo = zl.Repo.create(location, metastore=sqlite, storage_options=options)
    yield repo, sqlite, options
    repo.close()


def _worker(repo: zl.Repo, session_id: str, n: int) -> None:
    """A cooperative worker in its own process: joins, writes chunk `n`, flushes, exits."""
    spec = repo.spec
    options = json.dumps(dict(spec.storage_options))
    args = [spec.location, spec.metastore, options, session_id, str(n)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.admin.test_metastore_copy_sessions", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]


def _cli(repo: zl.Repo, metastore: str | None, *args: str) -> int:
    from zarrlake.cli import main

    options = dict(repo.spec.storage_options)
    where = [
        "-r", repo.spec.location, "--endpoint-url", options["endpoint_url"],
        "--region", options["region"], "--access-key-id", "test",
        "--secret-access-key", "test", "--allow-http",
    ]  # fmt: skip
    if metastore is not None:
        where += ["--metastore", metastore]
    with pytest.raises(SystemExit) as done:
        main([*where, *args])
    return int(done.value.code or 0)


def _state(repo: zl.Repo) -> dict:
    ctx = repo._context
    return {
        "log": [c.id for c in repo.log()],
        "branches": repo.list_branches(),
        "sessions": sorted((r.id, r.status) for r in ctx.records.scan()),
        "candidates": sorted(GcState(ctx).candidates()),
    }


def _reopen(repo: zl.Repo, metastore: str | None = None) -> zl.Repo:
    return zl.Repo.open(
        repo.spec.location, metastore=metastore, storage_options=dict(repo.spec.storage_options)
    )


def test_a_cooperative_flow_then_the_cli_copy(s3_repo, capsys):
    """Workers in other processes join a session, it commits; another is abandoned, one
    expires, and the implicit API's next session is open: `metastore copy` works."""
    repo, sqlite, _ = s3_repo
    s = repo.create_session()
    _worker(repo, s.id, 0)
    _worker(repo, s.id, 1)
    s.commit("cooperative")
    s.wait()
    gone = repo.create_session()
    gone.write("x/c/0", chunk(9))
    gone.abandon()
    late = repo.create_session()
    late.write("y/c/0", chunk(8))
    repo._context.records.update(late.id, lambda r: replace(r, expires_at=0))
    implicit = repo.session
    implicit.write("z/c/0", chunk(7))
    repo.commit("implicit")  # leaves no session open (issue 32)
    implicit.wait()
    assert repo.session.state == "open"  # the next implicit session, made on use
    assert repo.session.id  # handed over: its record is stored (else it has none to move)
    expected = _state(repo)
    assert _cli(repo, sqlite, "metastore", "copy", "--to", "bucket", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["switched"] and len(report["moved_sessions"]) == 1
    on_bucket = _reopen(repo)
    moved = {sid: "open" for sid in report["moved_sessions"]}
    assert _state(on_bucket) == expected
    assert {sid: on_bucket.session_info(sid).state for sid in moved} == moved
    head = on_bucket.readonly_session()
    assert head.read("w/c/0") == chunk(100) and head.read("w/c/1") == chunk(101)
    assert head.read("z/c/0") == chunk(7)
    assert fsck(on_bucket) == []


def test_open_sessions_are_copied_along(s3_repo):
    """An open session's staged writes move with it: the old handle can no longer commit
    into the retired metastore; joined again through the new one, it commits."""
    repo, _, _ = s3_repo
    s = repo.create_session()
    s.write_many([("a/c/0", chunk(1)), ("a/c/1", b"small" * 10)])
    s.flush()
    report = repo.copy_metastore("bucket")
    assert report.moved_sessions == (s.id,)
    with pytest.raises(zl.SessionClosedError):
        s.commit("into the old metastore")
    # closed in the old copy (fenced: no collector runs there), open in the new
    assert repo._context.records.get(s.id)[0].status == "aborted"
    on_bucket = _reopen(repo)
    assert on_bucket.session_info(s.id).state == "open"
    assert on_bucket.gc(timedelta(0)).objects_deleted == 0  # the copy left no lock behind
    again = on_bucket.join_session(s.id)
    assert again.read("a/c/0") == chunk(1)
    again.write("a/c/2", chunk(2))
    again.commit("moved along")
    head = on_bucket.readonly_session()
    assert [head.read(f"a/c/{i}") for i in range(3)] == [chunk(1), b"small" * 10, chunk(2)]
    assert fsck(on_bucket) == []
    on_bucket.gc(timedelta(0), full=True)
    assert on_bucket.readonly_session().read("a/c/0") == chunk(1)


def test_a_session_being_committed_goes_along(s3_repo):
    """A commit under way when the copy runs never lands in the old metastore (its fence
    refuses the branch swap): the session is copied open (committed, had it landed) and
    goes on in the new one."""
    repo, _, _ = s3_repo
    s = repo.create_session()
    s.write("a/c/0", chunk(1))
    s.flush()
    lease = time.time() + 600
    repo._context.records.update(s.id, lambda r: replace(r, status="committing", lease=lease))
    report = repo.copy_metastore("bucket")
    assert report.moved_sessions == (s.id,)
    assert repo._context.records.get(s.id)[0].status == "aborted"  # closed in the old one
    with pytest.raises(RepositoryMovedError):  # a ref write there is refused
        repo.create_branch("late")
    on_bucket = _reopen(repo)
    assert on_bucket.session_info(s.id).status == "open"
    again = on_bucket.join_session(s.id)
    again.commit("moved along")
    assert on_bucket.readonly_session().read("a/c/0") == chunk(1)


def test_copy_without_switch_leaves_open_sessions_open(s3_repo):
    repo, sqlite, _ = s3_repo
    s = repo.create_session()
    s.write("a/c/0", chunk(3))
    report = repo.copy_metastore("bucket", switch=False)
    assert not report.switched and report.moved_sessions == ()
    s.commit("still on SQLite")
    assert _reopen(repo, sqlite).readonly_session().read("a/c/0") == chunk(3)


def test_round_trip_back_into_used_metastores(s3_repo, pg_metastore_url):
    """SQLite -> bucket -> PostgreSQL -> SQLite -> bucket: the last two targets hold older
    copies; without --replace the error names it, with it the copy replaces them."""
    repo, sqlite, _ = s3_repo
    s = repo.create_session()
    s.write("a/c/0", chunk(0))
    s.commit("one")
    stale = repo.create_session()  # staged in the SQLite copy, abandoned after the move
    stale.write("s/c/0", chunk(5))
    stale.flush()
    repo.copy_metastore("bucket")
    on_bucket = _reopen(repo)
    on_bucket.join_session(stale.id).abandon()
    s = on_bucket.create_session()
    s.write("a/c/1", chunk(1))
    s.commit("two")
    on_bucket.copy_metastore(pg_metastore_url)
    on_pg = _reopen(repo, pg_metastore_url)
    s = on_pg.create_session()
    s.write("a/c/2", chunk(2))
    s.commit("three")
    with pytest.raises(AlreadyExistsError, match="--replace"):
        on_pg.copy_metastore(sqlite)
    expected = _state(on_pg)
    report = on_pg.copy_metastore(sqlite, replace=True)
    assert report.replaced
    back = _reopen(repo, sqlite)
    assert _state(back) == expected
    assert back.session_info(stale.id).state == "abandoned"  # the older copy was replaced
    assert [c.message for c in back.log()][:3] == ["three", "two", "one"]
    s = back.create_session()
    s.write("a/c/3", chunk(3))
    s.commit("four")
    assert _cli(back, sqlite, "metastore", "copy", "--to", "bucket") == 1
    assert _cli(back, sqlite, "metastore", "copy", "--to", "bucket", "--replace") == 0
    final = _reopen(repo)
    assert [final.readonly_session().read(f"a/c/{i}") for i in range(4)] == [
        chunk(i) for i in range(4)
    ]
    assert _state(final)["log"] == [c.id for c in back.log()]
    assert fsck(final) == []


def _cooperate(location: str, metastore: str, options: str, session_id: str, n: str) -> None:
    repo = zl.Repo.open(location, metastore=metastore, storage_options=json.loads(options))
    s = repo.join_session(session_id)
    s.write(f"w/c/{n}", chunk(100 + int(n)))
    s.flush()


if __name__ == "__main__":
    _cooperate(*sys.argv[1:6])
