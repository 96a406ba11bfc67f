"""Issue 29, metadata: every `zarr.json` a session writes must be a zarr v3 document zarr
itself can open (parsed with zarr's own metadata classes), and a node's type cannot change
while chunks or children exist under it. Refused writes raise InvalidInputError naming the
key and the reason, stage nothing, and leave `main` readable (by zarr and `zarrlake ls`).
Documents zarr writes (every codec it ships, sharding, consolidated metadata, NaN fill
values, dimension names, xarray's attributes) are accepted and read back unchanged.

Staging and commit are exercised on SQLite, in memory, on S3 + PostgreSQL and on the bucket
metastore (`shared_repo`)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.errors import ZarrUserWarning

import zarrlake as zl
from tests.helpers.cli import ok
from zarrlake.errors import InvalidInputError

ARRAY = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [4],
    "data_type": "int64",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
    "chunk_key_encoding": {"name": "default"},
    "fill_value": 0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
}
GROUP = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()

BAD_DOCS = [  # (document, what the error says)
    (b"{not json", "is not JSON"),
    (b"{}", "zarr_format must be 3"),
    (b"xxxxxxxxxx", "is not JSON"),
    (b'{"zarr_format": 2}', "zarr_format must be 3"),
    (b'{"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i8"}', "zarr_format must be 3"),
    (b"\xff\xfe\x00", "is not JSON"),
    (b"[1, 2]", "must be a JSON object, not list"),
    (b"null", "must be a JSON object, not NoneType"),
    (b'{"zarr_format": 3}', "node_type must be 'array' or 'group', not missing"),
    (b'{"zarr_format": 3, "node_type": "table"}', "node_type must be 'array' or 'group'"),
    (b'{"zarr_format": 3, "node_type": "array"}', "is not valid zarr v3"),
    (b'{"zarr_format": 3, "node_type": "group", "attributes": 5}', "is not valid zarr v3"),
    (json.dumps({**ARRAY, "shape": [-1]}).encode(), "is not valid zarr v3"),
    (json.dumps({**ARRAY, "data_type": "nope"}).encode(), "is not valid zarr v3"),
    (json.dumps({**ARRAY, "fill_value": "x"}).encode(), "is not valid zarr v3"),
    (json.dumps({**ARRAY, "codecs": [{"name": "no-such-codec"}]}).encode(), "is not valid"),
    (json.dumps({**ARRAY, "shape": [4, 4]}).encode(), "is not valid zarr v3"),
]


def store_set(session: zl.Session, key: str, data: bytes) -> None:
    """Write through the zarr store API, as zarr does."""
    sync(session.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def make_array(session: zl.Session, path: str = "a", values: bool = True) -> zarr.Array:
    root = zarr.open_group(session.store, mode="a")
    arr = root.create_array(path, shape=(4,), chunks=(2,), dtype="i4", fill_value=0)
    if values:
        arr[:] = np.arange(4)
    return arr


# documents zarr cannot open -----------------------------------------------------------------


@pytest.mark.parametrize("how", ["write", "write_many", "zarr store"])
def test_documents_zarr_cannot_open_are_refused(shared_repo, fresh_branch, how):
    """Each bad document is refused naming the key and the reason, whichever way it is
    written; nothing is staged, the session commits, and the array still opens."""
    s = shared_repo.create_session(fresh_branch)
    make_array(s)
    s.commit("create a")
    s = shared_repo.create_session(fresh_branch)
    before = (s._staged_changes(), s.read("a/zarr.json"))
    for doc, reason in BAD_DOCS:
        with pytest.raises(InvalidInputError) as info:
            if how == "write":
                s.write("a/zarr.json", doc)
            elif how == "write_many":
                s.write_many([("a/c/0", b"\x00" * 8), ("a/zarr.json", doc)])
            else:
                store_set(s, "a/zarr.json", doc)
        assert "metadata document 'a/zarr.json'" in str(info.value), doc
        assert reason in str(info.value), (doc, str(info.value))
        assert (s._staged_changes(), s.read("a/zarr.json")) == before, doc
    s.write("b/zarr.json", GROUP)
    s.commit("a group beside a")
    at_main = shared_repo.readonly_session(fresh_branch)
    assert zarr.open_array(at_main.store, path="a", mode="r")[:].tolist() == [0, 1, 2, 3]
    assert sorted(at_main.metadata_documents()) == ["a/zarr.json", "b/zarr.json", "zarr.json"]


def test_new_nodes_and_the_root_are_checked_too(shared_repo, fresh_branch):
    """A bad document is refused where no node existed and at the root."""
    s = shared_repo.create_session(fresh_branch)
    for key in ("zarr.json", "new/zarr.json", "deep/er/zarr.json"):
        with pytest.raises(InvalidInputError, match=f"metadata document '{key}' is not JSON"):
            s.write(key, b"{not json")
        assert s.read(key) == (s.read("zarr.json") if key == "zarr.json" else None)
    assert s._staged_changes() == []


def test_ls_keeps_working_after_refused_writes(tmp_path):
    """`zarrlake ls main` lists the array after bad documents were tried and the session
    committed (before the fix, it printed only `error: shape`)."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    make_array(s)
    s.commit("create a")
    s = repo.create_session()
    for doc, _ in BAD_DOCS:
        with pytest.raises(InvalidInputError):
            s.write("a/zarr.json", doc)
    zarr.open_array(s.store, path="a")[:2] = 9
    s.commit("write a chunk")
    [node] = [n for n in ok("-r", tmp_path / "repo", "ls", "main", "--json").json() if n["path"]]
    assert (node["path"], node["node_type"], node["shape"]) == ("a", "array", [4])
    assert node["stored_chunks"] == 2
    assert repo.fsck() == []


# documents zarr writes ------------------------------------------------------------------------


def zarr_written_documents() -> dict[str, bytes]:
    """Every key of a hierarchy zarr writes into its own memory store: arrays with each
    codec zarr ships, sharding, NaN/inf fill values, strings, dimension names, xarray-style
    attributes, and a root group with consolidated metadata."""
    store = zarr.storage.MemoryStore()
    root = zarr.open_group(store, mode="w", attributes={"title": "t", "history": "x"})
    zc = zarr.codecs
    arrays = {
        "gzip": dict(dtype="f8", compressors=zc.GzipCodec(level=5), fill_value=np.nan),
        "zstd": dict(dtype="i2", compressors=zc.ZstdCodec(level=3, checksum=True)),
        "blosc": dict(dtype="u4", compressors=zc.BloscCodec(cname="lz4", shuffle="bitshuffle")),
        "crc": dict(dtype="f4", compressors=zc.Crc32cCodec(), fill_value=-np.inf),
        "transpose": dict(dtype="i8", filters=zc.TransposeCodec(order=(1, 0)), compressors=None),
        "big": dict(dtype=">f8", serializer=zc.BytesCodec(endian="big"), fill_value=np.inf),
        "shard": dict(dtype="i4", shards=(4, 4), compressors=zc.ZstdCodec()),
        "text": dict(dtype=str, fill_value=""),
        "flags": dict(dtype=bool, fill_value=True),
        "cplx": dict(dtype="c16", fill_value=complex(np.nan, 1)),
        "time": dict(dtype="datetime64[ns]", fill_value=np.datetime64("NaT", "ns")),
    }
    for name, kwargs in arrays.items():
        arr = root.create_array(
            name,
            shape=(4, 4),
            chunks=(2, 2),
            dimension_names=("y", "x"),
            attributes={"units": "m", "coordinates": "lat lon", "_FillValue": "AAAAAAAA+H8="},
            **kwargs,
        )
        if arr.dtype.kind in "fiuc":
            arr[:2, :2] = 1
    root.create_group("sub", attributes={"nested": {"a": [1, None, "x"]}}).create_array(
        "v", shape=(3,), dtype="f4", chunk_key_encoding={"name": "v2", "separator": "."}
    )
    with warnings.catch_warnings():  # "not part of the Zarr format 3 specification"
        warnings.simplefilter("ignore", ZarrUserWarning)
        zarr.consolidate_metadata(store)
    return sync(_contents(store))


async def _contents(store: zarr.storage.MemoryStore) -> dict[str, bytes]:
    proto = default_buffer_prototype()
    return {k: (await store.get(k, proto)).to_bytes() async for k in store.list()}


def damaged(document: bytes) -> list[tuple[bytes, str]]:
    """Copies of `document` zarr could not open, each with what the refusal says: one field
    made invalid (an array's shape, a group's attributes), zarr_format 2, cut short."""
    doc = json.loads(document)
    field = {"shape": "x"} if doc["node_type"] == "array" else {"attributes": 5}
    return [
        (json.dumps(doc | field).encode(), "is not valid zarr v3"),
        (json.dumps(doc | {"zarr_format": 2}).encode(), "zarr_format must be 3"),
        (document[:-1], "is not JSON"),
    ]


def test_documents_zarr_writes_are_accepted(shared_repo, fresh_branch):
    """Every document of a hierarchy zarr wrote is accepted, committed and read back
    byte-for-byte, and zarr opens every array at the branch head; a copy of each with one
    field damaged is refused."""
    written = zarr_written_documents()
    assert "consolidated_metadata" in json.loads(written["zarr.json"])
    s = shared_repo.create_session(fresh_branch)
    for key in (k for k in written if k.endswith("zarr.json")):
        for bad, reason in damaged(written[key]):
            with pytest.raises(InvalidInputError, match=f"'{key}'.* {reason}"):
                s.write(key, bad)
    assert s._staged_changes() == []
    s.write_many(list(written.items()))
    s.commit("zarr's own documents")
    at_head = shared_repo.readonly_session(fresh_branch)
    docs = at_head.metadata_documents()
    assert docs == {k: v for k, v in written.items() if k.endswith("zarr.json")}
    group = zarr.open_group(at_head.store, mode="r", use_consolidated=False)
    assert group["gzip"][0, 0] == 1 and np.isnan(group["gzip"][3, 3])
    assert group["shard"][:2, :2].tolist() == [[1, 1], [1, 1]]
    assert group["gzip"].metadata.dimension_names == ("y", "x")
    assert zarr.open_array(at_head.store, path="sub/v", mode="r").shape == (3,)


def test_zarrs_own_documents_are_told_apart():
    """Every document zarr writes is checked as the node it is (its speed is a
    micro-benchmark: benchmarks/micro/test_metadata_check.py)."""
    from zarrlake._util.zarr_metadata import check_metadata

    docs = [(k, v) for k, v in zarr_written_documents().items() if k.endswith("zarr.json")]
    assert {check_metadata(k, v) for k, v in docs} == {"array", "group"}


# node type changes ----------------------------------------------------------------------------


def test_array_with_committed_chunks_cannot_become_a_group(shared_repo, fresh_branch):
    """Refused while a chunk is left; an array without chunks may change (and back)."""
    s = shared_repo.create_session(fresh_branch)
    make_array(s)
    make_array(s, "e", values=False)
    s.commit("a with chunks, e without")
    s = shared_repo.create_session(fresh_branch)
    s.write("e/zarr.json", GROUP)
    s.write("e/zarr.json", json.dumps(ARRAY).encode())
    s.write("e/zarr.json", GROUP)
    assert [k for k, _ in s._staged_changes()] == ["e/zarr.json"]
    with pytest.raises(InvalidInputError) as info:
        s.write("a/zarr.json", GROUP)
    message = str(info.value)
    assert "'a/zarr.json'" in message and "the array 'a' into a group" in message
    assert "chunks (e.g. 'a/c/0')" in message
    assert [k for k, _ in s._staged_changes()] == ["e/zarr.json"]
    s.delete_many(["a/c/0"])  # one chunk left: still refused, naming it
    with pytest.raises(InvalidInputError, match=r"e\.g\. 'a/c/1'"):
        store_set(s, "a/zarr.json", GROUP)
    s.delete_many(["a/c/1"])
    s.write("a/zarr.json", GROUP)  # nothing under it any more
    s.commit("a and e are groups now")
    at_head = shared_repo.readonly_session(fresh_branch)
    assert isinstance(zarr.open(at_head.store, path="a"), zarr.Group)
    assert isinstance(zarr.open(at_head.store, path="e"), zarr.Group)


def test_array_with_staged_chunks_cannot_become_a_group(shared_repo, fresh_branch):
    """Chunks staged in the session count: buffered by this handle, or flushed by another
    worker of the session."""
    s = shared_repo.create_session(fresh_branch)
    make_array(s, values=False)
    s.commit("a without chunks")
    s = shared_repo.create_session(fresh_branch)
    worker = shared_repo.join_session(s.id)
    zarr.open_array(worker.store, path="a")[2:] = 5
    worker.flush()
    with pytest.raises(InvalidInputError, match=r"array 'a' into a group .*'a/c/1'"):
        s.write("a/zarr.json", GROUP)
    s.delete("a/c/1")
    s.write("a/zarr.json", GROUP)
    t = shared_repo.create_session(fresh_branch)  # created in the session, chunks buffered
    make_array(t, "b")
    with pytest.raises(InvalidInputError, match=r"array 'b' into a group .*'b/c/[01]'"):
        t.write("b/zarr.json", GROUP)
    s.abandon()
    t.abandon()


def test_group_with_children_cannot_become_an_array(shared_repo, fresh_branch):
    s = shared_repo.create_session(fresh_branch)
    root = zarr.open_group(s.store, mode="a")
    root.create_group("g").create_group("child")
    s.commit("g/child")
    s = shared_repo.create_session(fresh_branch)
    array = json.dumps(ARRAY).encode()
    for key, node, child in (("g/zarr.json", "g", "g/child/zarr.json"), ("zarr.json", "/", "")):
        with pytest.raises(InvalidInputError) as info:
            s.write(key, array)
        message = str(info.value)
        assert f"the group {node!r} into an array while it has children" in message
        assert child in message
    assert s._staged_changes() == []
    s.delete("g/child/zarr.json")
    s.write("g/zarr.json", array)
    s.commit("g is an array now")
    assert zarr.open_array(shared_repo.readonly_session(fresh_branch).store, path="g").shape == (4,)


def test_zarr_overwriting_a_node_with_another_type_still_works(shared_repo, fresh_branch):
    """zarr deletes what is under a node before it overwrites it with another type, so its
    overwrites pass the check that refuses the same document written directly."""
    s = shared_repo.create_session(fresh_branch)
    make_array(s)
    s.commit("a with chunks")
    s = shared_repo.create_session(fresh_branch)
    with pytest.raises(InvalidInputError, match="the array 'a' into a group"):
        store_set(s, "a/zarr.json", GROUP)
    root = zarr.open_group(s.store, mode="a")
    root.create_group("a", overwrite=True).create_array("x", shape=(2,), dtype="i1")[:] = 1
    s.commit("a replaced by a group")
    s = shared_repo.create_session(fresh_branch)
    with pytest.raises(InvalidInputError, match="the group 'a' into an array"):
        store_set(s, "a/zarr.json", json.dumps(ARRAY).encode())
    zarr.open_group(s.store, mode="a").create_array("a", shape=(3,), dtype="f4", overwrite=True)
    s.commit("and by an array again")
    at_head = shared_repo.readonly_session(fresh_branch)
    assert sorted(at_head.metadata_documents()) == ["a/zarr.json", "zarr.json"]
    assert zarr.open_array(at_head.store, path="a").shape == (3,)
    assert at_head.list_prefix("a/") == ["a/zarr.json"]
