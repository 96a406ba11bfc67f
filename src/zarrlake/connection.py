"""The connection to one repository: its backends, typed object access, refs and session
records, shared by Repo and every Session. `connect(spec)` keeps one per process and spec,
so a session unpickled on a worker re-opens nothing it already has."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zarrlake import storage as storages
from zarrlake._util import runtime
from zarrlake._util.retry import RetryPolicy, backoff
from zarrlake._util.secrets import mask_urls, masked_options
from zarrlake.errors import (
    AlreadyExistsError,
    CASFailedError,
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    RepositoryNotFoundError,
    TransientError,
    ZarrLakeError,
)
from zarrlake.format.digest import DEFAULT, LEGACY, Hash, parse
from zarrlake.metastore.base import MetaStore
from zarrlake.metastore.choice import BUCKET, choose, default_for, kind_of, open_for
from zarrlake.metastore.retrying import RetryingMetaStore
from zarrlake.storage.base import ObjectStore
from zarrlake.storage.retrying import RetryingObjectStore
from zarrlake.vc.objects import Objects
from zarrlake.vc.refs import BRANCH, Refs

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

    from zarrlake.session_records import Clock, SessionRecords
    from zarrlake.vc.gc_protocol import WriteGuard
    from zarrlake.vc.purges import PurgeIndex

CONFIG_KEY = "zarrlake.json"
FORMAT = 3
"""The newest repository format this zarrlake reads. Format 3 spreads the session records
over shards (`session_shards` in the config; repositories created on the bucket metastore);
format 2 names its content hash in the config and keeps snapshot ids in refs; format 1
(SHA-256, refs naming only commits). Each is read and written as it is: a repository
keeps the format it was created with."""
INITIAL_MESSAGE = "Repository initialized"


@dataclass(frozen=True)
class RepoSpec:
    """Everything needed to open the same repository from another process or machine."""

    location: str
    metastore: str
    storage_options: tuple[tuple[str, Any], ...] = ()

    @property
    def is_local(self) -> bool:
        """Whether the repository lives in a local directory (an absolute path)."""
        return self.location.startswith("/")

    def __repr__(self) -> str:  # never shows a password or a secret option's value
        return (
            f"RepoSpec(location={mask_urls(self.location)!r}, "
            f"metastore={mask_urls(self.metastore)!r}, "
            f"storage_options={masked_options(self.storage_options)!r})"
        )


def resolve_spec(
    location: str | os.PathLike, metastore: str | None, storage_options: dict | None
) -> RepoSpec:
    """A spec from what users pass: a path or URL, an optional metastore URL and options.
    Without a metastore URL the spec's metastore is "" until the repository is created (the
    default: SQLite in a local directory, the memory metastore of the same name for
    memory://, the bucket itself on s3://) or opened (the one its config names)."""
    if not isinstance(location, str | os.PathLike) or not str(location):
        raise InvalidInputError(f"repository location must be a path or URL, not {location!r}")
    if metastore is not None and (not isinstance(metastore, str) or not metastore):
        raise InvalidInputError(f"metastore must be a URL or 'bucket', not {metastore!r}")
    loc = str(location)
    opts = tuple(sorted((storage_options or {}).items()))
    if "://" in loc and not loc.startswith("file://"):
        return RepoSpec(loc, metastore or "", opts)
    path = Path(loc.removeprefix("file://")).expanduser().absolute()
    if metastore == BUCKET:
        raise InvalidInputError(
            f"metastore='bucket' needs object storage with conditional writes (s3://); a "
            f"repository in a local directory ({path}) keeps its metastore in SQLite"
        )
    return RepoSpec(str(path), metastore or "", opts)


@dataclass(frozen=True)
class FlushPolicy:
    """When a session handle flushes its buffered writes by itself."""

    max_entries: int = 100_000
    """Buffered writes (keys) that make a handle flush."""
    max_bytes: int = 2 << 20
    """Buffered inline chunk bytes (or bytes of uploads kept for gc) that make it flush."""
    max_age: float = 60.0
    """Seconds since the oldest unflushed write after which it flushes."""
    idle: float | None = 5.0
    """Seconds without writes after which it flushes in the background (None: never)."""


@dataclass(frozen=True)
class Settings:
    """Tuning that every layer above the backends reads from one place.

    Give it to `Repo.open` / `Repo.create` (`settings=Settings(commit_timeout=120)`, or a dict
    of the fields to change), or record it in the repository's config with `Repo.create(...,
    settings=...)`: every client that opens the repository then starts from it, Spark and
    Dask workers included.

    Examples
    --------
    >>> repo = Repo.open("/data/weather", settings={"read_concurrency": 64})  # doctest: +SKIP
    """

    commit_timeout: float = 60.0
    """Seconds a commit keeps retrying while its branch keeps moving (CommitTimeoutError)."""
    stage_inline_max: int = 8192
    """Chunks up to this size (bytes) are staged inside fragments, not one object each.

    The fragments' data sections become the packs commits point into."""
    flush: FlushPolicy = field(default_factory=FlushPolicy)
    """When session handles flush buffered chunk writes by themselves."""
    flush_wait: float = 30.0
    """Seconds a commit waits for other workers of its session to flush their writes."""
    read_concurrency: int = 16
    """Ranged requests (parts of chunk objects, e.g. a shard's inner chunks) in flight at once."""
    read_coalesce_gap: int = 256 << 10
    """Ranges of one object at most this many bytes apart are fetched in one request."""
    check_chunks: bool = True
    """Refuse a chunk write whose bytes the array's codecs could not decode, naming the key.

    A cheap check of the frame (the compressor's magic and declared size, or the exact
    length of uncompressed chunks), not a decode; `zarrlake fsck --decode` decodes."""
    chunk_statistics: bool = True
    """Chunk writes carry their values' statistics (count, NaN, fill, min, max, sum) into
    the manifests, where reads and checks use them to skip chunks that cannot match."""

    def __post_init__(self) -> None:
        check_settings(self)

    def to_json(self) -> dict[str, Any]:
        """The settings as the repository config records them (plain JSON values)."""
        return asdict(self)

    def updated(self, changes: Settings | Mapping[str, Any] | None) -> Settings:
        """These settings with `changes` applied.

        A Settings replaces them whole, a mapping changes the fields it names
        (``{"flush": {"idle": None}}`` changes one flush field).

        Raises
        ------
        InvalidInputError
            If a name is not a setting or a value is of the wrong type or range.
        """
        if changes is None:
            return self
        if isinstance(changes, Settings):
            return changes
        if not isinstance(changes, Mapping):
            raise InvalidInputError(f"settings must be a Settings or a dict, not {changes!r}")
        _check_names(changes, Settings, "setting")
        fields_: dict[str, Any] = dict(changes)
        if "flush" in fields_:
            flush = fields_["flush"]
            if isinstance(flush, Mapping):
                _check_names(flush, FlushPolicy, "flush setting")
                fields_["flush"] = replace(self.flush, **flush)
            elif not isinstance(flush, FlushPolicy):
                raise InvalidInputError(f"flush must be a FlushPolicy or a dict, not {flush!r}")
        return replace(self, **fields_)


def _check_names(changes: Mapping[str, Any], cls: type, what: str) -> None:
    unknown = sorted(str(k) for k in changes if k not in {f.name for f in fields(cls)})
    if unknown:
        known = ", ".join(f.name for f in fields(cls))
        raise InvalidInputError(
            f"unknown {what}(s) {', '.join(unknown)}; known: {known}; use one of the known names"
        )


def check_settings(settings: Settings) -> None:
    """InvalidInputError naming the first setting of the wrong type or out of range."""
    if not isinstance(settings.flush, FlushPolicy):
        raise InvalidInputError(f"flush must be a FlushPolicy, not {settings.flush!r}")
    values = [(f.name, getattr(settings, f.name), f.type) for f in fields(settings)]
    values += [
        (f"flush.{f.name}", getattr(settings.flush, f.name), f.type) for f in fields(settings.flush)
    ]
    for name, value, kind in values:
        if name == "flush" or (name == "flush.idle" and value is None):
            continue
        if kind in (bool, "bool"):
            if not isinstance(value, bool):
                raise InvalidInputError(f"setting {name} must be True or False, not {value!r}")
            continue
        number = (int,) if "float" not in str(kind) else (int, float)
        least = 0 if name in _ZERO_ALLOWED else 1e-9
        if isinstance(value, bool) or not isinstance(value, number) or value < least:
            want = "an integer" if number == (int,) else "a number"
            bound = "0 or more" if least == 0 else "above 0"
            raise InvalidInputError(f"setting {name} must be {want} {bound}, not {value!r}")


_ZERO_ALLOWED = {"stage_inline_max", "flush_wait", "read_coalesce_gap"}
"""Settings where 0 means something (never inline, do not wait, never coalesce)."""


def outcome(call: Callable[[], object]) -> object:
    """What `call` returns, or the exception it raised (calls run side by side all finish)."""
    try:
        return call()
    except Exception as e:
        return e


@dataclass
class RepoContext:
    """An open repository: backends, objects, refs and session records."""

    spec: RepoSpec
    repo_id: str
    object_store: ObjectStore
    meta: MetaStore
    clock: Clock = None  # type: ignore[assignment]
    """The time leases, expiries, keep records and gc candidates are judged by: the
    metastore's clock (`MetaStore.clock`), which every client shares, so no process judges
    a time another wrote by a clock of its own (tests may set another)."""
    settings: Settings = field(default_factory=Settings)
    hash: Hash = LEGACY
    """The content hash objects and chunks are named and checked by (fixed at creation)."""
    format: int = FORMAT
    session_shards: int = 1
    """Partitions the session records are spread over (see SessionRecords; fixed at
    creation)."""

    def __post_init__(self) -> None:
        if self.clock is None:
            self.clock = self.meta.clock
        self.objects = Objects(
            self.object_store,
            self.hash,
            source_options=dict(self.spec.storage_options),  # virtual chunks on S3
            read_concurrency=self.settings.read_concurrency,
            coalesce_gap=self.settings.read_coalesce_gap,
        )
        self.refs = Refs(
            self.meta,
            self.partition("refs"),
            on_drop=self._dropped,
            snapshots=self.objects if self.format >= 2 else None,
            empty_hint=f"the metastore {self.spec.metastore} holds no refs for the repository "
            f"at {self.spec.location} (wrong metastore?)",
        )
        # read errors name the purge, if any
        self.objects.purged = lambda digest: self.purges.lookup(digest)
        self.objects.purges_exist = lambda epoch: self.purges.exist(epoch)
        self.handles: weakref.WeakSet[Any] = weakref.WeakSet()
        """The write paths of the session handles opened on this context (txn/writes.py):
        `Repo.close` finishes them."""
        self._making = threading.RLock()

    def _part(self, name: str, make: Callable[[], Any]) -> Any:
        """The part `name` of the context, made (and its module imported) at its first use,
        once: opening a repository to read it needs no session records, gc guard or purge
        index."""
        with self._making:
            if name not in self.__dict__:
                self.__dict__[name] = make()
        return self.__dict__[name]

    @property
    def records(self) -> SessionRecords:
        """The session records (made at first use)."""

        def make() -> SessionRecords:
            from zarrlake.session_records import SessionRecords

            return SessionRecords(
                self.meta,
                self.partition("sessions"),
                lambda: self.clock(),
                shards=self.session_shards,
                together=self.together,
            )

        return self._part("_records", make)

    @property
    def write_guard(self) -> WriteGuard:
        """The gc guard of uploads, shared so that sessions reuse its last phase read."""

        def make() -> WriteGuard:
            from zarrlake.vc.gc_protocol import WriteGuard

            return WriteGuard(self)

        return self._part("_write_guard", make)

    @property
    def purges(self) -> PurgeIndex:
        """Which purge removed a digest's bytes (made at first use)."""

        def make() -> PurgeIndex:
            from zarrlake.vc.purges import PurgeIndex, PurgeRecords

            return PurgeIndex(PurgeRecords(self.meta, self.refs.partition))

        return self._part("_purges", make)

    def _dropped(self, commit_id: str) -> None:
        """A ref no longer points at `commit_id`: a gc candidate (`register_dropped`)."""
        from zarrlake.vc.gc_protocol import register_dropped

        register_dropped(self, commit_id)

    def together(self, *calls: Callable[[], object]) -> list[object]:
        """Run independent metastore calls and return each one's result or the exception it
        raised: at once on a remote metastore (one round trip instead of one each), in turn
        on an embedded one, where a handoff to threads costs more than the calls."""

        if not self.meta.remote:
            return [outcome(call) for call in calls]
        return self.objects.map(outcome, list(calls))

    def partition(self, name: str) -> str:
        """The metastore partition `name` of this repository (refs, sessions, stage/<id>...)."""
        return f"{self.repo_id}/{name}"

    def stage_partition(self, session_id: str) -> str:
        """The metastore partition holding the staged records of session `session_id`."""
        return self.partition(f"stage/{session_id}")

    def close(self) -> None:
        """Close the object cache's pool, the object store and the metastore (after the
        record writes left in the background)."""
        records = self.__dict__.get("_records")
        if records is not None:
            records.settle()
        self.objects.close()
        self.object_store.close()
        self.meta.close()


def raise_first(outcomes: list[object]) -> None:
    """Raise the first exception among `together`'s outcomes, if any."""
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome


def open_backends(spec: RepoSpec) -> tuple[ObjectStore, MetaStore]:
    """The object store and metastore of `spec`, each behind a retrying wrapper."""
    return _open_store(spec), _open_meta(spec)


def _open_store(spec: RepoSpec) -> ObjectStore:
    raw_store = storages.open_storage(
        spec.location, retry_policy=None, **dict(spec.storage_options)
    )
    return RetryingObjectStore(raw_store)


def _open_meta(spec: RepoSpec) -> MetaStore:
    raw = open_for(spec.location, dict(spec.storage_options), spec.metastore)
    return RetryingMetaStore(raw)


def _open_meta_early(spec: RepoSpec) -> Future[MetaStore] | None:
    """The metastore named by a remote repository's spec, opened in a thread while its
    config is read: connecting to a server (PostgreSQL: four round trips) then overlaps
    the config's GET instead of following it. None when there is nothing to overlap (a
    local repository, or a metastore the config names)."""
    if spec.is_local or not spec.metastore or kind_of(spec.metastore) == BUCKET:
        return None
    pool = _thread_pool("zarrlake-open-metastore")
    opened = pool.submit(_open_meta, spec)
    pool.shutdown(wait=False)
    return opened


def _thread_pool(name: str) -> Executor:
    """A pool of one thread (concurrent.futures' thread pool, with queue, loads with the
    first: opening a local repository needs none)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1, thread_name_prefix=name)


def _close_opened(opened: Future[MetaStore]) -> None:
    """Close a metastore opened early for a repository that then failed to open."""
    if opened.exception() is None:
        with contextlib.suppress(Exception):
            opened.result().close()


def _read_config(store: ObjectStore) -> dict | None:
    try:
        return json.loads(store.get(CONFIG_KEY))
    except NotFoundError:
        return None
    except ValueError as e:
        raise ZarrLakeError(
            f"{store.url}/{CONFIG_KEY} is not a zarrlake config: {e}"
            "; check that the location is a zarrlake repository"
        ) from e


def save_settings(ctx: RepoContext, changes: Mapping[str, Any]) -> Settings:
    """Record `changes` in the repository's config (validated against the settings recorded
    there now, by a conditional write that retries when another client saved meanwhile) and
    use the result in `ctx`; returns the recorded settings. A local directory has no
    conditional writes: its clients take turns on a lock file beside the config instead."""
    with _config_turn(ctx):
        return _save_settings(ctx, changes)


def _config_turn(ctx: RepoContext) -> contextlib.AbstractContextManager[object]:
    """The turn a client of a local repository takes to change its config (one machine's
    processes and threads), else nothing: the config's conditional write decides."""
    if not ctx.spec.is_local:
        return contextlib.nullcontext()
    from zarrlake.metastore.filelock import file_lock

    return file_lock(os.path.join(ctx.spec.location, CONFIG_KEY + "-lock"))


def _save_settings(ctx: RepoContext, changes: Mapping[str, Any]) -> Settings:
    for _ in backoff(RetryPolicy(attempts=20, base_delay=0.01, max_delay=0.5)):
        try:
            data, tag = ctx.object_store.get_tagged(CONFIG_KEY)
        except ConfigurationError:  # a store without conditional updates (memory): one client
            data, tag = ctx.object_store.get(CONFIG_KEY), None
        config = json.loads(data)
        recorded = Settings().updated(config.get("settings")).updated(changes)
        config["settings"] = recorded.to_json()
        encoded = json.dumps(config).encode()
        try:
            if tag is None:
                ctx.object_store.put(CONFIG_KEY, encoded)
            else:
                ctx.object_store.put_if(CONFIG_KEY, encoded, tag)
        except CASFailedError:
            continue  # another client saved meanwhile: apply ours to theirs
        ctx.settings = recorded
        ctx.objects.coalesce_gap = recorded.read_coalesce_gap
        return recorded
    raise TransientError("the repository config kept changing while saving settings; try again")


def create_context(
    spec: RepoSpec, content_hash: str | Hash = DEFAULT, settings: Settings | None = None
) -> RepoContext:
    """Create a new repository at `spec`; AlreadyExistsError if one is there. `settings`,
    when given, are recorded in its config: every client that opens it starts from them."""
    import secrets

    from zarrlake.format.changes import ChangeSet
    from zarrlake.format.commit import CommitRecord
    from zarrlake.format.snapshot import SnapshotRoot
    from zarrlake.session_records import SHARDS

    algo = parse(content_hash)
    if spec.is_local and Path(spec.location).is_file():
        raise InvalidInputError(f"{spec.location} is a file, not a directory; give a directory")
    if not spec.metastore:
        spec = replace(spec, metastore=default_for(spec.location, spec.is_local))
    store = _open_store(spec)
    if _read_config(store) is not None:
        raise AlreadyExistsError(
            f"a zarrlake repository already exists at {spec.location}"
            "; open it with Repo.open, or choose another location"
        )
    meta = _open_meta(spec)
    chosen = settings if settings is not None else Settings()
    # On the bucket every partition is one object each write replaces: spread the session
    # records, which writers of different sessions change at once, over shards.
    shards = SHARDS if kind_of(meta.url) == BUCKET else 1
    ctx = RepoContext(
        spec,
        secrets.token_hex(8),
        store,
        meta,
        settings=chosen,
        hash=algo,
        format=3 if shards > 1 else 2,
        session_shards=shards,
    )
    # Publish the config last: its presence means the repository is complete.
    objects = ctx.objects
    snapshot = objects.write(SnapshotRoot())
    changes = objects.write(ChangeSet())
    now = runtime.now()  # history's time, as every commit's (expire's cutoff is on it too)
    initial = objects.write(CommitRecord((), snapshot, changes, INITIAL_MESSAGE, None, now, None))
    ctx.refs.create(BRANCH, "main", initial)
    # Format 2 (content hash named here, snapshot ids in refs) and 3 (sharded session
    # records): older zarrlake refuses the repository instead of misreading it.
    config = {
        "format": ctx.format,
        "repo_id": ctx.repo_id,
        "created": now,
        "hash": algo.label,
        "metastore": kind_of(spec.metastore),
    }
    if shards > 1:
        config["session_shards"] = shards
    if settings is not None:
        config["settings"] = settings.to_json()
    if not store.put_if_absent(CONFIG_KEY, json.dumps(config).encode()):
        meta.drop_partition(ctx.refs.partition)
        raise AlreadyExistsError(
            f"a zarrlake repository already exists at {spec.location}"
            "; open it with Repo.open, or choose another location"
        )
    return ctx


def open_context(
    spec: RepoSpec, settings: Settings | Mapping[str, Any] | None = None
) -> RepoContext:
    """Open the existing repository at `spec`; NotFoundError if there is none. Its settings
    are those its config records (defaults if none), updated with `settings`."""
    if spec.is_local and not Path(spec.location, CONFIG_KEY).exists():
        raise RepositoryNotFoundError(
            f"no zarrlake repository at {spec.location}; check the location and the metastore, "
            "or create one with Repo.create"
        )
    store = _open_store(spec)
    early = _open_meta_early(spec)
    try:
        config = _read_config(store)
        if config is None:
            raise RepositoryNotFoundError(
                f"no zarrlake repository at {spec.location}; check the location and the metastore, "
                "or create one with Repo.create"
            )
        if config.get("format", 0) > FORMAT:
            raise ZarrLakeError(
                f"repository format {config['format']} is newer than this zarrlake ({FORMAT})"
                "; upgrade zarrlake to open it"
            )
        chosen = choose(spec.location, spec.is_local, spec.metastore, config.get("metastore"))
    except BaseException:
        if early is not None:
            early.add_done_callback(_close_opened)
        raise
    spec = replace(spec, metastore=chosen)
    meta = early.result() if early is not None else _open_meta(spec)
    algo = parse(config.get("hash", LEGACY))
    recorded = Settings().updated(config.get("settings"))
    return RepoContext(
        spec,
        config["repo_id"],
        store,
        meta,
        settings=recorded.updated(settings),
        hash=algo,
        format=config.get("format", 1),
        session_shards=config.get("session_shards", 1),
    )


_CONNECTED: dict[tuple[int, RepoSpec], RepoContext] = {}
_CONNECT_LOCK = threading.Lock()


def connect(spec: RepoSpec) -> RepoContext:
    """One open context per process and spec (for sessions re-joined from pickles)."""
    key = (os.getpid(), spec)
    with _CONNECT_LOCK:
        ctx = _CONNECTED.get(key)
        if ctx is None:
            ctx = _CONNECTED[key] = open_context(spec)
        return ctx
