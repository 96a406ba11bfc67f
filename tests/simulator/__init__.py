"""Deterministic simulation of the whole protocol (after FoundationDB's simulator and
TigerBeetle's VOPR): every actor in one thread, a seeded scheduler choosing the interleaving
at every storage and metastore call and every fault, invariants checked after every step,
and any failure replayed exactly from its seed.

`run(Config(seed))` runs one seed; `python -m tests.simulator` runs many, replays one
with its trace, shrinks a failure and soaks (see `cli`). Modules: `scheduler` (greenlets,
the simulated clock, executor and timers), `backends` (the stores and their stopping
wrappers), `faults`, `actors`, `model` (the invariants), `world` (one run), `shrink`.
It needs the `greenlet` package (the dev extra).
"""

from tests.simulator.world import Config, Result, run

__all__ = ["Config", "Result", "run"]
