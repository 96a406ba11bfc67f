"""Issue 29, fsck: every committed `zarr.json` is parsed with zarr's metadata classes and a
bad one is a problem naming the commit, the ref and the key; `fsck --json` prints exactly
one JSON document whatever it finds (expired history, missing commit objects, an error that
stops the check)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import run
from zarrlake.errors import StorageError

BAD = {"bad/zarr.json": b"{}", "worse/zarr.json": b"{not json"}


def create(path: Path) -> tuple[zl.Repo, str]:
    """A repository with array `a` (4 chunks of 10); returns it and its head."""
    repo = zl.Repo.create(path)
    s = repo.create_session()
    zarr.open_group(s.store).create_array("a", shape=(40,), chunks=(10,), dtype="i4")
    return repo, s.commit("create a")


def write_a(repo: zl.Repo, branch: str, value: int) -> str:
    s = repo.create_session(branch)
    zarr.open_array(s.store, path="a")[:10] = value
    return s.commit(f"a[:10] = {value}")


@pytest.fixture
def planted(tmp_path, monkeypatch) -> tuple[zl.Repo, str, str]:
    """Bad documents committed as a release without the check could (c2), kept by the next
    commit (c3, main's head); tag v2 at c2. Returns (repo, c2, c3)."""
    repo, _ = create(tmp_path / "repo")
    s = repo.create_session()  # documents zarr writes: no false alarms
    root = zarr.open_group(s.store)
    root.create_group("g", attributes={"title": "x"}).create_array(
        "t", shape=(4, 4), dtype="f8", fill_value=np.nan, dimension_names=("y", "x")
    )
    root.create_array("s", shape=(8,), chunks=(2,), shards=(4,), dtype="u1")[:] = 3
    s.commit("more nodes")
    with monkeypatch.context() as m:
        m.setattr("zarrlake.txn.writes.check_metadata", lambda key, data: None)
        s = repo.create_session()
        s.write_many(list(BAD.items()))
        c2 = s.commit("bad documents")
    c3 = write_a(repo, "main", 1)
    repo.create_tag("v2", at=c2)
    return repo, c2, c3


def test_fsck_reports_committed_documents_zarr_cannot_open(planted):
    """Only the bad documents are reported (not those zarr wrote), once each."""
    repo, c2, c3 = planted
    problems = {p.object: p for p in repo.fsck()}
    assert set(problems) == {f"commits/{c3}:{key}" for key in BAD}
    bad, worse = problems[f"commits/{c3}:bad/zarr.json"], problems[f"commits/{c3}:worse/zarr.json"]
    assert bad.kind == worse.kind == "invalid"
    assert "metadata document 'bad/zarr.json': zarr_format must be 3" in bad.detail
    assert "metadata document 'worse/zarr.json' is not JSON" in worse.detail
    for p in (bad, worse):  # c2 keeps it too (reached from main and from v2): counted
        assert "(reached from branch 'main')" in p.detail and "(and 1 more" in p.detail
    [at_tag, _] = sorted(repo.fsck("v2"), key=lambda p: p.object)
    assert at_tag.object == f"commits/{c2}:bad/zarr.json" and "ref 'v2'" in at_tag.detail


def test_fsck_command_lists_them_and_fails(planted):
    repo, _, c3 = planted
    where = repo.spec.location
    res = run("-r", where, "fsck")
    assert res.code == 1
    assert "2 problem(s) found" in res.stdout
    assert f"commits/{c3}:bad/zarr.json: invalid: " in res.stdout
    res = run("-r", where, "fsck", "--json")
    assert res.code == 1
    doc = res.json()
    assert doc["ok"] is False and "error" not in doc
    assert sorted(p.split(": ")[0] for p in doc["problems"]) == [
        f"commits/{c3}:{key}" for key in sorted(BAD)
    ]


def test_fsck_json_is_one_document_with_expired_history_and_a_missing_commit(tmp_path):
    """The probe from the issue: expire history, delete a commit object, `fsck --json`."""
    repo, c1 = create(tmp_path / "repo")
    repo.create_tag("v1", at=c1)
    repo.create_branch("dev", at=c1)
    d1 = write_a(repo, "dev", 5)
    write_a(repo, "main", 1)
    c3 = write_a(repo, "main", 2)
    repo.expire(older_than=timedelta(0))
    repo._context.object_store.delete(f"commits/{d1}")
    res = run("-r", repo.spec.location, "fsck", "--json")
    assert res.code == 1
    doc = json.loads(res.stdout)  # one document: nothing printed after it
    assert doc["ok"] is False and "error" not in doc
    [problem] = doc["problems"]
    assert problem.startswith(f"commits/{d1}: missing: referenced by branch 'dev'")
    assert {e["commit"] for e in doc["expired_history"]} == {c1, c3}
    human = run("-r", repo.spec.location, "fsck")  # without --json the lines are still shown
    assert human.code == 1 and human.stdout.count("(expire; not a problem)") == 2


def test_fsck_json_reports_the_error_that_stopped_it(tmp_path, monkeypatch):
    """An error that stops the check (an unknown ref; storage failing mid-walk) is the
    document's `error`, and nothing but the document is printed on stdout."""
    repo, _ = create(tmp_path / "repo")
    write_a(repo, "main", 1)
    res = run("-r", repo.spec.location, "fsck", "nothere", "--json")
    assert res.code == 1
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and doc["problems"] == []
    assert "no branch, tag or commit named 'nothere'" in doc["error"]

    def unreadable(self, oid: str) -> float | None:
        raise StorageError(f"I/O error reading expired/{oid}")

    # reading whether main's head's parent expired fails, after the head was read
    monkeypatch.setattr("zarrlake.vc.fsck._Checker.expired_at", unreadable)
    res = run("-r", repo.spec.location, "fsck", "--json")
    assert res.code == 1
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and doc["error"].startswith("I/O error reading expired/")
    assert doc["checked"]["commits"] == 1
