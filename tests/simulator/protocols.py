"""What the simulator's parts use of each other, as Protocols, so that the modules that build
them need not be imported: actors, backends and the pull-request actor use the world (which
imports them to build a run), and the trace uses the scheduler (which imports the trace)."""

from __future__ import annotations

from collections.abc import Callable
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

    new_id: Callable[..., Any]
    clock_of: Callable[..., Any]
    latest: Callable[..., Any]
    targets: Callable[..., Any]
    after_call: Callable[..., Any]
    deleted: Callable[..., Any]
