"""Ref expressions and merge bases, checked against git itself on the same history with
merges; name rules (fuzzed against `git check-ref-format`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarrlake as zl
from tests.helpers.history import commit_chunks
from zarrlake._util.validate import check_ref_name
from zarrlake.errors import InvalidInputError

# (operation, branch, argument): the same history is built in zarrlake and in git
HISTORY = [
    ("commit", "main", "m1"),
    ("branch", "dev", "main"),
    ("commit", "dev", "d1"),
    ("commit", "dev", "d2"),
    ("commit", "main", "m2"),
    ("merge", "main", "dev"),  # M1 = merge of dev into main
    ("commit", "dev", "d3"),
    ("branch", "f", "main"),
    ("commit", "f", "f1"),
    ("commit", "main", "m3"),
    ("merge", "main", "dev"),
    ("merge", "f", "main"),  # f gets main's history as its second parent
    ("commit", "f", "f2"),
    ("merge", "main", "f"),
]
NAMES = ["main", "dev", "f"]


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin",
    }
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode:
        raise LookupError(res.stderr.strip())
    return res.stdout.strip()


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """(zarrlake repo, git dir, git commit id -> zarrlake commit id)."""
    root = tmp_path_factory.mktemp("twins")
    repo = zl.Repo.create(root / "zl")
    gdir = root / "git"
    gdir.mkdir()
    git(gdir, "init", "-q", "-b", "main")
    git(gdir, "commit", "-q", "--allow-empty", "-m", "init")
    mapping = {git(gdir, "rev-parse", "HEAD"): repo.resolve("main")}
    n = 0
    for op, branch, arg in HISTORY:
        n += 1
        if op == "branch":
            repo.create_branch(branch, at=arg)
            git(gdir, "branch", branch, arg)
            continue
        git(gdir, "checkout", "-q", branch)
        if op == "commit":
            cid = commit_chunks_msg(repo, branch, n)
            git(gdir, "commit", "-q", "--allow-empty", "-m", arg)
        else:
            cid = repo.merge(arg, into=branch, fast_forward="never", message=f"merge {n}")
            git(gdir, "merge", "-q", "--no-ff", "-m", f"merge {n}", arg)
        mapping[git(gdir, "rev-parse", "HEAD")] = cid
    return repo, gdir, mapping


def commit_chunks_msg(repo: zl.Repo, branch: str, n: int) -> str:
    s = repo.create_session(branch)
    s.write(f"k/{branch}{n}", str(n).encode())
    return s.commit(f"commit {n}")


def test_the_twins_have_the_same_shape(twins):
    repo, gdir, mapping = twins
    for name in NAMES:
        assert mapping[git(gdir, "rev-parse", name)] == repo.resolve(name)
    for gid, cid in mapping.items():
        parents = git(gdir, "rev-parse", f"{gid}^@").split()
        assert tuple(mapping[p] for p in parents) == repo.log(cid, limit=1)[0].parent_ids


steps = st.lists(
    st.tuples(st.sampled_from("~^"), st.sampled_from(["", "0", "1", "2", "3"])), max_size=4
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(base=st.sampled_from(NAMES), steps=steps)
def test_ref_expressions_resolve_as_git(twins, base, steps):
    repo, gdir, mapping = twins
    expr = base + "".join(op + n for op, n in steps)
    try:
        want = mapping[git(gdir, "rev-parse", "--verify", "-q", expr + "^{commit}")]
    except LookupError:
        with pytest.raises(zl.NotFoundError):
            repo.resolve(expr)
        return
    assert repo.resolve(expr) == want, expr


def test_unique_prefixes_and_full_ids(twins):
    repo, _, mapping = twins
    for cid in mapping.values():
        assert repo.resolve(cid) == cid
        assert repo.resolve(cid[:16] + "^0") == cid
    main = repo.resolve("main")
    assert repo.resolve(f"{main}~2") == repo.resolve("main~2")


def test_merge_base_matches_git(twins):
    repo, gdir, mapping = twins
    exprs = ["main", "dev", "f", "main~1", "main^2", "dev~1", "f~2", "f~1^2", "main^2~1", "m"]
    repo.create_tag("m", at="main~3")
    git(gdir, "tag", "m", "main~3")
    for a in exprs:
        for b in exprs:
            want = mapping[git(gdir, "merge-base", a, b)]
            assert repo.merge_base(a, b) == want, (a, b)


def test_malformed_expressions_are_refused(twins):
    repo, *_ = twins
    for bad in ["~1", "^", "main~x", "main^^x", "main~9999999999", "main^{commit}"]:
        with pytest.raises((InvalidInputError, zl.NotFoundError)):
            repo.resolve(bad)
    assert repo.resolve("main~1~") == repo.resolve("main~2")  # as in git


# names --------------------------------------------------------------------------------


def test_a_branch_and_a_tag_cannot_share_a_name(repo):
    repo.create_tag("v1.0")
    with pytest.raises(zl.AlreadyExistsError, match="tag"):
        repo.create_branch("v1.0")
    repo.create_branch("dev")
    with pytest.raises(zl.AlreadyExistsError, match="branch"):
        repo.create_tag("dev")
    assert repo.list_branches().keys() == {"main", "dev"}
    assert repo.list_tags().keys() == {"v1.0"}


def test_a_branch_made_while_a_tag_of_its_name_landed_steps_back(repo):
    # The tag's creator checked for a branch and re-checked after its swap before this
    # branch's swap landed: it was acknowledged, so the branch must not stay beside it.
    refs = repo._context.refs
    meta = refs.meta
    head = repo.list_branches()["main"]

    class Racing:
        def __getattr__(self, name):
            return getattr(meta, name)

        def write_if(self, partition, writes, checks):  # a ref write (vc/refs.py)
            writes = list(writes)
            if writes[0][0] == refs._key("branch", "x"):  # the tag lands between check and swap
                meta.set_if(partition, refs._key("tag", "x"), writes[0][1], None)
            return meta.write_if(partition, writes, checks)

    refs.meta = Racing()
    try:
        with pytest.raises(zl.AlreadyExistsError, match="a tag named 'x'"):
            repo.create_branch("x", at=head)
    finally:
        refs.meta = meta
    assert "x" not in repo.list_branches() and repo.list_tags()["x"] == head


@pytest.mark.parametrize("name", ["HEAD", "a~1", "a^", "a^2", "a..b", "x~", "@"])
def test_reserved_words_and_expression_syntax_are_refused(repo, name):
    with pytest.raises(InvalidInputError):
        repo.create_branch(name)
    with pytest.raises(InvalidInputError):
        repo.create_tag(name)


@settings(max_examples=200, deadline=None)
@given(name=st.text(alphabet=st.sampled_from("ab/.~^:-_@{}*HED \t1"), min_size=1, max_size=12))
def test_every_accepted_name_is_a_valid_git_branch_and_no_expression(name):
    try:
        check_ref_name(name)
    except InvalidInputError:
        return
    assert "~" not in name and "^" not in name and ".." not in name and name != "HEAD"
    subprocess.run(["git", "check-ref-format", f"refs/heads/{name}"], check=True)


def test_names_that_look_like_commit_history_still_work(repo):
    c = commit_chunks(repo, "main", {1: 1})
    repo.create_branch("release/1.x", at="main~1")
    assert repo.resolve("release/1.x") == repo.resolve("main^")
    assert repo.resolve("release/1.x~0") != c


def test_as_of_a_commits_own_time_finds_it(tmp_path):
    """A commit's time, as `log` shows it (microseconds), resolves to that commit: float
    seconds are compared at the precision they are shown with."""
    repo = zl.Repo.create(tmp_path / "repo")
    for i in range(20):
        s = repo.create_session()
        s.write(
            "zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {"i": %d}}' % i
        )
        s.commit(f"c{i}")
    for entry in repo.log("main"):
        assert repo.resolve("main", as_of=entry.timestamp) == entry.id
        assert repo.resolve("main", as_of=entry.timestamp.replace(tzinfo=None)) == entry.id


def test_a_branch_operation_given_a_tag_or_a_commit_id_says_which(repo):
    repo.create_tag("v1")
    head = repo.resolve("main")
    with pytest.raises(zl.NotFoundError, match="'v1' is a tag, and tags never move"):
        repo.merge("main", into="v1")
    with pytest.raises(zl.NotFoundError, match="'v1' is a tag"):
        repo.reset_branch("v1", "main")
    with pytest.raises(zl.NotFoundError, match="looks like a commit id, and this needs a branch"):
        repo.create_session(head)
    with pytest.raises(zl.NotFoundError, match=r"^branch 'nope' does not exist$"):
        repo.reset_branch("nope", "main")
