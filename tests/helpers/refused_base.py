"""The repository the refused-session tests share: a base a reset leaves behind, for a
session whose base gc may delete (tests/reliability/test_birth_check_retry.py,
test_refused_exit.py)."""

from __future__ import annotations

import zarr

import zarrlake as zl


def repo_to_reset(where: dict) -> str:
    """A repository at `where` with arrays "big" (chunks uploaded) and "small" (chunks
    staged inline), whose head is a commit a reset to the returned one leaves behind."""
    repo = zl.Repo.create(**where)
    s = repo.create_session()
    zarr.create_array(s.store, name="big", shape=(4, 64, 64), chunks=(1, 64, 64), dtype="f4")
    zarr.create_array(s.store, name="small", shape=(4, 4), chunks=(1, 4), dtype="f4")
    old = s.commit("arrays")
    s = repo.create_session()
    zarr.open_array(s.store, path="small")[0] = 1
    s.commit("row 0")
    repo.close()
    return old
