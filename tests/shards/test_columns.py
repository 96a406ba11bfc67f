"""Shards assembled from the manifest's columns (no reference object per inner chunk):
shards whose entries lie across two manifest ranges, read whole and in part by read-only
and writable sessions, and rewritten in part, read back as numpy wrote them."""

from __future__ import annotations

import numpy as np
import zarr

import zarrlake as zl
from zarrlake.format.shard import SEP

SHAPE, INNER, SHARD = (8, 256, 384), (1, 8, 8), (1, 256, 384)
"""8 shards of 1,536 inner chunks: 12,288 entries, split into manifest ranges of 4,096, so
some shards begin in one range and end in the next."""


def test_shards_across_manifest_ranges_read_as_written(repo: zl.Repo) -> None:
    values = np.random.default_rng(1).random(SHAPE, dtype="f4")
    s = repo.create_session()
    arr = zarr.create_array(s.store, name="a", shape=SHAPE, chunks=INNER, shards=SHARD, dtype="f4")
    arr[:] = values
    s.commit("8 shards")

    r = repo.readonly_session()
    view = r._txn.overlay.view
    pieces = [len(view.entries_under(f"a/c/{k}/0/0{SEP}".encode())) for k in range(8)]
    assert max(pieces) == 2  # some shard's entries lie in two ranges
    read = zarr.open_array(r.store, path="a", mode="r")
    assert np.array_equal(read[:], values)
    straddling = pieces.index(2)
    assert np.array_equal(read[straddling, 100:130, 7:300], values[straddling, 100:130, 7:300])

    w = repo.create_session()
    write = zarr.open_array(w.store, path="a", mode="r+")
    assert np.array_equal(write[straddling], values[straddling])  # nothing staged yet
    write[straddling, 0:8, 0:8] = 7
    values[straddling, 0:8, 0:8] = 7
    assert np.array_equal(write[straddling], values[straddling])  # its own write staged
    w.commit("one inner chunk")
    again = zarr.open_array(repo.readonly_session().store, path="a", mode="r")
    assert np.array_equal(again[:], values)


def test_inner_chunk_names_map_to_their_positions() -> None:
    """The names a shard's entries carry map to C-order positions as `name` makes them,
    for grids of one to four dimensions; other names are parsed or refused (-1)."""
    from zarrlake.format.shard import ShardLayout

    for grid in [(5,), (3, 11), (16, 4, 4), (2, 1, 3, 12)]:
        layout = ShardLayout(grid, False, True)
        names = [layout.name(i) for i in range(layout.count)]
        assert layout.positions(names) == list(range(layout.count))
        assert layout.positions(names[::-1]) == list(range(layout.count))[::-1]
    layout = ShardLayout((16, 4, 4), False, True)
    assert layout.positions(["15.3.3", "16.0.0", "0.0", "x.0.0", "01.0.0", ""]) == [
        255,
        -1,
        -1,
        -1,
        16,
        -1,
    ]
