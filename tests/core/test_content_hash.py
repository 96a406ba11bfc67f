"""Content hashes (issue 15): new repositories name their objects and check their chunks with
BLAKE3 and say so in their config and object frames; SHA-256 repositories, as every older
zarrlake made them, are read and written in their own format, byte for byte."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import blake3
import pytest
import zarr

import zarrlake as zl
from tests.core.counting import counted
from zarrlake.errors import CorruptionError, InvalidInputError
from zarrlake.format import envelope
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.format.commit import CommitRecord
from zarrlake.format.digest import Hash

CHUNK = bytes(range(256)) * 40  # 10 KiB: stored as a chunk object, not inline or packed


def write_chunk(repo: zl.Repo, data: bytes = CHUNK) -> str:
    s = repo.create_session()
    s.write("a/c/0", data)
    return s.commit("one chunk")


def config(path: Path) -> dict:
    return json.loads((path / "zarrlake.json").read_text())


@pytest.mark.parametrize(
    ("name", "algo", "frame", "hasher"),
    [
        ("blake3", Hash.BLAKE3, 2, lambda d: blake3.blake3(d).digest()),
        ("sha256", Hash.SHA256, 1, lambda d: hashlib.sha256(d).digest()),
    ],
)
def test_objects_and_chunks_are_named_by_the_repository_hash(tmp_path, name, algo, frame, hasher):
    repo = zl.Repo.create(tmp_path, content_hash=name)
    cid = write_chunk(repo)
    cfg = config(tmp_path)
    assert cfg["format"] == 2
    assert cfg["hash"] == name
    assert (tmp_path / chunk_object_key(hasher(CHUNK))).read_bytes() == CHUNK
    framed = (tmp_path / f"commits/{cid}").read_bytes()
    assert hasher(framed).hex()[:40] == cid
    version = struct.unpack_from("<H", framed, 5)[0]
    assert version == frame
    if frame == 2:  # the frame names its hash and digest length
        assert framed[7:9] == bytes([algo, 32])
    reopened = zl.Repo.open(tmp_path)
    assert reopened.context.hash is algo
    assert reopened.readonly_session("main").read("a/c/0") == CHUNK
    assert reopened.fsck() == []


def test_sha256_repository_keeps_the_frames_older_zarrlake_wrote(tmp_path):
    """The version 1 frame is magic, kind, version and payload, named by its SHA-256."""
    repo = zl.Repo.create(tmp_path, content_hash="sha256")
    cid = write_chunk(repo)
    framed = (tmp_path / f"commits/{cid}").read_bytes()
    assert framed[:7] == struct.pack("<4sBH", b"ZLK\x01", envelope.KIND_COMMIT, 1)
    assert hashlib.sha256(framed).hexdigest()[:40] == cid
    rec = CommitRecord.decode(cid, framed)
    assert rec.encode(Hash.SHA256) == (cid, framed)


def test_format_1_repository_is_read_and_written_as_it_is(tmp_path):
    """A repository older zarrlake made: config without a hash, SHA-256, refs that name
    only their commit. It opens, reads and commits, and its refs keep that form."""
    repo = zl.Repo.create(tmp_path, content_hash="sha256")
    write_chunk(repo)
    cfg = config(tmp_path)
    del cfg["hash"]
    cfg["format"] = 1
    (tmp_path / "zarrlake.json").write_text(json.dumps(cfg))
    old = zl.Repo.open(tmp_path)
    assert old.context.hash is Hash.SHA256
    assert old.readonly_session("main").read("a/c/0") == CHUNK
    s = old.create_session()
    s.write("a/c/1", CHUNK[::-1])
    cid = s.commit("second")
    value, _ = old.context.meta.get(old.context.refs.partition, b"branch/main")
    assert value == cid.encode()  # the commit id alone, as format 1 has it
    again = zl.Repo.open(tmp_path)
    assert again.readonly_session("main").read("a/c/1") == CHUNK[::-1]
    assert again.fsck() == []


def test_format_2_refs_name_the_snapshot_so_open_reads_no_commit_record(tmp_path):
    repo = zl.Repo.create(tmp_path)
    cid = write_chunk(repo)
    value, _ = repo._context.meta.get(repo._context.refs.partition, b"branch/main")
    snapshot = repo._context.objects.read_commit(cid).snapshot
    assert value == f"{cid} {snapshot}".encode()
    fresh, blobs, _ = counted(repo)
    assert fresh.readonly_session("main").read("a/c/0") == CHUNK
    assert blobs.calls["get"] == 3  # snapshot, manifest, chunk: no commit record
    assert fresh.log("main")[0].id == cid  # history still reads commit records


def test_new_repositories_default_to_blake3(tmp_path):
    repo = zl.Repo.create(tmp_path)
    assert repo._context.hash is Hash.BLAKE3
    assert config(tmp_path)["hash"] == "blake3"


def test_unknown_hash_is_refused_and_nothing_is_created(tmp_path):
    with pytest.raises(
        InvalidInputError, match=r"unknown content hash 'md5' \(choose one of sha256, blake3\)"
    ):
        zl.Repo.create(tmp_path / "r", content_hash="md5")
    assert not (tmp_path / "r" / "zarrlake.json").exists()


@pytest.mark.parametrize("name", ["blake3", "sha256"])
def test_altered_chunk_fails_its_check_on_read_and_in_fsck(tmp_path, name):
    repo = zl.Repo.create(tmp_path, content_hash=name)
    write_chunk(repo)
    path = tmp_path / chunk_object_key(repo._context.objects.digest(CHUNK))
    path.write_bytes(b"\xff" + CHUNK[1:])
    fresh = zl.Repo.open(tmp_path)
    with pytest.raises(CorruptionError, match="checksum mismatch"):
        fresh.readonly_session("main").read("a/c/0")
    problems = fresh.fsck()
    assert [p.kind for p in problems] == ["corrupt"]
    assert f"fails its {name.upper()} checksum" in problems[0].detail


@pytest.mark.parametrize("name", ["blake3", "sha256"])
def test_altered_format_object_fails_its_check(tmp_path, name):
    repo = zl.Repo.create(tmp_path, content_hash=name)
    cid = write_chunk(repo)
    path = tmp_path / f"commits/{cid}"
    data = bytearray(path.read_bytes())
    data[-2] ^= 1
    with pytest.raises(CorruptionError, match=f"commit object {cid}: checksum mismatch"):
        CommitRecord.decode(cid, bytes(data))


def test_frame_of_a_newer_format_is_refused_by_name():
    payload = b"{}"
    data = struct.pack("<4sBH", b"ZLK\x01", envelope.KIND_COMMIT, 9) + payload
    oid = hashlib.sha256(data).hexdigest()[:40]
    with pytest.raises(CorruptionError, match="format version 9 is newer than this zarrlake"):
        envelope.decode(envelope.KIND_COMMIT, oid, data)


def test_repository_of_a_newer_format_is_refused_at_open(tmp_path):
    zl.Repo.create(tmp_path)
    cfg = config(tmp_path)
    cfg["format"] = 99
    (tmp_path / "zarrlake.json").write_text(json.dumps(cfg))
    with pytest.raises(zl.ZarrLakeError, match="repository format 99 is newer"):
        zl.Repo.open(tmp_path)


@pytest.mark.parametrize("name", ["blake3", "sha256"])
def test_zarr_arrays_round_trip_with_small_packed_and_large_chunks(tmp_path, name):
    """Inline, packed and object chunks all carry digests of the repository's hash."""
    import numpy as np

    repo = zl.Repo.create(tmp_path, content_hash=name)
    s = repo.create_session()
    root = zarr.open_group(s.store, mode="a")
    small = root.create_array("small", shape=(64,), chunks=(4,), dtype="i2", compressors=None)
    large = root.create_array("large", shape=(4, 8192), chunks=(1, 8192), dtype="f4")
    small[:] = np.arange(64, dtype="i2")
    large[:] = np.random.default_rng(0).random((4, 8192), dtype="f4")
    want = large[:]
    s.commit("arrays")
    fresh = zl.Repo.open(tmp_path)
    group = zarr.open_group(fresh.readonly_session("main").store, mode="r")
    assert (group["small"][:] == np.arange(64)).all()
    assert (group["large"][:] == want).all()
    assert fresh.fsck() == []


def test_a_damaged_or_missing_chunk_object_is_named_with_what_to_run(tmp_path):
    """A chunk whose object fails its check, or is gone, is named with its object and the
    command that finds every other such object."""
    repo = zl.Repo.create(tmp_path)
    write_chunk(repo)
    key = chunk_object_key(repo._context.objects.digest(CHUNK))
    (tmp_path / key).write_bytes(b"\xff" + CHUNK[1:])
    with pytest.raises(CorruptionError) as damaged:
        zl.Repo.open(tmp_path).readonly_session("main").read("a/c/0")
    assert str(damaged.value).endswith(
        f": checksum mismatch in its data ({key}); run `zarrlake fsck` to find every damaged object"
    )
    (tmp_path / key).unlink()
    with pytest.raises(zl.NotFoundError) as gone:
        zl.Repo.open(tmp_path).readonly_session("main").read("a/c/0")
    assert str(gone.value).endswith(
        f": its data object {key} is missing; run `zarrlake fsck` to find every missing object"
    )
