"""The faults a run injects, all drawn from its seed: at a backend call, an error before it
runs, a lost reply (it ran; the caller sees an error), a delay, a crash of the calling
process before or after the call; between steps, a jump of the simulated clock.

Each run draws a profile (how often each fault happens) so that some seeds are calm, some
flaky, some crash a lot and some move time far ahead; `FaultPlan.counts` says what was
injected, by kind.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum


class Fault(StrEnum):
    """The kinds of fault the scheduler can give one backend call."""

    ERROR = "error before the call"
    LOST = "lost reply"
    DELAY = "delay"
    PAUSE = "pause"
    """The process stalls before the call (SIGSTOP, a long garbage collection, a frozen VM)
    for longer than a lease: anywhere, so between any read and the write it decides."""
    CRASH_BEFORE = "crash before the call"
    CRASH_AFTER = "crash after the call"
    CRASH_IN_FLIGHT = "crash with a write in flight"
    """The process dies with this write sent: the network delivers it later."""
    BURST = "burst of errors"


WRITES = (
    "set",
    "set_many",
    "set_if",
    "write_if",
    "delete",
    "delete_if",
    "drop",
    "put",
    "put_if_absent",
    "put_if",
    "retag",
)
"""Calls whose reply can be lost (the write happened)."""

JUMPS = (1.0, 30.0, 200.0, 900.0, 4000.0, 90_000.0)
PAUSES = (40.0, 200.0, 4000.0)
"""Lengths of a process's stall (`Fault.PAUSE`): past a sweep's lease (30 s), a committer's
(commit timeout + 60 s), a keep record's hour."""
STALLING = 10.0
"""How much more often the calls of the run's stalling kind of process stall."""
SLOW = 0.3
"""How often a call of the run's stalling kind of process is slow (5 to 25 s: a collector's
sweep, renewed at every batch, then lasts minutes, and committers wait for it)."""
IN_FLIGHT = (0.5, 5.0, 60.0, 400.0)
"""How long a dead process's last write stays in the network (`Fault.CRASH_IN_FLIGHT`)."""
"""Clock jumps in seconds: past idle flushes, leases (commit timeout + 60 s), sweep
deadlines, the gc lock's hour, and a day of session expiry."""


_MARGIN = 1e-9
"""Far above the rounding of `draw`'s subtractions (about 1e-16): a draw this far past the
sum of the rates is past each of them in turn."""
_WRITE_OPS: dict[str, bool] = {}
"""Whether a call's operation (`meta.set_if`, `get`, ...) is one of WRITES, by name."""


def _is_write(call: str) -> bool:
    """Whether `call` (its operation's name, a space, what it is on) is one of WRITES."""
    op = call.split(" ", 1)[0]
    write = _WRITE_OPS.get(op)
    if write is None:
        write = _WRITE_OPS[op] = op.split(".")[-1] in WRITES
    return write


@dataclass
class FaultPlan:
    """Per-call and per-step fault rates of one run, and the counts injected."""

    error: float = 0.0
    lost: float = 0.0
    delay: float = 0.0
    pause: float = 0.0
    stalling: str | None = None
    """The kind of process (its name's prefix) whose calls stall STALLING times as often."""
    crash: float = 0.0
    jump: float = 0.0
    burst: float = 0.0
    own_jump: float = 0.0
    """The share of clock jumps that step one process's clock only (the rest move time)."""
    own_jump_max: float = float("inf")
    """The largest step of one process's clock."""
    stuck: float = 0.0
    """How often a read starts failing for several tries in a row (one object or record
    unreadable for a while: retries give up, and what reads it must not guess)."""
    checking_stuck: float = 0.0
    """How often a read made while a process checks whether a commit landed (recovery's
    `landed`, or a committer's own check after an error) starts failing past its retries:
    the one answer there that must never be taken for "not landed"."""
    _stuck: dict[str, int] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    _burst_left: int = 0

    @classmethod
    def drawn(cls, rng: random.Random) -> FaultPlan:
        """A plan drawn from `rng`: a profile (calm, flaky, crashy, jumpy, everything) and its
        rates."""
        profile = rng.choice(("calm", "flaky", "crashy", "jumpy", "everything", "everything"))
        plan = cls()
        if profile in ("flaky", "everything"):
            plan.error = rng.choice((0.01, 0.03, 0.08))
            plan.lost = rng.choice((0.01, 0.03, 0.08))
            plan.delay = rng.choice((0.0, 0.02))
            plan.burst = rng.choice((0.0, 0.003))
        if profile in ("crashy", "everything"):
            plan.crash = rng.choice((0.003, 0.01, 0.02))
        if profile in ("jumpy", "everything"):
            plan.jump = rng.choice((0.005, 0.02))
        return plan

    def pauses(self, rng: random.Random, kinds: tuple[str, ...]) -> None:
        """Draw whether processes stall in this run, and which kind of process (of `kinds`)
        stalls STALLING times as often: a stall matters at few calls of a program (a
        collector's between its second look and its sweep phase, a committer's between
        its attempt and its swap), which it then reaches (a stream of its own, so the rest
        of a seed's draws stay as they were)."""
        self.pause = rng.choice((0.0, 0.0, 0.001, 0.004))
        self.stalling = rng.choice(kinds) if self.pause and kinds else None

    def draw(
        self,
        rng: random.Random,
        call: str,
        checking: bool = False,
        stalling: bool = False,
        slow: bool = False,
    ) -> Fault | None:
        """The fault for one backend call (`call` starts with its operation's name);
        `checking`: the caller is checking whether a commit landed; `stalling`: it is of
        the kind of process that stalls more often; `slow`: its calls are slow too."""
        if self._burst_left:
            self._burst_left -= 1
            self.counts[Fault.ERROR] += 1
            return Fault.ERROR
        if call in self._stuck:
            self._stuck[call] -= 1
            if not self._stuck[call]:
                del self._stuck[call]
            self.counts[Fault.ERROR] += 1
            return Fault.ERROR
        x = rng.random()
        write = _is_write(call)
        if checking and self.checking_stuck and not write:
            if x < self.checking_stuck:
                self.counts["read stuck failing while checking a commit landed"] += 1
                self._stuck[call] = rng.randrange(6, 14)
                return Fault.ERROR
            x = (x - self.checking_stuck) / (1.0 - self.checking_stuck)  # the rest as before
        if self.stuck and not write and x < self.stuck:
            self.counts["read stuck failing"] += 1
            self._stuck[call] = rng.randrange(6, 14)  # past the retry budget, mostly
            return Fault.ERROR
        x -= self.stuck if not write else 0.0
        if x >= self._total(write) + _MARGIN:  # past every rate: the loop below finds none
            return None
        for fault, rate in (
            (Fault.ERROR, self.error),
            (Fault.LOST, self.lost if write else 0.0),
            (Fault.DELAY, max(self.delay, SLOW) if slow else self.delay),
            (Fault.PAUSE, self.pause * (STALLING if stalling else 1.0)),
            (Fault.CRASH_BEFORE, self.crash / 2),
            (Fault.CRASH_AFTER, self.crash / 4 if write else 0.0),
            (Fault.CRASH_IN_FLIGHT, self.crash / 4 if write else 0.0),
            (Fault.BURST, self.burst),
        ):
            if x < rate:
                self.counts[fault] += 1
                if fault == Fault.BURST:
                    self._burst_left = rng.randrange(4, 12)  # past the retry budget
                    return Fault.ERROR
                return fault
            x -= rate
        return None

    def _total(self, write: bool) -> float:
        """The sum of the per-call rates `draw` walks through, for a write or a read."""
        total = self.error + max(self.delay, SLOW) + self.pause * STALLING
        total += self.crash / 2 + self.burst
        return total + self.lost + self.crash / 2 if write else total

    def delay_for(self, rng: random.Random, slow: bool = False) -> float:
        """The length of one injected delay, in simulated seconds; `slow`: of the run's
        stalling kind of process, whose calls also take up to 25 s (short of any lease,
        so a collector's sweep, renewed at every batch, can last for minutes)."""
        return rng.choice((5.0, 15.0, 25.0) if slow else (0.01, 0.2, 2.0))

    def pause_for(self, rng: random.Random) -> float:
        """The length of one stall of a process, in simulated seconds."""
        return rng.choice(PAUSES) * rng.uniform(1.0, 1.5)

    def in_flight_for(self, rng: random.Random) -> float:
        """How long a dead process's last write stays in the network."""
        return rng.choice(IN_FLIGHT)

    def clock_jump(self, rng: random.Random) -> float:
        """How far to move the clock forward now (0 mostly), counted when it jumps."""
        if self.jump and rng.random() < self.jump:
            self.counts["clock jump"] += 1
            return rng.choice(JUMPS) * rng.uniform(1.0, 1.5)
        return 0.0
