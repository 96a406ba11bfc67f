"""Repositories: where the objects and the metastore are, refs, history, sessions."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from zarrlake._util.deprecation import deprecated_alias, keyword_only, renamed_arguments, warn
from zarrlake._util.lazy import lazy_exports, load
from zarrlake._util.secrets import mask_urls
from zarrlake._util.validate import check_new_ref_name, check_ref_name
from zarrlake.connection import (
    RepoContext,
    RepoSpec,
    Settings,
    create_context,
    open_context,
    resolve_spec,
    save_settings,
)
from zarrlake.errors import (
    AlreadyExistsError,
    ExpiredHistoryError,
    InvalidInputError,
    NotFoundError,
)
from zarrlake.format.digest import parse
from zarrlake.vc.commit_info import Commit
from zarrlake.vc.refs import BRANCH, TAG

if TYPE_CHECKING:
    import pyarrow as pa
    import zarr

    from zarrlake.admin.clone import PullReport
    from zarrlake.admin.export import ExportReport
    from zarrlake.admin.metastore_copy import CopyReport
    from zarrlake.format.commit import CommitRecord
    from zarrlake.format.snapshot import SnapshotRoot
    from zarrlake.lifecycle.expire import ExpireReport
    from zarrlake.lifecycle.gc import GcReport
    from zarrlake.pulls import PullRequest
    from zarrlake.session import Session
    from zarrlake.session_records import SessionInfo
    from zarrlake.txn.transaction import Transaction
    from zarrlake.txn.writers import WriterInfo
    from zarrlake.vc.backfill import BackfillReport
    from zarrlake.vc.checks.kinds import Check
    from zarrlake.vc.checks.rules import CheckRule
    from zarrlake.vc.checks.run import CheckResult
    from zarrlake.vc.diff import Diff
    from zarrlake.vc.fsck import ExpiredHistory, Problem
    from zarrlake.vc.merge import History
    from zarrlake.vc.policies import ConflictPolicy, FastForward, IsolationLevel
    from zarrlake.vc.protection import Protection
    from zarrlake.vc.purges import PurgeRecord
    from zarrlake.vc.stats import RepoStats
    from zarrlake.zarr_store import SessionStore

__all__ = ["Commit", "Repo", "RepoSpec", "RepoStats", "SessionInfo"]

__getattr__ = lazy_exports(
    __name__, {"RepoStats": "zarrlake.vc.stats", "SessionInfo": "zarrlake.session_records"}
)

SESSION_EXPIRY = timedelta(hours=24)
"""How long a session lives unless told (`Repo.create_session(expires_in=)`; written here,
not in session_records, so that opening a repository does not import the records)."""

_OnRead = Callable[[str, int], None] | None
"""Called with (key, size) for every object fsck reads."""


def _session_classes() -> tuple[type[Session], type[Transaction]]:
    """Session and Transaction: the session machinery (most of the package's modules) loads
    with the first session, garbage collection paused while it loads (`_util/lazy.py`)."""
    return load("zarrlake.session").Session, load("zarrlake.txn.transaction").Transaction


def _flush_later(handles: weakref.WeakSet[Any]) -> None:
    """`flush_each_later` of the handles a collected Repo opened, if it opened any (the
    write path, and its modules, load with the first handle)."""
    if handles:
        from zarrlake.txn.writers import flush_each_later

        flush_each_later(handles)


class Repo:
    """A zarrlake repository.

    Open one with `Repo.open`, `Repo.create` or `Repo.open_or_create`.
    """

    def __init__(self, ctx: RepoContext) -> None:
        self._ctx = ctx
        self._session: Session | None = None
        self._checked_out = "main"  # the ref the implicit session is made on (`checkout`)
        self.last_pull: PullReport | None = None  # what the last clone or pull copied

    @classmethod
    def _owning(cls, ctx: RepoContext) -> Repo:
        """A Repo that opened `ctx` (not one sharing a session's, `Repo.of`): when it is
        garbage-collected, the handles opened on it flush their buffered writes (in the
        background; see txn/writers.py `flush_each_later` for why they do not finish)."""
        repo = cls(ctx)
        weakref.finalize(repo, _flush_later, ctx.handles)
        return repo

    @classmethod
    def of(cls, session: Session) -> Repo:
        """The repository `session` belongs to (sharing its connection)."""
        return cls(session._engine.context)

    def _protection(self) -> Protection:
        """The branch protection rules (their module loads with the first use)."""
        from zarrlake.vc.protection import Protection

        return Protection(self._ctx.meta, self._ctx.refs.partition)

    @property
    def spec(self) -> RepoSpec:
        """Where the repository is: location, metastore and storage options (picklable)."""
        return self._ctx.spec

    @property
    def repo_id(self) -> str:
        """The repository's id, which names its metastore partitions."""
        return self._ctx.repo_id

    @property
    def _context(self) -> RepoContext:
        """The engine below: backends, objects, refs and session records (internal)."""
        return self._ctx

    context = deprecated_alias("_context")

    def __repr__(self) -> str:
        return f"<zarrlake.Repo {mask_urls(self.spec.location)}>"

    # opening ------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        location: str | os.PathLike[str],
        *,
        metastore: str | None = None,
        storage_options: dict[str, Any] | None = None,
        content_hash: str = "blake3",
        settings: Settings | Mapping[str, Any] | None = None,
    ) -> Repo:
        """Create a new repository; AlreadyExistsError if one is there.

        `content_hash` ("blake3" or "sha256") names its objects and checks its chunks, for good.

        Parameters
        ----------
        location
            A local directory, or an object-store URL (``s3://bucket/prefix``).
        metastore
            Where refs and sessions live: ``sqlite:///path``, ``postgresql://...`` or
            ``bucket``; default SQLite beside a local repository, the bucket for s3://.
        storage_options
            Object-store options (region, endpoint, credentials), as obstore takes them.
        content_hash
            "blake3" (default) or "sha256".
        settings
            Tuning (`Settings`, or a dict of the fields to change) recorded in the
            repository's config: every client that opens it starts from these.

        Returns
        -------
        Repo
            The new, empty repository with its branch ``main``.

        Raises
        ------
        AlreadyExistsError
            If a repository exists at `location`.
        ConfigurationError
            If the storage or metastore cannot be reached.

        Examples
        --------
        >>> repo = Repo.create("/tmp/weather")
        >>> repo.list_branches()  # doctest: +SKIP
        """
        spec = resolve_spec(location, metastore, storage_options)
        chosen = None if settings is None else Settings().updated(settings)
        return cls._owning(create_context(spec, content_hash, chosen))

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str],
        *,
        metastore: str | None = None,
        storage_options: dict[str, Any] | None = None,
        settings: Settings | Mapping[str, Any] | None = None,
    ) -> Repo:
        """Open an existing repository; NotFoundError if there is none.

        Parameters
        ----------
        location
            A local directory, or an object-store URL (``s3://bucket/prefix``).
        metastore
            The metastore URL, when it is not the default for `location`.
        storage_options
            Object-store options (region, endpoint, credentials), as obstore takes them.
        settings
            Tuning for this process's connection: a `Settings`, or a dict of the fields to
            change from those the repository's config records (defaults if none). Sessions
            re-joined in other processes use the recorded ones.

        Raises
        ------
        NotFoundError
            If there is no repository at `location`.
        InvalidInputError
            If a setting is unknown or out of range.
        ConfigurationError
            If the storage or metastore cannot be reached.
        """
        return cls._owning(
            open_context(resolve_spec(location, metastore, storage_options), settings)
        )

    @classmethod
    def open_or_create(
        cls,
        location: str | os.PathLike[str],
        *,
        metastore: str | None = None,
        storage_options: dict[str, Any] | None = None,
        content_hash: str | None = None,
        settings: Settings | Mapping[str, Any] | None = None,
    ) -> Repo:
        """Open the repository at `location`, creating it if there is none.

        A new repository is created with `content_hash` (default "blake3") and `settings`
        recorded in its config, as `create` does; an existing one is opened with `settings`
        for this connection, as `open` does, and must use `content_hash` if one is given
        (InvalidInputError naming both otherwise: a repository's hash is fixed).
        """
        spec = resolve_spec(location, metastore, storage_options)
        try:
            ctx = open_context(spec, settings)
        except NotFoundError:
            chosen = None if settings is None else Settings().updated(settings)
            try:
                return cls._owning(create_context(spec, content_hash or "blake3", chosen))
            except AlreadyExistsError:
                ctx = open_context(spec, settings)
        if content_hash is not None and parse(content_hash).label != ctx.hash.label:
            ctx.close()
            raise InvalidInputError(
                f"the repository at {spec.location} names its objects by {ctx.hash.label}, not "
                f"{content_hash}: open it without content_hash (a repository's hash is fixed)"
            )
        return cls._owning(ctx)

    @property
    def config(self) -> Settings:
        """The settings this repository handle uses: those its config records, updated by
        what `open(settings=)` gave. Reading it does no I/O (`save_config` changes them)."""
        return self._ctx.settings

    def save_config(self, **changes: Any) -> Settings:
        """Record `changes` to the settings in the repository's config, for every client
        that opens it from now on (this handle uses them at once); returns the recorded
        settings.

        Each keyword names a `Settings` field (`flush` takes a dict of `FlushPolicy`
        fields). The change applies to what the config records now, by a conditional
        write, so two clients saving different fields at once both land.

        Raises
        ------
        InvalidInputError
            If a name is not a setting or a value is of the wrong type or range (nothing is
            written).

        Examples
        --------
        >>> repo.save_config(commit_timeout=120, flush={"idle": None})  # doctest: +SKIP
        """
        Settings().updated(changes)  # refuse a bad name or value before any I/O
        return save_settings(self._ctx, changes)

    def close(self) -> None:
        """Finish every session handle opened on this repository, then close the backends'
        connections.

        Each handle flushes its buffered writes and records its writer finished, as leaving
        its `with` block does, so a commit from another `Repo` or process counts them.
        The end of the process finishes them too; garbage collection of the `Repo` flushes
        them (a handle still in use finishes when it goes away). A handle that cannot
        finish (its session ended, its metastore is unreachable) is logged on the
        "zarrlake" logger, not raised; a commit of its session names it.
        """
        from zarrlake.txn.writers import finish_each

        try:
            finish_each(self._ctx.handles)
        finally:
            self._ctx.close()

    # refs and history ---------------------------------------------------------------------

    def resolve(self, ref: str, *, as_of: datetime | None = None) -> str:
        """The commit id that `ref` names.

        `ref` is a branch, tag, (unique prefix of a) commit id or ref expression (main~3,
        main^2). With `as_of`, the newest commit of `ref`'s first-parent history made at or
        before that time (naive: UTC).

        Parameters
        ----------
        ref
            A branch, tag, commit id (or unique prefix), or an expression such as
            ``main~3`` or ``v1^2``.
        as_of
            Travel back along `ref`'s first-parent history to this time.

        Returns
        -------
        str
            The full commit id.

        Raises
        ------
        NotFoundError
            If `ref` names nothing, or no commit is as old as `as_of`.
        ExpiredHistoryError
            If the history the expression walks was dropped by `expire`.
        """
        if as_of is None and isinstance(ref, str) and ref:  # resolve_ref's first look, made
            # without loading ref expressions (a new process reading `main` needs none)
            named = self._ctx.refs.named(ref)
            if named is not None:
                return named
        from zarrlake.vc.refexpr import commit_as_of, resolve_ref

        commit_id = resolve_ref(self._ctx.refs, self._ctx.objects, ref)
        if as_of is None:
            return commit_id
        return commit_as_of(self._ctx.objects, commit_id, as_of, ref)

    @keyword_only("limit")
    def log(
        self,
        ref: str = "main",
        *,
        limit: int | None = None,
        path: str | None = None,
        follow: bool = False,
    ) -> list[Commit]:
        """Commits reachable from `ref` along first parents, newest first.

        Parameters
        ----------
        ref
            Where to start: a branch, tag, commit id or ref expression.
        limit
            At most this many commits (None: the whole history).
        path
            Only the commits that changed this group or array, or anything below it
            (each Commit's `path` then says what the node was called there).
        follow
            With `path`: follow the node back across the moves (renames) that made it,
            itself or a group holding it (`zarrlake log --follow PATH`).

        Returns
        -------
        list of Commit
            Newest first; it ends early where `expire` dropped older history.

        Examples
        --------
        >>> [c.path for c in repo.log("main", path="t2m", follow=True)]  # doctest: +SKIP
        ['t2m', 't2m', 'temperature']
        """
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative integer, not {limit!r}")
        if path is None and follow:
            raise InvalidInputError("follow=True needs the path to follow")
        if path is not None and not isinstance(path, str):
            raise InvalidInputError(f"path must be a string, not {path!r}")
        head = self.resolve(ref)
        objects = self._ctx.objects
        found: Iterator[tuple[str, CommitRecord, str | None]]
        if path is None:
            found = ((cid, rec, None) for cid, rec in objects.history(head))
        else:
            from zarrlake.vc.path_log import path_history  # numpy: the change sets' keys

            found = path_history(objects, head, path, follow)
        out: list[Commit] = []
        for cid, rec, name in found:
            if limit is not None and len(out) >= limit:
                break
            out.append(Commit.from_record(cid, rec, name))
        return out

    def commit_info(self, ref: str) -> Commit:
        """The commit `ref` names."""
        cid = self.resolve(ref)
        return Commit.from_record(cid, self._ctx.objects.read_commit(cid))

    def expired_at(self, commit_id: str) -> datetime | None:
        """When `expire` dropped commit `commit_id`; None if it was not expired.

        `commit_id` is a full id, e.g. a parent id of a retained commit.
        """
        when = self._ctx.objects.expired_at(commit_id)
        return None if when is None else datetime.fromtimestamp(when, UTC)

    @keyword_only("at")
    def create_branch(self, name: str, *, at: str = "main") -> str:
        """A new branch at the commit `at` names; returns that commit id.

        The name follows git's rules for ref names and does not start with '-'
        (InvalidInputError says what is wrong with it)."""
        from zarrlake.vc.keep import keeping

        check_new_ref_name(name, "branch")
        commit_id = self.resolve(at)
        with keeping(self._ctx, [commit_id]):
            self._ctx.refs.create(BRANCH, name, commit_id)
        return commit_id

    def delete_branch(self, name: str) -> None:
        """Delete branch `name`; its commits stay until `gc` finds nothing else reaches them.

        Raises
        ------
        NotFoundError
            If there is no such branch.
        ProtectedBranchError
            If a protection rule forbids deleting it (a ReadOnlyError; see `protect_branch`).
        """
        self._ctx.refs.delete(BRANCH, name)

    def list_branches(self) -> dict[str, str]:
        """Branch names and their head commit ids."""
        return self._ctx.refs.list(BRANCH)

    @keyword_only("at")
    def create_tag(self, name: str, *, at: str = "main") -> str:
        """A new (immutable) tag at the commit `at` names; returns that commit id.

        The name follows the rules of a branch name (`create_branch`)."""
        from zarrlake.vc.keep import keeping

        check_new_ref_name(name, "tag")
        commit_id = self.resolve(at)
        with keeping(self._ctx, [commit_id]):
            self._ctx.refs.create(TAG, name, commit_id)
        return commit_id

    def delete_tag(self, name: str) -> None:
        """Delete tag `name`; its commit stays while a branch or another tag reaches it.

        Raises
        ------
        NotFoundError
            If there is no such tag.
        """
        self._ctx.refs.delete(TAG, name)

    def list_tags(self) -> dict[str, str]:
        """Tag names and their commit ids."""
        return self._ctx.refs.list(TAG)

    def _snapshot_of(self, commit_id: str) -> SnapshotRoot:
        """The snapshot root of commit `commit_id` (metadata documents and range index)."""
        from zarrlake.format.snapshot import SnapshotRoot

        objects = self._ctx.objects
        return objects.read(SnapshotRoot, objects.read_commit(commit_id).snapshot)

    snapshot_of = deprecated_alias("_snapshot_of")

    def diff(self, from_ref: str, to_ref: str) -> Diff:
        """What changed between two refs (branches, tags or commit ids).

        Parameters
        ----------
        from_ref, to_ref
            The two states to compare: branches, tags, commit ids or ref expressions.

        Returns
        -------
        Diff
            Nodes added, deleted, moved or changed, and chunks written and deleted, per
            node. Nodes moved between the two (when one descends from the other) are
            reported as moved, compared with what they were at their old path.

        Examples
        --------
        >>> d = repo.diff("v1.0", "main")
        >>> d.summary()  # doctest: +SKIP
        """
        from zarrlake.vc.diff import diff_commits

        return diff_commits(self._ctx.objects, self.resolve(from_ref), self.resolve(to_ref))

    def commit_changes(self, ref: str) -> Diff:
        """What commit `ref` changed against its first parent.

        Read from the commit's change set when `expire` dropped that parent.
        """
        from zarrlake.vc.diff import diff_commit

        return diff_commit(self._ctx.objects, self.resolve(ref))

    def fsck(
        self,
        ref: str | None = None,
        *,
        on_read: _OnRead = None,
        on_expired: Callable[[ExpiredHistory], None] | None = None,
        sources_only: bool = False,
        purges: bool = False,
        against: Repo | None = None,
        decode: bool = False,
        arrays: list[str] | None = None,
        on_decoded: Callable[[int, int], None] | None = None,
    ) -> list[Problem]:
        """Re-read and verify every object reachable from `ref`; returns the problems found.

        `ref` defaults to every branch and tag. Also verifies that every virtual source still
        is as imported (`sources_only`: only that). No problems are returned if the repository
        is intact. `on_read(key, size)` is called for every object read (progress, counts),
        `on_expired` for each place where `expire` ended a history (which is not a problem).
        Chunks a purge removed are not problems.

        With `purges`, proves the purges instead (`zarrlake fsck --purges`): every one
        finished, no purged chunk object or range still holds its bytes, and (given
        `against`, the repository this one was cloned from) every purge of that one is here.

        With `decode`, every chunk is also decoded with its array's codecs, in parallel
        (each failure is a problem of kind "undecodable" naming the array, the chunk's
        coordinates and the codec's message); `arrays` limits that to the arrays whose
        paths match one of its glob patterns; `on_decoded(done, queued)` follows it.
        """
        from zarrlake.vc.fsck import check_objects

        if purges:
            from zarrlake.admin.purge import prove

            return prove(self._ctx, None if against is None else against._context)
        if ref is not None:
            starts = [(self.resolve(ref), f"ref {ref!r}")]
        else:
            starts = [(c, f"branch {n!r}") for n, c in sorted(self.list_branches().items())]
            starts += [(c, f"tag {n!r}") for n, c in sorted(self.list_tags().items())]
        objects = self._ctx.objects
        return check_objects(
            self._ctx.object_store,
            starts,
            on_read,
            objects.algo,
            on_expired,
            objects.sources,
            sources_only,
            self._ctx.purges.lookup,
            decode,
            arrays,
            on_decoded,
        )

    def stats(self, ref: str = "main") -> RepoStats:
        """Counts at `ref`: commits in its history, arrays, chunks and their bytes."""
        from zarrlake.vc.stats import repo_stats

        return repo_stats(self._ctx.objects, self.resolve(ref))

    def chunk_stats(
        self, array: str, ref: str = "main", *, as_of: datetime | None = None
    ) -> pa.Table:
        """The value statistics of every chunk of `array` at `ref`, read from its manifests
        only (no chunk is read).

        One row per chunk of the grid (inner chunks of a sharded array), in C order: an
        int64 column of grid coordinates per dimension (named after the dimension, or
        `dim_<i>`), then `count` (elements of the chunk as stored), `nan_count`,
        `fill_count` (elements equal to the fill value), `min` and `max` (ignoring NaN, in
        the array's dtype), `sum` (float64, ignoring NaN) and `known`. A chunk absent from
        the manifests is all fill value; where `known` is false (written before
        statistics, with them off, a virtual chunk) the statistics are null.

        Raises
        ------
        NotFoundError
            If there is no array at `array`.
        """
        from zarrlake.vc.statistics import array_stats

        if not isinstance(array, str):
            raise InvalidInputError(f"array must be an array path, not {array!r}")
        return array_stats(self._ctx.objects, self.resolve(ref, as_of=as_of), array).table()

    def backfill_chunk_stats(
        self,
        array: str,
        branch: str = "main",
        *,
        message: str | None = None,
        author: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> BackfillReport:
        """Give the chunks of `array` on `branch` that lack statistics theirs (chunks
        written before statistics, with `Settings.chunk_statistics` off, or virtual ones):
        each is read and decoded, and the statistics are committed in one commit that
        changes no chunk and no document. `on_progress(done, total)` follows the reads.

        Raises
        ------
        NotFoundError
            If there is no array at `array` on the branch.
        ProtectedBranchError
            If a protection rule forbids direct commits to the branch (backfill a branch
            made from it and merge that).
        """
        from zarrlake.vc.backfill import backfill
        from zarrlake.vc.not_a_branch import needs_branch

        if not isinstance(array, str):
            raise InvalidInputError(f"array must be an array path, not {array!r}")
        check_ref_name(branch, "branch")
        self._protection().check_direct_commit(branch)
        path = array.strip("/")
        with needs_branch(self._ctx.refs, self._ctx.objects, branch, "session"):
            return backfill(
                self._history("backfill"),
                branch,
                path,
                message=message or f"Backfill chunk statistics of {path}",
                author=author,
                on_progress=on_progress,
            )

    # sessions -----------------------------------------------------------------------------

    def create_session(
        self,
        branch: str = "main",
        *,
        message: str | None = None,
        author: str | None = None,
        expires_in: timedelta = SESSION_EXPIRY,
        isolation: IsolationLevel = "snapshot",
    ) -> Session:
        """Start a transaction on `branch`, based on its current head.

        Use it as a context manager (`with repo.create_session() as s:`) to abandon it if the
        block raises.

        Parameters
        ----------
        branch
            The branch the session will commit to.
        message, author
            Recorded on the commit (the message can also be given to `Session.commit`).
        expires_in
            Staged writes of a session neither committed nor extended by then are dropped.
        isolation
            "snapshot": the commit conflicts with concurrent commits that wrote the same
            keys; "serializable": also with those that wrote keys this session read.

        Returns
        -------
        Session
            A writable session; pickle it (or `join_session(session.id)`) to write from
            other processes.

        Raises
        ------
        NotFoundError
            If there is no such branch.
        NotABranchError
            If `branch` is a tag or a commit id (the message says what to do instead).
        InvalidInputError
            If an argument is malformed.

        Examples
        --------
        >>> with repo.create_session("main", message="add day 1") as s:
        ...     zarr.open_group(s.store)["t2m"][0] = day1
        ...     s.commit()
        """
        Session, Transaction = _session_classes()
        from zarrlake.vc.not_a_branch import needs_branch

        check_ref_name(branch, "branch")
        with needs_branch(self._ctx.refs, self._ctx.objects, branch, "session"):
            txn = Transaction.begin(
                self._ctx,
                branch,
                message=message,
                author=author,
                expires_in=expires_in,
                isolation=isolation,
            )
        return Session(txn)

    def join_session(self, session_id: str) -> Session:
        """The same transaction, from any process: staged writes are shared.

        A unique prefix of the id is enough.

        Raises
        ------
        NotFoundError
            If no session has that id (or the prefix is not unique).
        SessionClosedError, SessionExpiredError
            If the session can no longer write.
        """
        Session, Transaction = _session_classes()
        return Session(Transaction.join(self._ctx, session_id))

    def session_info(self, session_id: str) -> SessionInfo:
        """The state of a session (any status), by id or unique id prefix.

        A session whose committer stopped is shown as what recovery makes of it.
        """
        from zarrlake.txn.commit import current_record

        rec = current_record(self._ctx, self._ctx.records.find(session_id))
        return rec.info(self._ctx.clock())

    def session_writers(self, session_id: str) -> list[WriterInfo]:
        """The writers of a session (by id or unique prefix) with their states.

        A writer's state is writing, finished, failed or gone (see Session.commit's
        `unfinished`).
        """
        from zarrlake.txn.staging import Staging
        from zarrlake.txn.writers import describe

        rec = self._ctx.records.find(session_id)
        staging = Staging(self._ctx.meta, self._ctx.stage_partition(rec.id), b"")
        return describe(staging.state())

    def list_sessions(self, branch: str | None = None) -> list[SessionInfo]:
        """Open, unexpired sessions (optionally of one branch), oldest first."""
        now = self._ctx.clock()
        return [rec.info(now) for rec in self._ctx.records.list_open(branch)]

    @keyword_only("branch")
    def abandon_sessions(self, older_than: timedelta, *, branch: str | None = None) -> list[str]:
        """Abandon every open session created at least `older_than` ago; returns their ids.

        Only the sessions of `branch` if given, else of all branches. Their staged writes are
        dropped by the next gc.
        """
        from zarrlake.lifecycle.sessions import abandon_sessions

        return abandon_sessions(self._ctx, older_than, branch)

    def readonly_session(self, ref: str = "main", *, as_of: datetime | None = None) -> Session:
        """A read-only view of a commit, pinned when opened.

        With `as_of`, the newest commit of `ref`'s history made at or before that time.

        Raises
        ------
        NotFoundError
            If `ref` names nothing.

        Examples
        --------
        >>> s = repo.readonly_session("v1.0")
        >>> zarr.open_group(s.store, mode="r")["t2m"][0]  # doctest: +SKIP
        """
        Session, Transaction = _session_classes()
        commit_id = self.resolve(ref, as_of=as_of)
        return Session(Transaction(self._ctx, None, commit_id))

    # Arraylake-style implicit session (deprecated: reading an attribute made a session) ---

    def checkout(self, ref: str = "main") -> Session:
        """A session on `ref`: writable on a branch (`create_session`), read-only on a tag
        or a commit (`readonly_session`); it is also the one the deprecated `store`,
        `root_group`, `session` and `commit` of the repository use."""
        if self._ctx.refs.get(BRANCH, ref) is not None:
            self._session = self.create_session(ref)
        else:
            self._session = self.readonly_session(ref)
        self._checked_out = ref
        return self._session

    @property
    def session(self) -> Session:
        """Deprecated (reading it may create a session): `s = repo.checkout(ref)`.

        The current session of the implicit (Arraylake-style) API, made on use by `checkout`
        of the ref last checked out (first: "main").
        """
        warn(
            "Repo.session is deprecated (reading it creates a session): use "
            "s = repo.checkout(ref) or repo.create_session(branch)"
        )
        return self._current()

    def _current(self) -> Session:
        """The implicit API's session, checked out on first use."""
        if self._session is None:
            self.checkout(self._checked_out)
        assert self._session is not None
        return self._session

    @property
    def root_group(self) -> zarr.Group:
        """Deprecated (reading it may create a session): `repo.checkout(ref).root_group`."""
        warn(
            "Repo.root_group is deprecated (reading it creates a session): use "
            "s = repo.checkout(ref), then s.root_group"
        )
        return self._current().root_group

    @property
    def store(self) -> SessionStore:
        """Deprecated (reading it may create a session): `repo.checkout(ref).store`."""
        warn(
            "Repo.store is deprecated (reading it creates a session): use "
            "s = repo.checkout(ref), then s.store"
        )
        return self._current().store

    def commit(
        self, message: str, *, on_conflict: ConflictPolicy = "fail", allow_empty: bool = False
    ) -> str:
        """Deprecated: commit the session `checkout` returned (`s.commit(message)`).

        Commits the implicit API's session; its next use starts a fresh one on the same
        branch.
        """
        warn("Repo.commit is deprecated: commit the session checkout() returned, s.commit(message)")
        session = self._current()
        commit_id = session.commit(message, on_conflict=on_conflict, allow_empty=allow_empty)
        self._session = None  # `session` checks out the same branch again when used
        return commit_id

    # merge, revert, reset, blame, protection (zarrlake.vc.merge and friends) --------------

    def _history(self, what: str = "move") -> History:
        from zarrlake.txn.checks import branch_gate
        from zarrlake.txn.commit import settle_before_reset
        from zarrlake.vc.merge import History

        ctx = self._ctx
        settle = lambda branch, head: settle_before_reset(ctx, branch, head)  # noqa: E731
        gate = branch_gate(ctx, what)  # the branch's checks, on the commit it would get
        return History(ctx.objects, ctx.refs, ctx.settings.commit_timeout, settle, gate)

    @renamed_arguments(into="target")
    @keyword_only("target")
    def merge(
        self,
        source: str,
        *,
        target: str = "main",
        message: str | None = None,
        author: str | None = None,
        on_conflict: ConflictPolicy = "fail",
        fast_forward: FastForward = "allow",
    ) -> str:
        """Merge ref `source` into branch `target` (three-way, per chunk).

        Returns target's new head: a merge commit, or source's head on a fast-forward.

        Parameters
        ----------
        source
            The ref to merge (branch, tag or commit).
        target
            The branch that moves (`into=` before: deprecated).
        message, author
            Recorded on the merge commit.
        on_conflict
            "fail" (raise ConflictError), or resolve chunk conflicts keeping "ours" (the
            target's) or "theirs" (source's).
        fast_forward
            "allow" to move `target` to source's head when it is a descendant, "never" to
            always make a merge commit.

        Raises
        ------
        ConflictError
            If both sides changed a chunk (or node) differently and `on_conflict` is "fail".
        ExpiredHistoryError
            If `expire` dropped the history the two share.
        ProtectedBranchError
            If a protection rule requires pull requests into `target` (merge one instead:
            `create_pull_request`).
        NotABranchError
            If `target` is a tag or a commit id (the message says what to do instead).
        """
        from zarrlake.vc.keep import keeping
        from zarrlake.vc.not_a_branch import needs_branch

        check_ref_name(target, "branch")
        self._protection().check_merge(target)
        src = self.resolve(source)
        text = message if message is not None else f"Merge {source} into {target}"
        with (
            keeping(self._ctx, [src]),
            needs_branch(self._ctx.refs, self._ctx.objects, target, "merge"),
        ):
            return self._history("merge").merge(
                src,
                target,
                message=text,
                author=author,
                on_conflict=on_conflict,
                fast_forward=fast_forward,
            )

    def merge_base(self, a: str, b: str) -> str:
        """The best common ancestor commit of refs `a` and `b`.

        ExpiredHistoryError if `expire` dropped their common history.
        """
        from zarrlake.vc.merge import common_history_expired
        from zarrlake.vc.refexpr import merge_base

        try:
            found = merge_base(self._ctx.objects, self.resolve(a), self.resolve(b))
        except ExpiredHistoryError as e:
            message = f"no merge base of {a!r} and {b!r}: {common_history_expired(e)}"
            raise ExpiredHistoryError(message, e.commit, e.expired_at) from None
        if found is None:
            raise NotFoundError(f"{a!r} and {b!r} share no history; give two refs of one history")
        return found

    @renamed_arguments(branch="target")
    @keyword_only("target")
    def revert(
        self,
        commit: str,
        *,
        target: str = "main",
        message: str | None = None,
        author: str | None = None,
        allow_empty: bool = False,
    ) -> str:
        """A new commit on branch `target` (`branch=` before: deprecated) undoing the
        changes `commit` made to its first parent.

        InvalidInputError if that changes nothing, unless `allow_empty`.
        """
        from zarrlake.vc.keep import keeping

        check_ref_name(target, "branch")
        undone = self.resolve(commit)
        with keeping(self._ctx, [undone]):
            return self._history("revert").revert(
                undone, target, message=message, author=author, allow_empty=allow_empty
            )

    def reset_branch(self, branch: str, to: str, *, expected: str | None = None) -> str:
        """Move `branch` to ref `to`; returns the new head.

        With `expected`, only if the branch is there now (ConflictError otherwise, nothing
        moved). A branch whose rule requires pull requests refuses it (ProtectedBranchError); a
        tag or a commit id given as `branch` is refused saying what it is (NotABranchError).
        """
        from zarrlake.vc.keep import keeping
        from zarrlake.vc.not_a_branch import needs_branch

        check_ref_name(branch, "branch")
        self._protection().check_merge(branch, "reset")
        want = self.resolve(expected) if expected is not None else None
        target = self.resolve(to)
        with (
            keeping(self._ctx, [target]),
            needs_branch(self._ctx.refs, self._ctx.objects, branch, "reset"),
        ):
            return self._history("reset").reset(branch, target, want)

    def squash(
        self,
        branch: str,
        *,
        since: str,
        message: str | None = None,
        author: str | None = None,
        allow_merges: bool = False,
        allow_tags: bool = False,
    ) -> str:
        """Replace `branch`'s first-parent history after `since` with one commit.

        The new commit has `since` as its parent and the tree of the branch's head (its
        snapshot is reused: nothing of the data is written again); its change set is what
        the squashed commits changed together, moves included. The branch moves to it by
        compare-and-swap from the head that was squashed. The squashed commits stay while
        another branch or tag reaches them; `gc` later reclaims what only they held.

        Sessions open on the branch whose base is a squashed commit can no longer commit
        (their base is gone from the branch's history; ConflictError, kind "reset").

        Parameters
        ----------
        branch
            The branch whose history is squashed.
        since
            The commit kept: a ref to a commit of the branch's first-parent history.
        message
            The new commit's message (default: "Squash N commits" and their messages).
        author
            Recorded on the new commit.
        allow_merges
            Squash across merge commits (their other parents are then no longer part of
            the branch's history).
        allow_tags
            Squash commits that tags point at (the tags keep them, outside the branch).

        Returns
        -------
        str
            The id of the new commit, the branch's new head.

        Raises
        ------
        InvalidInputError
            If `since` is the head or not in its first-parent history, or a squashed
            commit is a merge or tagged and that is not allowed.
        BranchMovedError
            If a commit landed on the branch meanwhile; nothing was changed.
        ProtectedBranchError
            If a protection rule for the branch does not allow squashing
            (`protect_branch(..., allow_squash=True)`).
        ChecksFailedError
            If a check guarding the branch fails on the new commit.

        Examples
        --------
        >>> repo.squash("ingest", since="v1", message="Days 1-30")  # doctest: +SKIP
        """
        from zarrlake.txn.checks import branch_gate
        from zarrlake.txn.commit import settle_before_reset
        from zarrlake.vc.keep import keeping
        from zarrlake.vc.not_a_branch import needs_branch
        from zarrlake.vc.squash import squash, squashed

        check_ref_name(branch, "branch")
        if message is not None and not isinstance(message, str):
            raise InvalidInputError(f"message must be a string, not {message!r}")
        ctx = self._ctx
        self._protection().check_squash(branch)
        kept = self.resolve(since)
        with needs_branch(ctx.refs, ctx.objects, branch, "squash"):
            head, version = ctx.refs.require(BRANCH, branch)
        plan = squashed(ctx.objects, branch, head, kept)
        merges = plan.merges()
        if merges and not allow_merges:
            raise InvalidInputError(
                f"cannot squash {branch!r} since {kept[:12]}: merge commit {merges[0][:12]} "
                f"lies in between ({len(merges)} in all); allow_merges=True squashes across "
                "them (their other parents then leave the branch's history)"
            )
        tags = {cid: name for name, cid in self.list_tags().items()}
        tagged = [(tags[cid], cid) for cid, _ in plan.commits if cid in tags]
        if tagged and not allow_tags:
            name, cid = tagged[0]
            raise InvalidInputError(
                f"cannot squash {branch!r} since {kept[:12]}: tag {name!r} points at commit "
                f"{cid[:12]}, which the squash takes out of the branch's history; "
                "allow_tags=True squashes anyway (the tag keeps its commit)"
                "; or move or delete the tag first"
            )
        gate = branch_gate(ctx, "squash")

        def before(new: str) -> None:
            gate(branch, new, head)
            settle_before_reset(ctx, branch, head)

        text = message if message is not None else plan.default_message()
        with keeping(ctx, [kept, head]):
            return squash(ctx.objects, ctx.refs, branch, plan, version, text, author, before)

    @keyword_only("ref")
    def blame(self, array_path: str, chunk_coords: tuple[int, ...], *, ref: str = "main") -> Commit:
        """The commit that last wrote chunk `chunk_coords` of `array_path` at `ref`."""
        from zarrlake.vc.blame import Blame

        cid = Blame(self._ctx.objects).blame(self.resolve(ref), array_path, tuple(chunk_coords))
        return Commit.from_record(cid, self._ctx.objects.read_commit(cid))

    def protect_branch(
        self,
        name_or_glob: str,
        *,
        allow_direct_commits: bool = False,
        allow_delete: bool = False,
        require_pull_request: bool = False,
        required_approvals: int = 0,
        dismiss_stale_approvals: bool = False,
        allow_squash: bool = False,
    ) -> None:
        """Protect branches matching a name or glob.

        Sessions cannot commit to them directly (merge instead) unless allowed, and they cannot
        be deleted unless allowed.

        With `require_pull_request`, a direct `merge` into them is refused too: only a pull
        request's merge lands there. `required_approvals` is how many approvals a pull request
        into them needs; `dismiss_stale_approvals` makes approvals given before the source
        branch last moved stop counting."""
        self._protection().protect(
            name_or_glob,
            allow_direct_commits=allow_direct_commits,
            allow_delete=allow_delete,
            require_pull_request=require_pull_request,
            required_approvals=required_approvals,
            dismiss_stale_approvals=dismiss_stale_approvals,
            allow_squash=allow_squash,
        )

    def unprotect_branch(self, name_or_glob: str) -> None:
        """Remove the protection rule for `name_or_glob`; NotFoundError if there is none."""
        self._protection().unprotect(name_or_glob)

    def list_protected_branches(self) -> dict[str, dict[str, bool | int]]:
        """The protection rules, by pattern.

        {pattern: {allow_direct_commits, allow_delete}}, plus require_pull_request,
        required_approvals, dismiss_stale_approvals and allow_squash where a rule sets them.
        """
        out: dict[str, dict[str, bool | int]] = {}
        for r in self._protection().rules():
            out[r.pattern] = {k: v for k, v in r.to_json().items() if k != "pattern"}
        return out

    def add_virtual_source(self, prefix: str) -> None:
        """Allow virtual chunk references under `prefix` (`file:///dir`, `s3://bucket/dir`)."""
        from zarrlake.vc.sources import VirtualSources

        VirtualSources(self._ctx.meta, self._ctx.refs.partition).add(prefix)

    def list_virtual_sources(self) -> list[str]:
        """The URL prefixes virtual chunk references may point into."""
        from zarrlake.vc.sources import VirtualSources

        return VirtualSources(self._ctx.meta, self._ctx.refs.partition).prefixes()

    def remove_virtual_source(self, prefix: str) -> None:
        """Stop allowing new virtual chunk references under `prefix`; those already
        committed stay readable. NotFoundError if `prefix` is not an allowed prefix."""
        from zarrlake.vc.sources import VirtualSources

        VirtualSources(self._ctx.meta, self._ctx.refs.partition).remove(prefix)

    protected_branches = deprecated_alias("list_protected_branches")
    virtual_sources = deprecated_alias("list_virtual_sources")

    # checks (zarrlake.checks) -------------------------------------------------------------

    @keyword_only("branches")
    def add_check(
        self, name: str, check: Check, *, branches: str | tuple[str, ...] | list[str] = ("main",)
    ) -> CheckRule:
        """Declare check `name`: `check` (a zarrlake.checks kind) guards some branches.

        It guards the branches matching `branches` (names or globs). Every commit, merge,
        revert or reset onto such a branch runs it first on the proposed commit, and
        ChecksFailedError refuses the move when it fails.

        Raises
        ------
        InvalidInputError
            If the name is malformed or taken, or the check is not a check kind.
        NotFoundError
            If a Custom check names an entry point that is not installed.

        Examples
        --------
        >>> from zarrlake.checks import ValueRange
        >>> repo.add_check("t-range", ValueRange("t", min=-90, max=60))  # doctest: +SKIP
        """
        from zarrlake.vc.checks import custom
        from zarrlake.vc.checks.kinds import Custom
        from zarrlake.vc.checks.rules import CheckRules

        if isinstance(check, Custom):
            custom.load(check.entry_point)  # a clear error now, not at the next commit
        return CheckRules(self._ctx.meta, self._ctx.refs.partition).add(name, check, branches)

    def list_checks(self) -> list[CheckRule]:
        """The declared checks, by name (each with `.name`, `.check`, `.branches`)."""
        from zarrlake.vc.checks.rules import CheckRules

        return CheckRules(self._ctx.meta, self._ctx.refs.partition).rules()

    def remove_check(self, name: str) -> None:
        """Remove check `name`; NotFoundError if there is none."""
        from zarrlake.vc.checks.rules import CheckRules

        CheckRules(self._ctx.meta, self._ctx.refs.partition).remove(name)

    @keyword_only("base", "names")
    def run_checks(
        self,
        ref: str,
        *,
        base: str | None = None,
        names: list[str] | tuple[str, ...] | None = None,
        reuse: bool = True,
    ) -> list[CheckResult]:
        """Run every declared check (or those `names`) on the change from `base` to `ref`.

        The checks run whatever branches they guard; `base` defaults to `ref`'s first parent.
        Results are recorded against that (commit, base) pair and reused for it (`reuse=False`
        computes them again); a result for another commit never counts.

        Returns
        -------
        list of CheckResult
            One per check: `.name`, `.passed`, `.message`, `.array`, `.chunks` (a few
            failing chunk coordinates), `.failing` (their count), `.commit`, `.base`.
        """
        from zarrlake.txn.checks import run_checks
        from zarrlake.vc.checks.rules import CheckRules

        commit = self.resolve(ref)
        if base is None:
            parents = self._ctx.objects.read_commit(commit).parents
            if not parents:
                raise InvalidInputError(
                    f"commit {commit[:12]} has no parent: give the base to check it against"
                )
            base_id = parents[0]
        else:
            base_id = self.resolve(base)
        rules_ = CheckRules(self._ctx.meta, self._ctx.refs.partition)
        chosen = rules_.named(list(names)) if names is not None else rules_.rules()
        return run_checks(self._ctx, chosen, commit, base_id, reuse)

    def gc(
        self,
        older_than: timedelta = timedelta(hours=1),
        *,
        dry_run: bool = False,
        full: bool = False,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> GcReport:
        """Delete objects nothing can reach, known garbage for at least `older_than`.

        With `full`, also find leftovers by listing every object (see zarrlake.lifecycle.gc).

        Parameters
        ----------
        older_than
            Grace period: only objects known to be garbage at least this long are deleted.
        dry_run
            Report what would be deleted; delete nothing.
        full
            Also list every object, finding leftovers nothing registered (slower).
        progress
            Called as progress(phase, done, total or None).

        Returns
        -------
        GcReport
            What was deleted (objects, bytes, per kind) and what waits for a later run.

        Raises
        ------
        GcBusyError
            If another collection is running on the repository.
        """
        from zarrlake.lifecycle.gc import collect

        return collect(self._ctx, older_than, dry_run=dry_run, full=full, progress=progress)

    @keyword_only("branches")
    def expire(
        self, older_than: datetime | timedelta, *, branches: list[str] | None = None
    ) -> ExpireReport:
        """Drop commits older than `older_than` from the history of `branches` (None: all).

        Branch heads and tags are not dropped; `gc` then reclaims what only the dropped
        commits reached.
        """
        from zarrlake.lifecycle.expire import expire

        return expire(self._ctx, older_than, branches)

    def copy_metastore(self, to: str, *, switch: bool = True, replace: bool = False) -> CopyReport:
        """Copy this repository's refs, sessions and gc records to another metastore.

        Then verify the copy, and (with `switch`) make the repository use it from now on.

        Parameters
        ----------
        to
            "bucket" (the repository's own storage; s3:// only), or a metastore URL
            (``postgresql://...``, ``sqlite:///path``).
        switch
            Record the target's kind in the repository config (reopen the repository
            afterwards; PostgreSQL and SQLite elsewhere need their URL given then).
        replace
            Drop and replace an older copy of this repository the target holds (one it
            used before). Open sessions are copied along (closed in the old metastore).

        Raises
        ------
        ZarrLakeError
            If a session is being committed, or a collector runs (the copy is offline).
        AlreadyExistsError
            If the target already holds this repository's refs and `replace` is not given.
        CorruptionError
            If the copy read back differs (the repository keeps its old metastore).
        """
        from zarrlake.admin.metastore_copy import copy_metastore

        return copy_metastore(self._ctx, to, switch, replace)

    # exporting and copying (zarrlake.admin.export, zarrlake.admin.clone) ---------------------

    def export(
        self,
        ref: str,
        dest: str | os.PathLike[str],
        *,
        arrays: list[str] | tuple[str, ...] | None = None,
        storage_options: dict[str, Any] | None = None,
        virtual: str = "refuse",
        overwrite: bool = False,
        workers: int = 16,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExportReport:
        """Write the tree at `ref` as a plain Zarr v3 hierarchy that zarr and xarray open
        without zarrlake.

        Chunk bytes are copied as stored (never decoded and encoded again) and checked
        against their digests on the way; sharded arrays come out as the shards zarr reads.

        Parameters
        ----------
        ref
            A branch, tag, commit id or ref expression.
        dest
            A directory, or an object-store URL (``s3://bucket/prefix``); empty, unless
            `overwrite` (then what it holds is deleted first).
        arrays
            Only these arrays or groups (with everything below them and the groups above).
        storage_options
            Options of the destination's object store (region, endpoint, credentials).
        virtual
            "refuse" (default: nothing is written when the tree holds virtual chunks) or
            "materialize" (read them from their sources, checked, and write them).
        workers
            Chunks copied at once (between local stores at most two a core: the copy is
            CPU work there).
        progress
            Called as progress(bytes written, bytes in all).

        Returns
        -------
        ExportReport
            Arrays, documents, chunks and bytes written, and the time taken.

        Raises
        ------
        AlreadyExistsError
            If `dest` holds anything (and `overwrite` is not given), or a repository.
        InvalidInputError
            If the tree holds virtual chunks and `virtual` is "refuse".
        CorruptionError, PurgedError
            If a chunk fails its checksum, or a purge removed it (the export stops).
        """
        from zarrlake.admin.export import export

        return export(
            self._ctx,
            self.resolve(ref),
            dest,
            arrays=None if arrays is None else list(arrays),
            storage_options=storage_options,
            virtual=virtual,  # type: ignore[arg-type]
            overwrite=overwrite,
            workers=workers,
            progress=progress,
        )

    @classmethod
    def clone(
        cls,
        source: Repo | str | os.PathLike[str],
        dest: str | os.PathLike[str],
        *,
        refs: list[str] | tuple[str, ...] | None = None,
        depth: int | None = None,
        metastore: str | None = None,
        storage_options: dict[str, Any] | None = None,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> Repo:
        """A new repository at `dest` holding the branches and tags of `source` (all, or
        `refs`) with their history (all of it, or the last `depth` commits of each).

        The copy shares nothing with the source (its own storage, metastore and id; the
        same commit ids), carries its purges, and remembers where it came from: `pull`
        brings it up to date. A clone stopped half-way (killed) goes on when run again.

        Parameters
        ----------
        source
            The repository to copy: a Repo, or its location (opened with default options).
        dest
            Where the copy goes: a directory or an object-store URL.
        refs
            Branch and tag names to copy (default: all).
        depth
            Copy only the last `depth` commits of each ref's history (default: all); the
            copy's history ends there as after `expire`.
        metastore, storage_options
            The copy's metastore and object-store options, as `Repo.create` takes them.
        progress
            Called as progress(phase, done, total or None).

        Returns
        -------
        Repo
            The copy (`last_pull` holds what was copied).

        Raises
        ------
        AlreadyExistsError
            If `dest` holds a repository that is not a clone of `source`.
        NotFoundError
            If a name in `refs` is no branch or tag of the source.
        """
        from zarrlake.admin.clone import clone

        src = source if isinstance(source, Repo) else cls.open(source)
        try:
            spec = resolve_spec(dest, metastore, storage_options)
            ctx, report = clone(
                src._ctx, spec, None if refs is None else list(refs), depth, progress
            )
        finally:
            if src is not source:
                src.close()
        repo = cls(ctx)
        repo.last_pull = report
        return repo

    def origin(self) -> dict[str, Any] | None:
        """Where this repository was cloned from (`location`, `repo_id`, the `refs` and
        `depth` asked for), or None if it is not a clone."""
        from zarrlake.admin.clone import origin

        return origin(self._ctx)

    def pull(
        self,
        source: Repo | str | os.PathLike[str] | None = None,
        *,
        refs: list[str] | tuple[str, ...] | None = None,
        depth: int | None = None,
        force: bool = False,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> PullReport:
        """Bring this copy up to date with `source` (default: the repository it was
        cloned from), copying only the objects it lacks, and its purges.

        `refs` are the branch and tag names to bring (default: the clone's, or all); their
        new history is copied down to the commits the copy holds (with `depth`, at most
        that many generations of it). A branch of the copy with commits the source lacks,
        or a tag at another commit, is refused with FastForwardError (nothing moved) unless
        `force`. A pull stopped half-way (killed) goes on when run again.
        """
        from zarrlake.admin.clone import origin, pull

        made = origin(self._ctx)
        if source is None:  # the origin, reached with this copy's storage options
            if made is None:
                raise InvalidInputError("this repository is not a clone: give the source")
            src = Repo.open(
                made["location"],
                metastore=made.get("metastore") or None,
                storage_options=dict(self.spec.storage_options) or None,
            )
        else:
            src = source if isinstance(source, Repo) else Repo.open(source)
        if made is not None and refs is None:  # the clone's refs, unless others are given
            refs = made.get("refs")
        try:
            report = pull(
                self._ctx,
                src._ctx,
                None if refs is None else list(refs),
                depth,
                force=force,
                progress=progress,
            )
        finally:
            if src is not source:
                src.close()
        self.last_pull = report
        return report

    # purging data from every version (zarrlake.admin.purge) --------------------------------

    def purge(
        self,
        paths: str | list[str] | tuple[str, ...],
        *,
        reason: str,
        by: str,
        region: tuple[slice | int, ...] | str | None = None,
        force: bool = False,
        keep_unremovable: bool = False,
        keep_heads: bool = False,
        messages: list[str] | tuple[str, ...] = (),
        dry_run: bool = False,
        progress: Callable[[str, int, int | None], None] | None = None,
    ) -> PurgeRecord:
        """Remove the chunk bytes of arrays (or of a region of one) from every version.

        Commits, ids and manifests stay as they are; reading a purged chunk at any version
        then raises PurgedError naming the purge. The purge is recorded in the metastore
        (`purges()`), and `fsck(purges=True)` proves it.

        Parameters
        ----------
        paths
            Array paths; every stored version of each is purged.
        reason, by
            Why, and who asked: kept in the purge record.
        region
            With one path: only the chunks meeting this region (slices and integers in
            array coordinates, or their text "0:10,:", at each version's shape and
            chunking).
        force
            Purge even bytes a branch head still holds, or that chunks outside the
            selection share (they are removed there too); refused otherwise, naming them.
        keep_unremovable
            Purge what can be and keep chunks of at most 64 bytes (inside manifests, which
            commit ids cover) and virtual chunks (outside the repository); refused otherwise.
        keep_heads
            Leave out the bytes branch heads hold (write the corrected data on the branch
            first): only history loses the rest, and no head needs `force`.
        messages
            Commits whose messages to redact where their ids do not cover them: the session
            records that made them and the pull requests that merged them.
        dry_run
            Find what would be removed; change nothing.
        progress
            Called as progress(phase, done, total or None).

        Returns
        -------
        PurgeRecord
            The record: counts of chunks, objects, ranges and bytes removed.

        Raises
        ------
        ZarrLakeError
            If the bytes are still needed and `force` is not given (the message says where).
        InvalidInputError
            If the selection holds chunks a purge cannot remove, and `keep_unremovable` is
            not given.
        GcBusyError
            If a garbage collection is running.
        """
        from zarrlake.admin.purge import purge

        return purge(
            self._ctx,
            list(paths) if not isinstance(paths, str) else [paths],
            reason=reason,
            by=by,
            region=region,
            force=force,
            keep_unremovable=keep_unremovable,
            keep_heads=keep_heads,
            messages=messages,
            dry_run=dry_run,
            progress=progress,
        )

    def purges(self) -> list[PurgeRecord]:
        """Every purge record, oldest first (who, when, why, which arrays, what it removed)."""
        from zarrlake.vc.purges import PurgeRecords

        return PurgeRecords(self._ctx.meta, self._ctx.refs.partition).list()

    def finish_purges(self) -> list[PurgeRecord]:
        """Finish purges a crash stopped half-way (`zarrlake purge --resume`); returns them."""
        from zarrlake.admin.purge import finish_pending

        return finish_pending(self._ctx)

    # pull requests (zarrlake.pulls) -----------------------------------------------------------

    @keyword_only("target")
    def create_pull_request(
        self,
        source: str,
        *,
        target: str = "main",
        title: str | None = None,
        description: str = "",
        author: str | None = None,
    ) -> PullRequest:
        """Open a pull request of branch `source` into branch `target`.

        Parameters
        ----------
        source, target
            Existing, different branches.
        title
            Default: "Merge SOURCE into TARGET".
        description, author
            Free text, and who opens it (a name; there is no authentication).

        Returns
        -------
        PullRequest
            The open pull request, with the next id (1, 2, ...).

        Raises
        ------
        InvalidInputError
            If `source` and `target` are the same, or either is not a branch.
        PullRequestError
            If a pull request of `source` into `target` is open already.

        Examples
        --------
        >>> pr = repo.create_pull_request("ingest/day1", target="main", title="Day 1")
        >>> pr.approve(author="alice")  # doctest: +SKIP
        >>> pr.merge(author="alice")  # doctest: +SKIP
        """
        from zarrlake.pulls import create

        return create(self, source, target, title, description, author)

    def pull_request(self, pr_id: int | str) -> PullRequest:
        """The pull request numbered `pr_id` (12, "12" or "#12"); NotFoundError if none."""
        from zarrlake.pulls import PullRequest, records_of
        from zarrlake.vc.pulls import parse_id

        return PullRequest(self, records_of(self).get(parse_id(pr_id))[0])

    def list_pull_requests(self, state: str | None = "open") -> list[PullRequest]:
        """Pull requests in `state` ("open", "merging", "merged", "closed"; None: all), by id."""
        from zarrlake.pulls import PullRequest, records_of

        return [PullRequest(self, rec) for rec in records_of(self).list(state)]
