"""Every name and call form renamed before 1.0 still works for one release, and warns
(DeprecationWarning at the caller's line) saying what to write instead; the new forms do
not warn. The renames are listed in CHANGELOG.md."""

from __future__ import annotations

import warnings
from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.checks import ValueRange


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    """main with an array `t` of 4 chunks, and a branch `dev` that rewrote chunk 1."""
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(4,), chunks=(1,), dtype="i4")[:] = [0, 1, 2, 3]
    s.commit("t")
    repo.create_branch("dev", at="main")
    s = repo.create_session("dev")
    zarr.open_array(s.store, path="t")[1] = 10
    s.commit("dev writes 1")
    return repo


def values(repo: zl.Repo, ref: str = "main") -> list[int]:
    return np.asarray(zarr.open_array(repo.readonly_session(ref).store, path="t")[:]).tolist()


def old(call, match: str):
    """Run `call` (an old form), which must warn naming the new form; return its result."""
    with pytest.warns(DeprecationWarning, match=match) as caught:
        out = call()
    assert all(w.filename == __file__ for w in caught), [w.filename for w in caught]
    return out


def test_renamed_and_positional_arguments_warn_and_work(repo):
    assert old(lambda: repo.merge("dev", into="main"), r"merge\(into=...\).*target=")
    assert values(repo) == [0, 10, 2, 3]
    head = repo.resolve("main")
    old(lambda: repo.revert(head, branch="main"), r"revert\(branch=...\).*target=")
    assert values(repo) == [0, 1, 2, 3]
    old(
        lambda: repo.revert(repo.resolve("main"), "main"),
        r"passing target to Repo.revert\(\) by position.*target=",
    )
    assert values(repo) == [0, 10, 2, 3]
    assert (
        len(old(lambda: repo.log("main", 2), r"passing limit to Repo.log\(\) by position.*limit="))
        == 2
    )
    assert old(lambda: repo.create_branch("b", "dev"), "at=") == repo.resolve("dev")
    assert old(lambda: repo.create_tag("v", "dev"), "at=") == repo.resolve("dev")
    assert old(lambda: repo.blame("t", (1,), "dev"), "ref=").message == "dev writes 1"
    old(lambda: repo.add_check("r", ValueRange("t", min=0, max=99), ("dev",)), "branches=")
    assert [r.branches for r in repo.list_checks()] == [("dev",)]
    results = old(lambda: repo.run_checks("dev", "main", ["r"]), "base=..., names=...")
    assert [(r.name, r.passed) for r in results] == [("r", True)]
    assert old(lambda: repo.expire(timedelta(days=1), ["main"]), "branches=").commits_expired == 0
    # a session's record is stored at its first write or hand-over (reading its id)
    assert repo.create_session("dev").id is not None
    assert old(lambda: repo.abandon_sessions(timedelta(0), "dev"), "branch=") != []
    pr = old(lambda: repo.create_pull_request("b", "main"), "target=")
    assert pr.target == "main"


def test_a_name_given_twice_is_refused(repo):
    with pytest.raises(TypeError, match="got both into= and target="):
        repo.merge("dev", into="main", target="main")
    with pytest.raises(TypeError, match="multiple values for 'limit'"):
        repo.log("main", 1, limit=2)


def test_pull_request_actors_by_is_author(repo):
    repo.create_branch("day", at="dev")
    pr = repo.create_pull_request("day", target="main", author="bot")
    old(lambda: pr.comment("looks fine", by="alice"), r"comment\(by=...\).*author=")
    old(lambda: pr.request_changes(by="bob"), r"request_changes\(by=")
    old(lambda: pr.approve(by="bob"), r"approve\(by=")
    assert pr.approvals == ["bob"] and [c.by for c in pr.comments] == ["alice"]
    old(lambda: pr.merge(by="bob"), r"merge\(by=")
    assert pr.merged_by == "bob" and values(repo) == [0, 10, 2, 3]
    repo.create_branch("other", at="main")
    s = repo.create_session("other")
    zarr.open_array(s.store, path="t")[3] = 30
    s.commit("other")
    closing = repo.create_pull_request("other")
    old(lambda: closing.close(by="carol"), r"close\(by=")
    assert closing.state == "closed"


def test_renamed_methods_and_report_serialisers(repo, tmp_path):
    repo.add_virtual_source("file:///data/")
    assert old(lambda: repo.virtual_sources(), "list_virtual_sources") == ["file:///data"]
    repo.remove_virtual_source("file:///data/")
    assert repo.list_virtual_sources() == []
    repo.protect_branch("main")
    assert list(old(lambda: repo.protected_branches(), "list_protected_branches")) == ["main"]
    gc = repo.gc(older_than=timedelta(0), dry_run=True)
    assert old(lambda: gc.to_dict(), "to_json") == gc.to_json()
    expired = repo.expire(timedelta(days=1))
    assert old(lambda: expired.to_dict(), "to_json") == expired.to_json()
    copied = repo.copy_metastore(f"sqlite:///{tmp_path / 'copy.db'}")
    assert old(lambda: copied.to_dict(), "to_json") == copied.to_json()


def test_session_status_is_state_and_internal_names_are_underscored(repo):
    s = repo.create_session("dev")
    assert s.state == "open" and old(lambda: s.status, "Session.state") == "open"
    info = repo.session_info(s.id)
    assert info.state == "open" and old(lambda: info.status, "SessionInfo.status") == "open"
    head = repo.resolve("main")
    assert old(lambda: repo.context, "Repo._context") is repo._context
    assert old(lambda: repo.snapshot_of(head), "Repo._snapshot_of") == repo._snapshot_of(head)
    zarr.open_array(s.store, path="t")[3] = 30
    assert old(lambda: s.staged_changes(), "Session._staged_changes") == s._staged_changes()
    assert old(lambda: s.read_ranges, "Session._read_ranges") == s._read_ranges
    s.abandon()
    assert s.state == "abandoned" and repo.session_info(s.id).state == "abandoned"


def test_the_implicit_session_warns_that_reading_it_makes_a_session(repo):
    store = old(lambda: repo.store, r"Repo.store is deprecated.*checkout")
    zarr.open_array(store, path="t")[2] = 20
    old(lambda: repo.root_group, "Repo.root_group is deprecated")
    assert old(lambda: repo.session, "Repo.session is deprecated").branch == "main"
    old(lambda: repo.commit("implicit"), "Repo.commit is deprecated")
    assert values(repo) == [0, 1, 20, 3] and repo.list_sessions() == []


def test_the_new_forms_do_not_warn(repo):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        repo.merge("dev", target="main")
        repo.revert(repo.resolve("main"), target="main")
        repo.log("main", limit=1)
        repo.create_branch("b", at="dev")
        repo.blame("t", (1,), ref="dev")
        repo.add_check("r", ValueRange("t", min=0, max=99), branches=("dev",))
        repo.run_checks("dev", base="main", names=["r"])
        repo.list_virtual_sources()
        repo.list_protected_branches()
        repo.gc(older_than=timedelta(0), dry_run=True).to_json()
        pr = repo.create_pull_request("b", target="main", author="bot")
        pr.comment("ok", author="alice")
        pr.approve(author="alice")
        s = repo.checkout("main")
        zarr.open_array(s.store, path="t")[0] = 5
        assert s.state == "open" and repo.session_info(s.id).state == "open"
        s.commit("explicit")
    assert values(repo)[0] == 5
