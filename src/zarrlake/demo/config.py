"""What the demo builds, where, and how big."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zarrlake.demo.data import GROUP, VARIABLES, Grid
from zarrlake.errors import InvalidInputError

SMALL = {"lat": 32, "lon": 40, "lat_chunk": 16, "lon_chunk": 20}


@dataclass(frozen=True)
class DemoConfig:
    """The demo's repository directory, dataset grid and Spark master; the defaults are the
    full-size story (30 days on 144 x 180 points)."""

    directory: Path
    grid: Grid = field(default_factory=Grid)
    master: str = "local[*]"

    @classmethod
    def sized(cls, directory: Path | str, days: int = 30, small: bool = False) -> DemoConfig:
        """The full grid, or with `small` a 32 x 40 one (for tests and slow machines)."""
        if not isinstance(days, int) or days < 3:
            raise InvalidInputError(f"the demo needs at least 3 days, not {days}")
        grid = Grid(days=days, **SMALL) if small else Grid(days=days)
        return cls(Path(directory), grid)

    @property
    def location(self) -> str:
        """The repository location as `Repo.create` takes it (the directory path)."""
        return str(self.directory)

    @property
    def arrays(self) -> list[str]:
        """The data arrays every ingest job writes."""
        return [f"{GROUP}/{v}" for v in VARIABLES]

    @property
    def tag_after(self) -> int:
        """The release tag `v1.0` goes on the commit of this many days."""
        return max(2, (2 * self.grid.days) // 3)
