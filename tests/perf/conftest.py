"""Fixtures of the count tests of the everyday paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import zarr

import zarrlake as zl


@pytest.fixture
def one_chunk_repo(tmp_path: Path) -> zl.Repo:
    """A local repository whose `main` holds array "a": (8, 64, 64) float32 in chunks of
    one 16 KiB row (above the staging inline limit, so a written row is uploaded), its
    commit's clean-up done."""
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=(8, 64, 64), chunks=(1, 64, 64), dtype="f4")
    s.commit("array")
    s.wait()
    return repo
