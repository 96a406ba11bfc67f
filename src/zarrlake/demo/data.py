"""The demo's dataset: deterministic, weather-like fields on a regional grid (pure numpy).

Hourly 2 m temperature and 10 m wind; one "block" is one day of every variable on one
spatial chunk, generated from a seed so the same call gives the same bytes on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np

GROUP = "weather"
VARIABLES = {  # name -> (long name, units)
    "t2m": ("2 metre temperature", "degC"),
    "u10": ("10 metre eastward wind", "m s-1"),
    "v10": ("10 metre northward wind", "m s-1"),
}
START = date(2025, 1, 1)
SEED = 20250101
LAT_RANGE = (35.0, 60.0)  # a European-sized regional grid
LON_RANGE = (-10.0, 30.0)
HOURS_PER_DAY = 24


@dataclass(frozen=True)
class Grid:
    """The dataset's size: days of hourly data on lat x lon points, and its chunking."""

    days: int = 30
    lat: int = 144
    lon: int = 180
    lat_chunk: int = 36
    lon_chunk: int = 45

    def __post_init__(self) -> None:
        sizes = (self.days, self.lat, self.lon, self.lat_chunk, self.lon_chunk)
        if any(not isinstance(n, int) or n < 1 for n in sizes):
            raise ValueError(f"grid sizes must be positive integers, not {self}")

    @property
    def hours(self) -> int:
        """The number of hourly time steps."""
        return self.days * HOURS_PER_DAY

    @property
    def shape(self) -> tuple[int, int, int]:
        """Shape of every variable: (time, lat, lon)."""
        return self.hours, self.lat, self.lon

    @property
    def chunks(self) -> tuple[int, int, int]:
        """Chunk shape of every variable: one day by one spatial tile."""
        return HOURS_PER_DAY, self.lat_chunk, self.lon_chunk

    @property
    def tiles(self) -> tuple[int, int]:
        """Spatial chunks along (lat, lon)."""
        return -(-self.lat // self.lat_chunk), -(-self.lon // self.lon_chunk)

    @property
    def spatial_chunks(self) -> int:
        """Chunks per time step (tiles along lat times tiles along lon)."""
        return self.tiles[0] * self.tiles[1]

    @property
    def rows_per_day(self) -> int:
        """Cells of one variable in one day."""
        return HOURS_PER_DAY * self.lat * self.lon

    def day_bytes(self) -> int:
        """Uncompressed float32 bytes of one day of every variable."""
        return self.rows_per_day * 4 * len(VARIABLES)

    def raw_bytes(self) -> int:
        """Uncompressed bytes of the whole dataset."""
        return self.days * self.day_bytes()

    def tile_slices(self, chunk: int) -> tuple[slice, slice]:
        """(lat, lon) index ranges of spatial chunk `chunk` (row-major over `tiles`)."""
        if not 0 <= chunk < self.spatial_chunks:
            raise ValueError(f"spatial chunk {chunk} is outside 0..{self.spatial_chunks - 1}")
        ci, cj = divmod(chunk, self.tiles[1])
        return (
            slice(ci * self.lat_chunk, min((ci + 1) * self.lat_chunk, self.lat)),
            slice(cj * self.lon_chunk, min((cj + 1) * self.lon_chunk, self.lon)),
        )


def day_name(day: int) -> str:
    """The calendar date of day index `day`, e.g. 2025-01-03 for day 2."""
    return (START + timedelta(days=day)).isoformat()


def coordinates(grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """Latitudes and longitudes of the grid points (degrees)."""
    return (
        np.linspace(*LAT_RANGE, grid.lat, dtype="f8"),
        np.linspace(*LON_RANGE, grid.lon, dtype="f8"),
    )


def generate_block(grid: Grid, day: int, chunk: int, revision: int = 0) -> dict[str, np.ndarray]:
    """One day (24 hours) of every variable on spatial chunk `chunk`, each (24, nlat, nlon)
    float32.

    Smooth fields (latitude gradient, diurnal cycle, a travelling synoptic wave) plus noise
    seeded by (day, chunk); a `revision` > 0 (reprocessed upstream files) draws other noise.
    """
    if not 0 <= day < grid.days:
        raise ValueError(f"day {day} is outside 0..{grid.days - 1}")
    lat_sl, lon_sl = grid.tile_slices(chunk)
    lats, lons = coordinates(grid)
    lat = lats[lat_sl][None, :, None]
    lon = lons[lon_sl][None, None, :]
    hour = np.arange(HOURS_PER_DAY, dtype="f8")[:, None, None] + HOURS_PER_DAY * day
    rng = np.random.default_rng([SEED, day, chunk, revision] if revision else [SEED, day, chunk])
    shape = (HOURS_PER_DAY, lat.shape[1], lon.shape[2])
    wave = np.sin(2 * np.pi * (lon / 15.0 - hour / 96.0)) * np.cos(2 * np.pi * lat / 20.0)
    t2m = (
        22.0
        - 0.7 * (lat - LAT_RANGE[0])
        + 5.0 * np.sin(2 * np.pi * (hour % 24 - 9) / 24) * np.cos(np.radians(lat))
        + 4.0 * wave
        - 0.1 * day
        + rng.normal(0.0, 0.3, shape)
    )
    u10 = 6.0 * np.cos(2 * np.pi * (lat - LAT_RANGE[0]) / 25.0) + 3.0 * wave
    u10 = u10 + rng.normal(0.0, 0.8, shape)
    v10 = 3.0 * np.cos(2 * np.pi * (lon / 15.0 - hour / 96.0)) + rng.normal(0.0, 0.8, shape)
    return {
        "t2m": np.broadcast_to(t2m, shape).astype("f4"),
        "u10": np.broadcast_to(u10, shape).astype("f4"),
        "v10": np.broadcast_to(v10, shape).astype("f4"),
    }


def block_rows(grid: Grid, day: int, chunk: int, revision: int = 0) -> dict[str, np.ndarray]:
    """The block as table columns: global (time, lat, lon) indices and one column per
    variable, one row per grid point and hour (what a Spark job writes)."""
    values = generate_block(grid, day, chunk, revision)
    lat_sl, lon_sl = grid.tile_slices(chunk)
    t, y, x = np.indices(values["t2m"].shape, dtype="i8").reshape(3, -1)
    return {
        "time": t + HOURS_PER_DAY * day,
        "lat": y + lat_sl.start,
        "lon": x + lon_sl.start,
        **{name: v.reshape(-1) for name, v in values.items()},
    }
