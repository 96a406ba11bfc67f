"""Garbage collection: delete the objects nothing can reach, safely next to live writers.

A run (1) settles sessions: committers whose lease ran out are recovered first, open
sessions past their expiry become expired, and the staged records of finished sessions are
dropped after their chunk objects are registered as candidates; (2) gathers candidates:
normally from what the metastore knows (those staged records, expired history, candidates
left by earlier runs), with `full=True` also by listing every object; (3) marks what is
live; (4) reads dead manifests, snapshots and commits to register what they refer to; (5)
enters a sweep epoch, marks again what changed meanwhile, and deletes dead candidates older
than the grace period. The sweep protocol is in `gc_protocol`.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING

from zarrlake._util import crashpoints
from zarrlake._util.deprecation import deprecated_alias
from zarrlake.errors import InvalidInputError, NotFoundError, ZarrLakeError
from zarrlake.format import blocks
from zarrlake.format.commit import CommitRecord
from zarrlake.format.fragment import FragmentRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.storage.local import LocalObjectStore
from zarrlake.vc.gc_protocol import (
    GcState,
    Heartbeat,
    Phase,
    forget_uploads,
    staged_candidates,
    staged_fragments,
    staged_uploads,
    uploads_partition,
)
from zarrlake.vc.keep import kept
from zarrlake.vc.reach import (
    KINDS,
    WRITTEN_BY_COMMITS,
    Reach,
    expired_commits,
    fragment_refs,
    kind_of,
    manifest_refs,
    record_refs,
)
from zarrlake.vc.refs import BRANCH, TAG
from zarrlake.vc.sweep_fence import Fence, FencedDeletes, SweepEnded, clear_bin, leftover_bins

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext

MAX_GRACE = timedelta(days=3650)
DELETE_BATCH = 1000
"""Objects deleted between lock renewals (a batch drops its candidates in one metastore
write: GcState.drop takes DROP_BATCH a write)."""
LIVE_STATUSES = ("open", "committing")

Progress = Callable[[str, int, int | None], None]
"""progress(phase, done, total): called as long phases advance (total None if unknown)."""
Lister = Callable[[list[str], set[str]], Iterable[str]]
"""lister(prefixes, live): the keys under the prefixes that are not in `live` (a Spark job
lists in parallel, filtering against a broadcast of `live`)."""
Deleter = Callable[[FencedDeletes], list[str]]
"""Deletes a batch under its sweep's fence (`FencedDeletes.run`, which a Spark task can run
on its part of the keys); returns the keys it deleted. SweepEnded once the sweep was ended
by another process."""
PARTIAL = re.compile(r"(.+)#\d+")
"""A local directory's half-written object: obstore writes `<key>#<n>` and links it to
`<key>` when complete; a writer killed in between leaves the file, which no listing shows."""


STALE_PARTIAL = 3600.0
"""Seconds after which a half-written file is garbage even if its object is live."""


@dataclass(frozen=True)
class Partial:
    """A half-written object file left in a local directory: its path, the key it was
    written for, its size and modification time."""

    path: str
    key: str
    size: int
    mtime: float


def partial_uploads(store: object, prefixes: Iterable[str]) -> list[Partial]:
    """The half-written object files under `prefixes` of a local directory store (none for
    other stores: their uploads land whole or not at all)."""
    while not isinstance(store, LocalObjectStore) and hasattr(store, "inner"):
        store = store.inner
    if not isinstance(store, LocalObjectStore):
        return []
    found = []
    for prefix in prefixes:
        top = store.root / prefix
        for folder, _, files in os.walk(top):
            for name in files:
                if "#" not in name:  # most files: no regex match per object
                    continue
                match = PARTIAL.fullmatch(name)
                if match is None:
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(os.path.join(folder, match[1]), store.root)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue  # its upload just completed
                found.append(Partial(path, rel.replace(os.sep, "/"), st.st_size, st.st_mtime))
    return found


@dataclass
class GcReport:
    """What a garbage collection deleted (or, with dry_run, would delete)."""

    dry_run: bool = False
    full: bool = False
    objects_deleted: int = 0
    bytes_deleted: int = 0
    by_kind: dict[str, tuple[int, int]] = field(default_factory=dict)
    sessions_expired: int = 0
    staged_records_deleted: int = 0
    candidates_pending: int = 0  # dead, but younger than the grace period (a later run)
    candidates_live: int = 0  # found live again (dropped from the candidates)
    deferred: int = 0  # kept this run: a commit in progress, or writes not flushed yet
    metastore_bytes_freed: int = 0  # the metastore file shrank by (SQLite VACUUM)
    seconds: float = 0.0

    def count(self, key: str, size: int) -> None:
        """Record one deleted object of `size` bytes, in the totals and under its kind."""
        kind = kind_of(key)
        n, b = self.by_kind.get(kind, (0, 0))
        self.by_kind[kind] = (n + 1, b + size)
        self.objects_deleted += 1
        self.bytes_deleted += size

    def to_json(self) -> dict:
        """The report as a plain dict (per-kind counts as objects/bytes), for `--json` output."""
        doc = dict(self.__dict__)
        doc["by_kind"] = {k: {"objects": n, "bytes": b} for k, (n, b) in self.by_kind.items()}
        return doc

    to_dict = deprecated_alias("to_json")


def check_older_than(older_than: object) -> timedelta:
    """`older_than` if it is a timedelta between zero and MAX_GRACE; else InvalidInputError."""
    if not isinstance(older_than, timedelta):
        raise InvalidInputError(f"older_than must be a datetime.timedelta, not {older_than!r}")
    if older_than < timedelta(0):
        raise InvalidInputError(f"older_than must not be negative, not {older_than}")
    if older_than > MAX_GRACE:
        raise InvalidInputError(
            f"older_than must be at most {MAX_GRACE.days} days, not {older_than}"
        )
    return older_than


def _noop(phase: str, done: int, total: int | None) -> None:
    pass


class Collector:
    """One garbage-collection run over a repository context."""

    def __init__(
        self,
        ctx: RepoContext,
        progress: Progress | None = None,
        lister: Lister | None = None,
        deleter: Deleter | None = None,
        delete_batch: int | None = None,
    ) -> None:
        self.delete_batch = delete_batch or DELETE_BATCH  # (read now: the simulator sets it)
        self.ctx = ctx
        self.objects = ctx.objects
        self.store = ctx.object_store
        self.state = GcState(ctx)
        self.progress = progress or _noop
        self.lister = lister or self._list
        self.deleter = deleter or self._delete
        self.report = GcReport()
        self.sizes: dict[str, int] = {}
        self._fragment_refs: dict[str, set[str]] = {}
        self.unread: dict[str, tuple[int, int, str]] = {}  # fragment objects to read
        self.unflushed = False  # a live session's worker holds writes not flushed yet
        self.history_running = False  # a merge, reset or new ref keeps commits (vc/keep.py)
        self.partials: list[Partial] = []  # half-written files a full run found
        self.grace = 0.0
        self.names: dict[str, list[str]] = {}  # dead containers read: the keys each names

    def _list(self, prefixes: list[str], live: set[str]) -> Iterator[str]:
        for prefix in prefixes:
            yield from (k for k in self.store.list_parallel(prefix) if k not in live)

    def _delete(self, batch: FencedDeletes) -> list[str]:
        """The batch's fenced deletes, in parallel on a remote store."""
        return batch.run(self.store, map=self._map)

    def _map(self, fn: Callable[[str], object], keys: list[str]) -> list[object]:
        """`fn` over `keys`: on the repository's pool for a remote store, in turn locally."""
        if not self.store.remote:
            return [fn(k) for k in keys]
        return list(self.objects.map(fn, keys))

    # sessions -----------------------------------------------------------------------------

    def settle_sessions(self, dry_run: bool) -> tuple[dict[str, int | None], set[str]]:
        """(objects finished sessions staged; live objects: what open and committing
        sessions staged, and their bases). Committers whose lease ran out are recovered
        first; finished sessions' fragments are registered as candidates and their staging
        records dropped (fragment objects whose index is unread go to `self.unread`)."""
        from zarrlake.txn.commit import load

        dead: dict[str, int | None] = {}
        live: set[str] = set()
        now = self.ctx.clock()
        finished = []
        for rec in list(self.ctx.records.scan()):
            if rec.status == "committing" and rec.lease is not None and now > rec.lease:
                rec, _ = load(self.ctx, rec.id)
            if rec.status == "open" and now > rec.expires_at and not dry_run:
                rec = self._expire_session(rec.id) or rec
                self.report.sessions_expired += rec.status == "expired"
            partition = self.ctx.stage_partition(rec.id)
            held = rec.status in LIVE_STATUSES or rec.may_land(now)  # aborted, may still land
            if held and not (rec.status == "open" and now > rec.expires_at):
                live.update(self._staged_refs(partition))
                live.update(self._uploads(rec.id))
                live.update(k for k, _ in rec.uploads)  # its first write's, as born
                if rec.base:  # (none yet while the session is being created)
                    live.add(f"commits/{rec.base}")
                continue
            finished.append(rec)
        # What finished sessions left: staged records, and uploads recorded (flushed or not),
        # read in parallel (one scan of each partition; most are empty).
        left = self.objects.map(self._left_by, [rec.id for rec in finished])
        for rec, (rows, fragments, uploaded) in zip(finished, left, strict=True):
            sid = rec.id
            if not rows and not uploaded and not rec.uploads:
                continue
            found, indexes = staged_candidates(self.objects, fragments)
            found += uploaded
            found += list(rec.uploads)
            dead.update(found)
            self.unread.update(indexes)
            if not dry_run:
                self.state.add(self.candidates, found, indexes)
                crashpoints.reached("gc_after_register")
                if rows:
                    self.ctx.meta.drop_partition(self.ctx.stage_partition(sid))
                uploads = uploads_partition(self.ctx, sid)
                forget_uploads(self.ctx.meta, uploads, [k for k, _ in uploaded])
                if rec.uploads:  # registered: the record need not carry them any more
                    self._forget_born(sid)
            self.report.staged_records_deleted += rows
        return dead, live

    def _forget_born(self, session_id: str) -> None:
        """Clear the uploads a finished session's record carries, now registered (best
        effort: a record left carrying them has them registered again next run)."""

        def change(rec):  # a SessionRecord
            return replace(rec, uploads=()) if rec.uploads else None

        with contextlib.suppress(ZarrLakeError):
            self.ctx.records.update(session_id, change)

    def _left_by(
        self, session_id: str
    ) -> tuple[int, list[FragmentRecord], list[tuple[str, int | None]]]:
        """(staged records, staged fragments, recorded uploads) of a finished session."""
        items = list(self.ctx.meta.scan(self.ctx.stage_partition(session_id)))
        fragments = [FragmentRecord.decode(v) for k, v, _ in items if k[:1] == b"f"]
        uploads = staged_uploads(self.ctx.meta, uploads_partition(self.ctx, session_id))
        return len(items), fragments, uploads

    def _expire_session(self, session_id: str):  # -> SessionRecord | None
        from dataclasses import replace

        def change(rec):  # a SessionRecord
            if rec.status != "open" or self.ctx.clock() <= rec.expires_at:
                return None
            return replace(rec, status="expired")

        try:
            rec, _ = self.ctx.records.update(session_id, change)
            return rec
        except ZarrLakeError:
            return None

    def _staged_refs(self, partition: str) -> set[str]:
        """Objects the fragments staged in a partition refer to (the fragments included).
        Notes in `self.unflushed` whether a worker holds writes it has not flushed."""
        out: set[str] = set()
        self.unflushed |= any(True for _ in self.ctx.meta.scan(partition, b"d", b"d"))
        for r in staged_fragments(self.ctx.meta, partition):
            if r.location not in self._fragment_refs:
                self._fragment_refs[r.location] = set(record_refs(self.objects, r))
            out |= self._fragment_refs[r.location]
        return out

    def _uploads(self, session_id: str) -> set[str]:
        """The objects a session recorded it uploads (flushed or not)."""
        return {
            k for k, _ in staged_uploads(self.ctx.meta, uploads_partition(self.ctx, session_id))
        }

    def live_sessions(self) -> tuple[set[str], bool]:
        """Objects staged or uploaded by open or committing sessions (and their bases), and
        whether a commit is in progress."""
        live: set[str] = set()
        committing = False
        for rec in self.ctx.records.scan():
            if rec.status in LIVE_STATUSES or rec.may_land(self.ctx.clock()):
                committing |= rec.status != "open"  # committing, or aborted but may land
                live.update(self._staged_refs(self.ctx.stage_partition(rec.id)))
                live.update(self._uploads(rec.id))
                live.update(k for k, _ in rec.uploads)  # its first write's, as born
                if rec.base:
                    live.add(f"commits/{rec.base}")
        return live, committing

    def expand_fragments(self, fragments: dict[str, tuple[int, int, str]]) -> dict[str, int | None]:
        """What staged fragment objects name (chunk objects, the fragments themselves):
        read once, when their session is finished."""
        found: dict[str, int | None] = {}
        for location, index in fragments.items():
            for key, need in fragment_refs(self.objects, location, index).items():
                found.setdefault(key, need if kind_of(key) == "chunks" else None)
        return found

    # marking ------------------------------------------------------------------------------

    def roots(self, reach: Reach, extra: set[str]) -> None:
        """Mark from branch heads, tags, session bases (after reading the sessions) and the
        commits running history operations keep (vc/keep.py)."""
        bases = {k.split("/", 1)[1] for k in extra if k.startswith("commits/")}
        reach.add_keys(k for k in extra if not k.startswith("commits/"))
        held = kept(self.ctx)
        self.history_running = bool(held)
        heads = set(self.ctx.refs.list(BRANCH).values()) | set(self.ctx.refs.list(TAG).values())
        # a ref made while expire runs may point at a commit it marked, until it takes the
        # marker back: refs and kept commits are marked whatever the markers say
        reach.add_commits(sorted(heads | bases), even_expired=heads | held)

    def expand(self, dead: Iterable[str]) -> list[tuple[str, int | None]]:
        """What dead commits, snapshots and manifest ranges refer to (read before they are
        deleted, so their contents become candidates too)."""
        found: list[tuple[str, int | None]] = []
        for key in dead:
            kind, _, oid = key.partition("/")
            names: list[tuple[str, int | None]] = []
            try:
                if kind == "commits":
                    rec = CommitRecord.decode(oid, self._get(key))
                    names += [(f"snapshots/{rec.snapshot}", None), (f"changes/{rec.changes}", None)]
                    names += [(f"commits/{p}", None) for p in rec.parents]
                elif kind == "snapshots":
                    root = SnapshotRoot.decode(oid, self._get(key))
                    names += [(f"manifests/{m}", None) for m in root.ranges.ids]
                elif kind == "manifests":
                    names += list(manifest_refs(ManifestRange.decode(oid, self._get(key))).items())
            except NotFoundError:
                continue
            except ZarrLakeError:
                continue  # a damaged dead object: what it referred to is left for --full
            if names:
                self.names[key] = [k for k, _ in names]
            found += names
        return found

    def hold_named(self, due: list[str], dead: Iterable[str]) -> list[str]:
        """`due` without what a dead container this run keeps names, transitively: a commit
        record, snapshot or manifest left for a later run must stay whole, or a ref made at
        it meanwhile (which finds the record, and no sweep running) would point at missing
        objects (soak seed 1004066: a commit registered again, by a clock ahead of the
        collector's, waited while its snapshot and change set were deleted)."""
        due_now = set(due)
        stack = [k for k in dead if k in self.names and k not in due_now]
        held: set[str] = set()
        while stack:
            for key in self.names.get(stack.pop(), ()):
                if key in due_now and key not in held:
                    held.add(key)
                    stack.append(key)
        return [k for k in due if k not in held] if held else due

    def _get(self, key: str) -> bytes:
        data = self.store.get(key)
        self.sizes[key] = len(data)
        return data

    def size(self, key: str, known: int | None) -> int:
        """The size of `key` to report: cached, `known` for chunks, or read (-1 once the object is
        gone)."""
        if key in self.sizes:
            return self.sizes[key]
        if known is not None and kind_of(key) == "chunks":
            return known
        try:
            return len(self.store.get(key))
        except NotFoundError:
            return -1  # already gone (e.g. an expired commit record): not counted

    # the run ------------------------------------------------------------------------------

    def run(self, older_than: timedelta, dry_run: bool, full: bool) -> GcReport:
        """One collection: take the gc lock (unless `dry_run`), mark and sweep, report.

        A dry run takes no lock and deletes nothing; it reports what a real run would delete."""
        start = time.monotonic()
        grace = check_older_than(older_than).total_seconds()
        self.report = GcReport(dry_run=dry_run, full=full)
        if not dry_run:
            self.state.acquire()
        try:
            if not dry_run:
                self._clear_leftovers()
            self._run(grace, dry_run, full)
        finally:
            if not dry_run:
                self.state.release()
        if not dry_run:
            self.report.metastore_bytes_freed = vacuum(self.ctx.meta)
        self.report.seconds = time.monotonic() - start
        return self.report

    def _clear_leftovers(self) -> None:
        """What sweeps that ended left behind (the lock is this collector's and no sweep is
        under way: `acquire` ended a stale one): their batch records, and on a local
        directory their bins: one a seal renamed (its sealer stopped half-way) has its
        objects put back, one its own collector ended is emptied."""
        phase, _ = self.state.phase()
        self.state.forget_sweeps(phase.epoch)
        for name in leftover_bins(self.store):
            epoch = name.split(".", 1)[0]
            if epoch.isdigit() and int(epoch) <= phase.epoch:
                clear_bin(self.store, name.split(".", 1)[0], sealed="." in name)

    def _run(self, grace: float, dry_run: bool, full: bool) -> None:
        self.candidates = self.state.candidates()
        self.progress("sessions", 0, None)
        self.unread = {k: c.index for k, c in self.candidates.items() if c.index}
        dead_staged, live_staged = self.settle_sessions(dry_run)
        fresh = dict(dead_staged) | self.expand_fragments(self.unread)
        expired = expired_commits(self.objects)
        reach = Reach(self.objects, expired)
        self.progress("marking", 0, None)
        self.roots(reach, live_staged)
        # found by listing alone, now or by an earlier run
        listed_only = {k for k, c in self.candidates.items() if c.listed}
        if full:
            self.partials = partial_uploads(self.store, [f"{k}/" for k in (*KINDS, "blocks")])
            for listed, key in enumerate(self.lister([f"{k}/" for k in KINDS], reach.live), 1):
                if key not in fresh and key not in self.candidates:
                    listed_only.add(key)
                fresh.setdefault(key, None)
                if listed % 1000 == 0:
                    self.progress("listing", listed, None)
        if self.unflushed:  # a writer may have uploaded them for writes it has not flushed
            self.report.deferred += len(listed_only)
            fresh = {k: v for k, v in fresh.items() if k not in listed_only}
        pool = {k: c.size for k, c in self.candidates.items()} | fresh
        frontier = [k for k in pool if k not in reach.live]
        while frontier:  # dead containers: what they refer to may be dead too
            found = [(k, s) for k, s in self.expand(frontier) if k not in pool]
            pool.update(found)
            frontier = [k for k, _ in found if k not in reach.live]
        now = self.ctx.clock()
        first_seen = {k: c.first_seen for k, c in self.candidates.items()}
        dead = [k for k in pool if k not in reach.live]
        due = [k for k in dead if now - first_seen.get(k, now) >= grace]
        if self.unflushed:
            due = [k for k in due if k not in listed_only]
        due = self.hold_named(due, dead)
        self.report.candidates_pending = len(dead) - len(due)
        self.grace = grace
        if dry_run:
            for key in due:
                if (size := self.size(key, pool.get(key))) >= 0:
                    self.report.count(key, size)
            for partial in self._dead_partials(reach):
                self.report.count(partial.key, partial.size)
            return
        # Dead objects that wait for a later run are registered. Those deleted now need no
        # record: what found them (expired commits, dead containers, fragments, the listing)
        # is deleted after them, so a run that stops half-way finds them again.
        due_now = set(due)
        waiting = [(k, s) for k, s in pool.items() if k not in reach.live and k not in due_now]
        self.state.add(
            self.candidates,
            [(k, s) for k, s in waiting if k not in self.candidates],
            listed=listed_only,
        )
        crashpoints.reached("gc_after_register")
        alive = [k for k in self.candidates if k in reach.live]
        self.state.drop(alive)
        self.report.candidates_live = len(alive)
        self.sweep(reach, due, pool, listed_only)

    def _keep_redropped(self, reach: Reach, due: list[str]) -> list[str]:
        """`due` without the candidates registered again since this run read them, within
        the grace period: the grace counts from a candidate record's latest time. A due
        commit a ref dropped again (a ref pointed at it meanwhile, `register_dropped`) is
        kept with what it reaches; another object found dead again (by a session's clean-up
        or a collector whose lock was taken over) waits for a later run. So does one whose
        record was dropped since (found live by a collector whose lock was taken over): it
        is registered again, first seen now."""
        if not due:
            return due
        now = self.ctx.clock()
        gone: list[str] = []
        again = self.state.changed(due, gone)
        young = {
            k
            for k, c in again.items()
            if k in self.candidates
            and c.first_seen > self.candidates[k].first_seen
            and now - c.first_seen < self.grace
        }
        if gone:  # (kept in `self.candidates` as registered now: `expanded` rewrites rows)
            read = [self.candidates.pop(k) for k in gone]
            indexes = {c.key: c.index for c in read if c.index}
            listed = {c.key for c in read if c.listed}
            self.state.add(self.candidates, [(c.key, c.size) for c in read], indexes, listed)
            young.update(gone)
        commits = [k.split("/", 1)[1] for k in young if k.startswith("commits/")]
        if commits:
            reach.add_commits(commits)
        self.report.deferred += len(young) - len(commits)
        return [k for k in due if k not in young]

    def sweep(
        self, reach: Reach, due: list[str], pool: dict[str, int | None], listed_only: set[str]
    ) -> None:
        """Enter the sweep phase, re-check what is live, then delete the `due` objects still
        unreached.

        Objects only a listing found wait while writers hold unflushed writes, and metadata objects
        wait while a commit is under way; deleting stops at the phase's deadline."""
        phase = self.state.begin_sweep()
        fence = Fence(self.store, phase.sweep, self._map)
        beat = Heartbeat(self.state, phase)
        handled: list[str] = []  # keys of the batches sent (deleted, or found gone)
        ended = False
        try:
            fence.open()
            crashpoints.reached("gc_after_sweep_begins")
            due = self.recheck(reach, due, pool, listed_only)
            order = {kind: i for i, kind in enumerate(KINDS)}
            due.sort(key=lambda k: order.get(kind_of(k), len(order)))
            sizes = {k: self.size(k, pool.get(k)) for k in due}
            tables = self._tables_present() if tables_of(due, sizes) else None
            drop_check_results(self.ctx, [k[8:] for k in due if k.startswith("commits/")])
            crashpoints.reached("gc_before_delete")
            finished = True
            for n, i in enumerate(range(0, len(due), self.delete_batch)):
                batch = due[i : i + self.delete_batch]
                prepared = fence.prepare(batch + tables_of(batch, sizes, tables))
                self.state.record(phase, n, prepared.tags)  # before the fence check
                if not self.state.may_delete(phase):
                    finished = False
                    break  # ended by another process: it sealed the fence
                try:
                    deleted = set(self.deleter(prepared))
                except SweepEnded:
                    finished = False
                    break
                crashpoints.reached("gc_after_delete")
                handled += batch
                for key in batch:
                    if key in deleted and sizes[key] >= 0:
                        self.report.count(key, sizes[key])
                self.progress("deleting", min(i + self.delete_batch, len(due)), len(due))
            if finished:  # what the fragments name is deleted or registered: not read again
                self.state.expanded([c for c in self.candidates.values() if c.index])
                self._delete_partials(reach, phase)
        finally:
            beat.stop()
            ended = self.state.end_sweep(phase)
        if ended:  # nobody will ask for what this sweep deleted back: forget it
            fence.close()
            gone = [k for k in handled if k in self.candidates]
            self.state.drop(gone)
            for key in gone:
                del self.candidates[key]
            self.state.forget_sweeps(phase.epoch)
        crashpoints.reached("gc_after_sweep_ends")

    def recheck(
        self, reach: Reach, due: list[str], pool: dict[str, int | None], listed_only: set[str]
    ) -> list[str]:
        """`due` less what became live since the first mark: read again once the sweep's
        phase is entered (a writer staging before it is seen here, one staging after it
        waits for the sweep), with what the state of sessions and history operations makes
        wait for a later run."""
        self.unflushed = False
        live, committing = self.live_sessions()
        self.roots(reach, live)  # only what changed since the first mark is read
        due = [k for k in self._keep_redropped(reach, due) if k not in reach.live]
        if self.unflushed:  # a writer began since: what only the listing found waits
            kept = [k for k in due if k in listed_only]
            self.report.deferred += len(kept)
            due = [k for k in due if k not in listed_only]
        if committing or self.history_running:  # a commit may reuse a metadata object
            kept = [k for k in due if kind_of(k) in WRITTEN_BY_COMMITS]
            self.report.deferred += len(kept)
            due = [k for k in due if kind_of(k) not in WRITTEN_BY_COMMITS]
        whole = self.hold_named(due, (k for k in pool if k not in reach.live))
        self.report.deferred += len(due) - len(whole)
        return whole

    def _tables_present(self) -> set[str] | None:
        """The block tables a local directory holds, listed once a sweep may delete some (so
        a table written before it began is seen): unlinking a missing table per chunk
        object cost more than a run's other deletes. None on a remote store, whose bulk
        deletes take missing keys."""
        if self.store.remote:
            return None
        return set(self.store.list(blocks.PREFIX))

    def _dead_partials(self, reach: Reach) -> list[Partial]:
        """Half-written files to delete: older than the grace period (by modification time:
        nothing else records them) if their object is not live (a live session's upload in
        flight is: its writer recorded it first), older than STALE_PARTIAL if it is (another
        writer completed the object; no write of one file takes that long)."""
        now = self.ctx.clock()
        return [
            p
            for p in self.partials
            if now - p.mtime
            >= (self.grace if _object_of(p.key) not in reach.live else STALE_PARTIAL)
        ]

    def _delete_partials(self, reach: Reach, phase: Phase) -> None:
        """Delete the dead half-written files (within the sweep, while it is still this
        collector's: a half-written file is no object, so no fence guards it)."""
        dead = self._dead_partials(reach)
        if not dead or not self.state.may_delete(phase):
            return
        for partial in dead:
            try:
                os.unlink(partial.path)
            except FileNotFoundError:
                continue
            self.report.count(partial.key, partial.size)


def _object_of(key: str) -> str:
    """The object whose liveness decides about `key`: a block table's is its chunk's."""
    return f"chunks/{key[len(blocks.PREFIX) :]}" if key.startswith(blocks.PREFIX) else key


def tables_of(keys: list[str], sizes: dict[str, int], present: set[str] | None = None) -> list[str]:
    """The block tables (format/blocks.py) that chunk objects among `keys` may have (only
    those in `present`, if given): they go with their object (deleting a missing one is no
    error)."""
    tables = [
        f"{blocks.PREFIX}{k[len('chunks/') :]}"
        for k in keys
        if kind_of(k) == "chunks" and not 0 <= sizes.get(k, -1) < blocks.TABLE_MIN
    ]
    return tables if present is None else [t for t in tables if t in present]


def drop_check_results(ctx: RepoContext, commits: list[str]) -> None:
    """Delete the check results recorded on or against `commits`, which gc or expiry is
    about to delete (a run stopping between leaves none behind), and, while at it, those
    of removed check rules: results are a cache that would otherwise grow forever. A run
    deleting no commit reads nothing."""
    if commits:
        from zarrlake.vc.checks.rules import drop_results

        drop_results(ctx.meta, ctx.refs.partition, commits)


def vacuum(meta: object) -> int:
    """Let the metastore give freed space back, if its backend can (SQLite)."""
    while hasattr(meta, "inner"):  # through the retrying and fault wrappers
        meta = meta.inner
    compact = getattr(meta, "vacuum", None)
    return compact() if callable(compact) else 0


def collect(
    ctx: RepoContext,
    older_than: timedelta = timedelta(hours=1),
    dry_run: bool = False,
    full: bool = False,
    progress: Progress | None = None,
    lister: Lister | None = None,
    deleter: Deleter | None = None,
    delete_batch: int | None = None,
) -> GcReport:
    """Delete every object nothing can reach that the collector has known to be garbage
    for at least `older_than` (see the module docstring)."""
    return Collector(ctx, progress, lister, deleter, delete_batch).run(older_than, dry_run, full)
