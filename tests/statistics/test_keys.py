"""The chunk keys of an array's manifest entries as grid positions: parsed as columns, the
same positions as key by key (zarr's chunk key encoding), for plain and sharded arrays,
both key encodings, keys outside the grid, keys of no chunk and shards stored whole."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.shard import SEP
from zarrlake.vc import statistics as vs


def _doc(**kw) -> bytes:
    store = MemoryStore()
    zarr.create_array(store, name="a", dtype="f4", fill_value=0, **kw)
    return store._store_dict["a/zarr.json"].to_bytes()


def _range(keys: list[str]) -> ManifestRange:
    keys = sorted(set(keys))
    refs = [
        ChunkRef(RefKind.INLINE, hashlib.sha256(k.encode()).digest(), 1, data=b"x") for k in keys
    ]
    return ManifestRange.from_refs([k.encode() for k in keys], refs)


def _one_by_one(layout, grid, piece) -> tuple[list[int], list[int]]:
    pos, extra = [], []
    for key in piece.keys.tolist():
        p, whole = vs._position(key.decode()[2:], layout, grid)
        pos.append(p)
        extra += whole
    return pos, extra


CASES = {
    "plain": (
        dict(shape=(30, 20), chunks=(4, 5)),
        [f"a/c/{i}/{j}" for i in range(8) for j in range(4)] + ["a/c/9/0", "a/c/1"],
    ),
    "v2 keys": (
        dict(shape=(30, 20), chunks=(4, 5), chunk_key_encoding={"name": "v2", "separator": "."}),
        [f"a/{i}.{j}" for i in range(8) for j in range(4)] + ["a/8.0"],
    ),
    "sharded": (
        dict(shape=(30, 20), chunks=(2, 5), shards=(4, 10)),
        [
            f"a/c/{i}/{j}{SEP}{k}.{m}"
            for i in range(8)
            for j in range(2)
            for k in range(2)
            for m in range(2)
        ]
        + [f"a/c/7/1{SEP}1.0", f"a/c/9/0{SEP}0.0"],
    ),
    "sharded, some whole": (
        dict(shape=(30, 20), chunks=(2, 5), shards=(4, 10)),
        [f"a/c/{i}/0{SEP}{k}.1" for i in range(8) for k in range(2)] + ["a/c/3/1", "a/c/7/1"],
    ),
    "not chunks": (dict(shape=(30, 20), chunks=(4, 5)), ["a/c/0/0", "a/c/x/1", "a/notes"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_columns_give_the_positions_the_key_encoding_gives(case):
    kw, keys = CASES[case]
    layout = vs.layout_of(_doc(**kw))
    piece = _range(keys)
    pos, rec = vs._entries(layout, layout.grid, "a/", piece)
    want, extra = _one_by_one(layout, layout.grid, piece)
    assert pos.tolist() == extra + want
    assert len(rec) == len(pos)
    assert not rec["kind"][: len(extra)].any()  # a whole shard's inner chunks: unknown
    assert any(p >= 0 for p in want)
    if case == "sharded":  # shard (7, 1), inner (0, 1): chunk (14, 3); inner (1, 0): row 15 of 15
        assert pos[piece.index(f"a/c/7/1{SEP}0.1".encode())] == np.ravel_multi_index(
            (14, 3), (15, 4)
        )
        assert pos[piece.index(f"a/c/7/1{SEP}1.0".encode())] == -1
