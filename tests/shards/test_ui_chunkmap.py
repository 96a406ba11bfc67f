"""Chunk maps of a sharded array, in a real headless browser on a real `zarrlake ui`
server: the map draws inner chunks (the diff's coordinates) with lines at the shards'
boundaries; the commit page's map and the chunk map page agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import zarrlake as zl
from tests.helpers.browser import headless_browser, shoot, ui_server
from zarrlake.ui.chunkmap import build_map, shard_lines

SHAPE, INNER, SHARD = (16, 16), (2, 2), (8, 8)  # 2 x 2 shards of 4 x 4 inner chunks


def test_shard_lines_fall_on_shard_boundaries_in_map_cells() -> None:
    m = build_map((8, 8), {(0, 0), (5, 6)}, set())
    shard_lines(m, (4, 4))
    assert m["shards"] == {"per": [4, 4], "row_lines": [4], "col_lines": [4]}
    big = build_map((256, 8), {(200, 1)}, set())  # drawn in blocks of 4 rows
    shard_lines(big, (16, 8))
    assert big["block"] == [4, 1]
    assert big["shards"]["row_lines"] == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60]
    assert big["shards"]["col_lines"] == []  # one shard across: no line inside


def test_the_chunk_map_of_a_sharded_array_shows_inner_chunks_and_shards(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    repo = zl.Repo.create(root)
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=SHAPE, chunks=INNER, shards=SHARD, dtype="f4",
        dimension_names=("y", "x"),
    )  # fmt: skip
    arr[:] = np.ones(SHAPE, dtype="f4")
    s.commit("ones")
    s = repo.create_session()
    arr = zarr.open_array(s.store, path="a")
    arr[0:2, 0:2] = 5  # inner chunk (0, 0), in shard (0, 0)
    arr[6:10, 6:8] = 7  # inner chunks (3, 3) and (4, 3): shards (0, 0) and (1, 0)
    change = s.commit("three inner chunks")
    diff = repo.diff(repo.log()[1].id, change)
    assert diff.chunks_written == {"a": {(0, 0), (3, 3), (4, 3)}}
    assert diff.shards_of("a", diff.chunks_written["a"]) == {
        (0, 0): [(0, 0), (3, 3)],
        (1, 0): [(4, 3)],
    }
    with (
        ui_server(str(root)) as url,
        headless_browser(tmp_path / "chromium-profile") as b,
    ):
        b.get(url.rstrip("/") + f"/commit/{change}")
        WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "commit-id"))
        svg = 'svg.chunkmap[data-path="a"]'
        assert len(b.find_elements(By.CSS_SELECTOR, f"{svg} rect.cell.written")) == 3
        assert len(b.find_elements(By.CSS_SELECTOR, f"{svg} line.shard-line")) == 2
        b.find_element(By.CSS_SELECTOR, "a.chunkmap-link").click()
        WebDriverWait(b, 20).until(lambda d: d.find_elements(By.ID, "chunkmap"))
        cells = b.find_elements(By.CSS_SELECTOR, "#chunkmap rect.cell.written")
        titles = sorted(
            c.find_element(By.TAG_NAME, "title").get_attribute("textContent") for c in cells
        )
        assert titles == [
            "chunk block (0, 0): 1 written, 0 deleted",
            "chunk block (3, 3): 1 written, 0 deleted",
            "chunk block (4, 3): 1 written, 0 deleted",
        ]
        lines = b.find_elements(By.CSS_SELECTOR, "#chunkmap line.shard-line")
        side = float(b.find_element(By.CSS_SELECTOR, "#chunkmap svg").get_attribute("width"))
        xs = {line.get_attribute("x1") == line.get_attribute("x2") for line in lines}
        assert len(lines) == 2 and xs == {True, False}  # one vertical, one horizontal
        middle = [
            float(line.get_attribute("x1")) for line in lines if line.get_attribute("x1") != "0"
        ]
        assert middle and abs(middle[0] - side / 2) <= 1  # between inner columns 3 and 4
        caption = b.find_element(By.CSS_SELECTOR, ".shard-caption").text
        assert "shards of 4 \u00d7 4" in caption
        assert any(
            "grid 8 \u00d7 8 chunks" in e.text for e in b.find_elements(By.CSS_SELECTOR, ".muted")
        )
        shoot(b, tmp_path, "sharded-chunk-map.png")
