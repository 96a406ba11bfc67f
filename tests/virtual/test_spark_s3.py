"""Imports with Spark (one task per batch of files, files in any order) and from moto's S3
server, read back through the store exactly as xarray reads the originals."""

from __future__ import annotations

import random

import pytest
import xarray as xr

import zarrlake as zl
from tests.fixtures.s3 import s3_client
from tests.helpers.virtual import assert_same, day_dataset, urls


def test_spark_import_in_any_order_is_one_commit(spark, repo, archives):
    paths = archives["h5netcdf"]
    shuffled = urls(paths)
    random.Random(3).shuffle(shuffled)
    head = repo.list_branches()["main"]
    s = repo.create_session()
    zl.spark.import_virtual(spark, s, shuffled, concat_dim="time", files_per_task=1)
    cid = s.commit("import")
    assert repo.commit_info(cid).parent_ids == (head,)
    assert_same(repo.readonly_session(), paths)
    opts = {"repo": repo.spec.location, "array": "u10", "changes": f"{head}..main"}
    feed = spark.read.format("zarrlake").options(**opts, layout="chunks").load().collect()
    with xr.open_mfdataset(paths) as ds:
        u10 = ds.u10.values
    assert sorted((r.time, r.change) for r in feed) == [(i, "added") for i in range(3)]
    for r in feed:  # one contiguous chunk per file, read from its source
        assert r.u10 == u10[2 * r.time : 2 * r.time + 2].ravel().tolist()


def test_spark_import_names_both_overlapping_files(spark, repo, archives, tmp_path):
    paths = archives["netcdf4"]
    dup = paths[0].parent.parent / "dup.nc"
    day_dataset(2).to_netcdf(dup, engine="netcdf4")  # the same days as day001.nc
    s = repo.create_session()
    with pytest.raises(zl.errors.InvalidInputError, match=r"day001\.nc and .*dup\.nc overlap"):
        zl.spark.import_virtual(spark, s, [*urls(paths), dup.as_uri()])
    with pytest.raises(zl.errors.InvalidInputError, match=r"missing\.nc does not exist"):
        zl.spark.import_virtual(spark, s, [*urls(paths), dup.with_name("missing.nc").as_uri()])
    assert s._staged_changes() == []


@pytest.fixture
def s3_archive(s3_location, archives):
    """The netCDF4 archive uploaded to a fresh moto bucket; (repo location, options, urls)."""
    location, options = s3_location
    bucket = location.split("/")[2]
    client = s3_client(options["endpoint_url"])
    out = []
    for p in archives["netcdf4"]:
        client.upload_file(str(p), bucket, f"archive/{p.name}")
        out.append(f"s3://{bucket}/archive/{p.name}")
    return location, options, out


def test_import_from_s3(spark, s3_archive, archives, tmp_path):
    location, options, s3_urls = s3_archive
    repo = zl.Repo.create(
        location, metastore=f"sqlite:///{tmp_path}/meta.sqlite", storage_options=options
    )
    repo.add_virtual_source(s3_urls[0].rsplit("/", 1)[0])
    s = repo.create_session()
    zl.virtual.import_files(s, s3_urls[:2], group="one")
    ref = s._engine.lookup("one/t2m/c/0/0/0")
    assert ref.identity.startswith("size=") and ";etag=" in ref.identity
    s.commit("in process")
    s = repo.create_session()
    zl.spark.import_virtual(spark, s, list(reversed(s3_urls)), group="spark")
    s.commit("with spark")
    reader = zl.Repo.open(
        location, metastore=f"sqlite:///{tmp_path}/meta.sqlite", storage_options=options
    ).readonly_session()
    for group, n in (("one", 2), ("spark", 3)):
        got = xr.open_zarr(reader.store, group=group, consolidated=False).load()
        with xr.open_mfdataset(archives["netcdf4"][:n]) as expected:
            xr.testing.assert_identical(got, expected.load())
    bucket = s3_urls[0].split("/")[2]
    s3_client(options["endpoint_url"]).upload_file(
        str(archives["netcdf4"][2]), bucket, "archive/day000.nc"
    )  # rewritten: a new ETag
    with pytest.raises(zl.StaleVirtualChunkError, match=r"day000\.nc changed since"):
        xr.open_zarr(reader.store, group="one", consolidated=False).load()
    assert {p.kind for p in repo.fsck(sources_only=True)} == {"stale"}
