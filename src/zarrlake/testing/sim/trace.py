"""What happened in a run, in order: operations of actors (with their outcome), faults,
crashes and clock jumps; each backend call too when asked (`calls=True`). Printed by the
replay command; the last lines are what a failure needs."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zarrlake.testing.sim.faults import Fault
    from zarrlake.testing.sim.protocols import Clock as Scheduler
    from zarrlake.testing.sim.protocols import Named as Actor

KEEP = 400
"""Lines kept when the whole trace is not asked for (the end of a run)."""


class Trace:
    """The last lines of what happened (all of them when replaying), numbered by step and time."""

    def __init__(self, keep_all: bool = False, calls: bool = False) -> None:
        self.lines: deque[str] = deque(maxlen=None if keep_all else KEEP)
        self.calls = calls

    def _line(self, sched: Scheduler, text: str) -> None:
        t = sched.now - 1_767_225_600.0
        self.lines.append(f"{sched.steps:>6} {t:>10.3f}s  {text}")

    def event(self, sched: Scheduler, text: str) -> None:
        """Add a line about the world (a fault plan, a crash, a clock jump)."""
        self._line(sched, text)

    def op(self, sched: Scheduler, actor: Actor, text: str) -> None:
        """Add a line for an actor's library operation."""
        self._line(sched, f"{actor.name:<12} {text}")

    def call(self, sched: Scheduler, actor: Actor, what: str) -> None:
        """Add a line for one backend call, when tracing calls."""
        if self.calls:
            self._line(sched, f"{actor.name:<12}   . {what}")

    def fault(self, sched: Scheduler, actor: Actor, fault: Fault) -> None:
        """Add a line for a fault given to the actor's pending call."""
        self._line(sched, f"{actor.name:<12}   ! {fault} at {actor.pending}")

    def text(self) -> str:
        """The trace as text."""
        return "\n".join(self.lines)
