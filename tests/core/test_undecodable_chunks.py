"""Chunk bytes zarr cannot decode: refused at the write (`Settings.check_chunks`, on by
default: a compressor's frame and declared size, the exact length of uncompressed chunks),
named when read (`UndecodableChunkError`: array, coordinates, the codec's message; a user
error in the CLI), and found afterwards by `fsck --decode`."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype

import zarrlake as zl
from tests.helpers.cli import run

BAD = b"\x00\x01\x02"
UNCHECKED = {"check_chunks": False}  # how a writer without the check stored bad bytes


def put(session: zl.Session, key: str, data: bytes) -> None:
    """Store raw bytes under `key` through the zarr store (as a zarr writer would)."""
    session.store.set_sync(key, default_buffer_prototype().buffer.from_bytes(data))


def good_chunk(compressors: object, dtype: str = "f8") -> tuple[bytes, bytes]:
    """(zarr.json, the bytes of chunk 0) of a 2x2-chunked array zarr wrote itself."""
    store = zarr.storage.MemoryStore()
    a = zarr.create_array(store, shape=(2, 2), chunks=(2, 2), dtype=dtype, compressors=compressors)
    a[:] = 7
    return store._store_dict["zarr.json"].to_bytes(), store._store_dict["c/0/0"].to_bytes()


CODECS = {
    "zstd": ZstdCodec(),
    "gzip": GzipCodec(),
    "blosc": BloscCodec(),
    "none": None,
    "crc32c": [Crc32cCodec()],
}


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    return zl.Repo.create(tmp_path / "repo")


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_write_of_bytes_the_codecs_cannot_decode_is_refused_naming_the_key(repo, codec):
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="t", shape=(4, 4), chunks=(2, 2), dtype="f8", compressors=CODECS[codec]
    )
    arr[:2, :2] = 1  # what zarr writes passes
    with pytest.raises(zl.InvalidInputError, match=r"chunk 't/c/1/1' .*Settings.check_chunks"):
        put(s, "t/c/1/1", BAD)
    _, good = good_chunk(CODECS[codec])
    with pytest.raises(zl.InvalidInputError, match="t/c/0/1"):
        put(s, "t/c/0/1", good[:-1] if codec != "zstd" else good[:5] + b"\xff" + good[6:])
    put(s, "t/c/1/0", good)  # another chunk's valid bytes are fine
    s.commit()
    got = zarr.open_array(repo.readonly_session().store, path="t", mode="r")[:]
    expected = np.zeros((4, 4))
    expected[:2, :2], expected[2:, :2] = 1, 7
    assert np.array_equal(got, expected)


def test_the_check_reads_only_the_frame_and_can_be_turned_off(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo", settings=UNCHECKED)
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(2,), chunks=(1,), dtype="f8")
    put(s, "t/c/0", BAD)  # stored as given
    assert s.read("t/c/0") == BAD
    with pytest.raises(zl.InvalidInputError, match="check_chunks must be True or False"):
        zl.Settings(check_chunks=1)  # type: ignore[arg-type]


def test_chunks_of_sharded_and_string_arrays_and_of_no_array_are_not_checked(repo):
    s = repo.create_session()
    zarr.create_array(s.store, name="s", shape=(4,), chunks=(2,), shards=(4,), dtype="u1")[:] = 3
    zarr.create_array(s.store, name="w", shape=(2,), chunks=(1,), dtype=str)[:] = ["a", "b"]
    s.write("loose/key", BAD)  # no array there: nothing to check against
    s.commit()
    ro = repo.readonly_session().store
    assert zarr.open_array(ro, path="s", mode="r")[:].tolist() == [3, 3, 3, 3]
    assert zarr.open_array(ro, path="w", mode="r")[:].tolist() == ["a", "b"]


@pytest.fixture
def planted(tmp_path) -> zl.Repo:
    """Main holds array `t` (zstd) whose chunk (1, 1) is 3 bytes no codec decodes, a big
    chunk (1, 0) stored as an object and cut short, and array `u` (sharded, inner chunks
    stored apart) with a bad inner chunk; array `ok` is whole."""
    repo = zl.Repo.create(tmp_path / "repo", settings=UNCHECKED)
    s = repo.create_session()
    t = zarr.create_array(s.store, name="t", shape=(2048, 4), chunks=(1024, 2), dtype="f8")
    t[:] = np.random.default_rng(0).random((2048, 4))
    put(s, "t/c/1/1", BAD)
    whole = s.read("t/c/1/0")
    assert whole is not None and len(whole) > 8192  # an object, not inline
    put(s, "t/c/1/0", whole[: len(whole) // 2])
    u = zarr.create_array(s.store, name="u", shape=(4,), chunks=(1,), shards=(4,), dtype="f8")
    u[:] = 5
    zarr.create_array(s.store, name="ok", shape=(2,), chunks=(1,), dtype="f8")[:] = 1
    s.commit("planted")
    return repo


def test_a_read_of_an_undecodable_chunk_names_the_array_and_coordinates(planted):
    t = zarr.open_array(planted.readonly_session().store, path="t", mode="r")
    with pytest.raises(zl.UndecodableChunkError) as e:
        t[1024:, 2:]
    assert (e.value.array, e.value.coords, e.value.key) == ("t", (1, 1), "t/c/1/1")
    assert "Zstd" in e.value.reason and "chunk (1, 1) of array 't'" in str(e.value)
    assert isinstance(e.value, zl.CorruptionError)
    assert t[:1024, :].shape == (1024, 4)  # the other chunks read
    with pytest.raises(zl.UndecodableChunkError, match="more chunk"):
        t[1024:, :]  # both bad chunks of row 1: the first named, the other counted


def test_fsck_decode_finds_every_planted_chunk(planted):
    assert planted.fsck() == []  # the bytes are as written: checksums hold
    problems = planted.fsck(decode=True)
    assert sorted((p.kind, p.detail.split(" does not")[0]) for p in problems) == [
        ("undecodable", "chunk (1, 0) of array 't' (key 't/c/1/0')"),
        ("undecodable", "chunk (1, 1) of array 't' (key 't/c/1/1')"),
    ]
    assert planted.fsck(decode=True, arrays=["ok", "u"]) == []
    assert len(planted.fsck(decode=True, arrays=["t"])) == 2
    with pytest.raises(zl.InvalidInputError, match="'nope'"):
        planted.fsck(decode=True, arrays=["nope"])


def test_fsck_decode_finds_a_bad_inner_chunk_of_a_sharded_array(tmp_path):
    store = zarr.storage.MemoryStore()  # a shard zarr wrote, one inner chunk's bytes garbled
    zarr.create_array(store, shape=(4,), chunks=(1,), shards=(4,), dtype="f8")[:] = [1, 2, 3, 4]
    shard = bytearray(store._store_dict["c/0"].to_bytes())
    shard[:4] = b"\xde\xad\xbe\xef"  # inner chunk 0's zstd frame starts the shard
    repo = zl.Repo.create(tmp_path / "repo", settings=UNCHECKED)
    s = repo.create_session()
    zarr.create_array(s.store, name="u", shape=(4,), chunks=(1,), shards=(4,), dtype="f8")
    put(s, "u/c/0", bytes(shard))
    s.commit()
    [problem] = repo.fsck(decode=True)
    assert problem.kind == "undecodable"
    assert "chunk (0,) of array 'u'" in problem.detail
    assert repo.fsck(decode=True, arrays=["u*"])[0].detail == problem.detail


def test_the_command_line_names_the_chunk_and_exits_1(planted):
    where = planted.spec.location
    res = run("-r", where, "cat", "main", "t", "--slice", "1024:1026,2:4")
    assert res.code == 1
    assert "internal error" not in res.stderr
    assert "chunk (1, 1) of array 't' does not decode" in res.stderr
    res = run("-r", where, "fsck", "--decode")
    assert res.code == 1
    assert "2 problem(s) found" in res.stdout and "chunks decoded" in res.stdout
    assert "undecodable: chunk (1, 1) of array 't' (key 't/c/1/1')" in res.stdout
    assert run("-r", where, "fsck", "--decode", "--arrays", "ok,u").code == 0
    res = run("-r", where, "fsck", "--decode", "--arrays", "t", "--json")
    assert res.code == 1 and len(res.json()["problems"]) == 2  # type: ignore[index]
    assert run("-r", where, "fsck", "--arrays", "t").code == 1  # --arrays needs --decode


def test_chunks_are_checked_against_the_document_written_with_them(repo):
    doc, chunk = good_chunk(GzipCodec())
    s = repo.create_session()
    s.write_many([("n/zarr.json", doc), ("n/c/0/0", chunk)])  # one batch: its own document
    with pytest.raises(zl.InvalidInputError, match="'m/c/0/0' is not a gzip stream"):
        s.write_many([("m/zarr.json", doc), ("m/c/0/0", BAD)])
    s.commit()
    got = zarr.open_array(repo.readonly_session().store, path="n", mode="r")[:]
    assert np.array_equal(got, np.full((2, 2), 7.0))


def test_an_array_created_again_with_other_codecs_takes_chunks_in_them(repo):
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(2, 2), chunks=(2, 2), dtype="f8")[:] = 1
    s.commit("zstd")
    s = repo.create_session()  # the base commit holds t with zstd
    t = zarr.create_array(
        s.store,
        name="t",
        shape=(2, 2),
        chunks=(2, 2),
        dtype="f8",
        compressors=GzipCodec(),
        overwrite=True,
    )
    t[:] = 2  # gzip frames: checked against the session's document, not the base's
    s.commit("gzip")
    got = zarr.open_array(repo.readonly_session().store, path="t", mode="r")[:]
    assert np.array_equal(got, np.full((2, 2), 2.0))
