"""Repositories that several processes open: on a local directory (SQLite), on S3 with a
PostgreSQL metastore, and on S3 alone (the bucket metastore)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.writers.workers import COLS, ROWS


@pytest.fixture(params=["sqlite", "s3-postgres", "s3-bucket"])
def where(request, tmp_path) -> Iterator[dict]:
    """Repo.open arguments of a new repository holding an empty int array `t` on main."""
    if request.param == "sqlite":
        args: dict = {"location": str(tmp_path / "repo")}
        db = None
    else:
        from tests.fixtures.s3 import s3_client, s3_options

        endpoint = request.getfixturevalue("s3_server")
        bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
        s3_client(endpoint).create_bucket(Bucket=bucket)
        args = {"location": f"s3://{bucket}/repo", "storage_options": s3_options(endpoint)}
        db = None
        if request.param == "s3-postgres":
            from tests.fixtures.postgres import create_database

            admin = request.getfixturevalue("postgres_url")
            db = create_database(admin)
            args["metastore"] = admin.rsplit("/", 1)[0] + "/" + db
    repo = zl.Repo.create(**args)
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(ROWS, COLS), chunks=(1, COLS), dtype="i8")
    s.commit("array t")
    repo.close()
    yield args
    if db is not None:
        from tests.fixtures.postgres import drop_database

        drop_database(request.getfixturevalue("postgres_url"), db)


def rows_at(repo: zl.Repo, ref: str = "main") -> np.ndarray:
    """The rows written (a written row holds its number + 1; one never written holds 0)."""
    arr = zarr.open_array(repo.readonly_session(ref).store, path="t", mode="r")
    return np.flatnonzero(arr[:, 0] == np.arange(1, ROWS + 1)).tolist()
