"""Cloning a repository (or the branches and tags chosen) to another location and metastore,
and pulling the copy up to date later (`Repo.clone`, `Repo.pull`).

The copy is a repository of its own: its own storage, metastore and id, sharing nothing
with the source. Its objects are the source's, byte for byte (ids are content hashes, so
commit ids are the same), and a pull copies only what the copy lacks: a commit the copy
holds has its whole history and every object it reaches already there, so the walk back
from the source's heads stops at the first one it finds, and below a new commit only
manifest ranges the copy lacks are read (a range the copy holds has all its chunks). The
set difference is taken on content addresses, with one existence check per candidate.

Order makes a copy stopped at any point (a kill) safe and resumable: data objects first,
then manifest ranges, snapshots and change sets, then commit records oldest first, then the
refs. A commit record is written only after everything it reaches, so the next pull (or
the same clone run again) takes up where the last stopped. With `depth`, history below the
last `depth` commits of each head is cut, the cut marked as `expire` marks it
(`expired/<id>`): history walks end there as they do after an expiry.

A copy carries the source's purge records, and applies each to its own storage: purged
bytes are never copied (the source holds tombstones), and a copy made before a purge loses
them at its next pull. The copy holds the garbage collector's lock while it pulls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from zarrlake._util import crashpoints
from zarrlake.connection import INITIAL_MESSAGE, RepoContext, RepoSpec, create_context, open_context
from zarrlake.errors import (
    AlreadyExistsError,
    Conflict,
    ConflictKind,
    CorruptionError,
    FastForwardError,
    InvalidInputError,
    NotFoundError,
)
from zarrlake.format.blocks import TABLE_MIN, table_key
from zarrlake.format.changes import ChangeSet
from zarrlake.format.chunk_ref import RefKind
from zarrlake.format.commit import CommitRecord
from zarrlake.format.digest import digest
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.gc_protocol import GcState
from zarrlake.vc.objects import prefix_of
from zarrlake.vc.purges import has_trailer, tombstone_of
from zarrlake.vc.reach import manifest_refs
from zarrlake.vc.refs import BRANCH, TAG

ORIGIN = b"origin"
"""The key, in the copy's refs partition, of where it was cloned from."""
VSOURCE = b"vsource/"
"""Allowed virtual sources (vc/sources.py), copied along: the copy reads the same files."""
BATCH = 256
"""Objects copied per batch (the crash point `pull_after_data_batch` follows the first)."""
Progress = Callable[[str, int, int | None], None] | None


@dataclass(frozen=True)
class PullReport:
    """What a clone or pull copied."""

    source: str
    commits: int
    """Commit records copied."""
    objects: int
    """Objects copied (chunks, block tables, manifests, snapshots, change sets, commits)."""
    bytes: int
    present: int
    """Candidate objects the copy held already (not copied)."""
    refs: dict[str, str] = field(default_factory=dict)
    """Branches (`branch/NAME`) and tags (`tag/NAME`) created or moved, to their commit."""
    cut: int = 0
    """Commits below the depth asked for, marked as the end of the copied history."""
    purges: tuple[str, ...] = ()
    """Purge records brought from the source."""
    seconds: float = 0.0

    def to_json(self) -> dict:
        """The report as a plain dict, for `--json` output."""
        return asdict(self)


def origin(ctx: RepoContext) -> dict[str, Any] | None:
    """Where the repository was cloned from (location, metastore without its password,
    repository id, refs, depth), or None if it is not a clone."""
    got = ctx.meta.get(ctx.refs.partition, ORIGIN)
    return None if got is None else json.loads(got[0])


def without_password(url: str) -> str:
    """A metastore URL as the copy records it: any password left out (the copy's
    metastore is another system; `pull` asks for the source when it needs one)."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    return f"{scheme}://{userinfo.partition(':')[0]}@{tail}"


def _pristine(ctx: RepoContext) -> bool:
    """Whether a repository holds nothing but its initial commit on main (a clone killed
    right after creating it)."""
    if ctx.refs.list(TAG):
        return False
    branches = ctx.refs.list(BRANCH)
    if set(branches) - {"main"}:
        return False
    if not branches:
        return True
    rec = ctx.objects.read_commit(branches["main"])
    return not rec.parents and rec.message == INITIAL_MESSAGE


def clone(
    source: RepoContext,
    spec: RepoSpec,
    refs: list[str] | None,
    depth: int | None,
    progress: Progress = None,
) -> tuple[RepoContext, PullReport]:
    """Create the copy at `spec` and pull into it (see the module). Run again on a copy a
    kill stopped, it goes on where that one stopped."""
    if spec.location.rstrip("/") == source.spec.location.rstrip("/"):
        raise InvalidInputError("a clone needs a location of its own")
    _check_depth(depth)
    try:
        dest = open_context(spec)
    except NotFoundError:
        dest = None
    if dest is not None:
        made = origin(dest)
        if made is None and not _pristine(dest):  # (killed before it recorded its origin)
            dest.close()
            raise AlreadyExistsError(
                f"a repository that is not a clone exists at {spec.location}"
                "; choose another destination"
            )
        if made is not None and made.get("repo_id") != source.repo_id:
            dest.close()
            raise AlreadyExistsError(
                f"{spec.location} is a clone of another repository ({made.get('location')})"
                "; choose another destination"
            )
        if made is not None:  # a clone stopped half-way: the same refs and depth
            refs, depth = made.get("refs"), made.get("depth")
    else:
        dest = create_context(spec, source.hash)
    if origin(dest) is None:
        main = dest.refs.get(BRANCH, "main")
        doc = {
            "location": source.spec.location,
            "metastore": without_password(source.spec.metastore),
            "repo_id": source.repo_id,
            "refs": refs,
            "depth": depth,
            "cloned_at": dest.clock(),
            "initial": None if main is None else main[0],  # its own: the source's replaces it
        }
        dest.meta.set_many(dest.refs.partition, [(ORIGIN, json.dumps(doc).encode())])
    return dest, pull(dest, source, refs, depth, progress=progress)


def _check_depth(depth: object) -> None:
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise InvalidInputError(f"depth must be a positive integer or None, not {depth!r}")


def _chosen(source: RepoContext, names: list[str] | None) -> dict[str, str]:
    """`kind/name` -> commit of the source's branches and tags chosen (all, for None)."""
    branches, tags = source.refs.list(BRANCH), source.refs.list(TAG)
    if names is None:
        return {f"{BRANCH}/{n}": c for n, c in branches.items()} | {
            f"{TAG}/{n}": c for n, c in tags.items()
        }
    out = {}
    for n in names:
        if n in branches:
            out[f"{BRANCH}/{n}"] = branches[n]
        elif n in tags:
            out[f"{TAG}/{n}"] = tags[n]
        else:
            raise NotFoundError(
                f"the source has no branch or tag {n!r}"
                "; run `zarrlake branch` and `zarrlake tag` on the source to see them"
            )
    return out


def _descends(source: RepoContext, head: str, ancestor: str) -> bool:
    """Whether `ancestor` is in the source's history of `head` (all parents)."""
    seen, stack = set(), [head]
    while stack:
        cid = stack.pop()
        if cid == ancestor:
            return True
        if cid in seen:
            continue
        seen.add(cid)
        try:
            stack.extend(source.objects.read_commit(cid).parents)
        except NotFoundError:
            continue  # expired (or never there): the history ends here
    return False


def _conflicts(
    dest: RepoContext, source: RepoContext, chosen: dict[str, str], force: bool
) -> list[Conflict]:
    """Refs of the copy a pull would move other than forward: a branch with commits the
    source lacks, a tag at another commit."""
    out = []
    initial = (origin(dest) or {}).get("initial")
    for ref, cid in chosen.items():
        kind, _, name = ref.partition("/")
        got = dest.refs.get(kind, name)
        if got is None or got[0] in (cid, initial) or force:
            continue
        if kind == TAG:
            out.append(Conflict(name, ConflictKind.DIVERGED, detail=f"tag at {got[0][:12]} here"))
        elif not _descends(source, cid, got[0]):
            out.append(
                Conflict(
                    name,
                    ConflictKind.DIVERGED,
                    detail=f"branch at {got[0][:12]} here, which the source's {cid[:12]} "
                    "does not descend from",
                )
            )
    return out


def _walk(
    dest: RepoContext, source: RepoContext, heads: Iterable[str], depth: int | None
) -> tuple[list[tuple[str, CommitRecord]], list[str], list[str]]:
    """(commits to copy, parents first; commits whose source expiry marker to copy; commits
    to mark as the end of the copied history), walking back from `heads` breadth first
    (so `depth` counts generations) and stopping at commits the copy holds."""
    found: dict[str, CommitRecord] = {}
    markers: list[str] = []
    cut: list[str] = []
    level = sorted(set(heads))
    generation = 0
    seen: set[str] = set(level)
    while level:
        below: list[str] = []
        for cid in level:
            if dest.object_store.exists(f"commits/{cid}"):
                continue
            if source.objects.expired_at(cid) is not None:
                markers.append(cid)
                continue
            if depth is not None and generation >= depth:
                cut.append(cid)
                continue
            rec = source.objects.read_commit(cid)
            found[cid] = rec
            for p in rec.parents:
                if p not in seen:
                    seen.add(p)
                    below.append(p)
        level = below
        generation += 1
    order: list[tuple[str, CommitRecord]] = []
    done: set[str] = set()
    for start in sorted(found):  # parents first (post-order), without recursion
        stack = [(start, False)]
        while stack:
            cid, expanded = stack.pop()
            if cid in done or cid not in found:
                continue
            if expanded:
                done.add(cid)
                order.append((cid, found[cid]))
                continue
            stack.append((cid, True))
            stack.extend((p, False) for p in found[cid].parents if p not in done)
    cut = [c for c in cut if c not in found]
    return order, markers, cut


class _Copier:
    """Copies objects the copy lacks from the source, checking each on the way."""

    def __init__(self, dest: RepoContext, source: RepoContext) -> None:
        self.dest = dest
        self.source = source
        self.done: set[str] = set()
        self.objects = 0
        self.bytes = 0
        self.present = 0

    def check(self, key: str, data: bytes) -> None:
        """CorruptionError unless `data` is what the source's `key` must hold."""
        kind, _, name = key.partition("/")
        if kind == "chunks":
            if digest(self.source.hash, data) == bytes.fromhex(name):
                return
            if tombstone_of(data) is not None or has_trailer(data):
                return  # retired by a purge: copied as it is
            raise CorruptionError(
                f"{key} in the source fails its checksum: not copied"
                "; run `zarrlake fsck` on the source"
            )
        kinds = (ManifestRange, SnapshotRoot, ChangeSet, CommitRecord)
        cls = {prefix_of(c): c for c in kinds}.get(kind)
        if cls is not None:
            cls.decode(name, data)  # checks the content hash it is named by

    def copy(self, keys: list[str], optional: bool = False) -> None:
        """Copy the keys the copy lacks (side by side); `optional` ones may be absent from
        the source (block tables)."""
        todo = [k for k in dict.fromkeys(keys) if k not in self.done]

        def one(key: str) -> tuple[int, int]:
            if self.dest.object_store.exists(key):
                return 0, 0
            try:
                data = self.source.object_store.get(key)
            except NotFoundError:
                if optional:
                    return 0, 0
                where = self.source.spec.location
                raise NotFoundError(
                    f"{key} is missing in the source {where}; run `zarrlake fsck` on the source"
                ) from None
            self.check(key, data)
            self.dest.object_store.put_if_absent(key, data)
            return 1, len(data)

        for i in range(0, len(todo), BATCH):
            batch = todo[i : i + BATCH]
            got = self.dest.objects.map(one, batch)
            self.objects += sum(n for n, _ in got)
            self.bytes += sum(b for _, b in got)
            self.present += sum(1 for n, _ in got if not n) if not optional else 0
            self.done.update(batch)
            crashpoints.reached("pull_after_data_batch")


def _data_keys(rng: ManifestRange) -> tuple[list[str], list[str]]:
    """(objects a range's chunks are in, block tables of those read by range)."""
    keys = list(manifest_refs(rng))
    tables = [
        table_key(rng.digest[i].tobytes())
        for i in range(len(rng))
        if rng.kind[i] == RefKind.OBJECT and int(rng.length[i]) >= TABLE_MIN
    ]
    return keys, tables


def pull(
    dest: RepoContext,
    source: RepoContext,
    refs: list[str] | None = None,
    depth: int | None = None,
    *,
    force: bool = False,
    progress: Progress = None,
) -> PullReport:
    """Bring the chosen refs of `source` (all, for None) and their history into `dest`,
    copying only what it lacks; see the module."""
    began = time.monotonic()
    _check_depth(depth)
    if dest.repo_id == source.repo_id:
        raise InvalidInputError(
            "a repository cannot pull from itself; pull from the repository it was cloned from"
        )
    if dest.hash != source.hash:
        raise InvalidInputError(
            f"the copy names objects by {dest.hash.label}, the source by {source.hash.label}: "
            "clone it anew"
        )
    chosen = _chosen(source, refs)
    conflicts = _conflicts(dest, source, chosen, force)
    if conflicts:
        raise FastForwardError(
            conflicts,
            "pull refused, nothing moved: "
            + "; ".join(f"{c.path}: {c.detail}" for c in conflicts)
            + " (force=True, --force, moves them to the source's)",
        )
    from zarrlake.admin.purge import carry_records, finish_pending

    purges = carry_records(source, dest)  # before any object: no tombstone without its record
    state = GcState(dest)
    state.acquire()  # no collector deletes what is copied before a ref reaches it
    try:
        report = _pull(dest, source, chosen, depth, force, progress)
    finally:
        state.release()
    finish_pending(dest)  # the source's purges applied here too
    return PullReport(
        **{**report.to_json(), "purges": tuple(purges), "seconds": time.monotonic() - began}
    )


def _pull(
    dest: RepoContext,
    source: RepoContext,
    chosen: dict[str, str],
    depth: int | None,
    force: bool,
    progress: Progress,
) -> PullReport:
    order, markers, cut = _walk(dest, source, chosen.values(), depth)
    copier = _Copier(dest, source)
    snapshots = list(dict.fromkeys(rec.snapshot for _, rec in order))
    fresh = [s for s in snapshots if not dest.object_store.exists(f"snapshots/{s}")]
    ranges: list[str] = []
    for sid in fresh:
        ranges += [m for m in source.objects.read(SnapshotRoot, sid).ranges.ids if m not in ranges]
    ranges = [m for m in ranges if not dest.object_store.exists(f"manifests/{m}")]
    for n, mid in enumerate(ranges):  # data first, then the ranges naming it
        keys, tables = _data_keys(source.objects.read(ManifestRange, mid))
        copier.copy(keys)
        copier.copy(tables, optional=True)
        if progress is not None:
            progress("copying", n + 1, len(ranges))
    copier.copy([f"manifests/{m}" for m in ranges])
    copier.copy([f"snapshots/{s}" for s in fresh])
    copier.copy([f"changes/{rec.changes}" for _, rec in order])
    now = dest.clock()
    for cid in markers:
        copier.copy([f"expired/{cid}"], optional=True)
    for cid in cut:
        doc = {"expired_at": now, "shallow": source.spec.location}
        dest.object_store.put_if_absent(f"expired/{cid}", json.dumps(doc).encode())
    for generation in _generations(order):  # a record found has its whole history
        copier.copy([f"commits/{cid}" for cid in generation])
        # a commit an earlier shallow copy cut is whole now: its history goes on (gc and
        # fsck stop at a marker, so it must go)
        dest.object_store.delete_many([f"expired/{cid}" for cid in generation])
    moved = _move_refs(dest, chosen, force)
    _copy_sources(dest, source)
    return PullReport(
        source=source.spec.location,
        commits=len(order),
        objects=copier.objects,
        bytes=copier.bytes,
        present=copier.present,
        refs=moved,
        cut=len(cut),
    )


def _generations(order: list[tuple[str, CommitRecord]]) -> list[list[str]]:
    """The commits of `order` (parents first) in groups whose parents are all in earlier
    groups (or already in the copy): each group is copied side by side."""
    level: dict[str, int] = {}
    for cid, rec in order:
        level[cid] = 1 + max((level[p] for p in rec.parents if p in level), default=-1)
    out: list[list[str]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for cid, n in level.items():
        out[n].append(cid)
    return out


def _move_refs(dest: RepoContext, chosen: dict[str, str], force: bool) -> dict[str, str]:
    """Create or move the chosen refs of the copy to the source's commits (the copy's own
    initial commit on main gives way to the source's main)."""
    initial = (origin(dest) or {}).get("initial")
    moved = {}
    for ref, cid in sorted(chosen.items()):
        kind, _, name = ref.partition("/")
        got = dest.refs.get(kind, name)
        if got is not None and got[0] == cid:
            continue
        if got is None:
            dest.refs.create(kind, name, cid)
        elif kind == BRANCH:
            dest.refs.move(name, cid, got[1])
            if force or got[0] == initial:  # commits of its own: the collector checks them
                dest.refs.dropped(got[0])
        elif force:  # a tag at another commit, replaced on request
            dest.refs.delete(TAG, name)
            dest.refs.create(TAG, name, cid)
        moved[ref] = cid
    return moved


def _copy_sources(dest: RepoContext, source: RepoContext) -> None:
    """Allow the copy's reads of the virtual sources the source allows."""
    rows = [(k, v) for k, v, _ in source.meta.scan(source.refs.partition, prefix=VSOURCE)]
    if rows:
        dest.meta.set_many(dest.refs.partition, rows)
