"""Sessions: transactions on a branch. Writes are staged in the metastore; reads see the
base commit plus the session's staged writes (those of every joined worker)."""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from zarrlake import faultpoints
from zarrlake.batching import GroupCommit
from zarrlake.commit import Change, CommitProtocol, CommitRequest
from zarrlake.diff import Diff, diff_staged
from zarrlake.errors import (
    CASFailedError,
    Conflict,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    SessionClosedError,
    SessionExpiredError,
    ZarrLakeError,
)
from zarrlake.format.refs import ChunkRef
from zarrlake.format.snapshot import SnapshotRoot, is_meta_key
from zarrlake.keys import KeyNamer
from zarrlake.metadoc import check_metadata
from zarrlake.names import check_key, check_prefix
from zarrlake.staging import Staging
from zarrlake.view import SnapshotView

if TYPE_CHECKING:
    import zarr

    from zarrlake.repo import Repo
    from zarrlake.store import SessionStore

DEFAULT_EXPIRY = timedelta(hours=24)
MAX_EXPIRY = timedelta(days=7)
STAGE_INLINE_MAX = 8192
"""Chunks up to this size are staged inside the metastore and packed into one object per
commit, instead of one object per chunk."""
ISOLATION_LEVELS = ("snapshot", "serializable")
CONFLICT_POLICIES = ("fail", "ours", "theirs")

OPEN, COMMITTING, COMMITTED, ABANDONED, EXPIRED = (
    "open",
    "committing",
    "committed",
    "abandoned",
    "expired",
)


def check_expiry(expires_in: object) -> timedelta:
    if not isinstance(expires_in, timedelta):
        raise InvalidInputError(f"expires_in must be a datetime.timedelta, not {expires_in!r}")
    if expires_in < timedelta(seconds=1) or expires_in > MAX_EXPIRY:
        raise InvalidInputError(
            f"session expiry must be between 1 second and 7 days, not {expires_in}"
        )
    return expires_in


def check_data(key: str, data: object) -> bytes:
    """Values written to a key must be bytes-like."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"data written to {key!r} must be bytes, not {type(data).__name__}")
    return bytes(data)


def check_byte_range(byte_range: object) -> tuple[int, int | None]:
    """A (start, end) byte range: 0 <= start, end None or >= start."""
    ok = isinstance(byte_range, tuple) and len(byte_range) == 2
    start, end = byte_range if ok else (None, None)  # type: ignore[misc]
    ok = ok and isinstance(start, int) and not isinstance(start, bool) and start >= 0
    ok = ok and (end is None or (isinstance(end, int) and not isinstance(end, bool)))
    if not ok or (end is not None and end < start):
        raise InvalidInputError(
            f"byte range must be (start, end) with 0 <= start <= end (or end None), "
            f"not {byte_range!r}"
        )
    return start, end  # type: ignore[return-value]


@dataclass(frozen=True)
class SessionRecord:
    id: str
    branch: str
    base: str
    created: float
    expires_at: float
    message: str | None
    author: str | None
    isolation: str
    status: str = OPEN
    commit: str | None = None  # the commit it became
    lease: float | None = None  # a committer that has not finished by then has died
    nonce: str = ""  # makes every stored version unique (lost-response detection)

    def encode(self) -> bytes:
        return json.dumps(asdict(replace(self, nonce=secrets.token_hex(4)))).encode()

    @classmethod
    def decode(cls, data: bytes) -> SessionRecord:
        doc = json.loads(data)
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})


class Session:
    """A transaction on a branch (writable), or a read-only view of one commit."""

    def __init__(
        self, repo: Repo, record: SessionRecord | None, commit_id: str, version: int | None = None
    ) -> None:
        self.repo = repo
        self._record = record
        self._version = version
        self._commit_id = commit_id
        self.writer = secrets.token_bytes(8)
        rec = repo.objects.commit(commit_id)
        root = repo.objects.read(SnapshotRoot, rec.snapshot)
        self.view = SnapshotView(repo.objects, root, rec.snapshot)
        self.staging = (
            Staging(repo.meta, repo.stage_partition(record.id), self.writer) if record else None
        )
        self._reads_recorded: set[str] = set()
        self._group: GroupCommit[Change] | None = None

    # identity -------------------------------------------------------------------------

    @property
    def id(self) -> str | None:
        return self._record.id if self._record else None

    @property
    def read_only(self) -> bool:
        return self._record is None

    @property
    def branch(self) -> str | None:
        return self._record.branch if self._record else None

    @property
    def base_commit(self) -> str:
        return self._commit_id

    @property
    def message(self) -> str | None:
        return self._record.message if self._record else None

    @property
    def author(self) -> str | None:
        return self._record.author if self._record else None

    @property
    def isolation(self) -> str:
        return self._record.isolation if self._record else "snapshot"

    @property
    def expires_at(self) -> datetime | None:
        return datetime.fromtimestamp(self._record.expires_at, UTC) if self._record else None

    @property
    def status(self) -> str:
        if self._record is None:
            return OPEN
        return self._load()[0].status

    def __repr__(self) -> str:
        if self._record is None:
            return f"<Session read-only at {self._commit_id[:12]}>"
        return f"<Session {self.id} on {self.branch!r} base {self._commit_id[:12]}>"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles to a handle that re-joins the same session (no data travels)."""
        from zarrlake.repo import _rejoin

        return (_rejoin, (self.repo.spec, self.id, self._commit_id))

    # zarr access ------------------------------------------------------------------------

    @property
    def store(self) -> SessionStore:
        from zarrlake.store import SessionStore

        return SessionStore(self, read_only=self.read_only)

    @property
    def root_group(self) -> zarr.Group:
        import zarr

        return zarr.open_group(self.store, mode="r" if self.read_only else "a")

    # record state -----------------------------------------------------------------------

    def _load(self) -> tuple[SessionRecord, int]:
        assert self._record is not None
        got = self.repo.meta.get(self.repo.sessions_partition, self._record.id.encode())
        if got is None:
            raise NotFoundError(f"session {self._record.id} no longer exists")
        rec = SessionRecord.decode(got[0])
        if rec.status == COMMITTING and rec.lease is not None and time.time() > rec.lease:
            rec, version = self._recover(rec, got[1])
            return rec, version
        return rec, got[1]

    def _recover(self, rec: SessionRecord, version: int) -> tuple[SessionRecord, int]:
        """A committer died mid-commit: finish the record by whether its commit landed."""
        landed = self._landed(rec)
        new = replace(rec, status=COMMITTED if landed else OPEN, commit=landed, lease=None)
        return self._swap(new, version)

    def _landed(self, rec: SessionRecord) -> str | None:
        """The commit this session made on its branch, if one landed (commits name their
        session, so no intent needs recording before the branch compare-and-swap)."""
        head = self.repo.refs.get("branch", rec.branch)
        if head is None:
            return None
        try:
            for cid, commit in self.repo.objects.history(head[0]):
                if cid == rec.base:
                    break
                if commit.session_id == rec.id:
                    return cid
        except ZarrLakeError:
            return None
        return None

    def _swap(self, new: SessionRecord, version: int) -> tuple[SessionRecord, int]:
        v = self.repo.meta.set_if(
            self.repo.sessions_partition, new.id.encode(), new.encode(), version
        )
        self._record, self._version = new, v
        return new, v

    def _check_writable(self, rec: SessionRecord, version: int) -> None:
        if rec.status == OPEN and time.time() > rec.expires_at:
            with contextlib.suppress(CASFailedError):
                self._swap(replace(rec, status=EXPIRED), version)
            raise SessionExpiredError(f"session {rec.id} expired at {self.expires_at}")
        if rec.status == EXPIRED:
            raise SessionExpiredError(f"session {rec.id} expired at {self.expires_at}")
        if rec.status != OPEN:
            raise SessionClosedError(f"session {rec.id} is {rec.status}; start a new session")

    def _require_writable(self) -> Staging:
        if self._record is None or self.staging is None:
            raise ReadOnlyError(
                "store was opened in read-only mode and does not support writing "
                f"(session at commit {self._commit_id[:12]} is read-only)"
            )
        return self.staging

    # reads ------------------------------------------------------------------------------

    def lookup(self, key: str) -> ChunkRef | None:
        """The reference `key` resolves to in this session, or None."""
        check_key(key)
        if self.staging is not None:
            staged, ref = self.staging.lookup(key)
            if staged:
                return ref
        return self.view.get(key)

    def read(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes | None:
        span = check_byte_range(byte_range) if byte_range is not None else None
        ref = self.lookup(key)
        self._track_read(key)
        if ref is None:
            return None
        data = self.repo.objects.read_ref(ref, f"key {key!r}")
        return data if span is None else data[span[0] : span[1]]

    def _track_read(self, key: str) -> None:
        if self.isolation == "serializable" and key not in self._reads_recorded:
            assert self.staging is not None
            self.staging.record_reads([key])
            self._reads_recorded.add(key)

    def exists(self, key: str) -> bool:
        return self.lookup(key) is not None

    def list_prefix(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        keys = set(self.view.keys(prefix))
        if self.staging is not None:
            for k, deleted in self.staging.keys(prefix):
                (keys.discard if deleted else keys.add)(k)
            if self.isolation == "serializable":
                self.staging.record_reads([], [prefix])
        return sorted(keys)

    def list_dir(self, prefix: str = "") -> list[str]:
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        check_prefix(prefix)
        if self.staging is None:
            return sorted(self.view.children(prefix))
        return sorted({k[len(prefix) :].split("/", 1)[0] for k in self.list_prefix(prefix)})

    # writes -----------------------------------------------------------------------------

    def write(self, key: str, data: bytes) -> None:
        self.stage([self.prepare(key, data)])

    def prepare(self, key: str, data: bytes) -> Change:
        """Check one write and upload its bytes if they are too big to stage inline; it takes
        effect once staged (`stage`)."""
        self._require_writable()
        return self._ref_for((check_key(key), check_data(key, data)))

    def stage(self, changes: list[Change]) -> None:
        """Stage prepared writes (durably, in one metastore transaction)."""
        self._stage(self._require_writable(), changes)

    def write_many(self, items: list[tuple[str, bytes]]) -> None:
        """Write several keys: big chunks are uploaded in parallel, then everything is staged
        in one metastore transaction."""
        staging = self._require_writable()
        checked = [(check_key(key), check_data(key, data)) for key, data in items]
        big = [i for i, (_, data) in enumerate(checked) if len(data) > STAGE_INLINE_MAX]
        uploaded = dict(
            zip(big, self.repo.objects.map(self._ref_for, [checked[i] for i in big]), strict=True)
        )
        refs = [uploaded[i] if i in uploaded else self._ref_for(c) for i, c in enumerate(checked)]
        self._stage(staging, refs)

    def _ref_for(self, item: tuple[str, bytes]) -> Change:
        key, data = item
        if is_meta_key(key):
            check_metadata(key, data)
            return key, ChunkRef.inline(bytes(data))
        if len(data) <= STAGE_INLINE_MAX:
            return key, ChunkRef.inline(bytes(data))
        ref = self.repo.objects.put_chunk(bytes(data))
        faultpoints.reached("after_chunk_upload")
        return key, ref

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: list[str]) -> None:
        """Delete the keys that exist; deleting a missing key is not an error."""
        staging = self._require_writable()
        present = [k for k in keys if self.lookup(k) is not None]
        if present:
            self._stage(staging, [(k, None) for k in present])

    def _stage(self, staging: Staging, items: list[Change]) -> None:
        """Stage (concurrent writers of this handle share one metastore transaction)."""
        assert self._record is not None
        if self._record.status != OPEN:
            self._check_writable(*self._load())
        if self._group is None:
            self._group = GroupCommit(self._stage_batch)
        self._group.submit(items)

    def _stage_batch(self, items: list[Change]) -> None:
        """Stage, then re-check the status: a write racing the commit's seal either is seen
        by the committer (sealed after our record) or raises here — never acknowledged and
        lost."""
        assert self.staging is not None
        self.staging.stage_many(items)
        faultpoints.reached("after_staging")
        self._check_writable(*self._load())

    # transaction ------------------------------------------------------------------------

    def update_expiration(self, expires_in: timedelta) -> None:
        self._require_writable()
        check_expiry(expires_in)
        while True:
            rec, version = self._load()
            self._check_writable(rec, version)
            try:
                self._swap(
                    replace(rec, expires_at=time.time() + expires_in.total_seconds()), version
                )
                return
            except CASFailedError:
                continue

    def staged_changes(self) -> list[Change]:
        """Every staged change of every worker; ConflictError if two workers staged
        different bytes for one key."""
        changes, clashes = self._require_writable().all()
        if clashes:
            namer = KeyNamer(
                self.view.root.meta,
                {k: r.data for k, r in changes if is_meta_key(k) and r is not None and r.data},
            )
            conflicts = []
            for key in clashes:
                node, coords = namer.name(key)
                conflicts.append(
                    Conflict(
                        node,
                        "writers",
                        [coords] if coords is not None else None,
                        f"two workers of this session staged different bytes for {key!r}",
                    )
                )
            raise ConflictError(conflicts)
        return changes

    def changes(self) -> Diff:
        """The uncommitted changes of this session (of all its workers)."""
        return diff_staged(self.view.root.meta, self.view.get, self.staged_changes())

    def commit(self, message: str | None = None, *, on_conflict: str = "fail") -> str:
        """Make the session's changes one commit on its branch; returns the commit id."""
        staging = self._require_writable()
        if on_conflict not in CONFLICT_POLICIES:
            raise InvalidInputError(
                f"on_conflict must be one of {', '.join(CONFLICT_POLICIES)}, not {on_conflict!r}"
            )
        rec, version = self._load()
        self._check_writable(rec, version)
        timeout = self.repo.commit_timeout
        try:
            rec, version = self._swap(
                replace(rec, status=COMMITTING, lease=time.time() + timeout + 60), version
            )
        except CASFailedError:
            self._check_writable(*self._load())
            raise SessionClosedError(f"session {rec.id} is being committed elsewhere") from None
        faultpoints.reached("after_seal")
        try:
            changes = self.staged_changes()
            reads = staging.reads() if rec.isolation == "serializable" else None
            request = CommitRequest(
                branch=rec.branch,
                base=rec.base,
                changes=changes,
                message=message if message is not None else (rec.message or ""),
                author=rec.author,
                session_id=rec.id,
                on_conflict=on_conflict,
                reads=reads,
                timeout=timeout,
            )

            commit_id = CommitProtocol(self.repo.objects, self.repo.refs).run(
                request, lambda _: faultpoints.reached("before_branch_cas")
            )
            faultpoints.reached("after_branch_cas")
        except BaseException:
            landed = None if isinstance(sys.exc_info()[1], ConflictError) else self._landed(rec)
            if landed is None:
                self._swap(replace(rec, status=OPEN, lease=None), version)
                raise
            commit_id = landed  # the branch holds our commit; the error came after it landed
        self._swap(replace(rec, status=COMMITTED, commit=commit_id, lease=None), version)
        faultpoints.reached("after_session_committed")
        # The staged records are dead now (the session is committed and refuses writes);
        # dropping them need not delay the caller.
        self.repo.objects.pool.submit(staging.clear)
        return commit_id

    def abandon(self) -> None:
        """Discard the session's staged changes; the branch is untouched."""
        staging = self._require_writable()
        while True:
            rec, version = self._load()
            if rec.status in (ABANDONED,):
                return
            if rec.status in (COMMITTED, COMMITTING):
                raise SessionClosedError(f"session {rec.id} is {rec.status}; cannot abandon it")
            try:
                self._swap(replace(rec, status=ABANDONED), version)
                break
            except CASFailedError:
                continue
        staging.clear()


def new_record(
    branch: str,
    base: str,
    message: str | None,
    author: str | None,
    expires_in: timedelta,
    isolation: str,
) -> SessionRecord:
    if isolation not in ISOLATION_LEVELS:
        raise InvalidInputError(
            f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {isolation!r}"
        )
    check_expiry(expires_in)
    now = time.time()
    return SessionRecord(
        id=secrets.token_hex(10),
        branch=branch,
        base=base,
        created=now,
        expires_at=now + expires_in.total_seconds(),
        message=message,
        author=author,
        isolation=isolation,
    )
