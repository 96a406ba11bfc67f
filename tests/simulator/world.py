"""One simulated run: the stores, the repository, the actors, the scheduler loop with the
invariants after every step, and the checks at the end (fsck, lease recovery).

Everything a run does follows from its `Config` (the seed, and what shrinking overrides):
ids come from a seeded stream (`secrets` is replaced for the run), so do backoff jitters
(`random` is seeded), retries do not sleep (stamina's test mode), and the clock is the
scheduler's.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import stamina
import tenacity.nap

from tests.simulator import backends
from tests.simulator import pulls as sim_pulls
from tests.simulator.actors import PROGRAMS, Actor
from tests.simulator.backends import DictObjectStore
from tests.simulator.faults import FaultPlan
from tests.simulator.model import MANIFEST_INLINE_MAX, Model, Violation
from tests.simulator.scheduler import Deadlock, Scheduler
from tests.simulator.trace import Trace
from zarrlake import connection
from zarrlake._util import retry, runtime
from zarrlake.connection import FlushPolicy, RepoContext, RepoSpec, Settings, create_context
from zarrlake.errors import SessionNotFoundError, TransientError
from zarrlake.format import fragment
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.format.digest import digest
from zarrlake.lifecycle import gc as lifecycle_gc
from zarrlake.metastore.base import MetaStore
from zarrlake.metastore.bucket import runs as bucket_runs
from zarrlake.metastore.bucket import store as bucket
from zarrlake.metastore.bucket.format import decode_head
from zarrlake.metastore.bucket.store import BucketMetaStore
from zarrlake.metastore.memory import MemoryMetaStore
from zarrlake.repo import Repo
from zarrlake.storage.base import ObjectStore
from zarrlake.txn import commit as txn_commit
from zarrlake.txn import writers
from zarrlake.txn.commit import RELEASED, load
from zarrlake.vc import gc_protocol
from zarrlake.vc.reach import EXPIRED_PREFIX
from zarrlake.vc.refs import BRANCH
from zarrlake.vc.sweep_fence import PROBE

KINDS = tuple(PROGRAMS)
SMALL_SKEW = 20.0
"""Seconds a process's clock is off at most in a seed with small skews, and one process's
clock steps at most, unless `Config.wild_clocks` (jumps of any size)."""
LARGE_SKEWS = (30.0, 200.0, 900.0, 4000.0)
"""How far off a process's clock is in a seed with large skews (ahead or behind, gc and
expire included): past a sweep's lease, a committer's lease, an hour. Nothing the protocol
decides rests on a process's own clock (leases, expiries and gc candidates are judged on
the metastore's), so no skew is off limits."""
META_ROOT = "meta/"
"""Where the bucket metastore keeps its heads and pages."""
ARRAY_DOC = json.dumps(
    {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [6],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
).encode()
KEYS = [f"a/c/{i}" for i in range(6)]
SIZES = (8, 40, 100, 300)
"""Inline in manifests (<= 64 B), inline in fragments (<= 128 B), chunk objects."""
VALUES = [bytes([65 + i]) * SIZES[i % 4] + bytes([i]) for i in range(16)]
SETTINGS = Settings(
    commit_timeout=60.0,
    stage_inline_max=128,
    flush=FlushPolicy(idle=1.0),
    flush_wait=30.0,
    check_chunks=False,  # VALUES are opaque bytes, which zarr could not decode
)
SWEEP_POLL = 5.0
"""Simulated seconds a writer waits between looks at a sweep's phase (the library's 50 ms
would spend a run's steps on one stalled sweep)."""
RECORD_MAX = 200
"""Fragments bigger than this are objects (the library's 32 KiB would never be reached)."""
DELETE_BATCH = 2
"""Objects a sweep deletes per batch (the library's 1,000 would make every sweep one
batch): a sweep then renews its lease, records, checks its fence and deletes many times,
and lasts long enough that committers wait for it past half their lease."""


STAMINA_ATTEMPTS = 8
"""Attempts a retried call makes at most under simulation (stamina's test mode, capped)."""
CHECKING_STUCK = (0.0, 0.3, 0.6, 1.0)
"""Rates, drawn per flaky or crashy seed, at which a read made while checking whether a
commit landed fails past its retries (`FaultPlan.checking_stuck`): recovery after a
committer crashed past its branch compare-and-swap, or a committer's own check after a
lost reply."""


KNOWN_ISSUES: dict[str, str] = {}
"""Library bugs the simulator found that are not fixed yet (none now): each is off by
default, so that the seeds CI runs pass, and `Config(issues=...)` provokes it. Fixed ones
are replayed by tests/sim/test_former_issues.py."""
META_WRITES = (
    "meta.set_if",
    "meta.write_if",
    "meta.set_many",
    "meta.set",
    "meta.delete",
    "meta.delete_if",
    "meta.drop",
)
MetaFactory = Callable[[str, ObjectStore], MetaStore]
"""Makes the run's metastore `name`, once per simulated process (and once for the
observer): a metastore kept in object storage builds on `store`, whose calls the scheduler
interleaves too (the observer's is the raw store)."""


def memory_metastore(name: str, store: ObjectStore) -> MetaStore:
    """The in-memory metastore (every handle on one name shares its data)."""
    return MemoryMetaStore(f"memory://{name}")


def bucket_metastore(name: str, store: ObjectStore) -> MetaStore:
    """The bucket-only metastore, kept in the simulated object store: its conditional
    writes, reads and listings are scheduling points with faults like any other call."""
    return BucketMetaStore(store, f"bucket+sim://{name}")


METASTORES: dict[str, MetaFactory] = {"memory": memory_metastore, "bucket": bucket_metastore}
BUCKET_EVERY = 4
"""One seed in this many runs on the bucket-only metastore (the others on the in-memory
one), unless `Config.metastore` says which."""
BUCKET_INLINE = 256
BUCKET_TIMES = (15.0, 2.5)
"""The bucket metastore's ORPHAN_GRACE and PREPARED_MAX_AGE under simulation (an hour and
ten minutes in the library, in the same ratio): a sweep then meets leftovers, and clocks
a few seconds apart, within a run."""
"""Bytes a bucket metastore head holds inline before a write moves them into pages (the
library's 64 KiB would never be reached in a run: pages, and their sweeps, would not run)."""


@dataclass(frozen=True)
class Config:
    """What a run does: everything not set here is drawn from the seed."""

    seed: int
    actors: tuple[str, ...] | None = None
    ops: int | None = None
    max_steps: int = 4000
    faults: bool = True
    issues: frozenset[str] = frozenset()
    """Known issues to provoke (see KNOWN_ISSUES); by default a run steers clear of them."""
    metastore: str | None = None
    """'memory' or 'bucket'; None: drawn from the seed (see BUCKET_EVERY)."""
    stuck_reads: bool = False
    """In flaky seeds, a read may also fail for several tries in a row (past the retries):
    off by default, see docs/reliability.md's known issues (expire under failing reads)."""
    wild_clocks: bool = False
    """One-process clock steps of any size (see SMALL_SKEW)."""
    hosts: bool | None = None
    """Each process on a host of its own (True), all on one (False); None: drawn."""

    @property
    def meta_kind(self) -> str:
        """The metastore this run uses."""
        if self.metastore is not None:
            return self.metastore
        return "bucket" if self.seed % BUCKET_EVERY == BUCKET_EVERY - 1 else "memory"

    def describe(self) -> str:
        """The config in words, as the failure report prints it."""
        parts = [f"seed {self.seed}"]
        if self.actors is not None:
            parts.append(f"actors {','.join(self.actors)}")
        if self.ops is not None:
            parts.append(f"ops {self.ops}")
        parts.append(f"max_steps {self.max_steps}")
        if not self.faults:
            parts.append("no faults")
        if self.issues:
            parts.append(f"issues {','.join(sorted(self.issues))}")
        if self.metastore is not None:
            parts.append(f"metastore {self.metastore}")
        if self.wild_clocks:
            parts.append("wild clocks")
        if self.hosts is not None:
            parts.append("a host per process" if self.hosts else "one host")
        if self.stuck_reads:
            parts.append("stuck reads")
        return ", ".join(parts)


@dataclass
class Result:
    """What one run did: steps, checks, faults, commits, and the failure with its trace if one."""

    config: Config
    actors: tuple[str, ...]
    ops: int
    steps: int
    checks: int
    faults: Counter[str]
    commits: int
    failure: str | None = None
    trace: str = ""
    seconds: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """Whether every invariant held."""
        return self.failure is None


class World:
    """The stores, the model and the scheduler of one run."""

    def __init__(self, config: Config, trace: Trace, meta_factory: MetaFactory) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.trace = trace
        self.faults = FaultPlan.drawn(self.rng)
        if not config.faults:
            self.faults = FaultPlan()
        self.sched = Scheduler(random.Random(self.rng.getrandbits(64)), self.faults, trace)
        name = f"sim-{config.seed}-{id(self)}"
        self.spec = RepoSpec(f"sim://{name}", f"sim://{name}")
        self.store = DictObjectStore(self.spec.location, clock=lambda: self.sched.now)
        self.name = name
        self.meta_factory = meta_factory
        self.meta = meta_factory(name, self.store)  # the observer's
        self.settings = SETTINGS
        self.keys = KEYS
        self.values = VALUES
        self.programs: dict[int, Actor] = {}
        self.handles_of: dict[int, list] = {}  # pid -> the session handles it holds
        self.leases_checked = 0.0  # simulated time of the last look at committers' leases
        self.kills_seen = 0  # the scheduler's kills when `restarts` last looked
        self.committing: dict[int, tuple[str, int, str | None]] = {}
        """pid of a process inside a commit -> (its session, clock jumps when it began)."""
        self.sched.on_timer = self.timer_fires
        unknown = set(config.issues) - set(KNOWN_ISSUES)
        if unknown:
            raise ValueError(f"unknown issues {sorted(unknown)}; known: {sorted(KNOWN_ISSUES)}")
        self._ids = 0
        self.events: list[tuple[str, str, float]] = []  # (what, by whom, their clock)
        self.refs_moved = False
        self.page_writers: dict[str, str] = {}  # bucket metastore page -> who wrote it
        self.pages_named: set[str] = set()  # pages some head has named
        self.pages_deleted: list[tuple[str, str, float | None, bool]] = []
        """(page, by, last written, whether its partition's head changed since the page was
        first written)"""
        self.page_first: dict[str, int] = {}  # page -> `changes` when it first landed
        self.head_changed: dict[str, int] = {}  # partition -> `changes` at its head's last
        self.changes = 0  # writes of bucket metastore heads and pages, counted
        self.pages_changed: set[str] = (
            set()
        )  # bucket metastore partitions whose head or pages changed
        n = self.rng.randint(2, 5)  # drawn even when given, so the rest of the run is alike
        drawn = sorted(self.rng.choice(KINDS) for _ in range(n))
        names = [f"{kind}{i}" for i, kind in enumerate(drawn)]
        names += [f"{k}{len(names)}" for k in sim_pulls.drawn(config.seed)]
        if config.actors is not None:
            names = [a if a[-1].isdigit() else f"{a}{i}" for i, a in enumerate(config.actors)]
        self.kinds = tuple(names)
        ops = self.rng.randint(1, 4)
        self.ops = config.ops if config.ops is not None else ops
        extra = random.Random(f"{config.seed}/extra")  # new draws leave the rest alike
        self.meta_rate = extra.choice((0.0, 0.2, 0.5))
        """How often a writer's session also changes metadata (and a reader reads it)."""
        self.hosts = extra.random() < 0.3
        if config.hosts is not None:
            self.hosts = config.hosts
        """Each process on a host of its own: no process can tell whether another is alive
        (a crashed collector's lock and sweep then stall writers until they time out)."""
        self.skew = extra.choice(("none", "none", "small", "large"))
        self.faults.own_jump = extra.choice((0.0, 0.5))
        if config.stuck_reads and self.faults.error:  # some reads fail for a while too
            self.faults.stuck = extra.choice((0.003, 0.01))
        if self.faults.error or self.faults.crash:  # a stream of its own: the rest as before
            checking = random.Random(f"{config.seed}/checking")
            self.faults.checking_stuck = checking.choice(CHECKING_STUCK)
        if not config.wild_clocks:
            self.faults.own_jump_max = SMALL_SKEW
        self.clocks = random.Random(f"{config.seed}/clocks")
        kinds = tuple(sorted({k.rstrip("0123456789") for k in self.kinds}))
        self.faults.pauses(random.Random(f"{config.seed}/pauses"), kinds)
        self.sched.on_process = self.place

    def place(self, proc) -> None:
        """Give a new simulated process its host and its clock's skew (drawn from the seed)."""
        if proc.name == "observer":
            return
        if self.hosts:
            proc.host = f"host{proc.pid}"
        sign = self.clocks.choice((1.0, -1.0))
        if self.skew == "small":
            proc.offset = sign * self.clocks.uniform(0.0, 1.0) * self.clocks.choice((1.0, 20.0))
        elif self.skew == "large":
            proc.offset = sign * self.clocks.choice(LARGE_SKEWS) * self.clocks.uniform(1.0, 1.2)
        proc.peak = proc.offset
        if proc.offset:
            self.faults.counts["clock skew"] += 1
            self.faults.counts[f"clock skew {'ahead' if sign > 0 else 'behind'}"] += 1

    def clock_of(self, actor) -> float:
        """The time the clock of `actor`'s process shows now."""
        return self.sched.clock_of(actor.process)

    def latest(self) -> float:
        """The metastore's clock, which judges sessions' expiry for every process (a little
        ahead, for the bucket metastore's reading of its service's clock)."""
        return self.sched.now + 1.0

    def new_id(self, prefix: str) -> str:
        """A fresh id with `prefix`, deterministic within the run."""
        self._ids += 1
        return f"{prefix}{self._ids}"

    # events from the backends (inside actors) -------------------------------------------

    def after_call(self, actor, what: str, result: object) -> None:
        """Note what a backend call changed, so the step's checks read only what they must."""
        op, _, rest = what.partition(" ")
        if op == "put_if" and rest.startswith(META_ROOT):
            self.pages_changed.add(rest.rsplit("/head", 1)[0])
            self.changes += 1
            self.head_changed[rest.rsplit("/head", 1)[0]] = self.changes
            if rest.endswith("refs/head"):  # a bucket metastore's refs moved (it may crash
                self.refs_moved = True  # before its meta.set_if returns)
        elif op == "put" and rest.startswith(META_ROOT) and "/pages/" in rest:
            self.page_writers[rest] = actor.name
            self.changes += 1
            self.page_first.setdefault(rest, self.changes)
        elif op in META_WRITES:
            if rest.startswith("refs"):
                self.refs_moved = True
        elif (
            op in ("put", "put_if_absent")
            and rest.startswith(EXPIRED_PREFIX)
            and result is not False
        ):
            what = f"expired {rest[len(EXPIRED_PREFIX) :]}"  # its cutoff: by its clock's peak
            self.events.append((what, actor.name, self.sched.now + actor.process.peak))

    def garbage_values(self) -> list[bytes]:
        """The values whose chunk objects exist but nothing retained needs (the model's
        view), those a collector has recorded as candidates first: writing one reuses an
        object a collector may be about to delete."""
        big = [v for v in self.values if len(v) > MANIFEST_INLINE_MAX]
        keys = {chunk_object_key(digest(self.obs.hash, v)): v for v in big}
        present = [k for k in keys if k in self.store.objects]
        if not present:
            return []
        needed = self.model.protected(self.latest(), self.obs.hash)
        garbage = [k for k in present if k not in needed]
        part = self.obs.partition("gc")
        doomed = [k for k in garbage if self.obs.meta.get(part, b"c/" + k.encode())]
        return [keys[k] for k in doomed or garbage]

    def targets(self) -> list[str]:
        """Commits resets, new branches and tags may point at: any commit ever seen (one
        gc or expire may be removing meanwhile)."""
        return sorted(self.model.commits)

    def timer_fires(self, proc) -> None:
        """A handle's idle flush may register its writes from now on."""
        for h in self.handles_of.get(proc.pid, ()):
            self.model.flush_begins(h)

    def deleted(self, key: str, born: float | None = None) -> None:
        """Record that the calling actor deleted `key` (checked after the step): an object
        of the repository, or a head or page of the bucket metastore (`meta/`), last
        written at `born` by the service's clock."""
        actor = self.sched.sender or (self.sched._me() if self.sched.inside() else None)
        if key.startswith(META_ROOT):
            base = key.split("/pages/")[0].split("/head")[0]
            self.pages_changed.add(base)
            self.changes += 1
            if key.endswith("/head"):
                self.head_changed[base] = self.changes
            elif "/pages/" in key and actor is not None:
                fenced = self.head_changed.get(base, 0) > self.page_first.get(key, self.changes)
                self.pages_deleted.append((key, actor.name, born, fenced))
            return
        assert actor is not None, f"{key} deleted outside any actor"
        if key.startswith(PROBE):  # a sweep's check that the store honours If-Match
            return
        self.events.append((f"deleted {key}", actor.name, self.sched.clock_of(actor.process)))

    # the run ----------------------------------------------------------------------------

    def setup(self) -> RepoContext:
        """Create the repository with its first commit; returns its context."""
        ctx = create_context(self.spec)
        ctx.settings = self.settings
        repo = Repo(ctx)
        s = repo.create_session()
        s.write("a/zarr.json", ARRAY_DOC)
        for key in self.keys[:4]:
            s.write(key, self.rng.choice(self.values))
        s.commit("setup")
        repo.create_branch("dev", at="main")
        obs = RepoContext(
            self.spec,
            ctx.repo_id,
            self.store,
            self.meta,
            hash=ctx.hash,
            format=ctx.format,
            session_shards=ctx.session_shards,
        )
        obs.settings = self.settings
        self.obs = obs
        self.model = Model(obs, self.keys)
        branches = obs.refs.list(BRANCH)
        self.model.seed(branches["main"], branches)
        return ctx

    def start_actors(self) -> None:
        """Start every actor of the run with its program and its own random stream."""
        for name in self.kinds:
            kind = name.rstrip("0123456789")
            actor = Actor(self, name, random.Random(f"{self.config.seed}/{name}"))
            actor.start((PROGRAMS | sim_pulls.PROGRAMS)[kind])

    def check_step(self) -> None:
        """Check the invariants after a step: refs and commits, each deletion and expiry, actor
        errors."""
        model = self.model
        if self.refs_moved:
            self.refs_moved = False
            model.check_refs()
        model.settle()
        if self.committing and self.sched.now >= self.leases_checked + 1.0:
            self.leases_checked = self.sched.now  # a lapse shows once time moves on
            self.check_leases()
        if self.pages_changed:
            self.check_pages()
        events, self.events = self.events, []
        for what, by, now in events:
            kind, _, arg = what.partition(" ")
            if kind == "deleted":  # grace periods and leases: on the metastore's clock
                model.check_delete(arg, by, self.sched.now)
            else:  # cutoffs: the expiring process's clock, as commit timestamps are
                model.check_expired(arg, by, now, self.sched.now)
        for actor in self.sched.actors:
            if actor.error is not None:
                error, actor.error = actor.error, None
                if isinstance(error, Violation):
                    raise error
                raise Violation(
                    f"{actor.name} raised {type(error).__name__}: {error}\n{actor.error_text}"
                )

    def check_pages(self) -> None:
        """Every page a bucket metastore head names exists: a page deleted while a head names
        it (or a head landed naming a page deleted meanwhile) loses that partition."""
        changed, self.pages_changed = self.pages_changed, set()
        deleted, self.pages_deleted = self.pages_deleted, []
        heads = {}
        for base in sorted(changed):
            head = self.store.objects.get(f"{base}/head")
            if head is None:
                continue
            self.model.counts["metastore heads' pages checked"] += 1
            decoded = heads[base] = decode_head(head, f"{base}/head")
            for run in decoded.runs:
                for page in run.pages:
                    self.pages_named.add(f"{base}/pages/{page.id}")
                    if f"{base}/pages/{page.id}" not in self.store.objects:
                        raise Violation(
                            f"the bucket metastore page {page.id} of {base} is gone, but "
                            "the partition's head names it (a page deleted while in use)"
                        )
        for key, by, born, fenced in deleted:
            self.check_page_delete(key, by, born, fenced, heads.get(key.split("/pages/")[0]))

    def check_page_delete(
        self, key: str, by: str, born: float | None, fenced: bool, head: Any
    ) -> None:
        """A page no head ever named, deleted by another process than the one writing it,
        must be a leftover: a page whose write can no longer land. That holds once its
        partition's head changed after the page was first written (the write that would
        name it is conditional on a head read before that, and a head's ETag never comes
        back), or when it is a dropped incarnation's. Its age is no proof: a service's
        clock may step, and a writer that stalled may write the page again (the same bytes)
        after the sweep judged it."""
        self.model.counts["metastore page deletions checked"] += 1
        writer = self.page_writers.get(key)
        if writer is None or writer == by or key in self.pages_named or born is None:
            return
        salt = key.split("/pages/")[1].split("-")[0]
        if head is None or f"{head.salt:08x}" != salt:
            return  # a dropped incarnation's page: its write can no longer land
        if not fenced:
            raise Violation(
                f"{by} deleted the bucket metastore page {key} of a write by {writer} still in "
                f"flight: the partition's head has not changed since the page was written "
                f"(last written {self.sched.now - born:.0f} s before, by the service's clock)"
            )

    def seal_of(self, sid: str) -> str | None:
        """The seal session `sid`'s record carries now (None: none, or no record)."""
        got = self.obs.meta.get(self.obs.records.partition_of(sid), sid.encode())
        return None if got is None else json.loads(got[0]).get("seal")

    def check_leases(self) -> None:
        """A committer that is running keeps its lease: on the metastore's clock the lease
        never lapses unless time jumped or the committer itself stalled since the commit
        began (it renews at every wait and between long steps, so recovery never aborts a
        committer that keeps going, however long a sweep it waits for lasts). Only a
        lease of its own seal counts: an earlier attempt's, left when that attempt failed
        and could not undo its seal, is recovery's to settle."""
        for pid, (sid, jumps, seal_before) in self.committing.items():
            proc = next(p for p in self.sched.processes if p.pid == pid)
            if jumps != self.sched.lapses(proc):
                continue
            partition = self.obs.records.partition_of(sid)
            got = self.obs.meta.get(partition, sid.encode()) if proc.alive else None
            if got is None:
                continue
            rec = json.loads(got[0])
            if seal_before is not None and rec.get("seal") == seal_before:
                continue
            if rec.get("committer") == RELEASED:  # given up by its committer (lease 0):
                continue  # recovery settles it, revoking its landing first
            self.model.counts["committers' leases checked"] += 1
            lease, now = rec.get("lease"), self.sched.now
            if rec.get("status") == "committing" and lease is not None and now > lease + 1.0:
                raise Violation(
                    f"session {sid}: the lease of its running committer ({proc.name}) "
                    f"lapsed {now - lease:.0f} s ago by the metastore's clock, no clock "
                    "having jumped (a lease not renewed while it waits?)"
                )

    def restarts(self) -> None:
        """Processes killed this step that leave a recovery behind start it."""
        if self.sched.kills == self.kills_seen:
            return
        self.kills_seen = self.sched.kills
        for pid, actor in list(self.programs.items()):
            if not actor.process.alive and actor.on_crash is not None:
                recover, actor.on_crash = actor.on_crash, None
                del self.programs[pid]
                recover()

    def finish(self) -> None:
        """After the last step: refs explained, committers' leases recovered and their
        records agreeing with the branches, fsck clean."""
        self.sched.unwind()
        model = self.model
        model.check_refs()
        model.settle()
        self.sched.now += 10_000.0 + max(0.0, self.latest() - self.sched.now)  # past every lease
        for sm in model.sessions.values():
            model.counts["session records checked"] += 1
            try:
                rec, _ = load(self.obs, sm.sid)
            except SessionNotFoundError:  # never stored: it staged, handed over, landed nothing
                staged = self.obs.stage_partition(sm.sid)
                if sm.landed is not None or any(True for _ in self.obs.meta.scan(staged)):
                    raise Violation(
                        f"session {sm.sid} has no record, but it landed or staged records"
                    ) from None
                model.counts["sessions that never stored a record"] += 1
                continue
            if rec.status == "committed" and rec.commit != sm.landed:
                raise Violation(
                    f"session {sm.sid} is recorded as committed as {rec.commit}, but the "
                    f"commit that landed is {sm.landed}"
                )
            if rec.status != "committed" and sm.landed is not None:
                head = model.heads.get(sm.branch)
                if head is not None and sm.landed in model._ancestors(head):
                    raise Violation(
                        f"session {sm.sid}'s commit {sm.landed[:12]} is on {sm.branch!r}, "
                        f"but its record says {rec.status} (lease recovery missed it)"
                    )
        model.counts["fsck runs"] += 1
        problems = Repo(self.obs).fsck()
        if problems:
            raise Violation(f"fsck: {problems[:5]}")
        for c in sorted(model.retained(self.latest())[0]):
            for key in model.commits[c].objects:
                model.counts["objects of retained commits checked"] += 1
                if not self.store.exists(key):
                    raise Violation(f"{key} of retained commit {c[:12]} is missing")


class _NoSleep:
    """Stands in for the `time` module in tenacity's sleep during a run."""

    @staticmethod
    def sleep(seconds: float) -> None:
        """Return at once."""


_NO_SLEEP = _NoSleep()
_RELEASE_LATER = writers.release_later


def _release_unless_simulated(handle: writers.Finishing) -> None:
    """`writers.release_later`, skipping the handles of simulated processes (whose release
    returns at once); registered by the handles a run makes, so it outlives the run."""
    if not getattr(handle, "simulated", False):
        _RELEASE_LATER(handle)


class _Attempt:
    """One attempt of `_attempts`: swallows a retried error unless it is the last."""

    __slots__ = ("last", "on")

    def __init__(self, on: type[BaseException] | tuple, last: bool) -> None:
        self.on = on
        self.last = last

    def __enter__(self) -> _Attempt:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: object, tb: object) -> bool:
        return kind is not None and not self.last and issubclass(kind, self.on)


def _attempts(
    policy: retry.RetryPolicy = retry.DEFAULT_POLICY,
    on: type[Exception] | tuple[type[Exception], ...] = TransientError,
) -> Iterator[_Attempt]:
    """`retry.attempts` as stamina's test mode (capped at 8 attempts, no waits, no random
    draws) runs it, without tenacity's machinery, which cost more than the simulated call
    it retried."""
    n = min(STAMINA_ATTEMPTS, policy.attempts or STAMINA_ATTEMPTS)
    for i in range(n):
        yield _Attempt(on, i == n - 1)


@contextmanager
def _checks_marked(world: World) -> Iterator[None]:
    """Mark the actor inside `txn.commit.landed` (recovery's check whether a commit landed,
    or a committer's own after an error), so that the faults drawn for its reads can aim
    there. Wraps whatever `landed` is now (a planted bug's version included)."""
    inner = txn_commit.landed

    def landed(ctx, rec):
        actor = world.sched._me() if world.sched.inside() else None
        if actor is not None:
            actor.checking += 1
        try:
            return inner(ctx, rec)
        finally:
            if actor is not None:
                actor.checking -= 1

    txn_commit.landed = landed
    try:
        yield
    finally:
        txn_commit.landed = inner


@contextmanager
def _determinism(seed: int) -> Iterator[None]:
    """Seeded ids, random bits and jitter, no sleeps in retries, small fragments and
    bucket metastore heads, for one run."""
    ids = random.Random(seed ^ 0x5EED)
    drawn = (secrets.randbits, secrets.randbelow)
    saved = (
        secrets.token_bytes,
        secrets.token_hex,
        random.getstate(),
        fragment.RECORD_MAX,
        gc_protocol.POLL,
        lifecycle_gc.DELETE_BATCH,
        bucket_runs.INLINE_BYTES,
        (bucket.ORPHAN_GRACE, bucket.PREPARED_MAX_AGE),
    )

    def token_bytes(n: int | None = None) -> bytes:
        return ids.randbytes(32 if n is None else n)

    def token_hex(n: int | None = None) -> str:
        return token_bytes(n).hex()

    secrets.token_bytes, secrets.token_hex = token_bytes, token_hex  # type: ignore[assignment]
    secrets.randbits, secrets.randbelow = ids.getrandbits, ids.randrange  # type: ignore[assignment]
    random.seed(seed)
    fragment.RECORD_MAX = RECORD_MAX
    gc_protocol.POLL = SWEEP_POLL
    lifecycle_gc.DELETE_BATCH = DELETE_BATCH
    bucket_runs.INLINE_BYTES = BUCKET_INLINE
    bucket.ORPHAN_GRACE, bucket.PREPARED_MAX_AGE = BUCKET_TIMES
    hooks = stamina.instrumentation.get_on_retry_hooks()
    stamina.instrumentation.set_on_retry_hooks([])
    # stamina's test mode waits 0 s between attempts, but tenacity still calls time.sleep(0),
    # which hands the CPU away on a busy machine: its sleep returns at once instead (and
    # `_attempts` below keeps the library's retries off tenacity altogether)
    tenacity.nap.time = _NO_SLEEP  # type: ignore[assignment]  # (a stand-in for the module)
    # a simulated handle's release does nothing (`Writes.release`), but handing it to the
    # release thread wakes a real thread at every garbage-collected session handle: the
    # thread switches cost more than the rest of the step
    release_later = writers.release_later
    writers.release_later = _release_unless_simulated
    attempts = retry.attempts
    retry.attempts = _attempts  # type: ignore[assignment]  # (_Attempt stands in for stamina's)
    # a repository opened at sim:// opens its metastore in a thread while it reads the
    # config (`connection._open_meta_early`): the simulated metastore opens without a call,
    # so the thread overlapped nothing, but starting it and waiting for it cost more than
    # the open, and on a loaded machine each waited for the OS to run the thread
    pool = connection._thread_pool
    connection._thread_pool = _InlinePool  # type: ignore[assignment]
    try:
        with stamina.set_testing(True, attempts=STAMINA_ATTEMPTS, cap=True):
            yield
    finally:
        stamina.instrumentation.set_on_retry_hooks(hooks)
        tenacity.nap.time = time
        writers.release_later = release_later
        retry.attempts = attempts
        connection._thread_pool = pool
        secrets.token_bytes, secrets.token_hex = saved[0], saved[1]
        secrets.randbits, secrets.randbelow = drawn
        random.setstate(saved[2])
        fragment.RECORD_MAX = saved[3]
        gc_protocol.POLL = saved[4]
        lifecycle_gc.DELETE_BATCH = saved[5]
        bucket_runs.INLINE_BYTES = saved[6]
        bucket.ORPHAN_GRACE, bucket.PREPARED_MAX_AGE = saved[7]


def run(
    config: Config,
    *,
    trace: Trace | None = None,
    meta_factory: MetaFactory | None = None,
) -> Result:
    """Run one seed; the result says whether every invariant held (`failure` otherwise).
    The metastore is `meta_factory`'s if given, else the one `config` names or draws."""
    start = time.perf_counter()
    if meta_factory is None:
        meta_factory = METASTORES[config.meta_kind]
    trace = trace or Trace()
    world = World(config, trace, meta_factory)
    backends.install(world)
    failure = None
    with _determinism(config.seed), _checks_marked(world):
        token = runtime.use(
            replace(
                world.sched.process("observer").runtime,
                executor=_Inline(),
                call_later=lambda delay, fn: _NoTimer(),
            )
        )
        try:
            world.setup()
            world.start_actors()
            while world.sched.steps < config.max_steps and world.sched.step():
                world.restarts()
                world.check_step()
            world.finish()
        except (Violation, Deadlock) as e:
            failure = f"{type(e).__name__}: {e}"
            trace.event(world.sched, f"FAILED: {failure}")
            world.sched.unwind()
        finally:
            runtime.reset(token)
            backends.uninstall()
            _drop(world)
    model = world.model if hasattr(world, "model") else None
    if model is not None:
        model.counts[f"seeds on the {config.meta_kind} metastore"] += 1
        if world.hosts:
            model.counts["seeds with a host per process"] += 1
    return Result(
        config,
        world.kinds,
        world.ops,
        world.sched.steps,
        model.checks if model else 0,
        world.faults.counts,
        len(model.commits) if model else 0,
        failure,
        trace.text(),
        time.perf_counter() - start,
        model.counts if model else Counter(),
    )


class _Inline(Executor):
    """The observer's executor: everything runs at once, in turn."""

    def map(self, fn, *iterables, timeout=None, chunksize=1):
        return iter([fn(*args) for args in zip(*iterables, strict=False)])

    def submit[T](self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        future.set_result(fn(*args, **kwargs))
        return future

    def shutdown(self, wait: bool = True, **_: object) -> None:
        pass


class _InlinePool:
    """Stands in for `zarrlake.connection`'s thread pool (`_thread_pool`) during a run: a task
    runs at once in the caller, its outcome kept in the future as a thread would keep it."""

    def __init__(self, name: str = "") -> None:
        pass

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """Run `fn` now; its result or its exception is the future's."""
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as e:
            future.set_exception(e)
        return future

    def shutdown(self, wait: bool = True, **_: object) -> None:
        """Nothing: no thread was started."""


class _NoTimer:
    def cancel(self) -> None:
        pass


def _drop(world: World) -> None:
    """Free the run's metastore data (the in-memory store keeps it by name)."""
    from zarrlake.metastore import memory

    inner = world.meta
    if isinstance(inner, MemoryMetaStore):
        memory._NAMED.pop(inner.name, None)
