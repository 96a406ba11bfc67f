"""The commit protocol: build the new snapshot from staged changes, write every immutable
object, then compare-and-swap the branch; on a moved branch, check conflicts against the
change sets of the commits in between and rebase.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from zarrlake._util import crashpoints, runtime
from zarrlake._util.retry import RetryPolicy, backoff
from zarrlake.errors import (
    CASFailedError,
    CommitTimeoutError,
    Conflict,
    ConflictError,
    ConflictKind,
    NoChangesError,
    TransientError,
)
from zarrlake.format import columns
from zarrlake.format.changes import (
    ChangeSet,
    Move,
    NodeChange,
    NodeChangeKind,
)
from zarrlake.format.commit import CommitRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import RangeIndex, SnapshotRoot, node_path
from zarrlake.vc.change_table import Change, ChangeTable
from zarrlake.vc.chunk_keys import KeyNamer, is_array_doc, load_doc
from zarrlake.vc.conflicts import find_conflicts, merge_changes, without
from zarrlake.vc.objects import Blob, Objects
from zarrlake.vc.refs import BRANCH, Landing, RefMovedError, Refs

__all__ = ["Change", "ChangeTable", "CommitProtocol", "CommitRequest", "SessionLanded"]


class SessionLanded(Exception):
    """The branch already holds a commit of this request's session, made by an earlier
    attempt whose branch update arrived late: the session must not be committed twice."""

    def __init__(self, commit: str) -> None:
        super().__init__(commit)
        self.commit = commit


# building snapshots ------------------------------------------------------------------


WRITE_BATCH = 64
"""Manifest ranges a large commit writes per round while it makes the rest (so its memory
holds a batch of them, not all)."""
CACHED_ENTRIES = 100_000
"""Commits of at most this many chunk changes keep their new ranges decoded in the cache."""
BRANCH_CAS = RetryPolicy(attempts=None, base_delay=0.002, max_delay=0.5)
"""How a commit retries a branch that moved under it (until the commit's timeout)."""


@functools.lru_cache(maxsize=16)
def _branch_cas(timeout: float) -> RetryPolicy:
    """BRANCH_CAS with the commit's timeout (made once per timeout, not per commit)."""
    return replace(BRANCH_CAS, timeout=timeout)


def _groups(idx: RangeIndex, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(range ids touched, start of each one's run in `keys`): sorted keys fall into the
    ranges of `idx` in runs (range -1: before the first range, or no ranges at all)."""
    if not len(keys):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(idx):
        where = np.maximum(np.searchsorted(idx.first_keys, keys, side="right") - 1, 0)
    else:
        where = np.full(len(keys), -1)
    starts = np.flatnonzero(np.concatenate([[True], where[1:] != where[:-1]]))
    return where[starts], starts


def _range_of(idx: RangeIndex, key: bytes) -> int:
    """The range of `idx` that key `key` falls into, as in `_groups` (-1: no ranges)."""
    if len(idx) < 2:
        return len(idx) - 1
    return max(int(np.searchsorted(idx.first_keys, key, side="right")) - 1, 0)


def _slices(idx: RangeIndex, keys: np.ndarray) -> dict[int, slice]:
    """Range id -> the slice of sorted `keys` falling into it."""
    n = len(keys)
    if n:
        first = _range_of(idx, keys[0])
        if first == _range_of(idx, keys[n - 1]):  # every key falls in one range
            return {first: slice(0, n)}
    ids, starts = _groups(idx, keys)
    if not len(ids):
        return {}
    ends = [*starts[1:].tolist(), len(keys)]
    return {int(i): slice(int(a), int(b)) for i, a, b in zip(ids, starts, ends, strict=True)}


def prefetch_snapshot(objects: Objects, head: str) -> None:
    """Start reading the snapshot of commit `head` (the prefetches are leaf reads on the I/O
    pool: none waits on another task there, so the pool always drains)."""
    objects.prefetch(lambda: objects.read(SnapshotRoot, objects.snapshot_of(head)))


def prefetch_ranges(objects: Objects, parent: SnapshotRoot, changes: ChangeTable) -> None:
    """Start reading the manifest ranges of `parent` that `apply_changes` reads first (its
    first batch), so they load beside other reads."""
    idx = parent.ranges
    touched = set(_slices(idx, changes.writes.keys)) | set(_slices(idx, changes.deletes))
    for i in sorted(i for i in touched if i >= 0)[:WRITE_BATCH]:
        objects.prefetch(functools.partial(objects.read, ManifestRange, idx.ids[i]))


def drop_unchanged(objects: Objects, parent: SnapshotRoot, changes: ChangeTable) -> ChangeTable:
    """`changes` less what the parent already holds: documents written with the bytes they
    have, chunks written with the bytes they have, deletes of keys that do not exist. Such
    writes (xarray rewrites coordinates it appends next to) are not changes: they make no
    conflict, diff or blame entry."""
    changes = changes.docs_changed_from(parent.meta)
    meta, idx = changes.meta, parent.ranges
    writes, deletes = changes.writes, changes.deletes
    if not len(idx):  # the parent holds no chunk: a delete deletes nothing
        return replace(changes, deletes=columns.keys_array([])) if len(deletes) else changes
    if not len(writes) + len(deletes):
        return changes
    if len(writes) == 1 and not len(deletes):  # one chunk (a one-chunk commit): looked up
        key = bytes(writes.keys[0])
        rng = objects.read(ManifestRange, idx.ids[_range_of(idx, key)])
        at = rng.index(key)
        ours = writes.take(slice(None))
        if (
            at < 0
            or rng.length[at] != ours.length[0]
            or rng.digest[at].tobytes() != ours.digest[0].tobytes()
        ):
            return changes
        return ChangeTable(meta, writes.without_keys(writes.keys), deletes)
    w, d = _slices(idx, writes.keys), _slices(idx, deletes)
    touched = sorted(set(w) | set(d))
    same_writes: list[np.ndarray] = []
    present_deletes: list[np.ndarray] = []
    for at in range(0, len(touched), WRITE_BATCH):  # a batch of base ranges at a time
        group = touched[at : at + WRITE_BATCH]
        ranges = objects.map(lambda i: objects.read(ManifestRange, idx.ids[i]), group)
        for i, rng in zip(group, ranges, strict=True):
            if i in w:
                ours = writes.take(w[i])
                keys = ours.keys
                pos = np.minimum(np.searchsorted(rng.keys, keys), len(rng) - 1)
                same = (rng.keys[pos] == keys) & (rng.length[pos] == ours.length)
                same &= (rng.digest[pos] == ours.digest).all(axis=1)
                same_writes.append(keys[same])
            if i in d:
                keys = deletes[d[i]]
                pos = np.minimum(np.searchsorted(rng.keys, keys), len(rng) - 1)
                present_deletes.append(keys[rng.keys[pos] == keys])
    same = np.concatenate(same_writes) if same_writes else writes.keys[:0]
    present = np.concatenate(present_deletes) if present_deletes else deletes[:0]
    if not len(same) and len(present) == len(deletes):  # (each write changes its chunk)
        return changes
    if len(same):
        writes = writes.without_keys(same)
    return ChangeTable(meta, writes, np.sort(present))


def apply_changes(
    objects: Objects,
    parent: SnapshotRoot,
    changes: ChangeTable,
    write: Callable[[list[Blob]], None] | None = None,
) -> tuple[SnapshotRoot, list[Blob]]:
    """`parent` with `changes` applied, and the new manifest ranges still to write: only
    the ranges the changes fall into are rewritten. With `write`, ranges are handed to it in
    batches as they are made, and only the last batch is returned."""
    meta = dict(parent.meta)
    for key, doc in changes.meta.items():
        if doc is None:
            meta.pop(key, None)
        else:
            meta[key] = doc
    writes, deletes = changes.writes, changes.deletes
    if not len(writes) + len(deletes):
        return SnapshotRoot(meta, parent.ranges), []
    idx = parent.ranges
    w, d = _slices(idx, writes.keys), _slices(idx, deletes)
    touched = sorted(set(w) | set(d))
    empty = slice(0, 0)
    cache = len(writes) + len(deletes) <= CACHED_ENTRIES
    pending: list[Blob] = []
    rebuilt: dict[int, list[tuple[bytes, str, int]]] = {}
    for at in range(0, len(touched), WRITE_BATCH):  # base ranges read in parallel, a batch
        group = touched[at : at + WRITE_BATCH]
        bases = objects.map(
            lambda i: objects.read(ManifestRange, idx.ids[i]), [i for i in group if i >= 0]
        )
        base_of = dict(zip([i for i in group if i >= 0], bases, strict=True))
        for i in group:
            base = base_of.get(i) or ManifestRange.empty()
            made = rebuilt[i] = []
            for piece in base.apply(writes.sub(w.get(i, empty)), deletes[d.get(i, empty)]):
                oid, blob = objects.encode(piece, cache)
                made.append((piece.first_key, oid, len(piece)))
                pending.append(blob)
                if write is not None and len(pending) >= WRITE_BATCH:
                    write(pending)
                    pending = []
    if len(rebuilt) == 1:  # one range rewritten, as one piece that starts where it did
        ((i, made),) = rebuilt.items()
        if i >= 0 and len(made) == 1 and made[0][0] == bytes(idx.first_keys[i]):
            _, oid, n = made[0]
            counts_ = idx.counts.copy()
            counts_[i] = n
            ranges = RangeIndex(idx.first_keys, (*idx.ids[:i], oid, *idx.ids[i + 1 :]), counts_)
            return SnapshotRoot(meta, ranges), pending
    first: list[bytes] = []
    oids: list[str] = []
    counts: list[int] = []
    for i in range(-1, len(idx)):
        if i in rebuilt:
            for first_key, oid, n in rebuilt[i]:
                first.append(first_key)
                oids.append(oid)
                counts.append(n)
        elif i >= 0:
            first.append(bytes(idx.first_keys[i]))
            oids.append(idx.ids[i])
            counts.append(int(idx.counts[i]))
    ranges = RangeIndex(columns.keys_array(first), tuple(oids), np.array(counts, np.uint64))
    return SnapshotRoot(meta, ranges), pending


def classify(old: bytes | None, new: bytes | None) -> NodeChange | None:
    """How one node's metadata document changed, or None if it did not."""
    if old == new:
        return None
    is_array = is_array_doc(old) or is_array_doc(new)
    if old is None:
        return NodeChange(NodeChangeKind.CREATED, is_array)
    if new is None:
        return NodeChange(NodeChangeKind.DELETED, is_array)
    a, b = load_doc(old), load_doc(new)
    a.pop("attributes", None)
    b.pop("attributes", None)
    if a == b:
        return NodeChange(NodeChangeKind.ATTRIBUTES, is_array)
    a.pop("shape", None)
    b.pop("shape", None)
    return NodeChange(NodeChangeKind.RESIZED if a == b else NodeChangeKind.REDEFINED, is_array)


def change_set(
    changes: ChangeTable, old_meta: dict[str, bytes], moves: tuple[Move, ...] = ()
) -> ChangeSet:
    """The change set of `changes` made against a snapshot with metadata `old_meta`, with
    the nodes they move (whose changes `changes` holds)."""
    nodes = {}
    for key in sorted(changes.meta):
        change = classify(old_meta.get(key), changes.meta[key])
        if change is not None:
            nodes[node_path(key)] = change
    keys, ops = changes.keys_and_ops()
    return ChangeSet(keys, ops, nodes, moves)


# the protocol -------------------------------------------------------------------------


@dataclass
class CommitRequest:
    """Everything one commit attempt needs: the branch and base it builds on, the staged changes,
    and what to record."""

    branch: str
    base: str
    changes: ChangeTable
    blobs: list[Blob]  # objects the commit writes besides its own (fragments held in records)
    message: str
    author: str | None
    session_id: str | None
    on_conflict: str = "fail"
    reads: tuple[list[str], list[str]] | None = None  # serializable sessions only
    timeout: float = 60.0
    metadata: dict[str, str] | None = None
    allow_empty: bool = True  # False: NoChangesError when nothing differs from the base
    keep: Callable[[], None] | None = None
    """Called between long steps (a committer renews its lease there; it raises to stop)."""
    moves: tuple[Move, ...] = ()
    """The nodes the session moved, in order (their changes are in `changes`)."""


Together = Callable[..., list[object]]
"""Runs independent calls, at once where that saves round trips; returns each one's result
or the exception it raised (RepoContext.together)."""


class CommitBuilder:
    """The first job of a commit: its objects. Made once per request (the base snapshot read,
    unchanged writes dropped, the change set computed); `build(head)` then checks conflicts
    with what landed on the branch since the base, rebases onto `head` and writes every
    object of the commit, returning its id (the branch is not touched)."""

    def __init__(
        self,
        objects: Objects,
        req: CommitRequest,
        alongside: tuple[Together, Callable[[str], None]] | None = None,
    ) -> None:
        self.objects = objects
        self.req = req
        self.alongside = alongside
        self.stored: set[str] = set()
        """Keys an earlier build of this request wrote: a rebuild does not send them again
        (content-addressed, so the same key is the same bytes; the landing fence of the
        attempt that wrote them names them until the next attempt's fence does)."""
        self.premade_id: str | None = None
        self.ready: str | None = None
        """The premade commit on the base, its objects written and its id fenced (`made`)."""
        self.base_root = objects.read(SnapshotRoot, objects.snapshot_of(req.base))
        req.changes = drop_unchanged(objects, self.base_root, req.changes)
        if not req.allow_empty and req.changes.empty:
            raise NoChangesError(
                f"session {req.session_id} changes nothing on {req.branch!r} (every write "
                "matches its base commit, or nothing was written); nothing was committed and "
                "the session stays open: commit(allow_empty=True) records an empty commit"
            )
        self.ours = change_set(req.changes, self.base_root.meta, req.moves)
        if req.keep is not None:  # reading the base's manifests may have taken long
            req.keep()

    def ancestry(self, head: str, base: str) -> list[CommitRecord]:
        """Commits after `base` up to `head`, newest first; ConflictError if `base` is not
        an ancestor (the branch was reset past it)."""
        return [rec for _, rec in self.between(head, base)]

    def between(self, head: str, base: str) -> list[tuple[str, CommitRecord]]:
        """(id, record) of the commits after `base` up to `head`, newest first, as
        `ancestry`."""
        out = list(self.objects.history(head, until=base))  # (base's record not read)
        if head == base or (out and out[-1][1].parents[:1] == (base,)):
            return out
        raise ConflictError(
            [Conflict("", ConflictKind.RESET, None, f"branch no longer descends from {base}")]
        )

    @staticmethod
    def _alike(changes: ChangeTable, theirs: ChangeSet, head_root: SnapshotRoot) -> set[str]:
        """The nodes whose metadata document the other side changed to exactly ours (both
        created the same array, set the same attributes). Chunks written alike still
        conflict: two read-modify-writes that computed the same bytes would otherwise lose
        one update."""
        return {
            node_path(key)
            for key, doc in changes.meta.items()
            if node_path(key) in theirs.nodes and head_root.meta.get(key) == doc
        }

    def build(self, head: str) -> str:
        """The id of the commit of the request on top of `head`, its objects written;
        ConflictError when the policy does not resolve a conflict, SessionLanded when a
        commit of the same session is already on the branch."""
        req, base_root, ours = self.req, self.base_root, self.ours
        changes = req.changes
        parent_id, parent_root = req.base, base_root
        if head != req.base:
            # The head's snapshot (known from the branch's value) loads beside the walk
            # down to the base, then the change sets beside the manifest ranges touched.
            objects = self.objects
            prefetch_snapshot(objects, head)
            pairs = self.between(head, req.base)
            for cid, c in pairs:  # a late commit of this session: never a second one
                if req.session_id is not None and c.session_id == req.session_id:
                    raise SessionLanded(cid)
            between = [c for _, c in pairs]
            head_root = objects.read(SnapshotRoot, between[0].snapshot)
            prefetch_ranges(objects, head_root, changes)  # while the change sets load
            theirs = merge_changes(objects.read_each(ChangeSet, [c.changes for c in between[::-1]]))
            namer = KeyNamer(
                base_root.meta,
                head_root.meta,
                {k: d for k, d in req.changes.meta.items() if d},
            )
            conflicts = find_conflicts(ours, theirs, namer, req.reads)
            if conflicts and req.reads is None:  # metadata changed alike: no conflict
                nodes = self._alike(req.changes, theirs, head_root)
                if nodes:
                    conflicts = find_conflicts(
                        without(ours, nodes), without(theirs, nodes), namer, req.reads
                    )
            if conflicts:
                policy_ok = req.on_conflict in ("ours", "theirs") and all(
                    c.kind == ConflictKind.CHUNK for c in conflicts
                )
                if not policy_ok:
                    raise ConflictError(conflicts)
                if req.on_conflict == "theirs":
                    changes = changes.without(theirs.keys)
            # a document the other side already wrote as ours is no change of this commit
            changes = changes.docs_changed_from(head_root.meta)
            parent_id, parent_root = head, head_root
        reuse = ours if parent_id == req.base and changes is req.changes else None
        return self._write(changes, parent_id, parent_root, reuse)

    def premade(self) -> tuple[str, list[Blob]]:
        """The commit of the request on its base and every object it writes, none written
        (the commit call sends them beside its gather: txn/commit.py); `build(base)` then
        returns its id, writing nothing, once they are (`made`)."""
        req = self.req
        commit_id, blobs = self._objects(req.changes, req.base, self.base_root, self.ours)
        self.premade_id = commit_id
        return commit_id, blobs

    def made(self, blobs: list[Blob]) -> None:
        """The objects `premade` returned are written (and its id fenced): `build(base)`
        lands them."""
        self.stored.update(key for key, _ in blobs)
        self.ready = self.premade_id

    def _write(
        self,
        changes: ChangeTable,
        parent_id: str,
        parent_root: SnapshotRoot,
        change_set_: ChangeSet | None = None,
    ) -> str:
        """Write every object of the new commit in one parallel round (all ids are content
        hashes known before any write); the branch moves only after all of them are durable,
        so until then even the commit record is unreachable. Staged chunk bytes are not
        copied: the manifests point into the fragments that staged them."""
        if self.ready is not None and parent_id == self.req.base and changes is self.req.changes:
            return self.ready  # premade, written and fenced
        commit_id, blobs = self._objects(changes, parent_id, parent_root, change_set_, True)

        def put_last() -> None:
            self.objects.put_all([b for b in blobs if b[0] not in self.stored])
            self.stored.update(key for key, _ in blobs)
            crashpoints.reached("after_objects_written")

        if self.alongside is None:
            put_last()
        else:  # (together, call): `call(commit_id)` goes out with the last objects
            together, call = self.alongside
            for outcome in together(put_last, lambda: call(commit_id)):
                if isinstance(outcome, Exception):
                    raise outcome
        return commit_id

    def _objects(
        self,
        changes: ChangeTable,
        parent_id: str,
        parent_root: SnapshotRoot,
        change_set_: ChangeSet | None = None,
        batches: bool = False,
    ) -> tuple[str, list[Blob]]:
        """The new commit's id and the objects still to write for it (`batches`: a large
        commit's manifest ranges are written as they are made, all but the last batch)."""
        req = self.req
        keep = req.keep

        def write(blobs: list[Blob]) -> None:
            self.objects.put_all(blobs)
            if keep is not None:
                keep()

        root, range_blobs = apply_changes(
            self.objects, parent_root, changes, write if batches else None
        )
        snapshot_id, root_blob = self.objects.encode(root)
        if change_set_ is None:  # rebased: the change set is against the new parent
            change_set_ = change_set(changes, parent_root.meta, req.moves)
        changes_id, changes_blob = self.objects.encode(change_set_)
        record = CommitRecord(
            parents=(parent_id,),
            snapshot=snapshot_id,
            changes=changes_id,
            message=req.message,
            author=req.author,
            timestamp=runtime.now(),
            session_id=req.session_id,
            metadata=dict(req.metadata or {}),
        )
        commit_id, record_blob = self.objects.encode(record)
        return commit_id, [*req.blobs, *range_blobs, root_blob, changes_blob, record_blob]


@dataclass(frozen=True)
class Moved:
    """A branch compare-and-swap that found the branch elsewhere: where it is now (None:
    deleted). A lost race is an answer, returned as data, not an error."""

    head: str | None
    version: int | None


def update_branch(
    refs: Refs, branch: str, new: str, expected_version: int, landing: Landing | None = None
) -> Moved | None:
    """The second job of a commit: move `branch` to `new` if it is still at
    `expected_version` (and, with `landing`, the session's landing fence is unchanged:
    LandingRevokedError otherwise). None when it moved; Moved (the branch's head now) when
    another update came first. Other errors propagate (a TransientError may hide a swap
    that landed: the caller looks for it)."""
    try:
        refs.move(branch, new, expected_version, landing)
        return None
    except RefMovedError as moved:  # where the refusal found it: no read again
        return Moved(*moved.head) if moved.head is not None else Moved(None, None)
    except CASFailedError:
        got = refs.get(BRANCH, branch)
        return Moved(*got) if got is not None else Moved(None, None)


class CommitProtocol:
    """Runs one commit against a branch: a CommitBuilder makes its objects for the head it
    finds, `update_branch` lands it; on a moved head it builds again. `before_cas(commit_id)`
    is called right before each branch compare-and-swap, after `check(commit_id, head)`
    (the branch's checks, on each commit built: a rebuilt one is checked again)."""

    def __init__(self, objects: Objects, refs: Refs) -> None:
        self.objects = objects
        self.refs = refs
        self.uncertain = False
        """Whether a branch swap was sent whose outcome is unknown (no definite answer came
        back): it may still land, so whoever gives this commit up first revokes its landing."""

    def run(
        self,
        req: CommitRequest,
        before_cas: Callable[[str], None],
        head: tuple[str, int] | None = None,
        check: Callable[[str, str], None] | None = None,
        together: Together | None = None,
        landing: Landing | None = None,
        after_cas: Callable[[str], None] | None = None,
        builder: CommitBuilder | None = None,
    ) -> str:
        """The id of the commit of `req` on its branch; `head`, the branch's (commit id,
        version) if the caller read it already, saves reading it again. With `together`
        (RepoContext.together), `before_cas(commit_id)` goes out with the commit's last
        objects: the branch swap needs both done, and neither needs the other (a remote
        metastore then waits one round trip less). Every commit the builder writes is then
        fenced with its objects, so `land` is given no `before_cas` of its own. `landing`:
        the session's landing fence, which every branch swap checks (vc/refs.py);
        `after_cas(commit_id)`: see `land`. `builder`: one made for `req` already (its
        premade commit written and fenced: see `CommitBuilder.premade`)."""
        alongside = None if together is None else (together, before_cas)
        if builder is None:
            builder = CommitBuilder(self.objects, req, alongside)
        else:
            builder.alongside = alongside
        fence = before_cas if alongside is None else None
        return self.land(
            req.branch,
            builder.build,
            req.timeout,
            req.base,
            fence,
            head,
            check,
            landing,
            after_cas,
        )

    def land(
        self,
        branch: str,
        build: Callable[[str], str],
        timeout: float,
        base: str | None = None,
        before_cas: Callable[[str], None] | None = None,
        known: tuple[str, int] | None = None,
        check: Callable[[str, str], None] | None = None,
        landing: Landing | None = None,
        after_cas: Callable[[str], None] | None = None,
    ) -> str:
        """Move `branch` to `build(head)` by compare-and-swap, rebuilding on a moved head
        after a jittered backoff until it lands or `timeout` passes (CommitTimeoutError);
        `build` returning the head means no move. A lost or failed CAS reply whose swap did
        land (looked for above `base`, default the first head seen) is a success. `known`
        is the (head, version) to try first, if the caller read it. `check(new, head)`
        runs before each swap (it raises to refuse the move); `landing`: a session's
        landing fence every swap checks. `before_cas(new)`, the swap and, once it landed,
        `after_cas(new)` are one `MetaStore.batch` (one transaction on an embedded
        metastore); a swap that lost ends it before anything is rebuilt."""
        # Committers of one repository take turns where the metastore offers them (the
        # embedded one): a swap then never loses, so no attempt's objects are wasted.
        with self.refs.meta.take_turns(self.refs.partition) as turns:
            return self._land(
                branch,
                build,
                timeout,
                base,
                before_cas,
                None if turns else known,
                check,
                landing,
                after_cas,
            )

    def _land(
        self,
        branch: str,
        build: Callable[[str], str],
        timeout: float,
        base: str | None,
        before_cas: Callable[[str], None] | None,
        known: tuple[str, int] | None,
        check: Callable[[str, str], None] | None = None,
        landing: Landing | None = None,
        after_cas: Callable[[str], None] | None = None,
    ) -> str:
        tried: set[str] = set()
        attempts = 0
        # A lost swap waits up to the time its attempt took (from the head's read until the
        # loss was handled), doubling per loss: on a slow store (the bucket, ~4 round trips
        # an attempt) losers that rebuilt at once met each other again, and each loss costs
        # the rebuild's reads and writes (W6 on the bucket: 0.7-1.0 -> 0.4 lost a commit).
        opened = [runtime.monotonic()]
        for _ in backoff(_branch_cas(timeout), lambda: runtime.monotonic() - opened[0]):
            attempts += 1
            opened[0] = runtime.monotonic()
            head, version = known or self.refs.require(BRANCH, branch)
            known = None
            base = base or head
            try:
                new = build(head)
            except SessionLanded as e:
                if e.commit in tried:  # our own attempt, whose CAS reply was lost
                    return e.commit
                raise
            if new == head:
                return head
            if check is not None:  # on this very commit: a rebuilt one is checked anew
                check(new, head)
            tried.add(new)
            sent = False
            try:
                # One transaction on an embedded metastore: the fence, the swap and what
                # follows a landed swap (a swap that lost ends it before the reads below).
                with self.refs.meta.batch():
                    if before_cas is not None:
                        before_cas(new)
                    sent = self.uncertain = True  # until a definite answer comes back
                    moved = update_branch(self.refs, branch, new, version, landing)
                    self.uncertain = False
                    if moved is None and after_cas is not None:
                        after_cas(new)
                if moved is None:
                    return new
                if moved.head is not None:  # the rebuild reads its snapshot: meanwhile,
                    prefetch_snapshot(self.objects, moved.head)  # the walk below reads
                landed = self._landed(tried, base, moved.head)  # (read after the swap)
                if landed is not None:  # our CAS landed, its reply was lost
                    return landed
                if moved.head is not None and moved.version is not None:
                    known = (moved.head, moved.version)  # build on it next
            except TransientError:  # the CAS may have landed before the error reached us
                if not sent:  # the fence's: no swap was sent
                    raise
                now = self.refs.get(BRANCH, branch)
                landed = self._landed(tried, base, now[0] if now is not None else None)
                if landed is not None:
                    return landed
                raise
        raise CommitTimeoutError(
            f"branch {branch!r} kept moving; gave up after {attempts} attempts and {timeout:.0f}s"
            "; try again"
        )

    def _landed(self, tried: set[str], base: str, head: str | None) -> str | None:
        """The attempt of ours that the branch holds, if any, looking down from `head` (the
        branch's head read since the last swap; None: the branch is gone). A lost CAS reply
        may be noticed only after other commits landed on top of ours, so look below the
        head too."""
        for cid, _ in self.objects.history(head, until=base) if head is not None else ():
            if cid in tried:
                return cid
        return None
