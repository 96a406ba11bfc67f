"""A virtual source rewritten with its size and mtime kept passes every identity check, but
its bytes are no longer the imported chunks: reads name the file and the key (not a bare
zlib error), and `materialize` refuses, storing nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import zarr
from starlette.testclient import TestClient

import zarrlake as zl
from tests.helpers.cli import run
from tests.helpers.virtual import day_dataset, encoding
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.ui import create_app
from zarrlake.virtual import materializing

BAD_KEY = "t2m/c/1/1/1"
"""The chunk whose bytes the rewrite changes (the last of t2m's 2 x 2 x 2)."""


def rewrite_in_place(path: Path, ref: ChunkRef) -> None:
    """Change the bytes of `ref` in `path`, keeping the file's size and mtime."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    for i in range(ref.offset, ref.offset + ref.length):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size


def imported(tmp_path: Path) -> tuple[zl.Repo, Path]:
    """A repository with one NetCDF file imported as virtual chunks (committed)."""
    path = tmp_path / "own.nc"
    day_dataset(0).to_netcdf(path, engine="netcdf4", encoding=encoding("netcdf4"))
    repo = zl.Repo.create(tmp_path / "repo")
    repo.add_virtual_source(tmp_path.as_uri())
    s = repo.create_session()
    zl.virtual.import_files(s, [path.as_uri()])
    s.commit("import")
    return repo, path


@pytest.fixture
def rewritten(tmp_path: Path) -> tuple[zl.Repo, Path]:
    """A repository with one NetCDF file imported (committed), then rewritten in place."""
    repo, path = imported(tmp_path)
    ref = repo.readonly_session()._engine.lookup(BAD_KEY)
    assert isinstance(ref, ChunkRef)
    rewrite_in_place(path, ref)
    return repo, path


def assert_names_file_and_key(message: str, path: Path) -> None:
    assert f"virtual source {path.as_uri()} changed since it was imported" in message, message
    assert f"chunk {BAD_KEY!r}" in message and "does not decode" in message, message
    assert "zlib.error" in message, message


@pytest.mark.parametrize("held_bytes", [materializing.HELD_BYTES, 0])
def test_materialize_refuses_a_rewritten_source_and_stores_nothing(
    rewritten: tuple[zl.Repo, Path], monkeypatch: pytest.MonkeyPatch, held_bytes: int
) -> None:
    """Batches of two chunks: the bad chunk is in the last batch, after three good ones;
    with nothing held, the storing pass would read again, but it is never reached."""
    repo, path = rewritten
    monkeypatch.setattr(materializing, "BATCH", 2)
    monkeypatch.setattr(materializing, "HELD_BYTES", held_bytes)
    s = repo.create_session()
    with pytest.raises(zl.StaleVirtualChunkError) as info:
        zl.virtual.materialize(s, "t2m")
    assert_names_file_and_key(str(info.value), path)
    assert s._staged_changes() == []
    assert zl.virtual.materialize(s, "u10") == 1  # another array of the file still decodes


def test_materialize_stores_every_chunk_when_none_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HELD_BYTES the storing pass reads the chunks again: the same chunks land."""
    repo, path = imported(tmp_path)
    expected = zarr.open_array(repo.readonly_session().store, path="t2m", mode="r")[:]
    monkeypatch.setattr(materializing, "BATCH", 3)
    monkeypatch.setattr(materializing, "HELD_BYTES", 0)
    s = repo.create_session()
    assert zl.virtual.materialize(s, "t2m") == 8
    s.commit("materialize")
    path.unlink()  # the copies are the repository's own now
    got = zarr.open_array(repo.readonly_session().store, path="t2m", mode="r")[:]
    assert (got == expected).all()


def test_cat_names_the_file_and_key_of_a_chunk_that_does_not_decode(
    rewritten: tuple[zl.Repo, Path],
) -> None:
    repo, path = rewritten
    res = run("-r", repo.spec.location, "cat", "main", "t2m", "--slice", ":,:,:")
    assert res.code == 1, res.stdout
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("zarrlake: error: "), line
    assert_names_file_and_key(line, path)
    assert "internal error" not in line


def test_the_web_ui_preview_names_the_file_and_key(rewritten: tuple[zl.Repo, Path]) -> None:
    repo, path = rewritten
    client = TestClient(create_app(repo))
    params = {"ref": "main", "path": "t2m", "slice": "1,:,:", "format": "json"}
    r = client.get("/array", params=params)
    assert r.status_code == 409, r.text
    assert_names_file_and_key(r.json()["error"], path)
    assert "internal error" not in r.json()["error"]
