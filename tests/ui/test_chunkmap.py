"""Chunk maps of large and odd-shaped grids stay bounded and count every change."""

from __future__ import annotations

import pytest

from zarrlake.errors import InvalidInputError
from zarrlake.ui.chunkmap import MAX_SIDE, build_map, parse_slice


def test_a_200000_chunk_grid_is_drawn_in_blocks() -> None:
    m = build_map((200_000, 1), {(123_456, 0), (5, 0)}, {(199_999, 0)})
    assert m["map_rows"] <= MAX_SIDE and m["map_cols"] == 1
    assert m["block"] == [3125, 1]
    assert [(c["row"], c["kind"]) for c in m["cells"]] == [
        (0, "written"),
        (39, "written"),
        (63, "deleted"),
    ]
    assert m["written_in_slice"] == 2 and m["deleted_in_slice"] == 1


def test_one_dimensional_and_shrunk_grids() -> None:
    m = build_map((10,), {(3,)}, {(12,)})  # chunk 12 lies beyond the shrunk grid
    assert m["grid"] == [13] and m["map_rows"] == 1 and m["map_cols"] == 13
    assert {(c["col"], c["kind"]) for c in m["cells"]} == {(3, "written"), (12, "deleted")}


def test_slices_of_a_4d_grid() -> None:
    written = {(t, z, 1, 2) for t in range(3) for z in (0, 4)}
    m = build_map((3, 5, 4, 4), written, set(), parse_slice("2,:,:,2", (3, 5, 4, 4)))
    assert (m["rows_dim"], m["cols_dim"], m["index"]) == (1, 2, {"0": 2, "3": 2})
    assert sorted((c["row"], c["col"]) for c in m["cells"]) == [(0, 1), (4, 1)]
    with pytest.raises(InvalidInputError, match=r"must be an integer in 0\.\.2"):
        parse_slice("3,:,:,0", (3, 5, 4, 4))


def test_a_slice_item_that_is_no_index_is_named_as_such() -> None:
    for text in ("1.5,:,:,0", "x,:", "-1,:,:,0"):
        with pytest.raises(InvalidInputError, match="is neither a chunk index"):
            parse_slice(text, (3, 5, 4, 4))
    with pytest.raises(InvalidInputError, match="has 2 items; the grid has 4 dimensions"):
        parse_slice(":,:", (3, 5, 4, 4))
