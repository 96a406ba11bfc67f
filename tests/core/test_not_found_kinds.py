"""Each "does not exist" is a NotFoundError of its own kind (repository, ref, session, pull
request), so a handler can tell a mistyped branch from a missing repository; every one is
still a NotFoundError (and a KeyError), as code written before the kinds expects."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zarrlake as zl


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    return zl.Repo.create(tmp_path / "r")


@pytest.mark.parametrize(
    ("call", "kind", "words"),
    [
        (lambda r, p: zl.Repo.open(p / "nowhere"), zl.RepositoryNotFoundError, "Repo.create"),
        (lambda r, p: r.resolve("nope"), zl.RefNotFoundError, "'nope'"),
        (lambda r, p: r.resolve("main~5"), zl.RefNotFoundError, "too short"),
        (lambda r, p: r.create_session("nope"), zl.RefNotFoundError, "'nope'"),
        (lambda r, p: r.expire(timedelta(0), branches=["nope"]), zl.RefNotFoundError, "'nope'"),
        (lambda r, p: r.join_session("0" * 32), zl.SessionNotFoundError, "no session"),
        (lambda r, p: r.session_info("0" * 32), zl.SessionNotFoundError, "no session"),
        (lambda r, p: r.pull_request(99), zl.PullRequestNotFoundError, "#99"),
    ],
)
def test_each_missing_thing_has_its_kind(repo, tmp_path, call, kind, words):
    with pytest.raises(kind) as e:
        call(repo, tmp_path)
    assert isinstance(e.value, zl.NotFoundError) and isinstance(e.value, KeyError)
    assert words in str(e.value)


def test_a_tag_given_for_a_branch_is_a_missing_ref_and_bad_input(repo):
    repo.create_tag("v1")
    with pytest.raises(zl.NotABranchError) as e:
        repo.create_session("v1")
    assert isinstance(e.value, zl.RefNotFoundError) and isinstance(e.value, zl.InvalidInputError)
