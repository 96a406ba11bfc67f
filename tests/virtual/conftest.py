"""Fixtures of the virtual tests; their helpers are in tests/helpers/virtual.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import zarrlake as zl
from tests.helpers.virtual import write_archive


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, list[Path]]:
    """Three files per engine, made once per module."""
    root = tmp_path_factory.mktemp("archive")
    return {e: write_archive(root / e, e) for e in ("netcdf4", "h5netcdf")}


@pytest.fixture
def repo(tmp_path, archives) -> zl.Repo:
    """A local repository allowing virtual sources under the archives' directory."""
    repo = zl.Repo.create(tmp_path / "repo")
    repo.add_virtual_source(archives["netcdf4"][0].parent.parent.as_uri())
    return repo
