"""The seeded scheduler: every simulated process and its background tasks run as greenlets in
one thread, and control passes back here at every storage and metastore call (`point`), at
every wait (`sleep`, `wait_until`) and when an actor ends. The scheduler picks which actor
runs next from its seed, draws the fault for the call it resumes, fires timers, and moves
the simulated clock; nothing runs that it did not choose, so a seed replays exactly.

A simulated process runs library code in one actor at a time (`Process.holder`, taken by
`op`): its background tasks (the idle flush of a session handle, the clean-up after a
commit) run between its operations, never inside them, because the library's locks are real
locks that would block the whole thread. Across processes every call interleaves.
"""

from __future__ import annotations

import heapq
import random
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import greenlet

from tests.simulator.faults import Fault, FaultPlan
from tests.simulator.trace import Trace
from zarrlake._util import runtime

EPOCH = 1_767_225_600.0
"""The simulated clock starts at 2026-01-01 00:00 UTC."""
TICK = 0.001
"""Simulated seconds each step takes."""
HOST = "sim"


class Crashed(BaseException):
    """Thrown into the greenlets of a process the simulator killed (only at the end of a
    run, to unwind them; a killed actor is otherwise never resumed)."""


class Deadlock(Exception):
    """No actor can run and nothing will wake one."""


@dataclass(eq=False)
class Process:
    """A simulated OS process: a pid, its runtime, and whether it was killed."""

    pid: int
    name: str
    alive: bool = True
    died: float | None = None
    """The simulated time it was killed at (None while alive)."""
    holder: Actor | None = None  # the actor running library code now
    runtime: runtime.Runtime = field(default_factory=runtime.Runtime)
    host: str = HOST
    offset: float = 0.0
    """Seconds this process's clock runs ahead of the simulated time (skew and its jumps)."""
    peak: float = 0.0
    """The largest `offset` it had: a time it read may be this far ahead (its clock can
    step back since)."""
    steady: bool = False
    """Its clock never steps alone (only with everyone's)."""
    stalls: int = 0
    """How many times it stalled (`Fault.PAUSE`) or was slow (seconds-long delays)."""


@dataclass(eq=False)
class Actor:
    """One greenlet of a simulated process: when it wakes, what it waits for, where it is
    stopped."""

    name: str
    process: Process
    glet: greenlet.greenlet | None = None
    wake: float = 0.0
    blocked: Callable[[], bool] | None = None  # runnable once this returns True
    pending: str | None = None  # the backend call it is stopped at
    fault: Fault | None = None  # drawn for that call
    done: bool = False
    error: BaseException | None = None
    error_text: str = ""
    background: bool = False
    checking: int = 0
    """Nesting depth of checks whether a commit landed (`txn.commit.landed`) it is in."""


class Scheduler:
    """Runs actors one backend call at a time, in an order drawn from `rng`."""

    def __init__(self, rng: random.Random, faults: FaultPlan, trace: Trace) -> None:
        self.rng = rng
        self.faults = faults
        self.trace = trace
        self.now = EPOCH
        self.steps = 0
        self.actors: list[Actor] = []
        self.processes: list[Process] = []
        self.current: Actor | None = None
        self.main = greenlet.getcurrent()
        self._timers: list[tuple[float, int, Process, Callable[[], None], _Timer]] = []
        self._seq = 0
        self._by_glet: dict[greenlet.greenlet, Actor] = {}
        self.on_timer: Callable[[Process], None] = lambda proc: None
        self.on_process: Callable[[Process], None] = lambda proc: None
        """Called with each new process (the world gives it its host and clock skew)."""
        self.jumps = 0  # clock jumps so far, of every clock or one process's
        self.kills = 0  # processes killed so far
        self._network: list[tuple[float, int, Actor, Callable[[], None]]] = []
        """Writes of dead processes still in the network: (when, seq, sender, delivery)."""
        self.sender: Actor | None = None
        """The (dead) actor whose write the network is delivering now."""

    # processes and actors ---------------------------------------------------------------

    def process(self, name: str) -> Process:
        """A new simulated process with its own pid and a runtime on the simulated clock."""
        proc = Process(1000 + len(self.processes), name)
        proc.runtime = runtime.Runtime(
            now=lambda: self.now + proc.offset,
            monotonic=lambda: self.now,  # a wall clock's skew or step leaves it alone
            sleep=self.sleep,
            call_later=lambda delay, fn: self.call_later(proc, delay, fn),
            executor=SimExecutor(self, proc),
            host=lambda: proc.host,
            pid=lambda: proc.pid,
            alive=lambda host, pid: self.alive(host, pid, proc),
        )
        self.processes.append(proc)
        self.on_process(proc)
        return proc

    def spawn(
        self, proc: Process, name: str, fn: Callable[[], None], background: bool = False
    ) -> Actor:
        """Start `fn` as a new actor of `proc`; `background` actors do not keep the run going."""
        actor = Actor(name, proc, background=background, wake=self.now)

        def body() -> None:
            runtime.use(proc.runtime)
            try:
                fn()
            except Crashed:
                pass
            except BaseException as e:
                actor.error = e
                actor.error_text = traceback.format_exc()
            finally:
                actor.done = True
                if proc.holder is actor:
                    proc.holder = None

        actor.glet = greenlet.greenlet(body, parent=self.main)
        self._by_glet[actor.glet] = actor
        self.actors.append(actor)
        return actor

    def alive(self, host: str, pid: int, asking: Process | None = None) -> bool | None:
        """Whether simulated process `pid` on `host` still runs, as process `asking` can
        tell: None for another host than its own."""
        if host != (asking.host if asking is not None else HOST):
            return None
        return any(p.pid == pid and p.host == host and p.alive for p in self.processes)

    def lapses(self, proc: Process) -> int:
        """What may let a lease of `proc` lapse without a bug: jumps of time for everyone,
        and its own stalls (a count that grows with either)."""
        return self.jumps + proc.stalls

    def clock_of(self, proc: Process) -> float:
        """The time process `proc`'s clock shows."""
        return self.now + proc.offset

    def kill(self, proc: Process, why: str) -> None:
        """SIGKILL: the process's actors never run again; its timers never fire."""
        if not proc.alive:
            return
        proc.alive = False
        proc.died = self.now
        proc.holder = None
        self.kills += 1
        self.trace.event(self, f"{proc.name} (pid {proc.pid}) killed {why}")

    def clock(self) -> float:
        """The simulated time."""
        return self.now

    # called from actors -----------------------------------------------------------------

    def _me(self) -> Actor:
        actor = self._by_glet.get(greenlet.getcurrent())
        if actor is None:
            raise RuntimeError("not inside a simulated actor")
        if not actor.process.alive:
            raise Crashed
        return actor

    def inside(self) -> bool:
        """Whether the caller is an actor (setup and the observer run outside)."""
        return greenlet.getcurrent() in self._by_glet

    def point(self, what: str) -> Fault | None:
        """Stop at a backend call; returns the fault drawn for it when resumed."""
        actor = self._me()
        actor.pending = what
        self.main.switch()
        if not actor.process.alive:
            raise Crashed
        actor.pending = None
        fault, actor.fault = actor.fault, None
        return fault

    def crash_me(self, why: str) -> None:
        """Kill the calling actor's process (a simulated crash); never returns."""
        actor = self._me()
        self.kill(actor.process, why)
        self.main.switch()
        raise Crashed  # never resumed; unwound only at the end of the run

    def sleep(self, seconds: float) -> None:
        """Let the calling actor sleep `seconds` of simulated time."""
        actor = self._me()
        actor.wake = self.now + max(seconds, 0.0)
        self.main.switch()
        if not actor.process.alive:
            raise Crashed

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Park the calling actor until `ready()` holds."""
        actor = self._me()
        while not ready():  # another actor may have taken what made it ready first
            actor.blocked = ready
            self.main.switch()
            if not actor.process.alive:
                raise Crashed

    @contextmanager
    def op(self, label: str) -> Iterator[None]:
        """Run one operation of an actor: library code of one process runs in one actor at a
        time (see the module docstring)."""
        actor = self._me()
        proc = actor.process
        if proc.holder is not actor:
            self.wait_until(lambda: proc.holder is None)
            proc.holder = actor
        try:
            yield
        finally:
            if proc.holder is actor:
                proc.holder = None

    def in_flight(self, delay: float, deliver: Callable[[], None]) -> None:
        """The calling actor's write leaves for the network and its process dies: the
        write takes effect `delay` simulated seconds later (`deliver`, run by the loop
        with `sender` set), unless the run ends first. Never returns."""
        actor = self._me()
        self._seq += 1
        heapq.heappush(self._network, (self.now + delay, self._seq, actor, deliver))
        self.crash_me("with its last write in flight")

    def _deliver(self) -> None:
        while self._network and self._network[0][0] <= self.now:
            _, _, actor, deliver = heapq.heappop(self._network)
            self.trace.event(self, f"the network delivers {actor.name}'s last write")
            self.sender = actor
            try:
                deliver()
            except Exception as e:  # the write was refused (or failed): nobody hears of it
                self.trace.event(self, f"  -> {type(e).__name__}: {str(e)[:140]}")
            finally:
                self.sender = None

    def call_later(self, proc: Process, delay: float, fn: Callable[[], None]) -> _Timer:
        """Run `fn` in process `proc` after `delay` simulated seconds; the handle cancels it."""
        handle = _Timer()
        self._seq += 1
        heapq.heappush(self._timers, (self.now + delay, self._seq, proc, fn, handle))
        return handle

    # the loop ---------------------------------------------------------------------------

    def _runnable(self, actor: Actor) -> bool:
        if actor.done or not actor.process.alive or actor.wake > self.now:
            return False
        if actor.blocked is not None:
            if not actor.blocked():
                return False
            actor.blocked = None
        return True

    def _fire_timers(self) -> None:
        while self._timers and self._timers[0][0] <= self.now:
            _, _, proc, fn, handle = heapq.heappop(self._timers)
            if handle.cancelled or not proc.alive:
                continue

            def task(fn: Callable[[], None] = fn, proc: Process = proc) -> None:
                with self.op("timer"):
                    self.on_timer(proc)
                    fn()

            if getattr(fn, "concurrent", False):  # a thread of its own that takes no lock
                self.spawn(proc, f"{proc.name}.beat", fn, background=True)
                continue
            self.spawn(proc, f"{proc.name}.timer", task, background=True)

    def step(self) -> bool:
        """Run one actor to its next stop; False when every actor is done or dead."""
        self._fire_timers()
        self._deliver()
        runnable = [a for a in self.actors if self._runnable(a)]
        if not runnable:
            waiting = [a for a in self.actors if not a.done and a.process.alive]
            wakes = [a.wake for a in waiting if a.wake > self.now and a.blocked is None]
            timers = [t[0] for t in self._timers if not t[4].cancelled and t[2].alive]
            timers += [n[0] for n in self._network]
            if not wakes and not timers:
                if any(not a.background for a in waiting):
                    names = ", ".join(f"{a.name} at {a.pending}" for a in waiting)
                    raise Deadlock(f"no actor can run: {names}")
                return False
            self.now = min(wakes + timers)
            return True
        actor = self.rng.choice(runnable)
        if actor.pending is not None:
            stalls = self.faults.stalling is not None and actor.name.startswith(
                self.faults.stalling
            )
            actor.fault = self.faults.draw(
                self.rng, actor.pending, actor.checking > 0, stalls, stalls
            )
            if actor.fault is not None:
                self.trace.fault(self, actor, actor.fault)
            if actor.fault == Fault.CRASH_BEFORE:
                self.kill(actor.process, f"before {actor.pending}")
                return True
            if actor.fault == Fault.DELAY:
                actor.wake = self.now + self.faults.delay_for(self.rng, stalls)
                actor.fault = None
                if stalls:  # a slow call (seconds): a lease of its own may lapse in it
                    actor.process.stalls += 1
                return True
            if actor.fault == Fault.PAUSE:  # for its own lease, as good as a jump of time
                actor.wake = self.now + self.faults.pause_for(self.rng)
                actor.fault = None
                actor.process.stalls += 1
                self.trace.event(self, f"{actor.name} stalls until {actor.wake - EPOCH:,.0f}")
                return True
        self.current = actor
        assert actor.glet is not None
        actor.glet.switch()
        self.current = None
        self.steps += 1
        self.now += TICK
        jump = self.faults.clock_jump(self.rng)
        if jump:
            self.jumps += 1
            alive = [p for p in self.processes if p.alive and p.name != "observer" and not p.steady]
            if alive and self.rng.random() < self.faults.own_jump:  # one host's clock steps
                proc = self.rng.choice(alive)
                jump = min(jump, self.faults.own_jump_max) * self.rng.choice((1.0, -1.0))
                proc.offset += jump  # an NTP step of its wall clock, either way
                proc.peak = max(proc.peak, proc.offset)
                self.faults.counts["clock jump of one process"] += 1
                self.trace.event(self, f"{proc.name}'s clock jumps {jump:+,.0f} s")
            else:  # time passes for everyone (a stall of the whole system)
                self.now += jump
                self.trace.event(self, f"clock jumps {jump:,.0f} s")
        return True

    def unwind(self) -> None:
        """End every greenlet still suspended (their processes count as killed); writes
        still in the network are lost with the run."""
        self._network.clear()
        for actor in self.actors:
            actor.process.alive = False
            if actor.glet:  # started and suspended (a greenlet never started just goes)
                actor.glet.throw(Crashed)
        self._timers.clear()


class _Timer:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimFuture(Future):
    """A future whose result() waits cooperatively (never blocks the thread)."""

    def __init__(self, sched: Scheduler) -> None:
        super().__init__()
        self._sched = sched

    def result(self, timeout: float | None = None) -> Any:
        """The result, waiting cooperatively (other actors run meanwhile); `timeout` is ignored."""
        if not self.done():
            self._sched.wait_until(self.done)
        return super().result(0)


class SimExecutor(Executor):
    """`map` runs inline in the calling actor (its calls still interleave with other
    processes); `submit` starts a background actor of the same process."""

    def __init__(self, sched: Scheduler, proc: Process) -> None:
        self.sched = sched
        self.proc = proc

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Run `fn` as a background actor; the future completes when it returns."""
        future = SimFuture(self.sched)

        def task() -> None:
            with self.sched.op("background"):
                try:
                    future.set_result(fn(*args, **kwargs))
                except Crashed:
                    raise
                except BaseException as e:
                    future.set_exception(e)

        self.sched.spawn(self.proc, f"{self.proc.name}.bg", task, background=True)
        return future

    def map(self, fn: Callable[..., Any], *iterables: Any, timeout=None, chunksize=1) -> Iterator:
        """`fn` over the arguments, inline in the calling actor."""
        return iter([fn(*args) for args in zip(*iterables, strict=False)])

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing: background actors end with the run."""
        pass
