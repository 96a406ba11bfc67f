"""Exit codes: 2 for a usage error (the command line does not parse or contradicts itself;
nothing is attempted, not even opening the repository), 1 for an operation the repository
refuses, and 1 with "internal error" and the --debug hint for anything that is not a
zarrlake or operating-system error (a library bug must not pass for bad input)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok, run
from zarrlake.errors import InvalidInputError, NotFoundError

USAGE_ERRORS = [
    (["check", "add", "x", "--kind", "nope"], "'nope' is not one of 'max-nan-fraction'"),
    (["check", "add", "x", "--kind", "monotonic", "--array", "t"], "does not take --array"),
    (["check", "add", "x", "--kind", "custom"], "needs --entry-point"),
    (["check", "add", "x", "--kind", "value-range", "--json-params", "{"], "not valid JSON"),
    (["gc", "--older-than", "5x"], "90s, 15m, 2h, 7d, 1w"),
    (["expire", "--older-than", "soon"], "bad duration 'soon'"),
    (["sessions", "abandon", "--older-than", "2 days"], "bad duration"),
    (["sessions", "extend", "abc", "3 fortnights"], "bad duration"),
    (["sessions", "abandon"], "not both"),
    (["sessions", "abandon", "abc", "--branch", "main"], "--branch goes with --older-than"),
    (["ls", "--as-of", "yesterday"], "bad date 'yesterday'"),
    (["cat", "main", "t", "--slice", "0:x"], "bad slice '0:x'"),
    (["cat"], "Missing argument 'ARRAY'"),
    (["blame", "t"], "Missing argument 'COORD...'"),
    (["blame", "main", "t", "1,x"], "bad chunk coordinates '1,x'"),
    (["blame", "a", "b", "t", "0"], "unexpected extra argument"),
    (["blame", "main", "t", "0", "--ref", "v1"], "give the ref once"),
    (["log", "--path", "a", "--follow", "a"], "not both"),
    (["log", "--graph", "--path", "a"], "--graph shows every commit"),
    (["log", "--limit", "x"], "'--limit'"),
    (["pr", "list", "--state", "done"], "'done' is not one of"),
    (["merge", "dev", "--ff", "sometimes"], "'sometimes' is not one of"),
    (["branch", "protect", "main", "--required-approvals", "-1"], "--required-approvals"),
    (["branch", "create", "-dash"], "No such option"),
    (["--storage-option", "novalue", "log"], "bad storage option 'novalue'"),
    (["ui", "--token", "short"], "at least 16 characters"),
    (["log", "--bogus"], "No such option: --bogus"),
    (["frobnicate"], "No such command"),
]


@pytest.mark.parametrize(("args", "says"), USAGE_ERRORS, ids=lambda a: " ".join(a)[:40])
def test_usage_errors_exit_2_before_touching_the_repository(tmp_path, args, says):
    nowhere = tmp_path / "nowhere"
    res = run("-r", nowhere, *args)
    assert res.code == 2, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("zarrlake: error: ") and says in line, line
    assert "internal error" not in line and res.stdout == ""
    assert not nowhere.exists()


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    """A repository with array t (4 x 6 in 2 x 3 chunks) written once."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    zarr.open_group(s.store).create_array("t", data=np.arange(24).reshape(4, 6), chunks=(2, 3))
    s.commit("write t")
    yield repo
    repo.close()


REFUSED = [
    (["cat", "main", "nope"], "no array 'nope'"),
    (["cat", "nope", "t"], "no branch, tag or commit"),
    (["cat", "main", "t", "--slice", "1,2,3"], "3 items for an array with 2 dimension(s)"),
    (["blame", "t", "9,9"], "outside the chunk grid"),
    (["blame", "nope", "t", "0,0"], "no branch, tag or commit"),
    (["branch", "create", "--", "-dash"], "it starts with '-'"),
    (["tag", "create", "@", "--at", "main"], "it is '@' alone"),
    (["gc", "--older-than", "100000d"], "at most"),
    (["virtual", "sources", "remove", "file:///nowhere"], "nothing to remove"),
    (["branch", "unprotect", "main"], "no protection rule"),
]


@pytest.mark.parametrize(("args", "says"), REFUSED, ids=lambda a: " ".join(a)[:40])
def test_refused_operations_exit_1(repo, args, says):
    assert says in fails("-r", repo.spec.location, *args)


BUGS = [
    ValueError("bad arithmetic"),
    KeyError("missing key"),
    IndexError("list index"),
    TypeError("unsupported operand"),
    AttributeError("no attribute x"),
]
USER_ERRORS = [
    InvalidInputError("bad input, said plainly"),
    NotFoundError("no such thing"),
    FileNotFoundError(2, "No such file"),
    PermissionError(13, "Permission denied"),
]


@pytest.mark.parametrize("error", BUGS + USER_ERRORS, ids=lambda e: type(e).__name__)
def test_only_zarrlake_and_system_errors_pass_for_the_users_and_a_bug_says_so(
    repo, monkeypatch, error
):
    def raises(*args, **kwargs):
        raise error

    monkeypatch.setattr(zl.Repo, "log", raises)
    line = fails("-r", repo.spec.location, "log")
    if error in USER_ERRORS:
        assert line == str(error)
        return
    assert line.startswith(f"internal error: {type(error).__name__}: ")
    assert str(error.args[0]) in line and line.endswith("(run with --debug for the traceback)")
    with pytest.raises(type(error)):  # --debug: the exception itself, with its traceback
        run("-r", repo.spec.location, "log", "--debug")


def test_fsck_json_reports_a_bug_as_an_internal_error(repo, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("stray")

    monkeypatch.setattr(zl.Repo, "fsck", broken)
    res = run("-r", repo.spec.location, "fsck", "--json")
    assert res.code == 1
    assert res.json()["error"].startswith("internal error: KeyError: 'stray'")


def test_branch_names_starting_with_a_dash_or_alone_at_are_refused_with_the_reason(repo):
    for name, reason in (("-dash", "starts with '-'"), ("@", "is '@' alone")):
        with pytest.raises(InvalidInputError, match=reason):
            repo.create_branch(name)
        with pytest.raises(InvalidInputError, match=reason):
            repo.create_tag(name)
    for name in ("a@b", "x-"):  # '@' inside a name and '-' after its start are fine
        repo.create_branch(name)
    assert {"a@b", "x-"} <= set(repo.list_branches())


def test_a_branch_made_with_a_leading_dash_before_the_rule_still_works(repo):
    """The rule applies to new names only: a branch an older release made keeps being read,
    written, protected and deleted (on the command line after `--`)."""
    from zarrlake.vc.refs import BRANCH

    head = repo.resolve("main")
    repo._context.refs.create(BRANCH, "-old", head)  # as an older release stored it
    r = repo.spec.location
    assert ok("-r", r, "branch", "list", "--json").json()["-old"] == head
    with repo.create_session("-old") as s:
        zarr.open_array(s.store, path="t")[0, 0] = 99
        cid = s.commit("on -old")
    assert ok("-r", r, "log", "--json", "--", "-old").json()[0]["id"] == cid
    assert ok("-r", r, "cat", "--slice", "0,0", "--json", "--", "-old", "t").json()["values"] == 99
    assert ok("-r", r, "branch", "delete", "--json", "--", "-old").json()["commit"] == cid
    assert "-old" not in repo.list_branches()
