"""Repositories: where the objects and the metastore are, refs, history, sessions."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The embedded default's backends load with the package, not inside the first open.
import zarrlake.metastore.sqlite
import zarrlake.storage.obstore  # noqa: F401
from zarrlake import metastore as metastores
from zarrlake import storage as storages
from zarrlake.diff import Diff, diff_snapshots
from zarrlake.errors import (
    AlreadyExistsError,
    InvalidInputError,
    NotFoundError,
    ZarrLakeError,
)
from zarrlake.format.changes import ChangeSet
from zarrlake.format.commit import CommitRecord
from zarrlake.format.envelope import ID_LENGTH
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.metastore.base import MetaStore
from zarrlake.metastore.retrying import RetryingMetaStore
from zarrlake.names import check_ref_name
from zarrlake.objects import Objects
from zarrlake.refs import BRANCH, TAG, Refs
from zarrlake.session import (
    DEFAULT_EXPIRY,
    OPEN,
    Session,
    SessionRecord,
    new_record,
)
from zarrlake.storage.base import ObjectStore
from zarrlake.storage.retrying import RetryingObjectStore

if TYPE_CHECKING:
    import zarr

    from zarrlake.store import SessionStore

CONFIG_KEY = "zarrlake.json"
FORMAT = 1
INITIAL_MESSAGE = "Repository initialized"


@dataclass(frozen=True)
class Commit:
    """One commit of the history, as users see it."""

    id: str
    parent_ids: tuple[str, ...]
    message: str
    author: str | None
    timestamp: datetime
    session_id: str | None

    @classmethod
    def from_record(cls, cid: str, rec: CommitRecord) -> Commit:
        return cls(cid, rec.parents, rec.message, rec.author, rec.time, rec.session_id)


@dataclass(frozen=True)
class RepoSpec:
    """Everything needed to open the same repository from another process or machine."""

    location: str
    metastore: str
    storage_options: tuple[tuple[str, Any], ...] = ()


def _resolve_spec(
    location: str | os.PathLike, metastore: str | None, storage_options: dict | None
) -> RepoSpec:
    if not isinstance(location, str | os.PathLike) or not str(location):
        raise InvalidInputError(f"repository location must be a path or URL, not {location!r}")
    loc = str(location)
    opts = tuple(sorted((storage_options or {}).items()))
    if loc.startswith("memory://"):
        return RepoSpec(loc, metastore or loc, opts)
    if "://" in loc and not loc.startswith("file://"):
        if metastore is None:
            raise InvalidInputError(
                f"a repository at {loc} needs a metastore URL (metastore='postgresql://...' "
                "or 'sqlite:///path')"
            )
        return RepoSpec(loc, metastore, opts)
    path = Path(loc.removeprefix("file://")).expanduser().absolute()
    return RepoSpec(str(path), metastore or f"sqlite:///{path}/metastore.sqlite", opts)


class Repo:
    """A zarrlake repository."""

    commit_timeout: float = 60.0

    def __init__(self, spec: RepoSpec, store: ObjectStore, meta: MetaStore, repo_id: str) -> None:
        self.spec = spec
        self.blobs = store
        self.meta = meta
        self.repo_id = repo_id
        self.objects = Objects(store)
        self.refs_partition = f"{repo_id}/refs"
        self.sessions_partition = f"{repo_id}/sessions"
        self.refs = Refs(meta, self.refs_partition)
        self._session: Session | None = None

    def stage_partition(self, session_id: str) -> str:
        return f"{self.repo_id}/stage/{session_id}"

    def __repr__(self) -> str:
        return f"<zarrlake.Repo {self.spec.location}>"

    # opening ------------------------------------------------------------------------------

    @staticmethod
    def _connect(spec: RepoSpec) -> tuple[ObjectStore, MetaStore]:
        """Open the object store and metastore, each behind a retrying wrapper.

        Testing facility: when the environment variable ZARRLAKE_FAULTS is set, e.g.
        ZARRLAKE_FAULTS="seed=1,error_rate=0.05,lost_response_rate=0.05,latency=0", both raw
        backends are wrapped in the fault-injecting wrappers inside the retrying ones
        (Retrying(Faulty(raw))), so a repository opened in another process sees transient
        errors, lost write responses and latency. The metastore's wrapper gets seed + 1.
        """
        if spec.location.startswith("/"):
            Path(spec.location).mkdir(parents=True, exist_ok=True)
        raw_store = storages.open_storage(
            spec.location, retry_policy=None, **dict(spec.storage_options)
        )
        raw_meta = metastores.open_metastore(spec.metastore)
        faults = os.environ.get("ZARRLAKE_FAULTS")
        if faults:
            from zarrlake.metastore.faults import FaultyMetaStore
            from zarrlake.storage.faults import FaultyObjectStore

            kinds = {"seed": int, "error_rate": float, "lost_response_rate": float}
            kinds["latency"] = float
            opts: dict[str, Any] = {"seed": 0}
            for part in filter(None, (p.strip() for p in faults.split(","))):
                name, _, value = (x.strip() for x in part.partition("="))
                try:
                    opts[name] = kinds[name](value)
                except (KeyError, ValueError):
                    raise InvalidInputError(
                        f"ZARRLAKE_FAULTS item {part!r}: use seed=N,error_rate=F,"
                        "lost_response_rate=F,latency=SECONDS"
                    ) from None
            raw_store = FaultyObjectStore(raw_store, **opts)
            raw_meta = FaultyMetaStore(raw_meta, **{**opts, "seed": opts["seed"] + 1})
        return RetryingObjectStore(raw_store), RetryingMetaStore(raw_meta)

    @classmethod
    def _read_config(cls, store: ObjectStore) -> dict | None:
        try:
            return json.loads(store.get(CONFIG_KEY))
        except NotFoundError:
            return None
        except ValueError as e:
            raise ZarrLakeError(f"{store.url}/{CONFIG_KEY} is not a zarrlake config: {e}") from e

    @classmethod
    def create(
        cls,
        location: str | os.PathLike,
        *,
        metastore: str | None = None,
        storage_options: dict | None = None,
    ) -> Repo:
        """Create a new repository; AlreadyExistsError if one is there."""
        spec = _resolve_spec(location, metastore, storage_options)
        if spec.location.startswith("/") and Path(spec.location).is_file():
            raise InvalidInputError(f"{spec.location} is a file, not a directory")
        store, meta = cls._connect(spec)
        if cls._read_config(store) is not None:
            raise AlreadyExistsError(f"a zarrlake repository already exists at {spec.location}")
        repo = cls(spec, store, meta, secrets.token_hex(8))
        # Publish the config last: its presence means the repository is complete.
        objects = repo.objects
        snapshot = objects.write(SnapshotRoot())
        changes = objects.write(ChangeSet())
        initial = objects.write(
            CommitRecord((), snapshot, changes, INITIAL_MESSAGE, None, time.time(), None)
        )
        repo.refs.create(BRANCH, "main", initial)
        config = {"format": FORMAT, "repo_id": repo.repo_id, "created": time.time()}
        if not store.put_if_absent(CONFIG_KEY, json.dumps(config).encode()):
            meta.drop_partition(repo.refs_partition)
            raise AlreadyExistsError(f"a zarrlake repository already exists at {spec.location}")
        return repo

    @classmethod
    def open(
        cls,
        location: str | os.PathLike,
        *,
        metastore: str | None = None,
        storage_options: dict | None = None,
    ) -> Repo:
        """Open an existing repository; NotFoundError if there is none."""
        spec = _resolve_spec(location, metastore, storage_options)
        if spec.location.startswith("/") and not Path(spec.location, CONFIG_KEY).exists():
            raise NotFoundError(f"no zarrlake repository at {spec.location}")
        store, meta = cls._connect(spec)
        config = cls._read_config(store)
        if config is None:
            raise NotFoundError(f"no zarrlake repository at {spec.location}")
        if config.get("format", 0) > FORMAT:
            raise ZarrLakeError(
                f"repository format {config['format']} is newer than this zarrlake ({FORMAT})"
            )
        repo = cls(spec, store, meta, config["repo_id"])
        if repo.refs.get(BRANCH, "main") is None and not repo.refs.list(BRANCH):
            raise NotFoundError(
                f"the metastore {spec.metastore} holds no refs for the repository at "
                f"{spec.location} (wrong metastore?)"
            )
        return repo

    @classmethod
    def open_or_create(
        cls,
        location: str | os.PathLike,
        *,
        metastore: str | None = None,
        storage_options: dict | None = None,
    ) -> Repo:
        try:
            return cls.open(location, metastore=metastore, storage_options=storage_options)
        except NotFoundError:
            try:
                return cls.create(location, metastore=metastore, storage_options=storage_options)
            except AlreadyExistsError:
                return cls.open(location, metastore=metastore, storage_options=storage_options)

    def close(self) -> None:
        self.blobs.close()
        self.meta.close()

    # refs and history ---------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """The commit id a branch, tag or (unique prefix of a) commit id names."""
        if not isinstance(ref, str) or not ref:
            raise InvalidInputError(f"a ref must be a non-empty string, not {ref!r}")
        if len(ref) <= 255:
            for kind in (BRANCH, TAG):
                got = self.refs.get(kind, ref)
                if got is not None:
                    return got[0]
        if 4 <= len(ref) <= ID_LENGTH and all(c in "0123456789abcdef" for c in ref):
            if len(ref) == ID_LENGTH:
                if self.objects.has_commit(ref):
                    return ref
            else:
                found = [k.rsplit("/", 1)[1] for k in self.blobs.list(f"commits/{ref}")]
                if len(found) == 1:
                    return found[0]
                if len(found) > 1:
                    raise InvalidInputError(f"commit id prefix {ref!r} is ambiguous")
        shown = ref if len(ref) <= 60 else ref[:57] + "..."
        raise NotFoundError(f"no branch, tag or commit named {shown!r}")

    def log(self, ref: str = "main", limit: int | None = None) -> list[Commit]:
        """Commits reachable from `ref`, newest first."""
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative integer, not {limit!r}")
        out = []
        for cid, rec in self.objects.history(self.resolve(ref)):
            if limit is not None and len(out) >= limit:
                break
            out.append(Commit.from_record(cid, rec))
        return out

    def create_branch(self, name: str, at: str = "main") -> str:
        commit_id = self.resolve(at)
        self.refs.create(BRANCH, name, commit_id)
        return commit_id

    def delete_branch(self, name: str) -> None:
        self.refs.delete(BRANCH, name)

    def list_branches(self) -> dict[str, str]:
        return self.refs.list(BRANCH)

    def create_tag(self, name: str, at: str = "main") -> str:
        commit_id = self.resolve(at)
        self.refs.create(TAG, name, commit_id)
        return commit_id

    def delete_tag(self, name: str) -> None:
        self.refs.delete(TAG, name)

    def list_tags(self) -> dict[str, str]:
        return self.refs.list(TAG)

    def snapshot_of(self, commit_id: str) -> SnapshotRoot:
        return self.objects.read(SnapshotRoot, self.objects.commit(commit_id).snapshot)

    def diff(self, from_ref: str, to_ref: str) -> Diff:
        """What changed between two refs (branches, tags or commit ids)."""
        a, b = self.resolve(from_ref), self.resolve(to_ref)
        return diff_snapshots(self.objects, self.snapshot_of(a), self.snapshot_of(b))

    # sessions -----------------------------------------------------------------------------

    def create_session(
        self,
        branch: str = "main",
        *,
        message: str | None = None,
        author: str | None = None,
        expires_in: timedelta = DEFAULT_EXPIRY,
        isolation: str = "snapshot",
    ) -> Session:
        """Start a transaction on `branch`, based on its current head."""
        check_ref_name(branch, "branch")
        head, _ = self.refs.require(BRANCH, branch)
        rec = new_record(branch, head, message, author, expires_in, isolation)
        version = self.meta.set_if(self.sessions_partition, rec.id.encode(), rec.encode(), None)
        return Session(self, rec, head, version)

    def join_session(self, session_id: str) -> Session:
        """The same transaction, from any process: staged writes are shared."""
        if not isinstance(session_id, str) or not session_id or len(session_id) > 64:
            raise InvalidInputError(f"invalid session id {session_id!r}")
        got = self.meta.get(self.sessions_partition, session_id.encode())
        if got is None:
            raise NotFoundError(f"no session {session_id!r}")
        rec = SessionRecord.decode(got[0])
        session = Session(self, rec, rec.base, got[1])
        session._check_writable(*session._load())
        return session

    def list_sessions(self, branch: str | None = None) -> list[SessionRecord]:
        """Open, unexpired sessions (optionally of one branch)."""
        now = time.time()
        out = []
        for _, value, _ in self.meta.scan(self.sessions_partition):
            rec = SessionRecord.decode(value)
            if rec.status == OPEN and rec.expires_at > now and branch in (None, rec.branch):
                out.append(rec)
        return sorted(out, key=lambda r: r.created)

    def readonly_session(self, ref: str = "main", *, as_of: datetime | None = None) -> Session:
        """A read-only view of a commit, pinned when opened. With `as_of`, the newest commit
        of `ref`'s history made at or before that time."""
        commit_id = self.resolve(ref)
        if as_of is not None:
            if not isinstance(as_of, datetime):
                raise InvalidInputError(f"as_of must be a datetime, not {as_of!r}")
            ts = (as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)).timestamp()
            for cid, rec in self.objects.history(commit_id):
                if rec.timestamp <= ts:
                    commit_id = cid
                    break
            else:
                raise NotFoundError(f"{ref!r} has no commit at or before {as_of.isoformat()}")
        return Session(self, None, commit_id)

    # Arraylake-style implicit session -----------------------------------------------------

    def checkout(self, ref: str = "main") -> Session:
        """Make `ref` current: a writable session on a branch, read-only on a tag/commit."""
        if self.refs.get(BRANCH, ref) is not None:
            self._session = self.create_session(ref)
        else:
            self._session = self.readonly_session(ref)
        return self._session

    @property
    def session(self) -> Session:
        if self._session is None:
            self.checkout("main")
        assert self._session is not None
        return self._session

    @property
    def root_group(self) -> zarr.Group:
        return self.session.root_group

    @property
    def store(self) -> SessionStore:
        return self.session.store

    def commit(self, message: str, *, on_conflict: str = "fail") -> str:
        """Commit the current session, then start a fresh one on the same branch."""
        session = self.session
        commit_id = session.commit(message, on_conflict=on_conflict)
        assert session.branch is not None
        self._session = self.create_session(session.branch)
        return commit_id


_OPEN: dict[tuple[int, RepoSpec], Repo] = {}
_OPEN_LOCK = threading.Lock()


def _open_cached(spec: RepoSpec) -> Repo:
    """One Repo per process and spec, for sessions re-joined from pickles."""
    key = (os.getpid(), spec)
    with _OPEN_LOCK:
        repo = _OPEN.get(key)
        if repo is None:
            repo = Repo.open(
                spec.location, metastore=spec.metastore, storage_options=dict(spec.storage_options)
            )
            _OPEN[key] = repo
        return repo


def _rejoin(spec: RepoSpec, session_id: str | None, commit_id: str) -> Session:
    repo = _open_cached(spec)
    if session_id is None:
        return Session(repo, None, commit_id)
    return repo.join_session(session_id)
