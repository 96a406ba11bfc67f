"""Session records: one per session in the `<repo_id>/sessions` partition, changed only by
compare-and-swap through `SessionRecords.update`, with time read from an injected clock."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from zarrlake import runtime
from zarrlake.errors import (
    CASFailedError,
    InvalidInputError,
    NotFoundError,
    SessionClosedError,
    SessionExpiredError,
    ZarrLakeError,
)
from zarrlake.metastore.base import MetaStore
from zarrlake.retry import RetryPolicy, backoff

Clock = Callable[[], float]
"""Seconds since the epoch (time.time); tests inject their own to move time."""

DEFAULT_EXPIRY = timedelta(hours=24)
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
    try:
        return Isolation(isolation)
    except ValueError:
        levels = ", ".join(Isolation)
        raise InvalidInputError(f"isolation must be one of {levels}, not {isolation!r}") from None


def as_datetime(ts: float | None) -> datetime | None:
    """A UTC datetime from seconds since the epoch; None stays None."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


@dataclass(frozen=True)
class SessionInfo:
    """A session as users see it (times are timezone-aware datetimes)."""

    id: str
    branch: str
    base: str
    status: str
    created: datetime
    expires_at: datetime
    message: str | None
    author: str | None
    isolation: str
    commit: str | None


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

    def encode(self) -> bytes:
        """The record as stored (JSON), with a fresh nonce so every update changes its bytes."""
        return json.dumps(asdict(replace(self, nonce=secrets.token_hex(4)))).encode()

    @classmethod
    def decode(cls, data: bytes) -> SessionRecord:
        """A stored record; fields unknown to this version are ignored."""
        doc = json.loads(data)
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})

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
        )

    def check_writable(self, now: float) -> None:
        """Raise unless the session can still write and commit at `now`."""
        if self.status == Status.EXPIRED or (self.status == Status.OPEN and now > self.expires_at):
            raise SessionExpiredError(f"session {self.id} expired at {self.expires_time}")
        if self.status != Status.OPEN:
            raise SessionClosedError(f"session {self.id} is {self.status}; start a new session")


class SessionRecords:
    """The session records of one repository, with one read-modify-CAS helper (`update`)."""

    def __init__(self, meta: MetaStore, partition: str, clock: Clock = runtime.now) -> None:
        self.meta = meta
        self.partition = partition
        self.clock = clock

    def new(
        self,
        branch: str,
        base: str,
        message: str | None,
        author: str | None,
        expires_in: timedelta,
        isolation: str,
    ) -> tuple[SessionRecord, int]:
        """Store a new open session record; returns it with its version."""
        level = check_isolation(isolation)
        check_expiry(expires_in)
        now = self.clock()
        rec = SessionRecord(
            id=secrets.token_hex(10),
            branch=branch,
            base=base,
            created=now,
            expires_at=now + expires_in.total_seconds(),
            message=message,
            author=author,
            isolation=str(level),
        )
        return rec, self.meta.set_if(self.partition, rec.id.encode(), rec.encode(), None)

    def get(self, session_id: str) -> tuple[SessionRecord, int]:
        """(record, version) of session `session_id`; NotFoundError when there is none."""
        got = self.meta.get(self.partition, session_id.encode())
        if got is None:
            raise NotFoundError(f"no session {session_id!r}")
        return SessionRecord.decode(got[0]), got[1]

    def swap(self, new: SessionRecord, version: int) -> int:
        """Store `new` if the record is still at `version` (CASFailedError otherwise)."""
        return self.meta.set_if(self.partition, new.id.encode(), new.encode(), version)

    def update(
        self, session_id: str, change: Callable[[SessionRecord], SessionRecord | None]
    ) -> tuple[SessionRecord, int]:
        """Apply `change` to the current record until the compare-and-swap wins (bounded,
        with jittered backoff). `change` may raise to refuse, or return None to keep the
        record as it is."""
        for _ in backoff(UPDATE_POLICY):
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
        """The records whose session ids start with `prefix`."""
        for _, value, _ in self.meta.scan(self.partition, prefix=prefix.encode()):
            yield SessionRecord.decode(value)

    def list_open(self, branch: str | None = None) -> list[SessionRecord]:
        """Open, unexpired sessions (optionally of one branch), oldest first."""
        now = self.clock()
        out = [
            rec
            for rec in self.scan()
            if rec.status == Status.OPEN and rec.expires_at > now and branch in (None, rec.branch)
        ]
        return sorted(out, key=lambda r: r.created)

    def find(self, prefix: str) -> SessionRecord:
        """The record whose id is `prefix` or starts with it (unique)."""
        if not isinstance(prefix, str) or not prefix or len(prefix) > 64:
            raise InvalidInputError(f"invalid session id {prefix!r}")
        got = self.meta.get(self.partition, prefix.encode())
        if got is not None:
            return SessionRecord.decode(got[0])
        if len(prefix) >= 4:
            found = list(self.scan(prefix))
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                raise InvalidInputError(f"session id prefix {prefix!r} is ambiguous")
        raise NotFoundError(f"no session {prefix!r}")
