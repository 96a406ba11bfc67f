"""Importing NetCDF archives as virtual chunks in one process, and reading them back through
the store exactly as xarray reads the original files."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrlake as zl
from tests.helpers.virtual import assert_same, day_dataset, encoding, urls
from zarrlake.format.chunk_ref import RefKind


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_import_files_reads_like_the_originals(repo, archives, engine):
    paths = archives[engine]
    s = repo.create_session()
    zl.virtual.import_files(s, urls(list(reversed(paths))), concat_dim="time")
    ref = s._engine.lookup("t2m/c/0/0/0")
    assert ref.kind == RefKind.VIRTUAL and ref.location == paths[0].as_uri()
    assert ref.identity.startswith(f"size={paths[0].stat().st_size};mtime=")
    cid = s.commit("import")
    reader = zl.Repo.open(repo.spec.location).readonly_session(cid)
    assert_same(reader, paths)
    stats = repo.stats()
    assert stats.virtual_sources == 3
    # t2m: 2 x 2 x 2 chunks per file, u10: 1, mask: 1
    assert stats.virtual_chunks == 3 * (8 + 1 + 1)
    assert stats.virtual_bytes > 0 and stats.bytes < stats.virtual_bytes
    assert repo.fsck() == []


def test_appending_files_to_an_existing_group(repo, archives):
    paths = archives["netcdf4"]
    s = repo.create_session()
    zl.virtual.import_files(s, urls(paths[:1]), group="era")
    s.commit("first day")
    s = repo.create_session()
    zl.virtual.import_files(s, urls(paths[1:]), group="era")
    s.commit("two more")
    got = xr.open_zarr(repo.readonly_session().store, group="era", consolidated=False).load()
    with xr.open_mfdataset(paths) as expected:
        xr.testing.assert_identical(got, expected.load())
    s = repo.create_session()
    with pytest.raises(zl.errors.InvalidInputError, match="overlaps the data already in group"):
        zl.virtual.import_files(s, urls(paths[1:2]), group="era")
    other = paths[0].parent.parent / "later-other-grid.nc"
    day_dataset(40, lat=5).to_netcdf(
        other, engine="netcdf4", encoding={"t2m": encoding("netcdf4")["t2m"]}
    )
    with pytest.raises(zl.errors.InvalidInputError, match="'lat' differs from group era"):
        zl.virtual.import_files(s, [other.as_uri()], group="era")
    assert s._staged_changes() == []


def test_write_a_virtualizarr_dataset(repo, archives):
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_mfdataset
    from virtualizarr.parsers import HDFParser

    paths = archives["h5netcdf"]
    registry = ObjectStoreRegistry({"file:///": LocalStore("/")})
    vds = open_virtual_mfdataset(urls(paths), registry=registry, parser=HDFParser())
    s = repo.create_session()
    zl.virtual.write(s, vds, group="g/h")
    s.commit("write")
    got = xr.open_zarr(repo.readonly_session().store, group="g/h", consolidated=False).load()
    with xr.open_mfdataset(paths) as expected:
        xr.testing.assert_identical(got, expected.load())


def test_stale_sources_are_refused_never_misread(repo, tmp_path, archives):
    path = tmp_path / "own.nc"
    day_dataset(0).to_netcdf(path, engine="netcdf4", encoding=encoding("netcdf4"))
    repo.add_virtual_source(tmp_path.as_uri())
    s = repo.create_session()
    zl.virtual.import_files(s, [path.as_uri()])
    s.commit("import")
    t2m = zarr.open_array(repo.readonly_session().store, path="t2m", mode="r")
    before = t2m[:]
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # touched
    with pytest.raises(zl.StaleVirtualChunkError, match=r"own\.nc changed since it was imported"):
        zarr.open_array(repo.readonly_session().store, path="t2m", mode="r")[:]
    [problem] = repo.fsck(sources_only=True)
    assert problem.kind == "stale" and problem.object == path.as_uri()
    day_dataset(9).to_netcdf(path, engine="netcdf4", encoding=encoding("netcdf4"))  # rewritten
    with pytest.raises(zl.StaleVirtualChunkError):
        zarr.open_array(repo.readonly_session().store, path="t2m", mode="r")[:]
    path.unlink()
    with pytest.raises(zl.StaleVirtualChunkError, match="is gone"):
        zarr.open_array(repo.readonly_session().store, path="t2m", mode="r")[:]
    assert not np.isnan(before).any()


def test_refused_imports_stage_nothing(repo, tmp_path, archives):
    paths = archives["netcdf4"]
    head = repo.list_branches()["main"]
    outside = tmp_path / "elsewhere.nc"
    day_dataset(0).to_netcdf(outside)
    corrupt = paths[0].parent.parent / "corrupt.nc"
    corrupt.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 200)
    same_day = paths[0].parent.parent / "same-day.nc"
    day_dataset(1, days=1).to_netcdf(same_day, engine="netcdf4")
    other_grid = paths[0].parent.parent / "other-grid.nc"
    day_dataset(10, lat=5).to_netcdf(other_grid, engine="netcdf4")
    cases = [
        ([outside.as_uri()], f"{outside.as_uri()} is outside every allowed prefix"),
        (
            [paths[0].as_uri(), paths[0].parent.joinpath("nope.nc").as_uri()],
            "nope.nc does not exist",
        ),
        ([corrupt.as_uri()], "corrupt.nc is not a readable NetCDF4/HDF5 file"),
        ([paths[0].as_uri(), same_day.as_uri()], "day000.nc and .*same-day.nc overlap"),
        (
            [paths[0].as_uri(), other_grid.as_uri()],
            "day000.nc and .*other-grid.nc cannot be joined",
        ),
    ]
    for given, message in cases:
        s = repo.create_session()
        with pytest.raises(zl.errors.InvalidInputError, match=message):
            zl.virtual.import_files(s, given)
        assert s._staged_changes() == [], message
        s.abandon()
    assert repo.list_branches()["main"] == head


def test_native_writes_and_materialize_replace_virtual_chunks(repo, tmp_path, archives):
    own = tmp_path / "own"
    own.mkdir()
    paths = [own / "a.nc", own / "b.nc"]
    for i, p in enumerate(paths):
        day_dataset(2 * i).to_netcdf(p, engine="netcdf4", encoding=encoding("netcdf4"))
    repo.add_virtual_source(own.as_uri())
    s = repo.create_session()
    zl.virtual.import_files(s, urls(paths))
    s.commit("import")
    with xr.open_mfdataset(paths) as ds:
        expected = ds.load()
    s = repo.create_session()
    zarr.open_array(s.store, path="u10")[0:2] = -1.0  # one whole chunk, now native
    assert s._engine.lookup("u10/c/0/0/0").kind != RefKind.VIRTUAL
    s.commit("fix u10")
    assert repo.diff("main~1", "main").chunks_written == {"u10": {(0, 0, 0)}}
    s = repo.create_session()
    assert zl.virtual.materialize(s, "t2m") == 16
    assert zl.virtual.materialize(s, "u10") == 1
    s.commit("materialize")
    assert repo.stats().virtual_chunks == 2  # mask's
    for p in paths:
        os_stat = p.stat()
        os.utime(p, ns=(os_stat.st_atime_ns, os_stat.st_mtime_ns + 10**9))
    got = zarr.open_group(repo.readonly_session().store, mode="r")
    np.testing.assert_array_equal(got["t2m"][:], expected.t2m.values)
    np.testing.assert_array_equal(got["u10"][2:], expected.u10.values[2:])
    assert (got["u10"][:2] == -1).all()
    assert len(repo.fsck(sources_only=True)) == 2  # mask still points at the sources


def test_gc_never_deletes_sources(repo, archives):
    """Even sources inside the repository's own directory are not gc's to delete."""
    from datetime import timedelta

    inside = repo.spec.location + "/archive"
    os.makedirs(inside)
    paths = []
    for _i, p in enumerate(archives["netcdf4"][:2]):
        paths.append(shutil.copy2(p, f"{inside}/{p.name}"))
    repo.add_virtual_source(f"file://{inside}")
    s = repo.create_session()
    zl.virtual.import_files(s, [f"file://{p}" for p in paths])
    s.commit("import")
    s = repo.create_session()
    s.delete_many(s.list_prefix("t2m/"))
    s.write("big/c/0", os.urandom(20_000))  # garbage once abandoned: gc must find it
    s.abandon()
    report = repo.gc(older_than=timedelta(0), full=True)
    assert report.by_kind["chunks"][0] == 1
    assert all(os.path.exists(p) for p in paths)
    assert_same(repo.readonly_session(), paths)


def test_sources_survive_reopening_and_are_checked(tmp_path):
    repo = zl.Repo.create(tmp_path / "r")
    with pytest.raises(zl.errors.InvalidInputError, match="must name a directory or bucket"):
        repo.add_virtual_source("file:///")
    with pytest.raises(zl.errors.InvalidInputError, match="file:///absolute/path"):
        repo.add_virtual_source("http://example.org/data")
    repo.add_virtual_source("s3://archive/era5/")
    repo.add_virtual_source((tmp_path / "data").as_uri())
    again = zl.Repo.open(tmp_path / "r")
    assert again.virtual_sources() == [(tmp_path / "data").as_uri(), "s3://archive/era5"]
    s = again.create_session()
    with pytest.raises(zl.errors.InvalidInputError, match=r"s3://archive/era5x/a\.nc is outside"):
        zl.virtual.import_files(s, ["s3://archive/era5x/a.nc"])


def test_staged_virtual_records_round_trip():
    from zarrlake.format.chunk_ref import ChunkRef
    from zarrlake.format.manifest import ManifestRange
    from zarrlake.format.staged import OP_WRITE, StagedRecord

    ref = ChunkRef.virtual("file:///d/a.nc", 100, 50, "size=9;mtime=1")
    got = StagedRecord.decode(StagedRecord(OP_WRITE, b"w" * 8, ref).encode(), "k").ref
    assert got == ref
    older = ChunkRef.virtual("file:///d/a.nc", 100, 50, "size=8;mtime=0")
    rng = ManifestRange.empty().merge([(b"a/c/0", ref), (b"a/c/1", older)])[0]
    oid, data = rng.encode()
    back = ManifestRange.decode(oid, data)
    assert back.get(b"a/c/0") == ref and back.get(b"a/c/1") == older
    assert ref.digest != older.digest
    plain = ManifestRange.empty().merge([(b"x", ChunkRef.object(b"\1" * 32, 5))])[0]
    assert "identities" not in json.dumps(plain.encode()[1][:400].decode(errors="replace"))


def test_chunk_maps_show_virtual_chunks_apart(repo, archives):
    from starlette.testclient import TestClient

    from zarrlake.ui.app import create_app

    paths = archives["netcdf4"]
    s = repo.create_session()
    zl.virtual.import_files(s, urls(paths))
    imported = s.commit("import")
    s = repo.create_session()
    zarr.open_array(s.store, path="t2m")[0, 0:3, 0:4] = 1.0  # chunk (0, 0, 0) becomes native
    s.commit("fix")
    client = TestClient(create_app(repo))
    maps = {m["path"]: m for m in client.get(f"/api/commit/{imported}").json()["chunk_maps"]}
    assert {c["kind"] for c in maps["t2m"]["cells"]} == {"virtual"}
    page = client.get(f"/commit/{imported}").text
    assert 'class="cell virtual"' in page and "virtual (written as references" in page
    assert 'id="stat-virtual">29<' in client.get("/").text
    fix = client.get("/api/commit/main").json()["chunk_maps"][0]
    assert [c["kind"] for c in fix["cells"]] == ["written"]


def test_diff_blame_and_merge_treat_virtual_chunks_as_chunks(repo, archives):
    paths = archives["netcdf4"]
    s = repo.create_session()
    zl.virtual.import_files(s, urls(paths[:2]))
    first = s.commit("two days")
    repo.create_branch("more", at="main")
    s = repo.create_session("more")
    zl.virtual.import_files(s, urls(paths[2:]))
    third = s.commit("third day")
    s = repo.create_session("main")
    zarr.open_group(s.store).create_array("extra", shape=(3,), dtype="i4", dimension_names=["x"])[
        :
    ] = 7
    s.commit("extra on main")
    d = repo.diff(first, third)
    assert d.chunks_written["t2m"] == {(t, y, x) for t in (4, 5) for y in (0, 1) for x in (0, 1)}
    merged = repo.merge("more", into="main")
    assert repo.blame("t2m", (5, 1, 1), ref=merged).id == third
    assert repo.blame("t2m", (0, 0, 0), ref=merged).id == first
    got = xr.open_zarr(repo.readonly_session(merged).store, consolidated=False).load()
    with xr.open_mfdataset(paths) as expected:
        xr.testing.assert_identical(got.drop_vars("extra"), expected.load())
    assert len(repo.commit_info(merged).parent_ids) == 2
