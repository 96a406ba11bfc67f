"""Bucket-only repositories: an s3:// repository made without a metastore URL keeps its
metastore in its own bucket, records that in its config, and opens from its URL and storage
options alone (here and in a new process, whose workers join a session by pickle); a
repository whose metastore is elsewhere says which one it needs."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import uuid

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.errors import ConfigurationError, InvalidInputError

CHILD = """
import json, pickle, sys
import zarr
import zarrlake as zl

location, options, pickled = sys.argv[1], json.loads(sys.argv[2]), bytes.fromhex(sys.argv[3])
repo = zl.Repo.open(location, storage_options=options)
seen = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[:].tolist()
worker = pickle.loads(pickled)  # a worker joining the driver's session
zarr.open_array(worker.store, path="a")[4:8] = 7
worker.flush()  # the worker's writes are durable before it reports
print(json.dumps({"seen": seen, "metastore": repo.spec.metastore}))
"""


def _write(session: zl.Session, values: list[int]) -> None:
    root = zarr.open_group(session.store, mode="a")
    arr = root.require_array("a", shape=(8,), chunks=(4,), dtype="i8", fill_value=0)
    arr[:] = values


def test_s3_repository_keeps_its_metastore_in_its_bucket(s3_location):
    location, options = s3_location
    repo = zl.Repo.create(location, storage_options=options)
    assert repo.spec.metastore == "bucket"
    config = json.loads(repo._context.object_store.get("zarrlake.json"))
    assert config["metastore"] == "bucket"
    s = repo.create_session()
    _write(s, list(range(8)))
    s.commit("first")
    heads = [k for k in repo._context.object_store.list("meta/") if k.endswith("/head")]
    assert len(heads) >= 2  # refs and sessions, at least: no server involved

    driver = repo.create_session()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, location, json.dumps(options), pickle.dumps(driver).hex()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"seen": list(range(8)), "metastore": "bucket"}
    driver.commit("the worker's write")  # one commit for the cooperative session
    again = zl.Repo.open(location, storage_options=options)
    got = zarr.open_array(again.readonly_session().store, path="a", mode="r")[:]
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 7, 7, 7, 7])
    assert [c.message for c in again.log()][:2] == ["the worker's write", "first"]


def test_bucket_metastore_named_explicitly(s3_location):
    location, options = s3_location
    repo = zl.Repo.create(location, metastore="bucket", storage_options=options)
    assert json.loads(repo._context.object_store.get("zarrlake.json"))["metastore"] == "bucket"
    assert zl.Repo.open(location, metastore="bucket", storage_options=options).log()


def test_bucket_metastore_on_memory_storage():
    location = f"memory://bucket-only-{uuid.uuid4().hex[:8]}"
    repo = zl.Repo.create(location, metastore="bucket")
    s = repo.create_session()
    _write(s, [1] * 8)
    s.commit("one")
    assert zl.Repo.open(location).log()[0].message == "one"


def test_local_directory_cannot_keep_its_metastore_in_a_bucket(tmp_path):
    with pytest.raises(InvalidInputError, match="SQLite"):
        zl.Repo.create(tmp_path / "repo", metastore="bucket")


def test_postgres_backed_repository_opened_without_its_url(s3_location, pg_metastore_url):
    location, options = s3_location
    zl.Repo.create(location, metastore=pg_metastore_url, storage_options=options).close()
    with pytest.raises(InvalidInputError) as info:
        zl.Repo.open(location, storage_options=options)
    message = str(info.value)
    assert "keeps its metastore in PostgreSQL" in message
    assert "metastore='postgresql://" in message and "ZARRLAKE_METASTORE" in message
    with pytest.raises(ConfigurationError, match=r"PostgreSQL metastore.*not a metastore in"):
        zl.Repo.open(location, metastore="bucket", storage_options=options)
    assert zl.Repo.open(location, metastore=pg_metastore_url, storage_options=options).log()


def test_bucket_repository_refuses_another_metastore(s3_location, pg_metastore_url):
    location, options = s3_location
    zl.Repo.create(location, storage_options=options).close()
    with pytest.raises(ConfigurationError, match="uses a metastore in its own bucket"):
        zl.Repo.open(location, metastore=pg_metastore_url, storage_options=options)


def test_repository_from_before_kinds_were_recorded_needs_its_url(s3_location):
    location, options = s3_location
    repo = zl.Repo.create(location, storage_options=options)
    store = repo._context.object_store
    config = json.loads(store.get("zarrlake.json"))
    del config["metastore"]
    store.put("zarrlake.json", json.dumps(config).encode())
    with pytest.raises(InvalidInputError, match="needs a metastore URL"):
        zl.Repo.open(location, storage_options=options)
    assert zl.Repo.open(location, metastore="bucket", storage_options=options).log()
