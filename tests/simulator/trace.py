"""What happened in a run, in order: operations of actors (with their outcome), faults,
crashes and clock jumps; each backend call too when asked (`calls=True`). Printed by the
replay command; the last lines are what a failure needs."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.simulator.faults import Fault
    from tests.simulator.protocols import Clock as Scheduler
    from tests.simulator.protocols import Named as Actor

KEEP = 400
"""Lines kept when the whole trace is not asked for (the end of a run)."""
EPOCH = 1_767_225_600.0
"""The simulated clock's start (`scheduler.EPOCH`): a line shows the time since."""


class Trace:
    """The last lines of what happened (all of them when replaying), numbered by step and time.

    A line is kept as its parts and formatted by `text`: most runs pass, and nobody reads
    their lines."""

    def __init__(self, keep_all: bool = False, calls: bool = False) -> None:
        self.lines: deque[tuple[int, float, str, str]] = deque(maxlen=None if keep_all else KEEP)
        """(step, simulated time, actor name or "", text) of each line kept."""
        self.calls = calls

    def event(self, sched: Scheduler, text: str) -> None:
        """Add a line about the world (a fault plan, a crash, a clock jump)."""
        self.lines.append((sched.steps, sched.now, "", text))

    def op(self, sched: Scheduler, actor: Actor, text: str) -> None:
        """Add a line for an actor's library operation."""
        self.lines.append((sched.steps, sched.now, actor.name, text))

    def call(self, sched: Scheduler, actor: Actor, what: str) -> None:
        """Add a line for one backend call, when tracing calls."""
        if self.calls:
            self.lines.append((sched.steps, sched.now, actor.name, f"  . {what}"))

    def fault(self, sched: Scheduler, actor: Actor, fault: Fault) -> None:
        """Add a line for a fault given to the actor's pending call."""
        self.lines.append((sched.steps, sched.now, actor.name, f"  ! {fault} at {actor.pending}"))

    def text(self) -> str:
        """The trace as text."""
        return "\n".join(map(_format, self.lines))


def _format(line: tuple[int, float, str, str]) -> str:
    steps, now, name, text = line
    if name:
        text = f"{name:<12} {text}"
    return f"{steps:>6} {now - EPOCH:>10.3f}s  {text}"
