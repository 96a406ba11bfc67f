"""Repositories on every backend combination the core is tested on."""

from __future__ import annotations

import secrets

import pytest

import zarrlake as zl


@pytest.fixture(params=["local", "memory"])
def repo_location(request, tmp_path) -> dict:
    """Arguments for Repo.create/open: local directory + SQLite, or memory."""
    if request.param == "local":
        return {"location": str(tmp_path / "repo")}
    return {"location": f"memory://{secrets.token_hex(6)}"}


@pytest.fixture
def repo(repo_location) -> zl.Repo:
    return zl.Repo.create(**repo_location)


@pytest.fixture
def local_repo(tmp_path) -> zl.Repo:
    return zl.Repo.create(tmp_path / "repo")
