"""`zarrlake demo` end to end on a small dataset (its own Spark, in a subprocess), then the
repository it leaves behind, checked through the API; and its directory safety rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zarrlake as zl
from zarrlake.check import check_repo
from zarrlake.demo import DemoConfig, generate_block, prepare_directory

ZARRLAKE = str(Path(sys.executable).with_name("zarrlake"))
DAYS = 3


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    where = tmp_path_factory.mktemp("demo") / "demo-repo"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    res = subprocess.run(
        [ZARRLAKE, "demo", "--dir", str(where), "--days", str(DAYS), "--small"],
        capture_output=True,
        text=True,
        env=env,
        timeout=540,
    )
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    return where, res.stdout


def test_demo_tells_the_story(demo_run):
    _, out = demo_run
    for step in (
        "1. Ingest",
        "2. History",
        "3. Concurrent writers",
        "4. A Spark job",
        "5. Summary",
    ):
        assert step in out
    assert "tagged v1.0" in out
    assert "byte-identical" in out and "not yet ingested (all NaN)" in out
    assert "chunk bytes added on disk: 0" in out
    assert "Both landed" in out
    assert "ConflictError" in out and "chunk conflict at 'weather/t2m' chunks (1, 1, 0)" in out
    assert "landed" in out.split("retried from the new head")[1]
    assert "corrupt upstream file for spatial chunk" in out
    assert "(unchanged)" in out and "open sessions left behind: 0" in out
    assert "deduplication" in out and "Repository:" in out


def test_demo_repository_history(demo_run):
    where, _ = demo_run
    repo = zl.Repo.open(where)
    messages = [c.message for c in repo.log("main")]
    ingests = [m for m in messages if m.startswith("Ingest ")]
    # each day once, plus the idempotent re-run of day 2; the failed job made no commit
    assert sorted(ingests) == sorted(
        ["Ingest 2025-01-01", "Ingest 2025-01-02", "Ingest 2025-01-03", "Ingest 2025-01-02"]
    )
    assert len([m for m in messages if "bias-correct" in m]) == 4  # 2 + A + B's retry
    assert messages[-2:] == ["Create the weather dataset", "Repository initialized"]
    assert len(messages) == 2 + len(ingests) + 4
    assert list(repo.list_tags()) == ["v1.0"]
    assert repo.list_sessions() == []
    assert check_repo(repo) == []

    import zarr

    head = zarr.open_array(repo.readonly_session("main").store, path="weather/u10", mode="r")
    cfg = DemoConfig.sized(where, DAYS, small=True)
    expected = generate_block(cfg, DAYS - 1, 0)["u10"]
    assert np.array_equal(
        head[24 * (DAYS - 1) : 24 * DAYS, : cfg.lat_chunk, : cfg.lon_chunk], expected
    )


def test_generation_is_deterministic(tmp_path):
    cfg = DemoConfig.sized(tmp_path, 3, small=True)
    a, b = generate_block(cfg, 1, 2), generate_block(cfg, 1, 2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["t2m"], generate_block(cfg, 2, 2)["t2m"])
    assert a["t2m"].shape == (24, cfg.lat_chunk, cfg.lon_chunk) and a["t2m"].dtype == np.float32


def test_demo_directory_is_wiped_only_if_it_is_a_repository(tmp_path):
    old = tmp_path / "old"
    zl.Repo.create(old)
    assert prepare_directory(old) == old and not old.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    res = subprocess.run(
        [ZARRLAKE, "demo", "--dir", str(other), "--small"], capture_output=True, text=True
    )
    assert res.returncode == 1
    assert "not a zarrlake repository; not wiping it" in res.stderr
    assert "Traceback" not in res.stderr
    assert (other / "precious.txt").read_text() == "keep me"
