"""Fixtures of the lifecycle tests; their helpers are in tests/helpers/lifecycle.py."""

from __future__ import annotations

import pytest

import zarrlake as zl


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    r = zl.Repo.create(tmp_path / "repo")
    yield r
    r.close()
