"""What the simulator's parts use of each other, as Protocols, so that the modules that build
them need not be imported: actors, backends and the pull-request actor use the world (which
imports them to build a run), and the trace uses the scheduler (which imports the trace)."""

from __future__ import annotations

from typing import Any, Protocol


class Clock(Protocol):
    """The scheduler as the trace sees it: the simulated time and the step count."""

    now: float
    steps: int


class Named(Protocol):
    """An actor as the trace sees it: its name, and the call it waits at."""

    name: str
    pending: str | None


class World(Protocol):
    """A run as its actors, backends and pull-request actor see it (`world.World`)."""

    name: str
    spec: Any
    settings: Any
    sched: Any
    trace: Any
    model: Any
    obs: Any
    meta: Any
    store: Any
    ops: Any
    keys: Any
    values: Any
    rng: Any
    programs: Any
    committing: Any
    handles_of: Any
    meta_rate: Any
    meta_factory: Any
    faults: Any

    def new_id(self, prefix: str) -> str:
        """A fresh id with `prefix`, deterministic within the run."""

    def clock_of(self, actor: Any) -> float:
        """The time the clock of `actor`'s process shows now."""

    def latest(self) -> float:
        """The clock furthest ahead."""

    def targets(self) -> list[str]:
        """Commits resets, new branches and tags may point at."""

    def after_call(self, actor: Any, what: str, result: object) -> None:
        """Note what a backend call changed."""

    def deleted(self, key: str, born: float | None = None) -> None:
        """Record that the calling actor deleted `key`."""

    def seal_of(self, sid: str) -> str | None:
        """The seal session `sid`'s record carries now."""

    def garbage_values(self) -> list[bytes]:
        """Values whose chunk objects are garbage now."""
