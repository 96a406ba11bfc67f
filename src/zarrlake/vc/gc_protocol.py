"""The records that make garbage collection safe alongside deduplicating writers.

All of them live in the metastore partition `<repo_id>/gc` and change only by
compare-and-swap:

- `lock`: one collector at a time (its owner token and `runtime.identity()`, so one known
  to be dead is taken over; renewed by compare-and-swap before each delete batch, taken
  over otherwise only LOCK_TTL after its last renewal).
- `phase`: the sweep epoch. A collector moves it to *sweeping* (epoch + 1, naming itself,
  with a lease SWEEP_LEASE seconds long on the metastore's clock, renewed by a heartbeat
  and before every delete batch) before it re-checks what is live and deletes, and back to
  *idle* after its last delete has returned. Nobody else ends a sweep while its collector
  may be alive and renewing: a process waiting for it ends it only once its collector is
  known dead (same host: process identity) or its lease lapsed, and then first seals the
  sweep's fence (`vc/sweep_fence.py`), so that no delete the collector sends afterwards
  can take effect: a collector paused anywhere, for any time, deletes nothing anyone
  relies on after the sweep ended.
- `s/<epoch>/<batch>`: what each delete batch of the sweep is about to delete, written
  before its fence check (the entity tags the fence's seal needs).
- `c/<object key>`: candidates, objects the collector has learned may be garbage, with the
  time it first learned so (the grace period counts from then, on the metastore's clock)
  and the size if known.

A writer reads the phase before uploading (`WriteGuard.begin`) and again after its
references are staged (`WriteGuard.settle`). If the two reads are the same idle phase, no
sweep overlapped the upload: a sweep starting later re-checks staged records after its
phase change and sees the writer's. Otherwise the writer waits out the sweep, then puts
back any object of its batch that the sweep deleted (and fails the write of one a purge
retired meanwhile: vc/purges.py). Dedup hits (`put_if_absent` finding an
old object) are therefore safe: the object is either kept or rewritten before the write is
acknowledged, and once the sweep is over none of its deletes can land any more.

Every object a session's writer uploads (chunk objects, fragment objects) is recorded in the
session's uploads partition (`uploads_partition`, one key per object, its size as value)
before it is uploaded (txn/uploads.py), or, for the first write of a session on a remote
metastore, in its session record as first stored (`SessionRecord.uploads`, copied to the
partition beside the upload: txn/birth.py). While the session is open or committing, those
objects are live; once it is finished (committed, abandoned, expired), they become
candidates (`register_staged` at commit or abandon, the collector's session settling
otherwise), so an incremental run reclaims what such a session uploaded whether or not a
fragment ever named it.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, NamedTuple, Protocol

from zarrlake._util import crashpoints, runtime
from zarrlake.errors import CASFailedError, GcBusyError, ZarrLakeError
from zarrlake.vc import sweep_fence
from zarrlake.vc.refs import Refs

if TYPE_CHECKING:
    from zarrlake.format.fragment import FragmentRecord
    from zarrlake.metastore.base import MetaStore
    from zarrlake.storage.base import ObjectStore
    from zarrlake.vc.objects import Objects


class GcContext(Protocol):
    """What the records need of an open repository (connection.RepoContext)."""

    meta: MetaStore
    object_store: ObjectStore
    objects: Objects

    @property
    def clock(self) -> Callable[[], float]:
        """Seconds since the epoch (read-only: RepoContext's is a dataclass field)."""

    def partition(self, name: str) -> str:
        """The metastore partition `name` of this repository."""

    def stage_partition(self, session_id: str) -> str:
        """The metastore partition holding the staged records of session `session_id`."""


PHASE = b"phase"
LOCK = b"lock"
CANDIDATE = b"c/"
SWEPT = b"s/"
"""Records of a sweep's delete batches: `s/<epoch>/<batch>` (see the module docstring)."""
SWEEP_LEASE = 30.0
"""Seconds (metastore clock) a sweep's lease runs from its last renewal: a collector that
died or stalled holds up writers for at most this long."""
HEARTBEAT = 10.0
"""Seconds between a collector's renewals of its sweep's lease while it sweeps."""
LOCK_TTL = 3600.0
"""A lock not renewed for this long is taken over (its holder's liveness unknown)."""
POLL = 0.05
"""Seconds a writer sleeps between reads of the phase while a sweep is deleting (a module
setting so the simulator can poll less often through a long stall)."""


@dataclass(frozen=True)
class Phase:
    """The sweep epoch: whether a collector is sweeping, which one, and until when its lease
    runs unless renewed (`until`, metastore clock); `ending`: another process is ending
    the sweep in its place (sealing its fence), and everyone waits on until it is idle."""

    epoch: int = 0
    sweeping: bool = False
    until: float = 0.0
    holder: str | None = None
    """`runtime.identity()` of the collector (None when idle)."""
    owner: str | None = None
    """The collector's lock token: tells its own sweep from a later one."""
    ending: bool = False

    def encode(self) -> bytes:
        """The phase as stored in the metastore (JSON)."""
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> Phase:
        """The stored phase; the idle epoch 0 when none was stored yet (a phase an earlier
        version stored has a `deadline` instead of a lease: it serves as one)."""
        if not data:
            return cls()
        doc = json.loads(data)
        if "until" not in doc:
            doc["until"] = doc.get("deadline", 0.0)
        return cls(**{k: v for k, v in doc.items() if k in _PHASE_FIELDS})

    @property
    def sweep(self) -> str:
        """The name of this sweep's fence (its bin on a local directory)."""
        return f"{self.epoch:012d}"

    def same_sweep(self, other: Phase) -> bool:
        """Whether `other` is this sweep, whatever its lease now (renewals change it)."""
        return (self.epoch, self.owner) == (other.epoch, other.owner) and other.sweeping


_PHASE_FIELDS = frozenset(Phase.__dataclass_fields__)


class Candidate(NamedTuple):
    """An object the collector learned may be garbage, and since when (the grace period counts from
    then). A named tuple: a run decodes one per chunk object uploaded since the last run, and
    a tuple is built in a fraction of a frozen dataclass's time."""

    key: str
    first_seen: float
    size: int | None = None
    index: tuple[int, int, str] | None = None  # type: ignore[assignment]  # shadows tuple.index
    """For a staged fragment not yet read: where its index lies (offset, length, id). What
    the fragment names (chunk objects) becomes candidates when a run reads it."""
    listed: bool = False
    """Found by a full run's listing alone: it may be a writer's fresh upload whose
    reference is not staged yet, so it waits while writers hold unflushed writes."""


def partition(ctx: GcContext) -> str:
    """The metastore partition holding the gc records of this repository."""
    return ctx.partition("gc")


class GcState:
    """The collector's side of the records."""

    def __init__(self, ctx: GcContext) -> None:
        self.ctx = ctx
        self.meta = ctx.meta
        self.partition = partition(ctx)
        self.clock: Callable[[], float] = lambda: ctx.clock()  # tests may swap the clock
        self.owner = f"{runtime.host()}:{runtime.pid()}:{random.getrandbits(32):08x}"
        self.read_rows: dict[bytes, bytes] = {}  # the candidate rows `candidates()` read
        self.lock_version: int | None = None
        """The version of the lock row this collector last wrote (None: it holds no lock,
        as a session's clean-up or a ref move registering candidates)."""

    # lock ---------------------------------------------------------------------------------

    def acquire(self, moving: bool = False) -> None:
        """Take the collector lock; GcBusyError if a collector that may be alive holds it,
        RepositoryMovedError if the repository moved to another metastore (unless
        `moving`: the metastore copy itself takes the lock)."""
        if not moving:
            Refs(self.meta, self.ctx.partition("refs")).check_moved()
        got = self.meta.get(self.partition, LOCK)
        if got is not None and not self._stale(json.loads(got[0])):
            lock = json.loads(got[0])
            raise GcBusyError(
                f"another garbage collection is running ({self._holder(lock)}, lock taken "
                f"{self.clock() - lock['since']:.0f} s ago); it is taken over once that "
                f"process is known to be gone, or after {LOCK_TTL:.0f} s without renewal"
                "; wait for it, or try again later"
            )
        value = self._value()
        try:
            self.lock_version = self.meta.set_if(
                self.partition, LOCK, value, got[1] if got else None
            )
        except CASFailedError:
            raise GcBusyError(
                "another garbage collection started at the same time; try again"
            ) from None
        phase, _ = self.phase()
        if got is not None and phase.sweeping:  # its collector is gone: seal, then end it
            end_in_place(self.ctx, phase)

    def _value(self) -> bytes:
        """The lock as this collector stores it: owner token, process identity, time."""
        doc = {"owner": self.owner, "identity": runtime.identity(), "since": self.clock()}
        return json.dumps(doc).encode()

    @staticmethod
    def _holder(lock: dict) -> str:
        ident = lock.get("identity")
        if ident:
            host, pid = runtime.identity_pid(ident)
            return f"pid {pid} on {host}"
        return str(lock.get("owner"))

    def _stale(self, lock: dict) -> bool:
        """Whether a lock may be taken over: its holder is known to be gone (by its
        recorded `runtime.identity()`: host, boot, pid namespace, pid and start time), or it
        was not renewed for LOCK_TTL. A live collector renews it at every delete batch, so
        a lock is never taken from a collector that may still delete on a guess (the host
        name and pid alone say nothing across containers sharing a host name)."""
        age = self.clock() - lock["since"]
        if age > LOCK_TTL:
            return True
        ident = lock.get("identity")
        if ident is not None:
            return runtime.identity_alive(ident) is False
        # A lock of an earlier version names only host and pid: a guess, trusted only once
        # any sweep of its holder would have passed its lease (its fence is sealed anyway).
        host, pid, _ = lock["owner"].split(":")
        return age > SWEEP_LEASE and runtime.alive(host, int(pid)) is False

    def release(self) -> None:
        """Drop the gc lock, if this collector still owns it."""
        got = self.meta.get(self.partition, LOCK)
        if got is not None and json.loads(got[0])["owner"] == self.owner:
            self.meta.set_many(self.partition, [(LOCK, None)])

    # phase --------------------------------------------------------------------------------

    def phase(self) -> tuple[Phase, int | None]:
        """The current phase and its version (None when never stored), for compare-and-swap."""
        got = self.meta.get(self.partition, PHASE)
        return (Phase.decode(got[0]), got[1]) if got else (Phase(), None)

    def refresh(self) -> None:
        """Check by compare-and-swap that this collector still holds the lock, renewing its
        time (a collector calls it when its sweep begins and before every delete batch);
        GcBusyError if the lock was taken over."""
        got = self.meta.get(self.partition, LOCK)
        if got is None or json.loads(got[0])["owner"] != self.owner:
            raise GcBusyError(
                "this garbage collection's lock was taken over; it stops here; run gc again"
            )
        try:
            self.lock_version = self.meta.set_if(self.partition, LOCK, self._value(), got[1])
        except CASFailedError:
            raise GcBusyError(
                "this garbage collection's lock was taken over; run gc again"
            ) from None

    def _write_candidates(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Write (or delete) candidate rows; a collector's only while its lock row is the
        version it last wrote, in the same atomic step: one paused until its lock was taken
        over writes nothing more (it would register, drop or date again the rows the new
        collector judges by), and stops with GcBusyError."""
        if self.lock_version is None:
            self.meta.set_many(self.partition, items)
            return
        try:
            self.meta.write_if(self.partition, items, {LOCK: self.lock_version})
        except CASFailedError:
            raise GcBusyError(
                "this garbage collection's lock was taken over; it stops here; run gc again"
            ) from None

    def begin_sweep(self) -> Phase:
        """Enter a new sweep epoch under this collector's lease: from here on, writers that
        staged before it are seen by the re-check that follows, and writers that stage
        after it wait for its end. A sweep left by a collector that is gone (this one holds
        the lock) is ended first, its fence sealed."""
        self.refresh()
        current, version = self.phase()
        if current.sweeping:
            end_in_place(self.ctx, current)
            current, version = self.phase()
        new = Phase(
            current.epoch + 1,
            True,
            self.clock() + SWEEP_LEASE,
            runtime.identity(),
            self.owner,
        )
        self.meta.set_if(self.partition, PHASE, new.encode(), version)
        return new

    def renew(self, phase: Phase) -> bool:
        """Extend the lease of this collector's sweep `phase` by compare-and-swap; False if
        the sweep is no longer its own (another process ended it, or is ending it)."""
        while True:
            current, version = self.phase()
            if not phase.same_sweep(current) or current.ending:
                return False
            renewed = replace(current, until=self.clock() + SWEEP_LEASE)
            try:
                self.meta.set_if(self.partition, PHASE, renewed.encode(), version)
                return True
            except CASFailedError:
                continue  # a heartbeat renewed it at the same time: look again

    def may_delete(self, phase: Phase) -> bool:
        """Whether the sweep of `phase` may go on deleting: the lock is still this
        collector's (GcBusyError otherwise) and its sweep's lease was renewed just now.
        The fence makes a delete sent after this check harmless if the sweep ends
        meanwhile; this check only stops a collector that was ended from going on."""
        self.refresh()
        return self.renew(phase)

    def end_sweep(self, phase: Phase) -> bool:
        """Move the phase back to idle (same epoch) if the sweep is still this collector's;
        False if another process ended it (or is ending it) in its place."""
        while True:
            current, version = self.phase()
            if not phase.same_sweep(current) or current.ending:
                return False
            try:
                self.meta.set_if(self.partition, PHASE, Phase(phase.epoch).encode(), version)
                return True
            except CASFailedError:
                continue  # renewed meanwhile by its heartbeat

    def record(self, phase: Phase, batch: int, tags: dict[str, str]) -> None:
        """Record a delete batch of sweep `phase` (its objects' entity tags) before the
        fence check that precedes its deletes."""
        key = SWEPT + f"{phase.epoch:012d}/{batch:08d}".encode()
        self.meta.set_many(self.partition, [(key, json.dumps(tags).encode())])

    def forget_sweeps(self, upto: int) -> None:
        """Drop the batch records of every sweep up to epoch `upto` (ended: nobody will
        seal their fences any more)."""
        stale = [k for k, _, _ in self.meta.scan(self.partition, prefix=SWEPT)]
        stale = [k for k in stale if int(k[len(SWEPT) :].split(b"/")[0]) <= upto]
        for i in range(0, len(stale), DROP_BATCH):
            self.meta.set_many(self.partition, [(k, None) for k in stale[i : i + DROP_BATCH]])

    # candidates -----------------------------------------------------------------------------

    def candidates(self) -> dict[str, Candidate]:
        """Every recorded candidate, by object key: the rows read in pages and each page's
        documents decoded by one JSON parse (a full run after many commits reads one row
        per chunk object uploaded since the last run). The rows as read are kept for
        `changed`."""
        out: dict[str, Candidate] = {}
        rows: dict[bytes, bytes] = {}
        page: list[tuple[bytes, bytes]] = []
        for k, v, _ in self.meta.scan(self.partition, prefix=CANDIDATE):
            page.append((k, v))
            if len(page) >= CANDIDATE_PAGE:
                _decode_candidates(page, out)
                rows.update(page)
                page = []
        _decode_candidates(page, out)
        rows.update(page)
        self.read_rows = rows
        return out

    def known(self, keys: Sequence[str]) -> dict[str, Candidate]:
        """The recorded candidates among `keys`, from one scan bounded by the first and the
        last of them (their common prefix), decoding only theirs: a small session's commit
        clean-up then reads a row or a few however many candidates wait for the next gc
        run (reading and decoding them all grew with every commit)."""
        return self._among(keys, {})

    def changed(self, keys: Sequence[str], gone: list[str] | None = None) -> dict[str, Candidate]:
        """The recorded candidates among `keys` whose stored row is no longer the one
        `candidates()` read (registered again since, or new): rows read unchanged are
        compared as bytes, not decoded (a collector re-checks every due candidate before
        it deletes, 100,000 rows after as many overwritten chunks). Keys whose row it read
        is gone since (dropped by another collector) are appended to `gone`."""
        return self._among(keys, self.read_rows, gone)

    def _among(
        self, keys: Sequence[str], unchanged: dict[bytes, bytes], gone: list[str] | None = None
    ) -> dict[str, Candidate]:
        """The candidates among `keys` whose row is not the one `unchanged` holds for it
        (and, in `gone`, those `unchanged` holds a row for that is stored no more)."""
        if not keys:
            return {}
        low, high = CANDIDATE + min(keys).encode(), CANDIDATE + max(keys).encode()
        common = _common_prefix(low, high)  # one key: exactly its own row
        want = {CANDIDATE + k.encode() for k in keys}
        rows = []
        stored: set[bytes] = set()
        for k, v, _ in self.meta.scan(self.partition, start=low, prefix=common):
            if k > high:
                break
            if k in want:
                stored.add(k)
                if unchanged.get(k) != v:
                    rows.append((k, v))
        if gone is not None:
            skip = len(CANDIDATE)
            gone += [k[skip:].decode() for k in sorted(want - stored) if k in unchanged]
        out: dict[str, Candidate] = {}
        for i in range(0, len(rows), CANDIDATE_PAGE):  # a page per JSON parse, as above
            _decode_candidates(rows[i : i + CANDIDATE_PAGE], out)
        return out

    def add(
        self,
        known: dict[str, Candidate],
        found: Iterable[tuple[str, int | None]],
        indexes: dict[str, tuple[int, int, str]] | None = None,
        listed: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> int:
        """Register newly found candidates (those not in `known`), first seen now;
        `indexes` gives staged fragments' index locations, `listed` those only a listing
        found."""
        now = self.clock()
        items = []
        for key, size in found:
            if key not in known:
                index = (indexes or {}).get(key)
                known[key] = Candidate(key, now, size, index, key in listed)
                doc = {"t": now, "size": size} | ({"index": list(index)} if index else {})
                if key in listed:
                    doc["listed"] = True
                items.append((CANDIDATE + key.encode(), json.dumps(doc)))
        for i in range(0, len(items), 1000):
            self._write_candidates([(k, v.encode()) for k, v in items[i : i + 1000]])
        return len(items)

    def expanded(self, candidates: list[Candidate]) -> None:
        """Note that these fragments' contents were registered (their index is not read
        again)."""
        items = [
            (CANDIDATE + c.key.encode(), json.dumps({"t": c.first_seen, "size": c.size}).encode())
            for c in candidates
        ]
        for i in range(0, len(items), 1000):
            self._write_candidates(items[i : i + 1000])

    def drop(self, keys: Sequence[str]) -> None:
        """Forget the candidates for `keys` (deleted or found live), DROP_BATCH a write (a
        run finds one candidate live per chunk a later commit kept: fewer transactions)."""
        for i in range(0, len(keys), DROP_BATCH):
            batch = keys[i : i + DROP_BATCH]
            self._write_candidates([(CANDIDATE + k.encode(), None) for k in batch])


def _common_prefix(a: bytes, b: bytes) -> bytes:
    """The longest prefix `a` and `b` share, byte by byte."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


CANDIDATE_PAGE = 10_000
"""Candidate rows decoded together (GcState.candidates)."""
DROP_BATCH = 10_000
"""Candidate rows deleted by one metastore write (GcState.drop)."""


def _decode_candidates(rows: list[tuple[bytes, bytes]], out: dict[str, Candidate]) -> None:
    """Add the candidates of stored `rows` (key, document) to `out`, parsing the documents
    as one JSON array (one call instead of one per row)."""
    if not rows:
        return
    docs = json.loads(b"[" + b",".join(v for _, v in rows) + b"]")
    skip = len(CANDIDATE)
    make = tuple.__new__  # Candidate's fields in order, without its Python-level __new__
    for (k, _), doc in zip(rows, docs, strict=True):
        key = k[skip:].decode()
        at = doc.get("index")
        index = (at[0], at[1], at[2]) if at else None
        listed = doc.get("listed", False)
        out[key] = make(Candidate, (key, doc["t"], doc.get("size"), index, listed))


class WriteGuard:
    """The writer's side: `token = guard.begin()` before uploading chunk objects, then
    `guard.settle(token, uploads)` once the references to them are staged."""

    REUSE = 30.0
    """Seconds `begin` may answer with the phase this guard last read instead of reading it
    again: a token older than the upload is still read before it, and can only make
    `settle` check the uploads when a sweep began since (never skip a check it needs)."""

    def __init__(
        self,
        ctx: GcContext,
        poll: float | None = None,
        sleep: Callable[[float], None] = runtime.sleep,
    ) -> None:
        self.sleep = sleep
        self._ctx = ctx
        self.meta = ctx.meta
        self.store = ctx.object_store
        self.objects = ctx.objects
        self.partition = partition(ctx)
        self.clock: Callable[[], float] = lambda: ctx.clock()  # tests may swap the clock
        self.poll = POLL if poll is None else poll
        self._last: tuple[float, Phase] | None = None  # (when sent, phase) of the latest read

    def _phase(self) -> Phase:
        sent = runtime.monotonic()
        got = self.meta.get(self.partition, PHASE)
        phase = Phase.decode(got[0] if got else None)
        last = self._last
        if last is None or sent >= last[0]:  # (a read sent earlier may come back later)
            self._last = (sent, phase)
        return phase

    def last_read(self) -> tuple[float, Phase] | None:
        """(`runtime.monotonic()` when it was sent, phase) of the latest read sent, or None."""
        return self._last

    def current(self) -> Phase:
        """The phase as stored now (read afresh)."""
        return self._phase()

    def begin(self) -> Phase:
        """The token to take before uploading: the current phase (or the last one read, if
        recent)."""
        last = self._last
        if last is not None and not last[1].sweeping and runtime.monotonic() - last[0] < self.REUSE:
            return last[1]
        return self._phase()

    def settle(
        self,
        before: Phase,
        uploads: Sequence[tuple[str, bytes | None]],
        keep: Callable[[], None] | None = None,
    ) -> list[str]:
        """Make sure every uploaded object still exists now that its reference is staged.
        One a sweep deleted meanwhile is written again from its bytes; returns the keys of
        those it could not be (their bytes were not kept: fresh uploads, which only a sweep
        of `--full` listing with a grace period shorter than the upload's age can delete).
        `keep` is called while it waits for a sweep (a committer renews its lease there)."""
        after = self._phase()
        if after == before and not after.sweeping:
            return []
        self._wait(after, keep)
        lost = []
        for key, data in uploads:
            if data is not None and self.objects.retired(key, len(data)):
                lost.append(key)  # a purge retired the object this write reused
            elif not self.store.exists(key):
                if data is None:
                    lost.append(key)
                else:
                    self.store.put_if_absent(key, data)
        return lost

    def wait_idle(self, keep: Callable[[], None] | None = None) -> None:
        """Block while a sweep is deleting (commits call this after sealing, before they
        write their metadata objects, so a sweep never deletes an object a commit reuses).
        `keep` is called on every poll: a committer renews its lease there, and gives up by
        raising when it cannot."""
        self._wait(self._phase(), keep)

    def _wait(self, phase: Phase, keep: Callable[[], None] | None = None) -> None:
        """Wait until no sweep is deleting. A sweep whose collector is known dead, or whose
        lease lapsed on the metastore's clock (no renewal for SWEEP_LEASE seconds), is
        ended here in its collector's place (`end_in_place`: its fence sealed first), so a
        dead collector holds writers up for at most its lease, and one that only stalled
        deletes nothing they rely on once they go on."""
        while phase.sweeping:
            if phase.ending or lapsed(phase, self.clock()):
                end_in_place(self._ctx, phase)
                phase = self._phase()
                continue
            crashpoints.reached("writer_waits_for_sweep")
            if keep is not None:
                keep()
            self.sleep(self.poll)  # a sweep is deleting: let it finish before checking
            phase = self._phase()


class Heartbeat:
    """Renews a collector's sweep lease every HEARTBEAT seconds in the background (a timer
    of `runtime`), so that a sweep busy between delete batches (marking again, reading
    sizes, a slow batch) keeps its lease, and one whose process died loses it within
    SWEEP_LEASE. Its beats only ever compare-and-swap the phase: they may run beside the
    collector's own calls (`concurrent`, which the simulator honours)."""

    concurrent = True

    def __init__(self, state: GcState, phase: Phase) -> None:
        self.state = state
        self.phase = phase
        self._stopped = False
        self._timer: runtime.Cancellable = runtime.call_later(HEARTBEAT, self)

    def __call__(self) -> None:
        """One beat: renew, and schedule the next unless stopped or given up on."""
        if self._stopped:
            return
        try:
            alive = self.state.renew(self.phase)
        except ZarrLakeError:  # a missed beat: the next one, or the next batch, renews
            alive = True
        if alive and not self._stopped:
            self._timer = runtime.call_later(HEARTBEAT, self)

    def stop(self) -> None:
        """Renew no more (the sweep is over, or its collector stops)."""
        self._stopped = True
        self._timer.cancel()


def lapsed(phase: Phase, now: float) -> bool:
    """Whether the sweep of `phase` may be ended by others: its collector is known dead
    (same host: `runtime.identity_alive`; zombies count as dead), or its lease ran out by
    the metastore's clock (`now`)."""
    if phase.holder and runtime.identity_alive(phase.holder) is False:
        return True
    return now > phase.until


def end_in_place(ctx: GcContext, phase: Phase) -> None:
    """End the sweep of `phase` in its collector's place: mark it `ending` (everyone keeps
    waiting; its collector stops at its next check), seal its fence with what its batches
    recorded (`vc/sweep_fence.py`: from then on none of its deletes can take effect), then
    move it to idle and drop its records. Safe to repeat and to run in several processes
    at once; a sweep that ended meanwhile is left alone."""
    meta, part = ctx.meta, partition(ctx)
    while True:
        got = meta.get(part, PHASE)
        current = Phase.decode(got[0] if got else None)
        if got is None or not phase.same_sweep(current):
            return
        if current.ending:
            break
        try:
            meta.set_if(part, PHASE, replace(current, ending=True).encode(), got[1])
        except CASFailedError:
            continue  # renewed, or another waiter began ending it: look again
    prefix = SWEPT + f"{phase.epoch:012d}/".encode()
    recorded: dict[str, str] = {}
    for _, value, _ in meta.scan(part, prefix=prefix):
        recorded.update(json.loads(value))
    sweep_fence.seal(ctx.object_store, phase.sweep, recorded, ctx.objects.map)
    got = meta.get(part, PHASE)
    if got is not None and phase.same_sweep(Phase.decode(got[0])):
        with contextlib.suppress(CASFailedError):  # another waiter ended it first
            meta.set_if(part, PHASE, Phase(phase.epoch).encode(), got[1])
    with contextlib.suppress(ZarrLakeError):  # clean-up only: the next collector retries
        GcState(ctx).forget_sweeps(phase.epoch)


def register_dropped(ctx: GcContext, commit_id: str) -> None:
    """Remember a commit a ref no longer points at (deleted or reset branch, deleted tag) as
    a candidate: an incremental gc reads it and its parents and reclaims whatever of that
    history nothing else reaches. A commit still reachable is simply dropped again."""
    GcState(ctx).add({}, [(f"commits/{commit_id}", None)])


def staged_fragments(meta: MetaStore, partition: str) -> list[FragmentRecord]:
    """The fragment records in a session's staging partition."""
    from zarrlake.format.fragment import FragmentRecord

    return [FragmentRecord.decode(v) for _, v, _ in meta.scan(partition, b"f", b"f")]


def staged_candidates(
    objects: Objects, records: list[FragmentRecord]
) -> tuple[list[tuple[str, int | None]], dict[str, tuple[int, int, str]]]:
    """(candidates, index locations) for a finished session's fragments: a fragment
    object is registered with where its index lies (a gc run reads it then); what a
    fragment held in its record names is registered at once."""
    from zarrlake.vc.reach import record_refs

    found: list[tuple[str, int | None]] = []
    indexes: dict[str, tuple[int, int, str]] = {}
    for r in records:
        if r.blob is None:
            found.append((r.location, r.index_offset + r.index_length))
            indexes[r.location] = r.index
        else:
            found += list(record_refs(objects, r).items())
    return found, indexes


def uploads_of(stage_partition: str) -> str:
    """The uploads partition of the session whose staging partition is `stage_partition`
    (`<repo>/stage/<id>` -> `<repo>/uploads/<id>`)."""
    repo, sep, session_id = stage_partition.rpartition("/stage/")
    assert sep, stage_partition
    return f"{repo}/uploads/{session_id}"


def uploads_partition(ctx: GcContext, session_id: str) -> str:
    """The metastore partition recording every object session `session_id` uploaded."""
    return uploads_of(ctx.stage_partition(session_id))


def staged_uploads(meta: MetaStore, partition: str) -> list[tuple[str, int | None]]:
    """(object key, size) of every upload recorded in an uploads partition."""
    return [(k.decode(), json.loads(v)) for k, v, _ in meta.scan(partition)]


def forget_uploads(meta: MetaStore, partition: str, keys: Iterable[str]) -> None:
    """Delete the upload records of `keys` (once registered as candidates). Only those: a
    straggling writer may record more meanwhile, which the next gc run then finds. A
    partition left empty is dropped (on the bucket metastore it would keep its head)."""
    items = [(k.encode(), None) for k in keys]
    for i in range(0, len(items), 1000):
        meta.set_many(partition, items[i : i + 1000])
    if items and not any(True for _ in meta.scan(partition, limit=1)):
        meta.drop_partition(partition)


def register_staged(
    ctx: GcContext,
    session_id: str,
    committed: str | None = None,
    born: Sequence[tuple[str, int]] = (),
) -> int:
    """Remember a finished session's staged fragments and recorded uploads as garbage
    candidates, before its records are dropped (abandon, commit cleanup), so an
    incremental gc finds them without listing: a run reads each fragment's index and
    registers the chunk objects it names, and the mark keeps whichever are still
    referenced. The upload records go once registered. `born`: the uploads its session
    record carries (`SessionRecord.uploads`), registered with them. Returns how many were
    new.

    The chunk objects the session's own commit `committed` refers to are left out: gc finds
    them through that commit once it is dropped or expired (`reach.committed_keeps`), and
    registering them would have every later run read them back only to drop them as live."""
    records = staged_fragments(ctx.meta, ctx.stage_partition(session_id))
    found, indexes = staged_candidates(ctx.objects, records) if records else ([], {})
    uploads = uploads_partition(ctx, session_id)
    uploaded = staged_uploads(ctx.meta, uploads)
    if not found and not uploaded and not born:
        return 0
    items = [*found, *uploaded, *born]
    chunks = [k for k, _ in items if k.startswith("chunks/")]
    if committed is not None and chunks:
        from zarrlake.vc.reach import committed_keeps

        try:
            kept = committed_keeps(ctx.objects, committed, chunks)
        except ZarrLakeError:  # unreadable (expired meanwhile): register everything
            kept = set()
        items = [(k, s) for k, s in items if k not in kept]
    if not items:  # the commit keeps all it uploaded: nothing to register, so the records
        # go with their partition, read just now (a record a straggler adds after that
        # read goes with it, as one added between the emptiness check and the drop would)
        if uploaded:
            ctx.meta.drop_partition(uploads)
        return 0
    state = GcState(ctx)
    new = state.add(state.known([k for k, _ in items]), items, indexes)
    forget_uploads(ctx.meta, uploads, [k for k, _ in uploaded])
    return new
