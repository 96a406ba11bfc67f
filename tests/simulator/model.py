"""The model a run is checked against, and the invariants checked after every step.

The model does not predict the interleaving; it judges what the library did. Every branch
head the repository takes is explained by an operation an actor began (a session commit, a
merge, a revert, a reset, a branch created or deleted) that has not definitely failed: a
move nothing explains is a phantom. A new commit is verified once, when it first becomes a
head: its contents must be what its operation makes of its parent's verified contents (a
session's acknowledged writes over the parent, with the conflict rules; a three-way merge;
a revert), and its change set must name every key it changed. What an actor was told (a
commit id, a flush that returned, a read) is checked against the same states, and so is
each object the collector deletes (never one a retained commit, a live session's
acknowledged write or a pinned base needs; never a candidate younger than the grace
period).

Values are sets where the outcome is not known: a write whose flush failed or was cut off
by a crash may be in the commit or not; the set narrows when the handle flushes again.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from tests.simulator import metadata as md
from zarrlake.errors import NotFoundError
from zarrlake.format.changes import ChangeSet
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.format.digest import digest
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.reach import EXPIRED_PREFIX, manifest_refs
from zarrlake.vc.refs import BRANCH, TAG
from zarrlake.vc.snapshot_view import SnapshotView

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext

KEEP = "<unchanged>"
"""A session leaves the key as its parent has it."""
ABSENT = None
"""A key that holds nothing (never written or deleted)."""

Value = bytes | None
State = dict[str, bytes]

MANIFEST_INLINE_MAX = 64


class Violation(AssertionError):
    """An invariant failed."""


class Outcome(StrEnum):
    """What an operation's caller knows of it: running, acknowledged, failed, or unknown (it may
    have happened)."""

    RUNNING = "running"
    ACKED = "acknowledged"
    FAILED = "failed"  # definitely did nothing (an error that says so by its kind)
    REPORTED = "reported failed"  # an error not saying it may have happened: it must not have
    UNKNOWN = "unknown"  # an error or a crash: it may or may not have happened


NOTHING = (Outcome.FAILED, Outcome.REPORTED)
"""Outcomes after which the operation must have changed nothing."""


@dataclass(eq=False)
class Intent:
    """An operation that may move a ref."""

    id: str
    kind: str  # commit, merge, revert, reset, create-branch, delete-branch, create-tag, ...
    branch: str
    actor: str
    outcome: Outcome = Outcome.RUNNING
    policy: str = "fail"
    session: SessionModel | None = None
    source: str | None = None  # merge: the source commit; revert: the reverted commit
    target: str | None = None  # reset / create: where the ref goes
    landed: str | None = None  # the commit it moved the ref to
    result: str | None = None  # what the caller was told
    began: int = 0
    ended: int | None = None
    group: list | None = None  # intents that may each have made the same move
    group_events: int = 0  # the moves that group explained: each intent made one at most
    unfinished: str | None = None  # commit: what to do with writers that failed or are gone
    gone: frozenset[str] = frozenset()  # commit: handles whose process was dead as it began
    committer: Any = None  # commit: the handle that commits


@dataclass(eq=False)
class Handle:
    """One handle (worker) of a session, as the model knows its writes."""

    name: str
    written: dict[str, frozenset] = field(default_factory=dict)  # the handle's own view
    durable: dict[str, frozenset] = field(default_factory=dict)  # registered for sure
    maybe: dict[str, set] = field(default_factory=dict)  # perhaps registered
    staged: dict[str, Value] = field(default_factory=dict)  # latest value certainly registered
    pending: dict[str, frozenset] | None = None  # in a flush under way
    process: Any = None  # the simulated process it lives in (gone once that is dead)
    wrote_at: dict[str, float] = field(default_factory=dict)  # when it last began writing a key
    withdrawn: dict[str, frozenset] = field(default_factory=dict)
    """Keys whose writes a flush may have withdrawn (gc removed their uploads), not written
    again since: what the handle staged of each before. A commit holds them only if it
    chose `unfinished` (it refuses otherwise, as long as they are not all written again)."""
    withdrew: bool = False  # a flush of it withdrew writes (a commit may discard its part)


@dataclass(eq=False)
class SessionModel:
    """A session as the model knows it: its handles, and the commit it landed if any."""

    sid: str
    branch: str
    base: str
    handles: list[Handle] = field(default_factory=list)
    landed: str | None = None
    closed: bool = False
    stored: bool = False
    """Its record is known stored with its base checked (an operation that stores it
    returned): its base is kept from then on. One stored later than an expire that
    dropped its base refuses its first write (txn/birth.py), and may be left behind by a
    crash between storing and checking: nothing of it can use that base."""


@dataclass
class CommitInfo:
    """A commit as the model knows it: its parents, state, changed keys and the objects it needs."""

    parents: tuple[str, ...]
    state: State
    timestamp: float
    changed: frozenset[str]  # keys its change set names
    objects: frozenset[str]  # every object it needs
    session: str | None
    message: str


class Model:
    """Everything the invariants compare against; `obs` reads the stores directly."""

    def __init__(self, obs: RepoContext, chunk_keys: list[str]) -> None:
        self.obs = obs
        self.chunk_keys = chunk_keys
        self.commits: dict[str, CommitInfo] = {}
        self.heads: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.intents: list[Intent] = []
        self.by_id: dict[str, Intent] = {}
        self.sessions: dict[str, SessionModel] = {}
        self.checks = 0
        self.expire_floor: dict[str, float] = {}  # running expire actor -> its older_than
        self.taken_back: dict[str, set[str]] = {}  # expire actor -> kept commits it marked
        self.gc_grace: dict[str, float] = {}  # running gc actor -> grace seconds
        self._attempt_of: dict[str, str | None] = {}  # commit -> the attempt it names
        self.later: list = []  # judgements waiting for the end of the step
        self.seq = 0  # orders the beginnings and ends of intents
        self.counts: Counter[str] = Counter()  # invariants checked, by kind
        self.watchers: list = []  # more invariants after each check_refs (sim/pulls.py)

    # reading the stores -----------------------------------------------------------------

    def refs(self) -> tuple[dict[str, str], dict[str, str]]:
        """(branches, tags) as stored now."""
        return self.obs.refs.list(BRANCH), self.obs.refs.list(TAG)

    def read_state(self, snapshot: str) -> tuple[State, frozenset[str]]:
        """(key -> value, objects needed) of a snapshot, read directly from the stores."""
        objects = self.obs.objects
        root = objects.read(SnapshotRoot, snapshot)
        view = SnapshotView(objects, root, snapshot)
        state: State = {}
        needs = {f"snapshots/{snapshot}"}
        for i in range(len(root.ranges)):
            mid = root.ranges.ids[i]
            needs.add(f"manifests/{mid}")
            needs.update(manifest_refs(objects.read(ManifestRange, mid)))
        for key in view.keys(""):
            if "/c/" in key:
                ref = view.get(key)
                assert ref is not None
                state[key] = bytes(objects.read_ref(ref, key))
        for key, doc in root.meta.items():  # metadata documents, compared by content
            canon = md.canonical(bytes(doc))
            assert canon is not None
            state[key] = canon
        return state, frozenset(needs)

    def learn(self, cid: str) -> CommitInfo:
        """Read a commit the first time it is seen: its record, contents and objects."""
        info = self.commits.get(cid)
        if info is not None:
            return info
        try:
            rec = self.obs.objects.read_commit(cid)
            state, needs = self.read_state(rec.snapshot)
            changes = self.obs.objects.read(ChangeSet, rec.changes)
        except NotFoundError as e:
            raise Violation(f"commit {cid[:12]} became a head but cannot be read: {e}") from e
        changed = frozenset(bytes(k).decode() for k in changes.keys)
        needs = needs | {f"commits/{cid}", f"changes/{rec.changes}"}
        info = CommitInfo(
            rec.parents, state, rec.timestamp, changed, needs, rec.session_id, rec.message
        )
        self.commits[cid] = info
        self._attempt_of[cid] = rec.metadata.get("sim")  # which commit attempt made it
        return info

    def seed(self, cid: str, branches: dict[str, str]) -> None:
        """The commits the run starts from (the setup's and the repository's first)."""
        todo = [cid]
        while todo:
            todo.extend(self.learn(todo.pop()).parents)
        self.heads = dict(branches)

    # intents ----------------------------------------------------------------------------

    def begin(self, intent: Intent) -> Intent:
        """Register an operation that may move a ref, in the order operations began."""
        self.seq += 1
        intent.began = self.seq
        self.intents.append(intent)
        self.by_id[intent.id] = intent
        return intent

    def end(self, intent: Intent, outcome: Outcome, result: str | None = None) -> None:
        """An operation ended (judged after this step's ref moves: `settle`)."""
        if outcome in NOTHING:
            intent.outcome = outcome  # explains no move from now on
            if intent.group is not None and len(intent.group) > 1:
                intent.group.remove(intent)  # another of the group moved the ref, unless
                if intent.group_events <= len(intent.group):  # the rest are too few for
                    intent.group, intent.landed = None, None  # its moves (judged by _end)
        elif outcome == Outcome.ACKED and intent.group is not None and len(intent.group) > 1:
            rest = [other for other in intent.group if other is not intent]
            made = intent.group_events - 1  # this one made a move: the others made the rest
            for other in rest:  # and those that made none may make one of their own later
                if made > 0:  # (after an A-B-A of the ref)
                    other.group, other.group_events = rest, made
                else:
                    other.group, other.landed, other.group_events = None, None, 0
            intent.group, intent.group_events = [intent], 1
        self.later.append(lambda: self._end(intent, outcome, result))

    def settle(self) -> None:
        """What actors were told during this step, judged after its ref moves."""
        later, self.later = self.later, []
        for fn in later:
            fn()

    def _end(self, intent: Intent, outcome: Outcome, result: str | None = None) -> None:
        self.seq += 1
        self.counts["outcomes checked"] += 1
        intent.ended = self.seq
        intent.outcome = outcome
        intent.result = result
        self.counts[f"outcomes checked: {outcome.value}"] += 1
        if outcome == Outcome.REPORTED and intent.landed is not None:
            raise Violation(
                f"{intent.kind} {intent.id} by {intent.actor} reported a failure "
                f"({result}), yet it moved {intent.branch!r} to {intent.landed[:12]} (a "
                "failure that happened)"
            )
        if outcome == Outcome.FAILED and intent.landed is not None:
            raise Violation(
                f"{intent.kind} {intent.id} by {intent.actor} failed, yet moved "
                f"{intent.branch!r} to {intent.landed[:12]} (a phantom)"
            )
        if outcome == Outcome.ACKED:
            landed = intent.session.landed if intent.session else None
            if intent.kind == "commit" and landed != result:
                where = "never landed" if landed is None else f"landed {landed[:12]}"
                raise Violation(
                    f"commit {intent.id} by {intent.actor} was acknowledged as "
                    f"{(result or '?')[:12]} on {intent.branch!r}, but the branch {where}"
                )
            if (
                intent.kind in ("merge", "revert")
                and result != self.heads.get(intent.branch)
                and intent.landed != result
                and not self._moved_since(intent)
                and result not in self._ancestors(self.heads[intent.branch])
            ):
                raise Violation(
                    f"{intent.kind} {intent.id} returned {(result or '?')[:12]}, "
                    f"which {intent.branch!r} does not hold"
                )

    def _moved_since(self, intent: Intent) -> bool:
        """Whether a reset (or a delete and create) of the branch overlapped `intent`."""
        return any(
            o.kind in ("reset", "delete-branch", "create-branch")
            and o.branch == intent.branch
            and o.outcome not in NOTHING
            and (intent.ended is None or o.began < intent.ended)
            and (o.ended is None or o.ended > intent.began)
            for o in self.intents
        )

    # sessions ---------------------------------------------------------------------------

    def session(self, sid: str, branch: str, base: str) -> SessionModel:
        """The model of session `sid`, made on first sight."""
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = SessionModel(sid, branch, base)
        return s

    def view(self, s: SessionModel, h: Handle, key: str) -> frozenset:
        """What handle `h` may read at `key`: its own latest write, else the base."""
        if key in h.written:
            return h.written[key]
        return frozenset({self.commits[s.base].state.get(key)})

    def wrote(self, h: Handle, key: str, value: Value, certain: bool) -> None:
        """Record a write by handle `h`: certain once acknowledged, else one more possible value."""
        if certain:
            h.written[key] = frozenset({value})
            h.withdrawn.pop(key, None)
        else:
            h.written[key] = h.written.get(key, frozenset({KEEP})) | {value}

    def flush_begins(self, h: Handle) -> None:
        """Everything written but not registered for sure may be registered from now on."""
        pending = {k: v for k, v in h.written.items() if h.durable.get(k) != v}
        for k, v in pending.items():
            h.maybe.setdefault(k, set()).update(v)
        h.pending = pending

    def flush_ok(self, s: SessionModel, h: Handle, what: str) -> None:
        """A flush returned: every write of the handle so far is registered."""
        pending, h.pending = h.pending, None
        self.later.append(lambda: self._flush_ok(s, h, pending, what))

    def _flush_ok(self, s: SessionModel, h: Handle, pending: dict | None, what: str) -> None:
        h.durable.update(pending or {})
        for k, v in (pending or {}).items():
            if len(v) == 1:  # a write that raised may never have been buffered
                h.staged[k] = next(iter(v))
        h.maybe.clear()
        if s.landed is not None:
            self.recheck(s, f"{h.name}'s {what} returned")

    def withdrew(self, h: Handle) -> None:
        """A flush withdrew writes of `h` (an error said so): any not certainly registered
        before may be among them."""
        h.withdrew = True
        self.counts["flushes that withdrew writes"] += 1
        for k, v in h.written.items():
            if h.durable.get(k) != v:
                h.withdrawn.setdefault(k, h.durable.get(k, frozenset({KEEP})))

    def flush_failed(self, h: Handle) -> None:
        """Forget the handle's pending flush (it may or may not have landed)."""
        h.pending = None

    def recheck(self, s: SessionModel, why: str) -> None:
        """Check again that the commit session `s` landed holds what it must."""
        assert s.landed is not None
        intent = next(i for i in self.intents if i.kind == "commit" and i.landed == s.landed)
        self._check_session_commit(s.landed, intent, why)

    # the step check ---------------------------------------------------------------------

    def check_refs(self) -> None:
        """Explain every ref that moved since the last step; verify new commits."""
        self.checks += 1
        self.counts["ref states compared"] += 1
        branches, tags = self.refs()
        for name in sorted(set(branches) | set(self.heads)):
            old, new = self.heads.get(name), branches.get(name)
            if old != new:
                self.counts["ref moves explained"] += 1
                self._transition(name, old, new)
                if new is None:
                    self.heads.pop(name, None)
                else:
                    self.heads[name] = new
        for name in sorted(set(tags) | set(self.tags)):
            old, new = self.tags.get(name), tags.get(name)
            if old != new:
                kind = "delete-tag" if new is None else "create-tag"
                if old is not None and new is not None:
                    raise Violation(f"tag {name!r} moved from {old[:12]} to {new[:12]}")
                self._explained(kind, name, new, f"tag {name!r} -> {new}")
                if new is None:
                    self.tags.pop(name)
                else:
                    self.learn(new)
                    self.tags[name] = new
        for watch in self.watchers:
            watch()

    def _running(self, kind: str, branch: str) -> list[Intent]:
        return [
            i
            for i in self.intents
            if i.kind == kind and i.branch == branch and i.outcome not in NOTHING
        ]

    def _explained(self, kind: str, branch: str, target: str | None, what: str) -> Intent:
        running = [i for i in self._running(kind, branch) if i.target == target]
        group = [i for i in running if i.landed is None]
        if not group:  # a group of identical requests explained an earlier event: each
            # did at most one, so one not yet counted may do this one (create, delete and
            # create again while two creates of one branch run)
            spare = [i for i in running if i.group and i.group_events < len(i.group)]
            if not spare:
                raise Violation(f"{what}: no {kind} of {branch!r} explains it (a phantom)")
            for i in spare[0].group:  # type: ignore[union-attr]
                i.group_events += 1
            return spare[0]
        for i in group:  # any of them may have done it (two deletions of one tag at once)
            i.landed, i.group, i.group_events = target or "deleted", group, 1
        return group[0]

    def _transition(self, branch: str, old: str | None, new: str | None) -> None:
        if new is None:
            self._explained("delete-branch", branch, None, f"branch {branch!r} deleted")
            return
        if old is None:
            self.learn(new)
            self._explained("create-branch", branch, new, f"branch {branch!r} created")
            return
        if new in self.commits:  # an existing commit: a reset or a fast-forward
            running = [i for i in self._running("reset", branch) if i.target == new]
            running += [
                i
                for i in self._running("merge", branch)
                if i.source == new and old in self._ancestors(new)
            ]
            group = [i for i in running if i.landed is None]
            for i in group:  # any of them may have done it; one must not have failed
                i.landed, i.group, i.group_events = new, group, 1
            if group:
                return
            # A group of identical requests explained an earlier move to `new`: each made
            # one at most, so one not yet counted may make this one (two resets to one
            # commit, a fast-forward landing between their moves).
            spare = [
                i for i in running if i.landed == new and i.group and i.group_events < len(i.group)
            ]
            if spare:
                for i in spare[0].group:  # type: ignore[union-attr]
                    i.group_events += 1
                return
            raise Violation(
                f"branch {branch!r} moved from {old[:12]} to the older commit {new[:12]} "
                "and no reset or merge explains it (a phantom)"
            )
        info = self.learn(new)
        if not info.parents or info.parents[0] != old:
            raise Violation(
                f"branch {branch!r} moved from {old[:12]} to {new[:12]}, whose first parent "
                f"is {info.parents[0][:12] if info.parents else 'none'} (a lost update)"
            )
        attempt = self._attempt_of.get(new)
        if attempt is not None:
            intent = self.by_id.get(attempt)
            if intent is None or intent.kind != "commit" or intent.branch != branch:
                raise Violation(f"commit {new[:12]} on {branch!r} names no commit of ours")
            self._land(intent, new)
            self._check_session_commit(new, intent, "it landed")
            return
        for i in self.intents:
            if i.kind in ("merge", "revert") and i.id == info.message and i.branch == branch:
                self._land(i, new)
                self._check_history_commit(new, i)
                return
        raise Violation(f"commit {new[:12]} on {branch!r} ({info.message!r}) has no author here")

    def _land(self, intent: Intent, cid: str) -> None:
        if intent.outcome == Outcome.REPORTED:
            raise Violation(
                f"{intent.kind} {intent.id} reported a failure ({intent.result}), yet "
                f"{cid[:12]} landed later (a failure that happened)"
            )
        if intent.outcome == Outcome.FAILED:
            raise Violation(f"{intent.kind} {intent.id} failed, yet {cid[:12]} landed")
        if intent.landed is not None and not (
            intent.session is None and self._moved_since(intent)
        ):  # a merge or revert lands again only if a reset took its first landing away
            raise Violation(
                f"{intent.kind} {intent.id} landed twice: {intent.landed[:12]} and {cid[:12]}"
            )
        intent.landed = cid
        s = intent.session
        if s is not None:
            if s.landed is not None:
                raise Violation(f"session {s.sid} committed twice: {s.landed[:12]} and {cid[:12]}")
            s.landed = cid

    # verifying commits ------------------------------------------------------------------

    def _ancestors(self, cid: str) -> set[str]:
        out, stack = set(), [cid]
        while stack:
            c = stack.pop()
            if c in out or c not in self.commits:
                continue
            out.add(c)
            stack.extend(self.commits[c].parents)
        return out

    def _first_parent_chain(self, head: str, base: str) -> list[str] | None:
        """Commits after `base` up to `head` along first parents (None if base is not on it)."""
        out, c = [], head
        while c != base:
            info = self.commits.get(c)
            if info is None or not info.parents:
                return None
            out.append(c)
            c = info.parents[0]
        return out

    def _check_changed(self, cid: str) -> None:
        info = self.commits[cid]
        parent = self.commits[info.parents[0]].state
        real = {k for k in set(parent) | set(info.state) if parent.get(k) != info.state.get(k)}
        missing = real - info.changed
        if missing:
            raise Violation(f"the change set of {cid[:12]} leaves out {sorted(missing)}")

    def contributions(self, s: SessionModel, intent: Intent | None = None) -> dict[str, list[set]]:
        """Per key, each handle's possible latest registered change (KEEP: none). Unless the
        commit chose to include unfinished writers, a handle whose process was dead when it
        began contributes nothing (a commit that chose nothing is refused if it staged
        anything), and one that died during it may or may not."""
        out: dict[str, list[set]] = {}
        drop = intent is not None and intent.unfinished != "include"
        for h in s.handles:
            if drop and intent is not None and h.name in intent.gone:
                continue
            if self.rewritten(s, h):
                continue
            died = drop and h.process is not None and not h.process.alive
            chose = intent is not None and intent.unfinished is not None
            if (
                chose
                and h.withdrew
                and intent.unfinished == "discard"
                and h is not intent.committer
            ):
                died = True  # its whole part may be left out
            for key in set(h.durable) | set(h.maybe):
                options = set(h.durable.get(key, {KEEP})) | h.maybe.get(key, set())
                if chose:  # its withdrawn writes are left out
                    options |= h.withdrawn.get(key, frozenset())
                out.setdefault(key, []).append(options | {KEEP} if died else options)
        return out

    @staticmethod
    def rewritten(s: SessionModel, h: Handle) -> bool:
        """Whether dead handle `h`'s part was written again after its process died: every
        key it may have staged, by another handle certainly (txn/superseded.py). A commit
        leaves out such a writer whatever `unfinished` chose once it is unfinished (gone or
        failed) and the rewriter finished; otherwise it counts both and refuses where their
        bytes differ. Either way, what lands at those keys is the rewriter's."""
        died = None if h.process is None else h.process.died
        keys = set(h.durable) | set(h.maybe)
        if died is None or not keys:
            return False
        return all(
            any(
                o is not h
                and len(o.durable.get(key, ())) == 1
                and KEEP not in o.durable[key]
                and o.wrote_at.get(key, died) > died
                for o in s.handles
            )
            for key in keys
        )

    def _check_unfinished(self, s: SessionModel, cid: str, intent: Intent) -> None:
        """A writer gone before the commit began, certainly holding registered writes, makes
        a commit that chose nothing (`unfinished=None`) refuse, unless its part was written
        again since."""
        if intent.unfinished is not None:
            return
        for h in s.handles:
            if h.name in intent.gone and h.durable and not self.rewritten(s, h):
                raise Violation(
                    f"session {s.sid}: commit {cid[:12]} landed although {h.name}, whose "
                    "process was dead, had staged writes (a gone writer counted silently)"
                )

    def _check_session_commit(self, cid: str, intent: Intent, why: str) -> None:
        s = intent.session
        assert s is not None
        self.counts["session commits verified"] += 1
        self._check_changed(cid)
        info = self.commits[cid]
        parent = self.commits[info.parents[0]].state
        base = self.commits[s.base].state
        chain = self._first_parent_chain(info.parents[0], s.base)
        if chain is None:
            raise Violation(
                f"session {s.sid} landed {cid[:12]} on a branch no longer descending from its "
                f"base {s.base[:12]} (a reset conflict was missed)"
            )
        theirs = set().union(*(self.commits[c].changed for c in chain)) if chain else set()
        self._check_unfinished(s, cid, intent)
        unfinished = (
            ""
            if intent.unfinished == "include" or not intent.gone
            else (
                f" (unfinished={intent.unfinished!r}: nothing of {sorted(intent.gone)}, whose "
                "process was dead, may count: a gone writer counted silently?)"
            )
        )
        conflicts = []
        for key, per_handle in sorted(self.contributions(s, intent).items()):
            certain = [next(iter(o)) for o in per_handle if len(o) == 1 and KEEP not in o]
            if len(set(certain)) > 1:
                raise Violation(
                    f"session {s.sid} ({why}): two workers staged different bytes for {key!r} "
                    f"and its commit {cid[:12]} landed anyway (a cooperative overlap missed)"
                )
            options = set().union(*per_handle)
            changes = {o for o in options if o is not KEEP and o != base.get(key)}
            results = (
                {parent.get(key)} if (KEEP in options or len(changes) < len(options)) else set()
            )
            for o in changes:
                if key in theirs and md.is_meta(key):  # metadata: no policy resolves it
                    if o == parent.get(key):
                        results.add(o)  # both sides wrote the same document: no conflict
                    continue
                if key in theirs:
                    if intent.policy == "fail":
                        continue
                    results.add(o if intent.policy == "ours" else parent.get(key))
                else:
                    results.add(o)
            if not results:
                conflicts.append(key)
                continue
            got = info.state.get(key)
            if md.is_meta(key) and key in theirs and got in changes and got != parent.get(key):
                conflicts.append(key)  # its document over another's change of it
                continue
            if got not in results:
                raise Violation(
                    f"session {s.sid} ({why}): commit {cid[:12]} holds {_show(got)} at "
                    f"{key!r}; expected one of {sorted(_show(r) for r in results)}{unfinished}"
                )
        meta = [k for k in conflicts if md.is_meta(k)]
        if meta:
            raise Violation(
                f"session {s.sid} committed {cid[:12]} over a metadata conflict on {meta}: "
                f"{info.parents[0][:12]} changed those documents since its base {s.base[:12]} "
                "(metadata conflicts fail whatever on_conflict says)"
            )
        structural = self._structural_conflicts(s, intent, chain, parent, base)
        if structural:
            raise Violation(
                f"session {s.sid} committed {cid[:12]} over a structural conflict: "
                f"{'; '.join(structural)}"
            )
        if conflicts:
            raise Violation(
                f"session {s.sid} committed {cid[:12]} over a conflict on {conflicts}: "
                f"{info.parents[0][:12]} changed them since its base {s.base[:12]} "
                "(on_conflict='fail')"
            )
        touched = set(self.contributions(s, intent))
        for key in set(parent) | set(info.state):
            if key not in touched and parent.get(key) != info.state.get(key):
                raise Violation(
                    f"session {s.sid}: commit {cid[:12]} changed {key!r}, which it never "
                    f"wrote{unfinished}"
                )

    def _their_nodes(self, chain: list[str]) -> dict[str, tuple[str, bool]]:
        """Node -> (how, guards chunks) of the commits in `chain` (newest first) taken
        together, a later change winning as the commit protocol merges change sets:
        created stays created unless deleted; a structural change is not hidden by a later
        attribute change."""
        nodes: dict[str, tuple[str, bool]] = {}
        for c in reversed(chain):
            info = self.commits[c]
            before = self.commits[info.parents[0]].state
            for key in sorted(k for k in info.changed if md.is_meta(k)):
                old, new = before.get(key), info.state.get(key)
                kind = md.change_kind(old, new)
                if kind is None:
                    continue
                prev = nodes.get(md.node_of(key))
                if prev is not None and prev[0] == "created" and kind != "deleted":
                    continue
                if prev is not None and prev[0] != "attributes" and kind == "attributes":
                    continue
                nodes[md.node_of(key)] = (kind, md.guards_chunks(old, new))
        return nodes

    def _structural_conflicts(
        self, s: SessionModel, intent: Intent, chain: list[str], parent: State, base: State
    ) -> list[str]:
        """Certain conflicts between a node's structure changed on one side (a resize, a
        new or deleted array) and chunk writes under it on the other: none may land. Only
        writes known to be in the commit count, and a node both sides left with the same
        document conflicts with nothing."""
        theirs = set().union(*(self.commits[c].changed for c in chain)) if chain else set()
        their_nodes = self._their_nodes(chain)
        their_data = {k for k in theirs if not md.is_meta(k)}
        ours: dict[str, set] = {
            k: set().union(*o) for k, o in self.contributions(s, intent).items()
        }
        found = []
        for node in sorted(set(their_nodes) | {md.node_of(k) for k in ours if md.is_meta(k)}):
            key = f"{node}/{md.META_SUFFIX}" if node else md.META_SUFFIX
            options = ours.get(key, {KEEP})
            if key in theirs and (parent.get(key) in options or KEEP in options):
                continue  # maybe alike (or not ours to judge): nothing certain
            mine = [o for o in options if o is not KEEP and o != base.get(key)]
            certain = bool(mine) and len(mine) == len(options)
            if certain and all(md.guards_chunks(base.get(key), o) for o in mine):
                hit = sorted(k for k in their_data if md.under(node, k))
                if hit:
                    found.append(f"it changed the structure of {node!r}; {hit} changed under it")
            if certain:
                continue  # both changed the document: a metadata conflict, judged above
            if node in their_nodes and their_nodes[node][1]:
                written = sorted(
                    k
                    for k, o in ours.items()
                    if not md.is_meta(k)
                    and md.under(node, k)
                    and KEEP not in o
                    and base.get(k) not in o
                )
                if written:
                    found.append(f"{node!r} changed structure since its base; it wrote {written}")
        return found

    def _merge_bases(self, a: str, b: str) -> list[str]:
        common = self._ancestors(a) & self._ancestors(b)
        return sorted(c for c in common if not any(c in self._ancestors(d) - {d} for d in common))

    def _check_history_commit(self, cid: str, intent: Intent) -> None:
        self.counts[f"{intent.kind} commits verified"] += 1
        self._check_changed(cid)
        info = self.commits[cid]
        head = info.parents[0]
        if intent.kind == "merge":
            if intent.source is None:  # a pull request merges its source as it finds it
                intent.source = info.parents[-1]
            if info.parents != (head, intent.source):
                raise Violation(f"merge {cid[:12]} has parents {info.parents}")
            bases = self._merge_bases(head, intent.source)
            other = intent.source
        else:
            assert intent.source is not None
            reverted = self.commits[intent.source]
            bases, other = [intent.source], reverted.parents[0]
        errors = []
        for base in bases:
            expected, conflicts, meta = three_way(
                self.commits[base].state,
                self.commits[head].state,
                self.commits[other].state,
                intent.policy,
            )
            if meta:
                errors.append(f"metadata conflicts: {'; '.join(meta)} (base {base[:12]})")
            elif conflicts and intent.policy == "fail":
                errors.append(f"conflicts on {conflicts} (base {base[:12]})")
            elif expected != info.state:
                diff = sorted(
                    k
                    for k in set(expected) | set(info.state)
                    if expected.get(k) != info.state.get(k)
                )
                errors.append(f"differs at {diff} (base {base[:12]})")
            else:
                return
        raise Violation(
            f"{intent.kind} {intent.id} landed {cid[:12]} on {intent.branch!r} with "
            f"on_conflict={intent.policy!r}, but: {'; '.join(errors)}"
        )

    # reads ------------------------------------------------------------------------------

    def check_read(self, who: str, cid: str, got: dict[str, Value]) -> None:
        """Check values read at commit `cid` against that commit's state."""
        info = self.commits.get(cid)
        if info is None:
            self.learn(cid)
            info = self.commits[cid]
        self.counts["pinned reads checked"] += len(got)
        for key, value in got.items():
            if info.state.get(key) != value:
                raise Violation(
                    f"{who} read {_show(value)} at {key!r} of {cid[:12]}, which holds "
                    f"{_show(info.state.get(key))}"
                )

    def check_session_read(self, who: str, s: SessionModel, h: Handle, got: dict) -> None:
        """Check values read in a session: its own writes, else the base (others' flushed writes may
        show)."""
        others = [o for o in s.handles if o is not h]
        got = {
            k: v
            for k, v in got.items()  # another worker's flushed write of the key may show
            if not any(k in o.written or k in o.maybe or k in o.durable for o in others)
        }
        self.counts["session reads checked"] += len(got)
        for key, value in got.items():
            allowed = self.view(s, h, key)
            if KEEP in allowed:
                allowed = allowed - {KEEP} | {self.commits[s.base].state.get(key)}
            if value not in allowed:
                raise Violation(
                    f"{who} read {_show(value)} at {key!r} in session {s.sid}; its writes and "
                    f"base {s.base[:12]} allow only {sorted(_show(v) for v in allowed)}"
                )

    # retention and deletes --------------------------------------------------------------

    def live_sessions(self, now: float) -> list[dict]:
        """The session records still open (not expired at `now`) or committing."""
        out = []
        records = self.obs.records
        for _, value, _ in (i for p in records.partitions for i in self.obs.meta.scan(p)):
            rec = json.loads(value)
            live = rec["status"] == "committing" or (
                rec["status"] == "open" and now <= rec["expires_at"]
            )
            if live:
                out.append(rec)
        return out

    def retained(self, now: float) -> tuple[set[str], set[str]]:
        """(commits that must stay readable, commits that must not be expired)."""
        store = self.obs.object_store
        hard = set(self.heads.values()) | set(self.tags.values())
        for rec in self.live_sessions(now):
            sm = self.sessions.get(rec["id"])
            dropped_first = store.exists(f"{EXPIRED_PREFIX}{rec['base']}")
            if sm is not None and not sm.stored and dropped_first:
                continue  # expired before its record was stored (txn/birth.py)
            if rec["base"] in self.commits:
                hard.add(rec["base"])
                head = self.heads.get(rec["branch"])
                chain = self._first_parent_chain(head, rec["base"]) if head else None
                hard.update(chain or ())
        seen, stack = set(), list(hard)
        while stack:
            c = stack.pop()
            if c in seen or c not in self.commits:
                continue
            if c not in hard and store.exists(f"{EXPIRED_PREFIX}{c}"):
                continue
            seen.add(c)
            stack.extend(self.commits[c].parents)
        return seen, hard

    def protected(self, now: float, algo) -> dict[str, str]:
        """Object key -> why it must exist."""
        keep: dict[str, str] = {}
        commits, _ = self.retained(now)
        for c in sorted(commits):
            for key in self.commits[c].objects:
                keep.setdefault(key, f"retained commit {c[:12]}")
        live = {r["id"] for r in self.live_sessions(now)}
        for s in self.sessions.values():
            if s.sid not in live:
                continue
            for h in s.handles:
                for key, v in h.staged.items():
                    if isinstance(v, bytes) and len(v) > MANIFEST_INLINE_MAX:
                        obj = chunk_object_key(digest(algo, v))
                        keep.setdefault(obj, f"{h.name}'s flushed write of {key!r}")
        return keep

    def check_delete(self, key: str, by: str, now: float) -> None:
        """Check that deleting `key` (by `by`) was allowed: unreachable, past its grace, not
        retained."""
        self.counts["deletes checked"] += 1
        grace = self.gc_grace.get(by)
        if key.startswith("commits/") and by in self.expire_floor:
            cid = key.split("/", 1)[1]
            _, hard = self.retained(now)
            if cid in hard:
                raise Violation(
                    f"expire by {by} deleted the record of {cid[:12]}, which a "
                    "branch, tag or open session keeps"
                )
            return
        keep = self.protected(now, self.obs.hash)
        if key in keep:
            raise Violation(f"{by} deleted {key}, still needed: {keep[key]}")
        if grace is not None:
            got = self.obs.meta.get(self.obs.partition("gc"), b"c/" + key.encode())
            # gc deletes what it finds dead with no candidate record only when the grace is 0
            age = 0.0 if got is None else now - json.loads(got[0])["t"]
            if age < grace and grace > 0:  # (with 0 any age will do: skew may make it < 0)
                raise Violation(
                    f"{by} deleted {key}, a candidate for {age:.1f} s, under a grace "
                    f"period of {grace:.0f} s"
                )

    def check_expired(self, cid: str, by: str, now: float, metastore_now: float) -> None:
        """A new expiry marker: the commit is old enough (by `now`, the expiring process's
        clock, which its cutoff comes from) and nothing keeps it (sessions' expiry judged
        by `metastore_now`)."""
        self.counts["expiries checked"] += 1
        try:
            marker = json.loads(self.obs.object_store.get(f"{EXPIRED_PREFIX}{cid}"))
        except NotFoundError:
            return
        info = self.commits.get(cid)
        _, hard = self.retained(metastore_now)
        if cid in hard:  # a ref made since expire read them: it takes the marker back
            self.taken_back.setdefault(by, set()).add(cid)
            return
        older = self.expire_floor.get(by)
        if info is not None and info.timestamp >= marker["cutoff"]:
            raise Violation(f"{by} expired {cid[:12]}, newer than its cutoff")
        if older is not None and marker["cutoff"] > now - older + 1e-6:
            raise Violation(f"{by} expired with a cutoff later than now - older_than")

    def check_expire_done(self, by: str, now: float) -> None:
        """After an expiry returned: the markers it wrote for commits a ref made meanwhile
        keeps were taken back (one killed in between may leave them: gc still keeps refs)."""
        _, hard = self.retained(now)
        for cid in sorted(self.taken_back.pop(by, ())):
            self.counts["expiries of kept commits taken back"] += 1
            if cid in hard and self.obs.object_store.exists(f"{EXPIRED_PREFIX}{cid}"):
                what = (
                    "a tag points at"
                    if cid in self.tags.values()
                    else "a branch or open session keeps"
                )
                raise Violation(f"{by} left {cid[:12]} expired, which {what}")


def three_way(
    base: State, ours: State, theirs: State, policy: str
) -> tuple[State, list[str], list[str]]:
    """The three-way merge: a chunk changed on one side takes that side; changed alike on
    both, that; changed differently, a conflict resolved by `policy`. A metadata document
    changed differently on both sides conflicts whatever the policy (unless both changed
    only attributes, which merge name by name), and so does a structural change of a node
    on one side with chunk writes under it on the other. Returns (state, chunk conflicts,
    metadata conflicts)."""
    out: State = {}
    conflicts: list[str] = []
    meta: list[str] = []
    keys = sorted(set(base) | set(ours) | set(theirs))
    for key in keys:
        b, o, t = base.get(key), ours.get(key), theirs.get(key)
        if o == t or t == b:
            v = o
        elif o == b:
            v = t
        elif md.is_meta(key):
            merged = None
            if md.change_kind(b, o) == md.change_kind(b, t) == "attributes":
                assert o is not None and t is not None
                merged = md.merge_attributes(b, o, t)
            if merged is None:
                meta.append(f"both sides changed {key}")
                v = o
            else:
                v = merged
        else:
            conflicts.append(key)
            v = t if policy == "theirs" else o
        if v is not None:
            out[key] = v
    for side, other in ((ours, theirs), (theirs, ours)):
        for key in keys:
            if not md.is_meta(key) or ours.get(key) == theirs.get(key):
                continue  # not a document, or both sides left it alike
            if not md.guards_chunks(base.get(key), side.get(key)):
                continue
            node = md.node_of(key)
            hit = [
                k
                for k in keys
                if not md.is_meta(k)
                and md.under(node, k)
                and other.get(k) != base.get(k)
                and other.get(k) != side.get(k)
            ]
            if hit:
                meta.append(f"{node!r} changed structure on one side, {hit} on the other")
    return out, conflicts, meta


def _show(value: object) -> str:
    if value is None:
        return "nothing"
    if value is KEEP:
        return KEEP
    assert isinstance(value, bytes)
    return f"{value[:6]!r}..({len(value)} B)" if len(value) > 8 else repr(value)
