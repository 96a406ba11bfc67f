"""The public API's surface (issue 32): what a user sees of Repo, Session, the errors and the
settings, each checked against a real repository (SQLite files, memory storage)."""

from __future__ import annotations

import pytest
import zarr

import zarrlake as zl
from zarrlake import errors
from zarrlake.session_records import Status

GROUP = b'{"zarr_format": 3, "node_type": "group"}'


def _commit_one(repo: zl.Repo, branch: str = "main", value: int = 1) -> str:
    s = repo.create_session(branch)
    s.write("zarr.json", GROUP.replace(b"}", b', "attributes": {"v": %d}}' % value))
    return s.commit(f"v={value}")


# errors ----------------------------------------------------------------------------------


def test_every_error_class_is_exported_at_the_top_level():
    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, Exception)
    }
    assert classes <= set(zl.__all__)
    assert all(getattr(zl, name) is getattr(errors, name) for name in classes)


def test_a_protected_branch_is_not_a_bad_value(local_repo):
    local_repo.protect_branch("main")
    s = local_repo.create_session()
    s.write("zarr.json", GROUP)
    with pytest.raises(zl.ProtectedBranchError) as e:
        s.commit("direct")
    assert not isinstance(e.value, ValueError)
    assert isinstance(e.value, zl.ReadOnlyError)


def test_a_write_to_a_read_only_session_is_still_a_value_error(local_repo):
    ro = local_repo.readonly_session()
    with pytest.raises(zl.ReadOnlySessionError) as e:
        ro.write("zarr.json", GROUP)
    assert isinstance(e.value, ValueError) and isinstance(e.value, zl.ReadOnlyError)
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(ro.store, mode="a")


def test_a_moved_branch_and_a_refused_fast_forward_have_their_own_conflict_errors(local_repo):
    repo = local_repo
    old = repo.resolve("main")
    _commit_one(repo)
    with pytest.raises(zl.BranchMovedError) as moved:
        repo.reset_branch("main", old, expected=old)
    assert isinstance(moved.value, zl.ConflictError)
    assert [c.kind for c in moved.value.conflicts] == [zl.ConflictKind.MOVED]
    repo.create_branch("dev", at=old)
    _commit_one(repo, "dev", 2)
    with pytest.raises(zl.FastForwardError) as ff:
        repo.merge("main", into="dev", fast_forward="only")
    assert isinstance(ff.value, zl.ConflictError)
    assert [c.kind for c in ff.value.conflicts] == [zl.ConflictKind.DIVERGED]
    assert not isinstance(ff.value, zl.BranchMovedError)


# messages for a ref that is not a branch -------------------------------------------------


@pytest.fixture
def tagged(local_repo) -> tuple[zl.Repo, str]:
    head = _commit_one(local_repo)
    local_repo.create_tag("v1")
    return local_repo, head


def test_a_session_on_a_commit_id_says_it_is_a_commit_and_how_to_read_it(tagged):
    repo, head = tagged
    for given in (head, head[:12]):
        with pytest.raises(zl.NotABranchError) as e:
            repo.create_session(given)
        text = str(e.value)
        assert text.startswith(f"{given!r} looks like a commit id, and this needs a branch")
        assert f"readonly_session({given!r})" in text and "does not exist" not in text
    assert repo.list_sessions() == []


def test_a_session_on_a_tag_says_it_is_a_tag_and_how_to_read_it(tagged):
    repo, _ = tagged
    with pytest.raises(zl.InvalidInputError) as e:
        repo.create_session("v1")
    assert str(e.value).startswith("'v1' is a tag, and tags never move")
    assert "readonly_session('v1')" in str(e.value)


def test_a_merge_into_a_tag_or_a_commit_says_what_it_is(tagged):
    repo, head = tagged
    with pytest.raises(zl.NotABranchError) as e:
        repo.merge("main", into="v1")
    assert str(e.value).startswith("'v1' is a tag, and tags never move: nothing can be merged")
    with pytest.raises(zl.NotABranchError) as e:
        repo.merge("main", into=head)
    assert str(e.value).startswith(f"{head!r} looks like a commit id")
    assert "a merge moves a branch" in str(e.value)
    assert repo.list_tags()["v1"] == head


def test_a_reset_of_a_tag_says_how_to_move_a_tag(tagged):
    repo, head = tagged
    with pytest.raises(zl.NotABranchError) as e:
        repo.reset_branch("v1", "main~1")
    text = str(e.value)
    assert text.startswith("'v1' is a tag, and tags never move: reset_branch moves branches")
    assert "delete_tag('v1') and create_tag('v1'" in text
    assert isinstance(e.value, zl.NotFoundError) and isinstance(e.value, zl.InvalidInputError)
    assert repo.list_tags()["v1"] == head


def test_a_missing_branch_still_says_only_that(tagged):
    repo, _ = tagged
    with pytest.raises(zl.NotFoundError, match=r"^branch 'nope' does not exist$") as e:
        repo.reset_branch("nope", "main")
    assert not isinstance(e.value, zl.NotABranchError)


# status ----------------------------------------------------------------------------------


def test_a_read_only_session_reports_its_own_status(local_repo):
    ro = local_repo.readonly_session()
    assert ro.status == "read-only" == Status.READ_ONLY
    s = local_repo.create_session()
    assert s.state == "open"
    s.abandon()
    assert s.state == "abandoned"


# one name per thing ----------------------------------------------------------------------


def test_session_info_uses_the_session_s_names_and_keeps_the_old_ones_deprecated(local_repo):
    s = local_repo.create_session()
    s.write("zarr.json", GROUP)
    open_info = local_repo.session_info(s.id)
    assert open_info.base_commit == s.base_commit and open_info.committed_as is None
    cid = s.commit("one")
    info = local_repo.session_info(s.id)
    assert info.committed_as == s.committed_as == cid
    assert info.describe().startswith(f"committed as {cid[:12]}")
    with pytest.warns(
        DeprecationWarning, match=r"SessionInfo.base is deprecated: use .base_commit"
    ):
        assert info.base == s.base_commit
    with pytest.warns(
        DeprecationWarning, match=r"SessionInfo.commit is deprecated: use .committed_as"
    ):
        assert info.commit == cid


# the implicit session --------------------------------------------------------------------


def test_the_implicit_commit_leaves_no_open_session_and_the_metastore_copies(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    zarr.create_array(repo.store, name="t", shape=(4,), chunks=(2,), dtype="i4")[:] = 1
    assert len(repo.list_sessions()) == 1  # first use checks out main
    first = repo.commit("one")
    assert repo.list_sessions() == []
    assert repo.resolve("main") == first
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    assert repo.copy_metastore(copy).moved_sessions == ()
    repo.close()
    repo = zl.Repo.open(tmp_path / "repo", metastore=copy)
    assert repo.list_sessions() == [] and repo.resolve("main") == first
    zarr.open_array(repo.store, path="t")[0] = 5  # the next session is made on use
    assert [i.branch for i in repo.list_sessions()] == ["main"]
    second = repo.commit("two")
    assert repo.log("main", limit=1)[0].id == second and repo.list_sessions() == []
    assert zarr.open_array(repo.readonly_session().store, path="t", mode="r")[:].tolist() == [
        5,
        1,
        1,
        1,
    ]


def test_the_implicit_session_stays_on_the_branch_checked_out(local_repo):
    local_repo.create_branch("dev")
    local_repo.checkout("dev")
    local_repo.root_group.attrs["x"] = 1
    local_repo.commit("on dev")
    assert local_repo.list_sessions() == []
    assert local_repo.session.branch == "dev"
    assert local_repo.log("dev", limit=1)[0].message == "on dev"
    assert local_repo.log("main", limit=1)[0].message != "on dev"


# engine hooks off Session ----------------------------------------------------------------

HOOKS = (
    "lookup",
    "peek",
    "prepare",
    "prepare_all",
    "stage",
    "start_writer",
    "accept_writers",
    "writer",
    "inline_max",
    "context",
)


def test_the_engine_hooks_are_not_public_members_of_session(local_repo):
    s = local_repo.create_session()
    for name in HOOKS:
        assert not hasattr(s, name), name
        assert not hasattr(zl.Session, name), name
    s.write("a/c/0", b"x" * 10)
    ref = s._engine.lookup("a/c/0")
    assert ref is not None and ref.length == 10
    again = zl.Repo.of(s)
    assert again.repo_id == local_repo.repo_id and again._context is s._engine.context
    s.abandon()


# settings --------------------------------------------------------------------------------


def test_settings_given_to_open_tune_that_connection_only(tmp_path):
    zl.Repo.create(tmp_path / "repo").close()
    tuned = zl.Repo.open(tmp_path / "repo", settings={"commit_timeout": 5, "flush": {"idle": None}})
    assert tuned.context.settings.commit_timeout == 5
    assert tuned.context.settings.flush.idle is None
    assert tuned.context.settings.read_concurrency == zl.Settings().read_concurrency
    whole = zl.Repo.open(tmp_path / "repo", settings=zl.Settings(read_concurrency=3))
    assert whole.context.settings == zl.Settings(read_concurrency=3)
    assert zl.Repo.open(tmp_path / "repo").context.settings == zl.Settings()


def test_settings_given_to_create_are_recorded_for_every_client(tmp_path):
    from zarrlake.connection import connect
    from zarrlake.format.chunk_ref import RefKind

    repo = zl.Repo.create(tmp_path / "repo", settings=zl.Settings(stage_inline_max=0))
    again = zl.Repo.open(tmp_path / "repo", settings={"commit_timeout": 7})
    assert again._context.settings.stage_inline_max == 0  # recorded
    assert again._context.settings.commit_timeout == 7  # given on top
    assert connect(repo.spec).settings.stage_inline_max == 0  # a worker's connection
    s = again.create_session()
    s.write("a/c/0", b"x" * 100)
    assert s._engine.lookup("a/c/0").kind != RefKind.INLINE  # uploaded, not staged inline
    s.commit("one")
    default = zl.Repo.create(tmp_path / "other")
    d = default.create_session()
    d.write("a/c/0", b"x" * 100)
    assert d._engine.lookup("a/c/0").kind == RefKind.INLINE


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"commit_timout": 5}, r"unknown setting\(s\) commit_timout; known: commit_timeout"),
        ({"flush": {"idel": 1}}, r"unknown flush setting\(s\) idel"),
        ({"read_concurrency": 0}, "setting read_concurrency must be an integer above 0, not 0"),
        ({"read_concurrency": 2.5}, "setting read_concurrency must be an integer above 0"),
        ({"commit_timeout": "60"}, "setting commit_timeout must be a number above 0, not '60'"),
        ({"read_coalesce_gap": -1}, "setting read_coalesce_gap must be an integer 0 or more"),
        ([("commit_timeout", 5)], "settings must be a Settings or a dict"),
    ],
)
def test_bad_settings_are_refused_by_name(tmp_path, settings, message):
    zl.Repo.create(tmp_path / "repo").close()
    with pytest.raises(zl.InvalidInputError, match=message):
        zl.Repo.open(tmp_path / "repo", settings=settings)
    with pytest.raises(zl.InvalidInputError, match=message):
        zl.Repo.create(tmp_path / "new", settings=settings)
    assert not (tmp_path / "new" / "zarrlake.json").exists()
