"""Every zl.spark entry point that takes a repository takes it the same ways (issue 32): a
Repo, its RepoSpec, or its location as a path string or PathLike, on a real local Spark."""

from __future__ import annotations

from datetime import timedelta

import pytest
import zarr

import zarrlake as zl
from zarrlake.connection import RepoSpec
from zarrlake.spark.repo_arg import source_options, spec_of

CREATE = {"shape": "4", "chunks": "2", "dtype": "float64", "dims": "x"}


def _rows(spark, value: float):
    return spark.createDataFrame([(x, value) for x in range(4)], "x long, v double")


def test_write_array_takes_a_repo_a_spec_and_a_path(spark, tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    given = [repo, repo.spec, tmp_path / "repo"]
    for n, arg in enumerate(given, 1):
        zl.spark.write_array(
            _rows(spark, float(n)),
            repo=arg,
            array="v",
            message=f"as {type(arg).__name__}",
            **CREATE,
        )
        got = zarr.open_array(repo.readonly_session().store, path="v", mode="r")[:]
        assert got.tolist() == [float(n)] * 4, type(arg)
    messages = [c.message for c in repo.log("main", limit=3)]
    assert messages == ["as PosixPath", "as RepoSpec", "as Repo"]
    assert repo.list_sessions() == []


def test_gc_takes_a_repo_a_spec_and_a_location(spark, tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    for arg in (repo, repo.spec, str(tmp_path / "repo")):
        s = repo.create_session()
        s.write("a/c/0", b"x" * 5000)
        s.abandon()
        report = zl.spark.gc(spark, arg, timedelta(0), dry_run=True)
        assert report.full, type(arg)
    assert repo.list_branches()  # a Repo given is left open


def test_a_repo_argument_of_another_type_is_refused_by_name():
    with pytest.raises(zl.InvalidInputError, match=r"repo must be a zarrlake\.Repo, a RepoSpec"):
        spec_of(42)  # type: ignore[arg-type]
    with pytest.raises(zl.InvalidInputError, match="repo must be"):
        spec_of("")


def test_a_spec_s_metastore_and_storage_options_become_source_options():
    spec = RepoSpec("s3://b/r", "bucket", (("allow_http", True), ("region", "x")))
    assert source_options(spec) == {
        "repo": "s3://b/r",
        "metastore": "bucket",
        "storage.allow_http": True,
        "storage.region": "x",
    }
