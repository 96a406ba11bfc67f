"""Exporting a version with virtual chunks: refused by default (nothing is written), or
materialized (read from the source files, checked against their identity) into a plain
Zarr v3 copy that xarray reads as it reads the original files."""

from __future__ import annotations

import pytest
import xarray as xr

import zarrlake as zl
from tests.helpers.virtual import urls


def test_virtual_chunks_are_refused_or_materialized(repo, archives, tmp_path):
    paths = archives["netcdf4"]
    s = repo.create_session()
    zl.virtual.import_files(s, urls(paths), concat_dim="time")
    s.commit("import")
    with pytest.raises(zl.InvalidInputError, match=r"virtual.*materialize"):
        repo.export("main", tmp_path / "refused")
    assert not any((tmp_path / "refused").rglob("*"))
    report = repo.export("main", tmp_path / "copy", virtual="materialize")
    assert report.materialized > 0
    got = xr.open_zarr(tmp_path / "copy", consolidated=False).load()
    with xr.open_mfdataset(paths, combine="by_coords") as expected:
        xr.testing.assert_identical(got, expected.load())
