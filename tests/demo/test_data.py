"""The demo's dataset generator (zarrlake.demo.data): deterministic, shaped as the grid
says, and covering every grid point exactly once."""

from __future__ import annotations

import numpy as np
import pytest

from zarrlake.demo.config import DemoConfig
from zarrlake.demo.data import VARIABLES, Grid, block_rows, coordinates, day_name, generate_block

SMALL = Grid(days=3, lat=32, lon=40, lat_chunk=16, lon_chunk=20)
RAGGED = Grid(days=3, lat=10, lon=7, lat_chunk=4, lon_chunk=3)  # edge tiles are partial


def test_same_call_same_bytes_other_day_or_tile_other_bytes():
    a, b = generate_block(SMALL, 1, 2), generate_block(SMALL, 1, 2)
    assert set(a) == set(VARIABLES)
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    assert not np.array_equal(a["t2m"], generate_block(SMALL, 2, 2)["t2m"])
    assert not np.array_equal(a["u10"], generate_block(SMALL, 1, 1)["u10"])


def test_a_revision_draws_other_noise_around_the_same_fields():
    base, again = generate_block(SMALL, 1, 2), generate_block(SMALL, 1, 2, revision=0)
    revised = generate_block(SMALL, 1, 2, revision=1)
    assert all(base[k].tobytes() == again[k].tobytes() for k in base)
    for k in base:
        assert not np.array_equal(base[k], revised[k])
        assert abs(float(base[k].mean()) - float(revised[k].mean())) < 0.2


def test_known_values_do_not_drift():
    """The generator's output is pinned (sums over a block, float64): a change to it changes
    every demo repository's bytes. Values as produced before the demo became a package."""
    expected = {
        (0, 0): {"t2m": 138364.9615535736, "u10": 2887.770324703888, "v10": -2960.424369211777},
        (2, 3): {"t2m": 64736.18898949213, "u10": 823.4709120031912, "v10": 510.698442859255},
    }
    for (day, chunk), sums in expected.items():
        block = generate_block(SMALL, day, chunk)
        assert all(v.dtype == np.float32 for v in block.values())
        got = {k: float(v.astype("f8").sum()) for k, v in block.items()}
        assert got == pytest.approx(sums, rel=1e-9)
    block = generate_block(SMALL, 0, 0)  # plausible weather: degC and m/s
    assert block["t2m"].min() > -30 and block["t2m"].max() < 45
    assert np.abs(block["u10"]).max() < 30 and np.abs(block["v10"]).max() < 30


@pytest.mark.parametrize("grid", [SMALL, RAGGED])
def test_tiles_cover_the_grid_once(grid):
    seen = np.zeros((grid.lat, grid.lon), dtype=int)
    for chunk in range(grid.spatial_chunks):
        lat, lon = grid.tile_slices(chunk)
        seen[lat, lon] += 1
        block = generate_block(grid, grid.days - 1, chunk)
        expected = (24, lat.stop - lat.start, lon.stop - lon.start)
        assert all(v.shape == expected for v in block.values())
    assert (seen == 1).all()
    assert grid.spatial_chunks == grid.tiles[0] * grid.tiles[1]


def test_rows_match_the_block_and_place_it_on_the_grid():
    day, chunk = 2, 3  # the ragged grid's tile (1, 0)
    rows = block_rows(RAGGED, day, chunk)
    block = generate_block(RAGGED, day, chunk)
    lat, lon = RAGGED.tile_slices(chunk)
    n = block["t2m"].size
    assert all(len(col) == n for col in rows.values())
    assert rows["time"].min() == 24 * day and rows["time"].max() == 24 * day + 23
    assert (rows["lat"].min(), rows["lat"].max()) == (lat.start, lat.stop - 1)
    assert (rows["lon"].min(), rows["lon"].max()) == (lon.start, lon.stop - 1)
    full = np.full((24 * RAGGED.days, RAGGED.lat, RAGGED.lon), np.nan, dtype="f4")
    full[rows["time"], rows["lat"], rows["lon"]] = rows["v10"]
    assert np.array_equal(full[24 * day : 24 * day + 24, lat, lon], block["v10"])


def test_sizes_and_names():
    assert SMALL.shape == (72, 32, 40) and SMALL.chunks == (24, 16, 20)
    assert SMALL.day_bytes() == 24 * 32 * 40 * 4 * 3
    assert SMALL.raw_bytes() == 3 * SMALL.day_bytes()
    lats, lons = coordinates(SMALL)
    assert lats.shape == (32,) and lons.shape == (40,) and lats[0] < lats[-1]
    assert day_name(0) == "2025-01-01" and day_name(31) == "2025-02-01"


def test_bad_sizes_and_indices_are_refused():
    with pytest.raises(ValueError, match="positive integers"):
        Grid(days=0)
    with pytest.raises(ValueError, match=r"day 3 is outside 0\.\.2"):
        generate_block(SMALL, 3, 0)
    with pytest.raises(ValueError, match=r"spatial chunk 4 is outside 0\.\.3"):
        generate_block(SMALL, 0, 4)


def test_config_sizes(tmp_path):
    from zarrlake.errors import InvalidInputError

    small = DemoConfig.sized(tmp_path, 3, small=True)
    assert small.grid == SMALL and small.tag_after == 2
    full = DemoConfig.sized(tmp_path)
    assert full.grid.shape == (720, 144, 180) and full.tag_after == 20
    assert full.arrays == ["weather/t2m", "weather/u10", "weather/v10"]
    with pytest.raises(InvalidInputError, match="at least 3 days"):
        DemoConfig.sized(tmp_path, 2)
