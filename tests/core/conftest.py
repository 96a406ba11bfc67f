"""Repositories on every backend combination the core is tested on."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import pytest

import zarrlake as zl


@pytest.fixture(params=["local", "memory", "memory-bucket"])
def repo_location(request, tmp_path) -> dict:
    """Arguments for Repo.create/open: local directory + SQLite, memory, or memory storage
    holding the metastore too (the bucket metastore, without a server)."""
    if request.param == "local":
        return {"location": str(tmp_path / "repo")}
    if request.param == "memory-bucket":
        return {"location": f"memory://{secrets.token_hex(6)}", "metastore": "bucket"}
    return {"location": f"memory://{secrets.token_hex(6)}"}


@pytest.fixture
def repo(repo_location) -> zl.Repo:
    return zl.Repo.create(**repo_location)


@pytest.fixture
def local_repo(tmp_path) -> zl.Repo:
    return zl.Repo.create(tmp_path / "repo")


@pytest.fixture(scope="class", params=["local-sqlite", "memory", "s3-postgres", "s3-bucket"])
def shared_repo(request, tmp_path_factory) -> Iterator[zl.Repo]:
    """One repository per test class and backend combination, for suites of many small tests
    that each work on a branch of their own (see `fresh_branch`)."""
    if request.param == "local-sqlite":
        yield zl.Repo.create(tmp_path_factory.mktemp("repo") / "repo")
    elif request.param == "memory":
        yield zl.Repo.create(f"memory://{secrets.token_hex(6)}")
    elif request.param == "s3-bucket":  # the whole repository in one bucket, no server
        from tests.fixtures.s3 import s3_client, s3_options

        endpoint = request.getfixturevalue("s3_server")
        bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
        s3_client(endpoint).create_bucket(Bucket=bucket)
        repo = zl.Repo.create(f"s3://{bucket}/repo", storage_options=s3_options(endpoint))
        try:
            yield repo
        finally:
            repo.close()
    else:
        from tests.fixtures.postgres import create_database, drop_database
        from tests.fixtures.s3 import s3_client, s3_options

        endpoint = request.getfixturevalue("s3_server")
        admin = request.getfixturevalue("postgres_url")
        bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
        s3_client(endpoint).create_bucket(Bucket=bucket)
        db = create_database(admin)
        repo = zl.Repo.create(
            f"s3://{bucket}/repo",
            metastore=admin.rsplit("/", 1)[0] + "/" + db,
            storage_options=s3_options(endpoint),
        )
        try:
            yield repo
        finally:
            repo.close()
            drop_database(admin, db)


@pytest.fixture
def fresh_branch(shared_repo: zl.Repo) -> str:
    """A new branch of `shared_repo` at its initial (empty) commit."""
    initial = shared_repo.log("main")[-1].id
    name = f"t-{secrets.token_hex(6)}"
    shared_repo.create_branch(name, at=initial)
    return name
