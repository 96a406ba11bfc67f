"""Spark with executors in separate processes (local-cluster: a master, two executor JVMs
and their Python workers), against PostgreSQL and the S3 server: a write job and a
map_regions job each make one commit, with the right values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.spark.cluster_job import plane

JOB = Path(__file__).with_name("cluster_job.py")


@pytest.mark.slow(seconds=100)  # four JVMs: 100-260 s under make test, so handed out early
def test_write_and_map_regions_on_a_cluster(pg_metastore_url, s3_location, tmp_path):
    location, storage = s3_location
    repo = zl.Repo.create(location, metastore=pg_metastore_url, storage_options=storage)
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    # its own process: one SparkSession per process, and the cluster's JVMs end with it
    done = subprocess.run(
        [sys.executable, str(JOB), location, pg_metastore_url, json.dumps(storage)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["workers"] and report["driver"] not in report["workers"]

    log = repo.log()
    assert [c.message for c in log[:2]] == ["map_regions job", "write job"]
    assert len(log) == 3  # the repository's first commit, then one per job
    store = repo.readonly_session("main").store
    cells = zarr.open_array(store, path="cells", mode="r")[:]
    np.testing.assert_array_equal(cells, (np.arange(256) * 0.5).reshape(4, 8, 8))
    planes = zarr.open_array(store, path="planes", mode="r")[:]
    np.testing.assert_array_equal(planes, np.stack([plane(t) for t in range(6)]))
