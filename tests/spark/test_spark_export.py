"""zl.spark.export on a real local Spark: tasks copy a few manifest ranges each (shards
whose inner chunks straddle two ranges are written once, whole), the driver writes the
metadata last; the copy opens with plain zarr and matches numpy and the local export byte
for byte; a destination that is not empty is refused before any task runs."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl


def test_spark_export_matches_numpy_and_the_local_export(spark, tmp_path, monkeypatch):
    monkeypatch.setattr("zarrlake.format.manifest.TARGET_ENTRIES", 32)  # many small ranges
    repo = zl.Repo.create(tmp_path / "repo")
    sharded = np.arange(20 * 30, dtype="u2").reshape(20, 30)
    plain = np.random.default_rng(3).random((40, 40))
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g.attrs["source"] = "spark"
    g.create_array("s", shape=sharded.shape, chunks=(1, 1), shards=(5, 5), dtype="u2")[:] = sharded
    g.create_array("p", shape=plain.shape, chunks=(10, 10), dtype="f8")[:] = plain
    s.commit("data")
    assert len(repo._snapshot_of(repo.resolve("main")).ranges) >= 2
    report = zl.spark.export(spark, repo, "main", tmp_path / "spark.zarr", ranges_per_task=4)
    local = repo.export("main", tmp_path / "local.zarr")
    assert (report.chunks, report.bytes, report.documents) == (
        local.chunks,
        local.bytes,
        local.documents,
    )
    out = zarr.open_group(tmp_path / "spark.zarr", mode="r")
    assert out.attrs["source"] == "spark"
    np.testing.assert_array_equal(out["s"][:], sharded)
    np.testing.assert_array_equal(out["p"][:], plain)
    for f in (tmp_path / "local.zarr").rglob("*"):
        if f.is_file():
            twin = tmp_path / "spark.zarr" / f.relative_to(tmp_path / "local.zarr")
            assert twin.read_bytes() == f.read_bytes(), f


def test_spark_export_refuses_a_non_empty_destination_before_any_task(spark, tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    zarr.open_group(s.store).create_array("a", shape=(4,), chunks=(2,), dtype="i4")[:] = 1
    s.commit("a")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "x").write_bytes(b"1")
    with pytest.raises(zl.AlreadyExistsError, match="not empty"):
        zl.spark.export(spark, str(tmp_path / "repo"), "main", tmp_path / "dest")
