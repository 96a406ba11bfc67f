"""Session records: one per session in the `<repo_id>/sessions` partition (or spread over
its shards, see `SessionRecords`), changed only by compare-and-swap through
`SessionRecords.update`, with time read from an injected clock."""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import cast

from zarrlake._util import forksafe, runtime
from zarrlake._util.retry import RetryPolicy, backoff
from zarrlake.errors import (
    REPORT_BUG,
    CASFailedError,
    InvalidInputError,
    SessionClosedError,
    SessionExpiredError,
    SessionNotFoundError,
    ZarrLakeError,
)
from zarrlake.metastore.base import Item, MetaStore

Clock = Callable[[], float]
"""Seconds since the epoch (time.time); tests inject their own to move time."""

PENDING = ""
"""The base of a session record written before its branch's head was read (releases before
the record was stored lazily wrote one while the session was being created): `expire` then
keeps the branch's whole history. Today's records name their base (see txn/birth.py)."""
MAX_EXPIRY = timedelta(days=7)
UPDATE_POLICY = RetryPolicy(attempts=100, base_delay=0.0005, max_delay=0.05)
"""How `SessionRecords.update` retries a lost compare-and-swap."""


class Status(StrEnum):
    """The life of a session: open, committing (sealed under a lease), then one of the final
    states."""

    OPEN = "open"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABANDONED = "abandoned"
    EXPIRED = "expired"
    ABORTED = "aborted"
    """A commit that could not be finished (its committer outlived its lease, or died
    where it cannot be told whether its commit landed): final, except that it becomes
    committed if its commit turns up on the branch (looked for whenever the record is read)."""
    READ_ONLY = "read-only"
    """A read-only view of one commit (`Repo.readonly_session`): it has no record, and never
    writes or commits. Only `Session.state` says it; no stored record holds it."""


class Isolation(StrEnum):
    """How a commit checks for conflicts: written keys only (snapshot), or read ones too
    (serializable)."""

    SNAPSHOT = "snapshot"
    SERIALIZABLE = "serializable"


def check_expiry(expires_in: object) -> timedelta:
    """`expires_in` if it is a timedelta between 1 second and MAX_EXPIRY; else InvalidInputError."""
    if not isinstance(expires_in, timedelta):
        raise InvalidInputError(f"expires_in must be a datetime.timedelta, not {expires_in!r}")
    if expires_in < timedelta(seconds=1) or expires_in > MAX_EXPIRY:
        raise InvalidInputError(
            f"session expiry must be between 1 second and 7 days, not {expires_in}"
        )
    return expires_in


def check_isolation(isolation: object) -> Isolation:
    """The Isolation named by `isolation`; InvalidInputError for an unknown level."""
    with contextlib.suppress(ValueError):
        if isinstance(isolation, str):
            return Isolation(isolation)
    levels = ", ".join(Isolation)
    raise InvalidInputError(f"isolation must be one of {levels}, not {isolation!r}")


def as_datetime(ts: float | None) -> datetime | None:
    """A UTC datetime from seconds since the epoch; None stays None."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


def _renamed(old: str, new: str) -> None:
    """Warn that attribute `old` is a deprecated alias of `new` (kept so old code runs)."""
    warnings.warn(f"{old} is deprecated: use .{new}", DeprecationWarning, stacklevel=3)


@dataclass(frozen=True)
class SessionInfo:
    """A session as users see it (times are timezone-aware datetimes)."""

    id: str
    branch: str
    base_commit: str
    """The commit the session reads from (as `Session.base_commit`)."""
    state: str
    """open, committing, committed, aborted, abandoned or expired (as `Session.state`)."""
    created: datetime
    expires_at: datetime
    message: str | None
    author: str | None
    isolation: str
    committed_as: str | None
    """The commit the session became, once committed (as `Session.committed_as`)."""
    since: datetime | None = None
    """When the session entered its state (committing, aborted, committed), if recorded."""
    committer: tuple[str, int] | None = None
    """(host, pid) of the process committing it (or that last tried to)."""
    note: str | None = None
    """Why the session is aborted, or other news about its state."""

    @property
    def status(self) -> str:
        """Deprecated: `state` (the word pull requests use too)."""
        _renamed("SessionInfo.status", "state")
        return self.state

    @property
    def base(self) -> str:
        """Deprecated: `base_commit` (the name Session uses too)."""
        _renamed("SessionInfo.base", "base_commit")
        return self.base_commit

    @property
    def commit(self) -> str | None:
        """Deprecated: `committed_as` (the name Session uses too)."""
        _renamed("SessionInfo.commit", "committed_as")
        return self.committed_as

    def describe(self) -> str:
        """The state in a few words: "committing since ... by pid 12@host" and the like."""
        out = self.state
        if self.state == Status.COMMITTED and self.committed_as:
            out += f" as {self.committed_as[:12]}"
        if self.since is not None:
            out += f" since {self.since:%Y-%m-%d %H:%M:%S} UTC"
        if self.committer is not None and self.state in (Status.COMMITTING, Status.ABORTED):
            out += f" by pid {self.committer[1]}@{self.committer[0]}"
        return out


@dataclass(frozen=True)
class SessionRecord:
    """The stored state of one session. Times are epoch seconds (see the `*_time` views)."""

    id: str
    branch: str
    base: str
    created: float
    expires_at: float
    message: str | None
    author: str | None
    isolation: str
    status: str = Status.OPEN
    commit: str | None = None  # the commit it became
    lease: float | None = None  # a committer that has not finished by then has died
    nonce: str = ""  # makes every stored version unique (lost-response detection)
    since: float | None = None  # when the status began (sealed, aborted, committed)
    committer: str | None = None  # runtime.identity() of the process that sealed it
    seal: str | None = None  # random token of one seal: the committer's fence on its record
    attempts: tuple[str, ...] = ()  # commit ids this seal may move the branch to, each
    # recorded (by compare-and-swap on this record) before that branch compare-and-swap
    note: str | None = None  # why it was aborted
    uploads: tuple[tuple[str, int], ...] = ()
    """(object key, size) of the objects the session's first write uploads, carried by the
    record as it is first stored on a remote metastore (txn/birth.py): gc counts them
    with the session's uploads partition, which holds them too once that write returns.
    Cleared by the creator's seal once it knows the copy landed, or by gc once it has
    registered them for a finished session."""

    def encode(self) -> bytes:
        """The record as stored (JSON), with a fresh nonce so every update changes its bytes."""
        doc = {name: getattr(self, name) for name in _FIELDS}  # asdict deep-copies: slow
        if not self.uploads:
            del doc["uploads"]  # (records without them read as before by older versions)
        doc["nonce"] = f"{random.getrandbits(32):08x}"  # (the kernel's entropy: a syscall)
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes) -> SessionRecord:
        """A stored record; fields unknown to this version are ignored."""
        doc = json.loads(data)
        rec = cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})
        if rec.attempts:
            rec = replace(rec, attempts=tuple(rec.attempts))
        if rec.uploads:
            rec = replace(rec, uploads=tuple((k, n) for k, n in rec.uploads))
        return rec

    @property
    def created_time(self) -> datetime:
        """When the session was created, as a UTC datetime."""
        return datetime.fromtimestamp(self.created, UTC)

    @property
    def expires_time(self) -> datetime:
        """When the session expires unless extended, as a UTC datetime."""
        return datetime.fromtimestamp(self.expires_at, UTC)

    def info(self, now: float) -> SessionInfo:
        """The user's view at `now`: an open session past its expiry shows as expired."""
        expired = self.status == Status.OPEN and now > self.expires_at
        return SessionInfo(
            self.id,
            self.branch,
            self.base,
            str(Status.EXPIRED if expired else self.status),
            self.created_time,
            self.expires_time,
            self.message,
            self.author,
            self.isolation,
            self.commit,
            as_datetime(self.since),
            runtime.identity_pid(self.committer) if self.committer else None,
            self.note,
        )

    def committer_text(self) -> str:
        """The committing process as "pid 123 on host" (or "an unknown process")."""
        if not self.committer:
            return "a process of an earlier version (not recorded)"
        host, pid = runtime.identity_pid(self.committer)
        return f"pid {pid} on {host}"

    def since_text(self) -> str:
        """When the status began, for messages."""
        return "an unrecorded time" if self.since is None else f"{as_datetime(self.since)}"

    def may_land(self, now: float) -> bool:
        """Whether a commit of this session may still land: it is committing, or aborted
        while its committer may still be between recording an attempt and moving the
        branch (until the session's expiry)."""
        if self.status == Status.COMMITTING:
            return True
        return self.status == Status.ABORTED and bool(self.attempts) and now <= self.expires_at

    def check_writable(self, now: float) -> None:
        """Raise unless the session can still write and commit at `now`."""
        if self.status == Status.EXPIRED or (self.status == Status.OPEN and now > self.expires_at):
            raise SessionExpiredError(
                f"session {self.id} expired at {self.expires_time}; start a new session"
            )
        if self.status == Status.COMMITTING:
            lease = "an unrecorded time" if self.lease is None else str(as_datetime(self.lease))
            raise SessionClosedError(
                f"session {self.id} is being committed since {self.since_text()} by "
                f"{self.committer_text()}; its writes are closed. If that commit fails the "
                "session opens again; if that process is gone without landing it, the "
                "session opens again as soon as this is noticed (on the next read of it); "
                f"otherwise its lease ends at {lease}, after which the session is aborted "
                "unless its commit landed"
                "; wait for that commit, or start a new session"
            )
        if self.status == Status.ABORTED:
            raise SessionClosedError(
                f"session {self.id} was aborted at {self.since_text()}: {self.note or ''} "
                "Nothing more can be written or committed in it (a commit of it may yet show "
                "up on the branch if that process resumes, and the session is then committed). "
                "Start a new session and write again what was flushed to this one"
            )
        if self.status != Status.OPEN:
            raise SessionClosedError(f"session {self.id} is {self.status}; start a new session")


_FIELDS = tuple(f.name for f in fields(SessionRecord))


_LATER = forksafe.PerProcess(
    lambda: ThreadPoolExecutor(1, thread_name_prefix="zarrlake-record-later")
)
"""Runs the record writes a process leaves in the background (`SessionRecords.later`)."""


class Later:
    """A record write left to the background, run by whichever comes to it first: the
    pool, or a caller that needs it done (`result`), which runs it in place rather than
    wait for a pool that has not started it (under the simulator, one that cannot)."""

    def __init__(self, write: Callable[[SessionRecords], object], records: SessionRecords):
        self.write = write
        self.records = records
        self.pid = os.getpid()
        self._claim = threading.Lock()
        self._done = threading.Event()
        self._outcome: tuple[object, Exception | None] | None = None
        if not records.meta.remote:  # a handoff to a thread costs more than the write
            self.run()
            return
        pool: Executor = runtime.current().executor or _LATER.get()
        pool.submit(self.run)

    def run(self) -> None:
        """Do the write, unless it was begun elsewhere."""
        if not self._claim.acquire(blocking=False):
            return
        try:
            self._outcome = (self.write(self.records), None)
        except Exception as e:
            self._outcome = (None, e)
        except BaseException as e:  # interrupted: whoever waits hears of it
            self._outcome = (None, ZarrLakeError(f"a session record write was interrupted: {e!r}"))
            raise
        finally:
            self._done.set()

    def result(self) -> object:
        """What the write returned (raising what it raised), once it is done; None in a
        forked child for a write its parent had not done (the parent's to do)."""
        if self._outcome is None and self.pid != os.getpid():
            return None
        self.run()
        while self._outcome is None:  # begun elsewhere: wait for it
            if runtime.current() is runtime.REAL:
                self._done.wait()
            else:  # a simulated thread waits on the simulated clock
                runtime.sleep(0.001)
        value, error = self._outcome
        if error is not None:
            raise error
        return value

    def done(self) -> bool:
        """Whether the write is done (or failed)."""
        return self._outcome is not None


SHARDS = 16
"""Shards of the session records of a repository created on the bucket metastore (one per
first hex digit of the session id)."""
_HEX = "0123456789abcdef"
SCAN_BATCH = 1000
"""Records of each shard a scan reads at once before it reads the shards' rest in turn."""


_DEALT = [0, 0]  # (pid, the next shard to deal out)
_DEALING = threading.Lock()


def _deal_shard() -> str:
    """A shard for a new writer (a thread of one handle's records): in turn from the
    process id's, so a process's writers have shards of their own up to 16 of them, and
    so do processes started one after another on one host (a pool's workers). On the
    bucket metastore a shard is one head object that every write replaces: writers on
    shards of their own do not refuse each other's conditional writes (4 processes
    committing at once: 0.3-0.7 refused writes a commit on a random shard per session, 0
    on shards of their own)."""
    with _DEALING:
        if _DEALT[0] != os.getpid():
            _DEALT[:] = [os.getpid(), os.getpid() % SHARDS]
        turn = _DEALT[1]
        _DEALT[1] = turn + 1
    return _HEX[turn % SHARDS]


class SessionRecords:
    """The session records of one repository, with one read-modify-CAS helper (`update`).

    With `shards` (16), a record lives in the partition `<partition>/<first digit of its
    id>` instead of `<partition>` itself: on the bucket metastore a partition is one object
    that every write replaces, and writers of different sessions would otherwise queue on
    it. Session ids are random hex past a first digit dealt to each writing thread
    (`_deal_shard`), so the shards split the records by writer, and in key order: a scan
    reads the shards at once (`together`) and joins them in turn.

    A write this process need not wait for (a commit's finish) can run in the background
    (`later`: on a remote metastore; in place on an embedded one); every other call waits
    for it first, so the process reads its own writes and never races them."""

    def __init__(
        self,
        meta: MetaStore,
        partition: str,
        clock: Clock = runtime.now,
        shards: int = 1,
        together: Callable[..., list[object]] | None = None,
    ) -> None:
        if shards not in (1, SHARDS):
            raise InvalidInputError(
                f"session records are kept in 1 or {SHARDS} shards, not {shards}; {REPORT_BUG}"
            )
        self.meta = meta
        self.partition = partition
        self.clock = clock
        self.shards = shards
        self.together = together
        self._later: list[Later] = []
        self._lock = threading.Lock()
        self._shard = threading.local()  # (pid, the shard dealt to this thread)

    @property
    def partitions(self) -> list[str]:
        """Every partition holding records, in key order."""
        if self.shards == 1:
            return [self.partition]
        return [f"{self.partition}/{c}" for c in _HEX]

    def partition_of(self, session_id: str) -> str:
        """The partition holding the record of `session_id` (or `prefix` of ids)."""
        if self.shards == 1:
            return self.partition
        first = session_id[:1]
        if not first or first not in _HEX:
            raise InvalidInputError(
                f"invalid session id {session_id!r}; run `zarrlake sessions list` for the ids"
            )
        return f"{self.partition}/{first}"

    def later(self, write: Callable[[SessionRecords], object]) -> Later:
        """Run `write` in the background, given these records without the wait (it would
        wait for itself); every later call waits for it."""
        direct = SessionRecords(self.meta, self.partition, self.clock, self.shards, self.together)
        with self._lock:
            task = Later(write, direct)
            self._later.append(task)
        return task

    def settle(self) -> None:
        """Wait for this process's background writes (`later`) to be done."""
        if not self._later:
            return
        with self._lock:
            pending = list(self._later)
        for task in pending:
            if task.pid == os.getpid():  # a forked child has not the thread to wait for
                with contextlib.suppress(Exception):  # the write's to report, not ours
                    task.result()
        with self._lock:
            self._later = [t for t in self._later if t.pid == os.getpid() and not t.done()]

    def draft(
        self,
        branch: str,
        base: str,
        message: str | None,
        author: str | None,
        expires_in: timedelta,
        isolation: str,
    ) -> SessionRecord:
        """A new open session record, not stored yet (see `store`)."""
        level = check_isolation(isolation)
        check_expiry(expires_in)
        now = self.clock()
        return SessionRecord(
            id=self._new_id(),
            branch=branch,
            base=base,
            created=now,
            expires_at=now + expires_in.total_seconds(),
            message=message,
            author=author,
            isolation=str(level),
        )

    def _new_id(self) -> str:
        """A random session id; with shards, its first digit is the shard dealt to the
        calling thread (`_deal_shard`), so a writer's records keep to the shard whose head
        its process last wrote, and storing one is a single request unless another
        process's writer shares it."""
        drawn = secrets.token_hex(10)
        if self.shards == 1 or runtime.current() is not runtime.REAL:
            return drawn  # (the simulator draws every id from its own stream)
        pid, shard = getattr(self._shard, "dealt", (None, ""))
        if pid != os.getpid():
            shard = _deal_shard()
            self._shard.dealt = (os.getpid(), shard)
        return shard + drawn[1:]

    def store(self, rec: SessionRecord) -> int:
        """Store a new session record (none may exist under its id); returns its version.
        Stored again after a failure whose write landed (a lost reply), it is found as it
        was written and its version returned."""
        self.settle()
        value = rec.encode()
        try:
            return self.meta.set_if(self.partition_of(rec.id), rec.id.encode(), value, None)
        except CASFailedError:
            got = self._get(rec.id)
            if got is not None and got[0] == value:
                return got[1]
            raise

    def forget(self, session_id: str) -> None:
        """Delete the record of a session whose creation failed (nobody knows its id)."""
        self.settle()
        self.meta.delete(self.partition_of(session_id), session_id.encode())

    def get(self, session_id: str) -> tuple[SessionRecord, int]:
        """(record, version) of session `session_id`; NotFoundError when there is none."""
        self.settle()
        got = self._get(session_id)
        if got is None:
            raise SessionNotFoundError(
                f"no session {session_id!r}; run `zarrlake sessions list` to see the open ones"
            )
        return SessionRecord.decode(got[0]), got[1]

    def swap(self, new: SessionRecord, version: int) -> int:
        """Store `new` if the record is still at `version` (CASFailedError otherwise)."""
        self.settle()
        return self.meta.set_if(self.partition_of(new.id), new.id.encode(), new.encode(), version)

    def update(
        self, session_id: str, change: Callable[[SessionRecord], SessionRecord | None]
    ) -> tuple[SessionRecord, int]:
        """Apply `change` to the current record until the compare-and-swap wins (bounded,
        with jittered backoff). `change` may raise to refuse, or return None to keep the
        record as it is."""
        for _ in backoff(UPDATE_POLICY):  # (`get` waits for the background writes)
            rec, version = self.get(session_id)
            new = change(rec)
            if new is None:
                return rec, version
            try:
                return new, self.swap(new, version)
            except CASFailedError:
                pass
        raise ZarrLakeError(f"session {session_id}: record kept changing; try again")

    def scan(self, prefix: str = "") -> Iterator[SessionRecord]:
        """The records whose session ids start with `prefix`, in id order."""
        self.settle()
        if self.shards == 1 or prefix:
            if not self._may_exist(prefix):
                return
            partition = self.partition_of(prefix) if prefix else self.partition
            for _, value, _ in self.meta.scan(partition, prefix=prefix.encode()):
                yield SessionRecord.decode(value)
            return
        # The first batch of every shard at once (one round trip on a remote metastore),
        # the rest of a shard that has more as it is reached: memory stays bounded.
        reads = [lambda p=p: list(self.meta.scan(p, limit=SCAN_BATCH)) for p in self.partitions]
        firsts = self.together(*reads) if self.together else [r() for r in reads]
        for partition, first in zip(self.partitions, firsts, strict=True):
            if isinstance(first, BaseException):
                raise first
            items = cast(list[Item], first)
            for _, value, _ in items:
                yield SessionRecord.decode(value)
            if len(items) == SCAN_BATCH:
                for _, value, _ in self.meta.scan(partition, start=items[-1][0] + b"\0"):
                    yield SessionRecord.decode(value)

    def _get(self, session_id: str) -> tuple[bytes, int] | None:
        if self.shards > 1 and not (session_id and self._may_exist(session_id)):
            return None  # no record can have this id
        return self.meta.get(self.partition_of(session_id), session_id.encode())

    def _may_exist(self, prefix: str) -> bool:
        """Whether ids starting with `prefix` can have records (sharded: hex ids only)."""
        return self.shards == 1 or not prefix or prefix[0] in _HEX

    def list_open(self, branch: str | None = None) -> list[SessionRecord]:
        """Open, unexpired sessions (optionally of one branch), oldest first."""
        now = self.clock()
        out = [
            rec
            for rec in self.scan()
            if rec.status == Status.OPEN and rec.expires_at > now and branch in (None, rec.branch)
        ]
        return sorted(out, key=lambda r: r.created)

    def list_current(self, branch: str | None = None) -> list[SessionRecord]:
        """Sessions not yet finished or recently given up (open and unexpired, committing,
        or aborted and not past their expiry), optionally of one branch, oldest first."""
        now = self.clock()
        out = [
            rec
            for rec in self.scan()
            if branch in (None, rec.branch)
            and (
                rec.status == Status.COMMITTING
                or (rec.status in (Status.OPEN, Status.ABORTED) and rec.expires_at > now)
            )
        ]
        return sorted(out, key=lambda r: r.created)

    def find(self, prefix: str) -> SessionRecord:
        """The record whose id is `prefix` or starts with it (unique)."""
        self.settle()
        if not isinstance(prefix, str) or not prefix or len(prefix) > 64:
            raise InvalidInputError(
                f"invalid session id {prefix!r}; run `zarrlake sessions list` for the ids"
            )
        got = self._get(prefix)
        if got is not None:
            return SessionRecord.decode(got[0])
        if len(prefix) >= 4:
            found = list(self.scan(prefix))
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                raise InvalidInputError(
                    f"session id prefix {prefix!r} is ambiguous; give more characters of the id"
                )
        raise SessionNotFoundError(
            f"no session {prefix!r}; run `zarrlake sessions list` to see the open ones"
        )
