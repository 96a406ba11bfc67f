"""The actors: each is a program run by a simulated process against the repository through
the public API (`Repo`, `Session`), reporting what it began and what it was told to the
model. Isolated writers, cooperative sessions (a driver and workers in their own
processes), readers pinned to commits and to `as_of` times, garbage collection (incremental
and full), expiry, merges and reverts, resets, branches and tags, protection rules.

A process the scheduler kills stops where it was; some programs leave a recovery behind
(`Actor.on_crash`): a new process that joins the session and finishes it, as a restarted
job would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from tests.simulator import metadata as md
from tests.simulator.model import Handle, Intent, Outcome, SessionModel, Violation
from zarrlake.connection import open_context
from zarrlake.errors import (
    CASFailedError,
    ConflictError,
    CorruptionError,
    ExpiredHistoryError,
    GcBusyError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    SessionClosedError,
    SessionExpiredError,
    UnfinishedWritersError,
    UnflushedWritesError,
    ZarrLakeError,
)
from zarrlake.repo import Repo
from zarrlake.vc.policies import (
    ConflictPolicy,
    FastForward,
    IsolationLevel,
    UnfinishedPolicy,
    UnflushedPolicy,
)

if TYPE_CHECKING:
    from tests.simulator.protocols import World
    from tests.simulator.scheduler import Process
    from zarrlake.session import Session

BRANCHES = ("main", "dev")
GARBAGE_REUSE = 0.25
"""How often a writer writes a value whose chunk object is garbage (`Actor.value`)."""
DEFINITE = (
    ConflictError,
    SessionClosedError,
    SessionExpiredError,
    ReadOnlyError,
    InvalidInputError,
    UnflushedWritesError,
)
"""Errors after which a commit certainly did not land."""


class Actor:
    """A program's handle on its simulated process, its random stream and the world."""

    def __init__(self, world: World, name: str, rng: random.Random) -> None:
        self.world = world
        self.name = name
        self.rng = rng
        self.process: Process = world.sched.process(name)
        self.repo: Repo | None = None
        self.on_crash: Callable[[], None] | None = None

    @property
    def model(self):  # -> Model
        """The run's model, which the actor reports outcomes to."""
        return self.world.model

    def start(self, program: Callable[[Actor], None]) -> None:
        """Run `program` as this actor in its simulated process."""
        self.world.sched.spawn(self.process, self.name, lambda: program(self))
        self.world.programs[self.process.pid] = self

    def open(self) -> Repo:
        """The actor's repository, opened on first use (retried while opening fails)."""
        while self.repo is None:
            try:
                with self.op("open the repository"):
                    ctx = open_context(self.world.spec)
            except ZarrLakeError:
                self.world.sched.sleep(1.0)
                continue
            ctx.settings = self.world.settings
            self.repo = Repo(ctx)
        return self.repo

    @contextmanager
    def op(self, label: str) -> Iterator[None]:
        """Trace one library operation; corruption it raises fails the run as a Violation."""
        sched = self.world.sched
        with sched.op(label):
            me = sched._me()
            self.world.trace.op(sched, me, label)
            try:
                yield
            except CorruptionError as e:
                raise Violation(f"{self.name}: {label}: {e}") from e
            except ZarrLakeError as e:
                self.world.trace.op(sched, me, f"  -> {type(e).__name__}: {str(e)[:140]}")
                raise

    def note(self, text: str) -> None:
        """Add an outcome line under the current operation in the trace."""
        sched = self.world.sched
        self.world.trace.op(sched, sched._me(), f"  -> {text}")

    def think(self) -> None:
        """Let simulated time pass between operations (idle flushes fire, leases age)."""
        if self.rng.random() < 0.3:
            self.world.sched.sleep(self.rng.choice((0.05, 0.5, 2.0, 20.0)))

    def key(self) -> str:
        """A key drawn from the world's keys."""
        return self.rng.choice(self.world.keys)

    def value(self) -> bytes:
        """A value drawn from the world's values; now and then one whose chunk object is
        garbage in storage (no retained commit or live session needs it): its upload is a
        deduplicated reuse of an object a collector may be deleting."""
        if self.rng.random() < GARBAGE_REUSE:
            garbage = self.world.garbage_values()
            if garbage:
                self.model.counts["writes reusing a garbage object"] += 1
                return self.rng.choice(garbage)
        return self.rng.choice(self.world.values)

    def branch(self) -> str:
        """A branch drawn from those the actors work on."""
        return self.rng.choice(BRANCHES)


# sessions -----------------------------------------------------------------------------


def _plain(data: bytes | memoryview | None) -> bytes | None:
    """A read's value as bytes (a virtual chunk's comes as a memoryview)."""
    return None if data is None else bytes(data)


class Writing:
    """One handle on a session and the model's view of it."""

    def __init__(self, actor: Actor, session: Session, model_session: SessionModel) -> None:
        self.actor = actor
        self.s = session
        self.m = model_session
        self.h = Handle(f"{actor.name}#{len(model_session.handles)}", process=actor.process)
        model_session.handles.append(self.h)
        actor.world.handles_of.setdefault(actor.process.pid, []).append(self.h)

    def stored(self) -> None:
        """After an operation returned: note whether the session's record is stored with its
        base checked (txn/birth.py); from then on expire must keep that base."""
        if not self.s._txn.unborn:
            self.m.stored = True

    def checked(self, key: str) -> None:
        """A write of `key` returned: a session whose record is stored had its base checked
        (txn/birth.py), none left failed or under way: no write is acknowledged before."""
        birth = self.s._txn.birth
        if birth is None or not birth.stored:
            return
        self.actor.model.counts["writes acknowledged on a stored record"] += 1
        if not birth.born:
            raise Violation(
                f"{self.actor.name}: a write of {key!r} returned before the base of session "
                f"{self.m.sid[:6]} was checked"
            )

    def write(self, key: str, value: bytes | None) -> None:
        """Write (or delete, `value` None) one key; the model learns what may now be staged."""
        a, model = self.actor, self.actor.model
        # A write may flush the handle's buffer (full, or its oldest write too old) before
        # it returns, or be cut off after that: until it returns, its value may be staged.
        written = md.canonical(value) if md.is_meta(key) else value
        self.h.maybe.setdefault(key, set()).add(written)
        self.h.wrote_at[key] = a.world.sched.now
        try:
            with a.op(f"{'delete' if value is None else 'write'} {key} {_size(value)}"):
                if value is None:
                    self.s.delete(key)
                else:
                    self.s.write(key, value)
        except ZarrLakeError as e:
            self.withdrew(e)
            model.wrote(self.h, key, written, certain=False)
            return
        self.stored()
        if value is not None:  # (a delete of nothing stages nothing)
            self.checked(key)
        view = model.view(self.m, self.h, key)
        if value is None and view == {None}:
            return  # deleting what is not there stages nothing
        model.wrote(self.h, key, written, certain=value is not None or None not in view)

    def withdrew(self, error: ZarrLakeError) -> None:
        """Tell the model if `error` says a flush withdrew this handle's writes."""
        if WITHDRAWN in str(error):
            self.actor.model.withdrew(self.h)

    def get(self, key: str) -> bytes | None:
        """Read one key in the session (checked against the model); raises ZarrLakeError."""
        a = self.actor
        with a.op(f"read {key} in session {self.m.sid[:6]}"):
            got = _plain(self.s.read(key))
        shown = md.canonical(got) if md.is_meta(key) else got
        a.model.check_session_read(a.name, self.m, self.h, {key: shown})
        return got

    def change_metadata(self) -> None:
        """What zarr writes for a user's metadata change: an attribute set, a resize (a
        shrink deletes the chunks outside the new shape), a new array created or deleted."""
        a = self.actor
        roll = a.rng.random()
        key = md.NEW_ARRAY if roll >= 0.75 else "a/zarr.json"
        a.model.counts["metadata changes begun"] += 1
        try:
            doc = self.get(key)
        except ZarrLakeError:
            return
        if key == md.NEW_ARRAY:
            units = a.rng.choice(md.ATTRIBUTE_VALUES[:2])
            self.write(key, md.new_array(a.rng.choice((2, 4)), units) if doc is None else None)
            return
        if doc is None:
            return
        if roll < 0.5:
            name = a.rng.choice(md.ATTRIBUTE_NAMES)
            self.write(key, md.with_attribute(doc, name, a.rng.choice(md.ATTRIBUTE_VALUES)))
            return
        old, length = md.shape_of(doc) or 0, a.rng.choice(md.SHAPES)
        self.write(key, md.resized(doc, length))
        for i in range(length, old):  # zarr deletes the chunks a shrink leaves outside
            self.write(f"a/c/{i}", None)

    def read(self, keys: list[str]) -> None:
        """Read `keys` in the session and have the model check what it saw."""
        a = self.actor
        got = {}
        try:
            with a.op(f"read {', '.join(keys)} in session {self.m.sid[:6]}"):
                for key in keys:
                    got[key] = self.s.read(key)
        except ZarrLakeError:
            return
        a.model.check_session_read(a.name, self.m, self.h, got)

    def flush(self) -> bool:
        """Flush the handle; returns whether it is known to have succeeded."""
        a, model = self.actor, self.actor.model
        model.flush_begins(self.h)
        try:
            with a.op(f"flush session {self.m.sid[:6]}"):
                self.s.flush()
        except ZarrLakeError as e:
            self.withdrew(e)
            model.flush_failed(self.h)
            return False
        self.stored()
        model.flush_ok(self.m, self.h, "flush")
        return True

    def commit(
        self,
        policy: ConflictPolicy,
        unflushed: UnflushedPolicy = "wait",
        unfinished: UnfinishedPolicy | None = None,
    ) -> str | None:
        """Commit; the outcome goes to the model. Returns the commit id if acknowledged."""
        a, model = self.actor, self.actor.model
        intent = model.begin(
            Intent(a.world.new_id("c"), "commit", self.m.branch, a.name, policy=policy)
        )
        intent.session = self.m
        intent.committer = self.h
        if unfinished is None and unflushed == "discard":
            unfinished = "include"  # what unflushed="discard" implies
        intent.unfinished = unfinished
        intent.gone = frozenset(  # dead, as the committer can tell (on its own host)
            h.name
            for h in self.m.handles
            if h.process is not None and not h.process.alive and h.process.host == a.process.host
        )
        model.flush_begins(self.h)
        # While it runs, its lease must never lapse by its own clock unless a clock jumped.
        seal = a.world.seal_of(self.m.sid)
        a.world.committing[a.process.pid] = (self.m.sid, a.world.sched.lapses(a.process), seal)
        began = a.world.sched.now
        try:
            with a.op(f"commit {self.m.sid[:6]} to {self.m.branch} ({policy}, {unflushed})"):
                cid = self.s.commit(
                    intent.id,
                    on_conflict=policy,
                    metadata={"sim": intent.id},
                    unflushed=unflushed,
                    unfinished=unfinished,
                    allow_empty=True,  # the simulator explores the protocol, not this rule
                )
        except DEFINITE as e:
            model.flush_failed(self.h)
            model.end(intent, Outcome.FAILED)
            raise e
        except ZarrLakeError as e:
            self.withdrew(e)
            if self.h.withdrawn and isinstance(e, UnfinishedWritersError):
                model.counts["commits refused over own withdrawn writes"] += 1
            model.flush_failed(self.h)
            model.end(intent, commit_outcome(e), _said(e))
            raise
        finally:
            a.world.committing.pop(a.process.pid, None)
            if a.world.sched.now - began > LEASE_SPAN:  # it had to renew its lease
                model.counts["commits that ran longer than a lease"] += 1
        a.note(f"committed {cid[:12]}")
        model.flush_ok(self.m, self.h, "commit")
        model.end(intent, Outcome.ACKED, cid)
        return cid

    def abandon(self) -> None:
        """Abandon the session; the model marks it closed if that was acknowledged."""
        try:
            with self.actor.op(f"abandon {self.m.sid[:6]}"):
                self.s.abandon()
        except ZarrLakeError:
            return
        self.m.closed = True


WITHDRAWN = "were withdrawn: write those chunks again"
"""In the error of a flush whose writes gc's removal of their uploads withdrew."""
LEASE_SPAN = 120.0
"""A committer's lease in the simulated settings (commit timeout 60 s plus the margin)."""
UNCHECKED = "could not be checked"
"""In the note a commit adds to its error when it could not tell whether it landed."""


def commit_outcome(error: ZarrLakeError) -> Outcome:
    """A commit's error says it did not land (it looked), unless its note says it could
    not tell."""
    notes = " ".join(getattr(error, "__notes__", ()))
    return Outcome.UNKNOWN if UNCHECKED in notes else Outcome.REPORTED


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error)[:100]}"


def begin_session(a: Actor, branch: str) -> Writing | None:
    """A new session on `branch` with drawn expiry and isolation; None if it could not begin."""
    repo = a.open()
    expires = a.rng.choice((timedelta(minutes=2), timedelta(hours=1), timedelta(hours=24)))
    isolation: IsolationLevel = "serializable" if a.rng.random() < 0.15 else "snapshot"
    try:
        with a.op(f"begin session on {branch} ({isolation}, expires in {expires})"):
            s = repo.create_session(branch, expires_in=expires, isolation=isolation)
    except ZarrLakeError:
        return None
    sid = s._engine.id  # its record is stored at its first write, hand-over or commit
    a.note(f"session {sid} at {s.base_commit[:12]}")
    assert sid is not None and s.branch is not None
    return Writing(a, s, a.model.session(sid, s.branch, s.base_commit))


def hand_over(a: Actor, w: Writing) -> bool:
    """The driver reads the session's id to give it to workers (storing its record);
    False if that failed."""
    try:
        with a.op(f"hand over session {w.m.sid[:6]}"):
            assert w.s.id == w.m.sid
    except ZarrLakeError:
        return False
    w.m.stored = True
    return True


def join(a: Actor, m: SessionModel) -> Writing | None:
    """A new handle on session `m` in this actor's process; None if joining failed."""
    repo = a.open()
    try:
        with a.op(f"join session {m.sid[:6]}"):
            s = repo.join_session(m.sid)
    except ZarrLakeError:
        return None
    m.stored = True
    return Writing(a, s, m)


def commit_with_retries(w: Writing, a: Actor, unflushed: UnflushedPolicy = "wait") -> None:
    """Commit with a drawn conflict policy, retrying a conflict up to three times."""
    policy: ConflictPolicy = a.rng.choice(("fail", "fail", "ours", "theirs"))
    unfinished: UnfinishedPolicy | None = None
    for _ in range(3):
        try:
            w.commit(policy, unflushed, unfinished)
            return
        except ConflictError:
            if a.rng.random() < 0.5:
                w.abandon()
                return
            policy = a.rng.choice(("ours", "theirs"))
        except UnfinishedWritersError:  # a worker failed or died: the driver chooses
            unfinished = a.rng.choice(("discard", "include"))
        except UnflushedWritesError:
            unflushed = "discard"
        except (SessionClosedError, SessionExpiredError, ReadOnlyError, InvalidInputError):
            w.abandon()
            return
        except ZarrLakeError:
            a.think()
    w.abandon()


def isolated_writer(a: Actor) -> None:
    """The program of a writer: sessions of a few writes, maybe a read and a flush, then commit or
    abandon."""
    for _ in range(a.world.ops):
        w = begin_session(a, a.branch())
        if w is None:
            continue
        sid = w.m

        def recover(m: SessionModel = sid) -> None:
            resume(a.world, m)

        a.on_crash = recover
        for _ in range(a.rng.randint(1, 3)):
            key = a.key()
            w.write(key, None if a.rng.random() < 0.1 else a.value())
        if a.rng.random() < a.world.meta_rate:
            w.change_metadata()
        if a.rng.random() < 0.5:
            w.read([a.key()])
        if a.rng.random() < 0.4:
            w.flush()
        a.think()
        if a.rng.random() < 0.1:
            w.abandon()
        else:
            commit_with_retries(w, a)
        a.on_crash = None
        a.think()


def resume(world: World, m: SessionModel) -> None:
    """A restarted job: wait out a committer's lease, join the session, finish it."""
    name = f"{m.handles[0].name.split('#')[0]}'" if m.handles else "resumer"
    a = Actor(world, name, random.Random(world.rng.getrandbits(64)))

    def program(a: Actor) -> None:
        a.world.sched.sleep(a.rng.choice((1.0, 200.0)))
        w = join(a, m)
        if w is None:
            return
        if a.rng.random() < 0.5:  # it redoes some of its work first
            w.write(a.key(), a.value())
            w.flush()
        commit_with_retries(w, a, unflushed="discard")

    a.start(program)


def cooperative(a: Actor) -> None:
    """A driver with workers in their own processes, each writing its share of the keys;
    now and then two workers write one key."""
    w = begin_session(a, a.branch())
    if w is None:
        return
    if not hand_over(a, w):
        w.abandon()
        return
    n = a.rng.randint(2, 3)
    workers = []
    for i in range(n):
        mine = [k for j, k in enumerate(a.world.keys) if j % n == i]
        if a.rng.random() < 0.15:
            mine.append(a.rng.choice(a.world.keys))  # an overlap
        worker = Actor(a.world, f"{a.name}.w{i}", random.Random(a.rng.getrandbits(64)))

        def work(me: Actor, keys: list[str] = mine) -> None:
            coop_worker(me, w.m, keys)

        worker.start(work)
        workers.append(worker)
    if a.rng.random() < 0.4:  # a driver that does not wait: its workers' writes race the seal
        a.world.sched.sleep(a.rng.choice((0.0, 0.01)))
        commit_with_retries(w, a, a.rng.choice(("wait", "discard")))
        return
    procs = {x.process for x in workers}  # every foreground actor of a live one done
    a.world.sched.wait_until(
        lambda: all(
            act.done or not act.process.alive
            for act in a.world.sched.actors
            if not act.background and act.process in procs
        )
    )
    a.think()
    commit_with_retries(w, a)


def coop_worker(a: Actor, m: SessionModel, keys: list[str]) -> None:
    """The program of a worker joining a driver's session: write some of its keys, maybe flush."""
    w = join(a, m)
    if w is None:
        return
    for key in a.rng.sample(keys, k=min(len(keys), a.rng.randint(1, 3))):
        w.write(key, a.value())
    if a.rng.random() < 0.3:
        w.read([k for k in keys if k in w.h.written][:1])
    if a.rng.random() < 0.85:
        w.flush()
    elif a.rng.random() < 0.5:
        a.world.sched.sleep(2.0)  # the idle flush may do it


# readers ------------------------------------------------------------------------------


def reader(a: Actor) -> None:
    """The program of a reader: read pinned commits or branches as of a time, checked against the
    model."""
    repo = a.open()
    for _ in range(a.world.ops):
        a.think()
        model = a.model
        keys = a.rng.sample(a.world.keys, k=2)
        if a.rng.random() < a.world.meta_rate:
            keys.append(a.rng.choice(("a/zarr.json", md.NEW_ARRAY)))
        if a.rng.random() < 0.5 and model.commits:
            cid = a.rng.choice(sorted(model.commits))
            label, as_of = f"read {cid[:12]}", None
        else:
            branch = a.branch()
            back = a.rng.choice((0.0, 1.0, 30.0, 3600.0))
            as_of = datetime.fromtimestamp(a.world.clock_of(a) - back, UTC)
            cid, label = None, f"read {branch} as of {back:.0f} s ago"
        try:
            with a.op(label):
                if as_of is None:
                    s = repo.readonly_session(cid)
                else:
                    s = repo.readonly_session(branch, as_of=as_of)
                    cid = s.base_commit
                got = {k: _plain(s.read(k)) for k in keys}
            got = {k: md.canonical(v) if md.is_meta(k) else v for k, v in got.items()}
        except (NotFoundError, ExpiredHistoryError) as e:
            if cid is not None and cid in model.retained(a.world.latest())[0]:
                raise Violation(f"{a.name} could not read retained commit {cid[:12]}: {e}") from e
            continue
        except ZarrLakeError:
            continue
        assert cid is not None
        if (
            as_of is not None
            and cid in model.commits
            and (model.commits[cid].timestamp > as_of.timestamp())
        ):
            raise Violation(f"{a.name}: as_of {as_of} resolved to the later {cid[:12]}")
        model.check_read(a.name, cid, got)


# history operations -------------------------------------------------------------------


def _history_op(a: Actor, intent: Intent, label: str, call: Callable[[], str]) -> None:
    model = a.model
    model.begin(intent)
    try:
        with a.op(label):
            result = call()
    except (ConflictError, InvalidInputError, ExpiredHistoryError, ReadOnlyError) as e:
        if isinstance(e, ConflictError) and intent.kind == "reset":
            model.end(intent, Outcome.FAILED)
        else:
            model.end(intent, Outcome.FAILED)
        return
    except (CASFailedError, NotFoundError) as e:  # it says nothing moved
        model.end(intent, Outcome.REPORTED, _said(e))
        return
    except ZarrLakeError as e:
        model.end(intent, Outcome.UNKNOWN, _said(e))
        return
    a.note(f"-> {result[:12]}")
    model.end(intent, Outcome.ACKED, result)


def merger(a: Actor) -> None:
    """The program that merges one branch into the other, or reverts commits."""
    repo = a.open()
    for _ in range(a.world.ops):
        a.think()
        into = a.branch()
        model = a.model
        if a.rng.random() < 0.6:
            source = BRANCHES[1 - BRANCHES.index(into)]
            head = model.heads.get(source)
            if head is None:
                continue
            policy: ConflictPolicy = a.rng.choice(("fail", "fail", "ours", "theirs"))
            ff: FastForward = a.rng.choice(("allow", "never"))
            intent = Intent(a.world.new_id("m"), "merge", into, a.name, policy=policy)
            intent.source = head
            _history_op(
                a,
                intent,
                f"merge {source}@{head[:8]} into {into} ({policy}, ff {ff})",
                partial(
                    repo.merge,
                    head,
                    target=into,
                    message=intent.id,
                    on_conflict=policy,
                    fast_forward=ff,
                ),
            )
        else:
            head = model.heads.get(into)
            if head is None:
                continue
            chain = [c for c in sorted(model._ancestors(head)) if model.commits[c].parents]
            if not chain:
                continue
            target = a.rng.choice(chain)
            intent = Intent(a.world.new_id("r"), "revert", into, a.name)
            intent.source = target
            _history_op(
                a,
                intent,
                f"revert {target[:8]} on {into}",
                partial(repo.revert, target, target=into, message=intent.id),
            )


def _toggle_ref(a: Actor, kind: str, name: str, exists: bool, known: list[str]) -> None:
    """Delete the tag or branch `name` if it exists, else create it at a known commit."""
    repo = a.open()
    delete, create = {
        "tag": (repo.delete_tag, repo.create_tag),
        "branch": (repo.delete_branch, repo.create_branch),
    }[kind]
    if exists:
        intent = Intent(a.world.new_id(kind[0]), f"delete-{kind}", name, a.name)
        _history_op(a, intent, f"delete {kind} {name}", partial(_done, delete, name))
        return
    at = a.rng.choice(known)
    intent = Intent(a.world.new_id(kind[0]), f"create-{kind}", name, a.name)
    intent.target = at
    _history_op(a, intent, f"{kind} {name} at {at[:8]}", partial(create, name, at=at))


def admin(a: Actor) -> None:
    """Resets, branches and tags, protection rules."""
    repo = a.open()
    model = a.model
    for _ in range(a.world.ops):
        a.think()
        roll = a.rng.random()
        known = a.world.targets()
        branch = a.branch()
        if roll < 0.3 and known:
            to = a.rng.choice(known)
            expected = model.heads.get(branch) if a.rng.random() < 0.5 else None
            intent = Intent(a.world.new_id("x"), "reset", branch, a.name)
            intent.target = to
            _history_op(
                a,
                intent,
                f"reset {branch} to {to[:8]}" + (f" if at {expected[:8]}" if expected else ""),
                partial(repo.reset_branch, branch, to, expected=expected),
            )
        elif roll < 0.55 and known:
            name = a.rng.choice(("t1", "t2"))
            _toggle_ref(a, "tag", name, name in model.tags, known)
        elif roll < 0.75 and known:
            _toggle_ref(a, "branch", "f1", "f1" in model.heads, known)
        else:
            try:
                if a.rng.random() < 0.5:
                    with a.op("protect main"):
                        repo.protect_branch("main")
                else:
                    with a.op("unprotect main"):
                        repo.unprotect_branch("main")
            except ZarrLakeError:
                pass


def _done(fn: Callable[[str], None], name: str) -> str:
    fn(name)
    return "done"


# lifecycle ----------------------------------------------------------------------------


def collector(a: Actor) -> None:
    """The program running garbage collection with drawn grace periods (full or incremental)."""
    repo = a.open()
    for _ in range(a.world.ops):
        a.think()
        grace = a.rng.choice((0.0, 0.0, 5.0, 60.0, 3600.0))
        full = a.rng.random() < 0.4
        a.model.gc_grace[a.name] = grace
        try:
            with a.op(f"gc older_than={grace:.0f}s{' full' if full else ''}"):
                report = repo.gc(timedelta(seconds=grace), full=full)
            a.note(f"deleted {report.objects_deleted}, pending {report.candidates_pending}")
        except GcBusyError:
            dead = [p for p in a.world.sched.processes if p.name.startswith("gc") and not p.alive]
            if dead:  # a crashed collector's lock, not taken over on a guess
                a.model.counts["gc runs refused by a crashed collector's lock"] += 1
        except ZarrLakeError:
            pass
        finally:
            a.model.gc_grace.pop(a.name, None)


def expirer(a: Actor) -> None:
    """The program expiring old history with drawn ages and branches."""
    repo = a.open()
    for _ in range(a.world.ops):
        a.think()
        older = a.rng.choice((1.0, 60.0, 3600.0))
        branches = a.rng.choice((None, ["main"], ["dev"]))
        a.model.expire_floor[a.name] = older
        try:
            with a.op(f"expire older_than={older:.0f}s branches={branches}"):
                report = repo.expire(timedelta(seconds=older), branches=branches)
            a.note(f"expired {report.commits_expired}")
            a.model.check_expire_done(a.name, a.world.latest())
        except ZarrLakeError:
            pass
        finally:
            a.model.expire_floor.pop(a.name, None)


def _size(value: bytes | None) -> str:
    return "" if value is None else f"({len(value)} B)"


PROGRAMS: dict[str, Callable[[Actor], None]] = {
    "writer": isolated_writer,
    "coop": cooperative,
    "reader": reader,
    "gc": collector,
    "expire": expirer,
    "merge": merger,
    "admin": admin,
}
