"""Purging data from every version (`Repo.purge`), and proving it (`fsck --purges`).

A purge removes the bytes of the chunks of some arrays (or of a region of one) from every
version the repository stores, leaving commits, ids and manifests as they were:

1. Read every stored commit's snapshot and select the chunk references of the arrays (and
   region) in each; their digests are the bytes to remove. Read every manifest range again
   for other references to those digests: chunks of other arrays, or of a region left out,
   that hold the same bytes lose them too, and so do branch heads that still hold them.
   Either needs `force=True`, and the refusal says which arrays and branches; or
   `keep_heads=True` leaves out what branch heads hold (the data rewritten there), so
   only history loses its bytes.
2. Store the purge record (who, when, why, which arrays, the digests and ranges), marked
   pending, so a purge stopped half-way is finished by the next one (`finish_pending`).
3. Holding the garbage collector's lock, inside a sweep epoch (writers that reused one of
   these objects meanwhile see the epoch change and re-check it, `WriteGuard.settle`),
   replace each chunk object by a tombstone and zero each range of a shared object
   (vc/purges.py), then mark the record done.

Chunks of at most 64 bytes live inside manifests, which commit ids cover, and virtual chunks
live in files outside the repository: neither can be removed here. A purge refuses when its
selection holds any, unless told to keep them (`keep_unremovable`), and records how many it
kept. Commit messages and metadata are part of each commit record, whose id is their hash:
they cannot be redacted; `messages` redacts the copies the id does not cover (the session
records of those commits and the pull requests that merged them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from zarrlake._util import crashpoints
from zarrlake.connection import RepoContext
from zarrlake.errors import InvalidInputError, NotFoundError, ZarrLakeError
from zarrlake.format.blocks import table_key
from zarrlake.format.chunk_ref import RefKind, chunk_object_key
from zarrlake.format.digest import digest
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.shard import layout_of, split_inner_key
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.metastore.checks import prefix_upper_bound
from zarrlake.vc.chunk_keys import KeyNamer, load_doc
from zarrlake.vc.fsck import Problem
from zarrlake.vc.gc_protocol import GcState, Heartbeat
from zarrlake.vc.pulls import PullRecord, PullRequests
from zarrlake.vc.purges import (
    DONE,
    PENDING,
    PurgeRecord,
    PurgeRecords,
    Span,
    has_trailer,
    new_id,
    tombstone,
    tombstone_of,
    trailer,
)
from zarrlake.vc.refs import BRANCH

Region = tuple[slice | int, ...]
Progress = Callable[[str, int, int | None], None] | None
REDACTED = "[redacted by purge {}]"
BATCH = 256
"""Objects replaced (or shared objects rewritten) per batch; the sweep's deadline and the
collector lock are checked between batches."""


def _digest_column(rng: ManifestRange) -> np.ndarray:
    """The digests of a range's entries as 32-byte strings (for membership tests)."""
    return np.ascontiguousarray(rng.digest).view("S32").ravel()


def parse_region(text: str) -> Region:
    """A region as the command line gives it: "0:10,:,5" (one item per dimension)."""
    out: list[slice | int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if ":" in part:
                lo, _, hi = part.partition(":")
                out.append(slice(int(lo) if lo else None, int(hi) if hi else None))
            else:
                out.append(int(part))
        except ValueError:
            raise InvalidInputError(
                f"a region is like '0:10,:,5', not {text!r}; write it in that form"
            ) from None
    return tuple(out)


def show_region(region: Region) -> str:
    """A region as text (the inverse of `parse_region`)."""

    def one(r: slice | int) -> str:
        if isinstance(r, int):
            return str(r)
        return f"{'' if r.start is None else r.start}:{'' if r.stop is None else r.stop}"

    return ",".join(one(r) for r in region)


def _check_region(region: object) -> Region:
    if not isinstance(region, tuple) or not region:
        raise InvalidInputError(
            f"a region is a tuple of slices and integers, not {region!r}"
            "; give slices and integers, e.g. (slice(0, 10), 5)"
        )
    for r in region:
        if isinstance(r, bool) or not isinstance(r, slice | int):
            raise InvalidInputError(
                f"a region is a tuple of slices and integers, not {region!r}"
                "; give slices and integers, e.g. (slice(0, 10), 5)"
            )
        if isinstance(r, slice) and r.step not in (None, 1):
            raise InvalidInputError(
                f"a region's slices take no step ({region!r}); give slices without a step"
            )
    return region


class _Box:
    """Which chunk entries of one array (at one version) meet a region."""

    def __init__(self, path: str, doc: bytes, region: Region) -> None:
        meta = load_doc(doc)
        shape = [int(n) for n in meta.get("shape", [])]
        if len(region) != len(shape):
            raise InvalidInputError(
                f"the region {show_region(region)!r} has {len(region)} dimension(s); "
                f"{path!r} has {len(shape)}"
                "; give one item per dimension"
            )
        self.bounds = []
        for r, n in zip(region, shape, strict=True):
            if isinstance(r, int):
                lo, hi = (r + n if r < 0 else r), (r + n if r < 0 else r) + 1
            else:
                lo, hi, _ = r.indices(n)
            self.bounds.append((lo, hi))
        grid = [int(n) for n in meta["chunk_grid"]["configuration"]["chunk_shape"]]
        layout = layout_of(doc)
        self.chunk = grid
        self.inner = (
            grid
            if layout is None
            else [g // n for g, n in zip(grid, layout.chunks_per_shard, strict=True)]
        )

    def meets(self, coords: tuple[int, ...] | None, inner: bool) -> bool:
        """Whether the chunk at `coords` (of the inner-chunk grid if `inner`) meets it."""
        if coords is None:
            return False
        size = self.inner if inner else self.chunk
        return all(
            c * s < hi and (c + 1) * s > lo
            for c, s, (lo, hi) in zip(coords, size, self.bounds, strict=True)
        )


@dataclass
class Plan:
    """What a purge removes: found by reading every stored version."""

    paths: tuple[str, ...]
    region: Region | None
    commits: int = 0
    objects: dict[bytes, int] | None = None
    """Chunk objects to replace by tombstones: digest -> size."""
    spans: list[Span] | None = None
    """Ranges of shared objects to zero."""
    chunks: int = 0
    kept_inline: int = 0
    kept_virtual: int = 0
    heads: dict[str, list[str]] | None = None
    """Branch -> arrays whose purged bytes its head still holds."""
    kept_at_heads: int = 0
    """Digests of the selection left alone because a branch head holds them (keep_heads)."""
    outside: dict[str, int] | None = None
    """Array -> chunks outside the selection holding purged bytes."""

    @property
    def bytes(self) -> int:
        """Bytes the purge removes: its objects' and its ranges'."""
        return sum((self.objects or {}).values()) + sum(s[2] for s in self.spans or [])

    def forced(self) -> tuple[str, ...]:
        """Why this purge needs force=True (empty: it does not)."""
        out = [
            f"branch {b!r} still holds the bytes (of {', '.join(paths)}) at its head"
            for b, paths in sorted((self.heads or {}).items())
        ]
        out += [
            f"{n} chunk reference(s) of {p!r} outside the selection hold the same bytes"
            for p, n in sorted((self.outside or {}).items())
        ]
        return tuple(out)


def _snapshots(ctx: RepoContext, progress: Progress) -> tuple[int, dict[str, SnapshotRoot]]:
    """(number of commits, snapshot roots by id) of every commit the repository stores."""
    objects = ctx.objects
    ids = objects.commit_ids("")
    roots: dict[str, SnapshotRoot] = {}
    for n, cid in enumerate(ids):
        try:
            sid = objects.read_commit(cid).snapshot
        except NotFoundError:
            continue  # expired meanwhile
        if sid not in roots:
            roots[sid] = objects.read(SnapshotRoot, sid)
        if progress is not None:
            progress("reading", n + 1, len(ids))
    return len(ids), roots


def _ranges_under(root: SnapshotRoot, prefix: bytes) -> list[int]:
    idx = root.ranges
    if not len(idx):
        return []
    stop = prefix_upper_bound(prefix)
    lo = idx.locate(prefix)
    hi = len(idx) if stop is None else int(np.searchsorted(idx.first_keys, stop, side="left"))
    return list(range(lo, max(hi, lo + 1)))


def plan_purge(
    ctx: RepoContext,
    paths: Sequence[str],
    region: Region | None,
    progress: Progress = None,
    keep_heads: bool = False,
) -> Plan:
    """Find what purging `paths` (or `region` of the one path) removes; see the module.
    With `keep_heads`, bytes a branch head holds are left out: only history is purged."""
    objects = ctx.objects
    commits, roots = _snapshots(ctx, progress)
    plan = Plan(tuple(paths), region, commits, {}, [], heads={}, outside={})
    selected: dict[str, np.ndarray] = {}  # range id -> mask of selected entries
    done: set[tuple[str, str, bytes]] = set()
    found: set[str] = set()
    home: dict[str, str] = {}  # range id -> a snapshot holding it (to name its keys)
    for sid, root in roots.items():
        for mid in root.ranges.ids:
            home.setdefault(mid, sid)
        for path in paths:
            doc = root.meta.get(f"{path}/zarr.json")
            if doc is None or load_doc(doc).get("node_type") != "array":
                continue
            found.add(path)
            box = _Box(path, doc, region) if region is not None else None
            namer = KeyNamer(root.meta) if box is not None else None
            prefix = f"{path}/".encode()
            stop = prefix_upper_bound(prefix)
            for i in _ranges_under(root, prefix):
                mid = root.ranges.ids[i]
                memo = (mid, path, doc if box is not None else b"")
                if memo in done:
                    continue
                done.add(memo)
                rng = objects.read(ManifestRange, mid)
                part = rng.key_slice(prefix, stop)
                mask = selected.setdefault(mid, np.zeros(len(rng), bool))
                if box is None or namer is None:
                    mask[part] = True
                    continue
                for j in range(part.start, part.stop):
                    key = bytes(rng.keys[j]).decode()
                    inner = split_inner_key(key) is not None
                    mask[j] |= box.meets(namer.coords(path, key), inner)
    missing = [p for p in paths if p not in found]
    if missing:
        raise NotFoundError(
            f"no version of the repository has an array {', '.join(missing)}"
            "; run `zarrlake ls` to see the arrays"
        )
    wanted: set[bytes] = set()
    for mid, mask in selected.items():
        rng = objects.read(ManifestRange, mid)
        kinds = np.asarray(rng.kind)[mask]
        plan.kept_virtual += int((kinds == RefKind.VIRTUAL).sum())
        rows = rng.digest[mask][kinds != RefKind.VIRTUAL]
        wanted.update(bytes(r.tobytes()) for r in rows)
    if keep_heads:
        held = _held_at_heads(ctx, roots, wanted)
        plan.kept_at_heads = len(held)
        wanted -= held
    _affected(ctx, plan, wanted, selected, roots, home, progress)
    return plan


def _held_at_heads(
    ctx: RepoContext, roots: dict[str, SnapshotRoot], wanted: set[bytes]
) -> set[bytes]:
    """The digests of `wanted` some branch head holds (in any array)."""
    if not wanted:
        return set()
    column = np.array(sorted(wanted), dtype="S32")
    held: set[bytes] = set()
    seen: set[str] = set()
    for cid in ctx.refs.list(BRANCH).values():
        sid = ctx.objects.snapshot_of(cid)
        root = roots.get(sid) or ctx.objects.read(SnapshotRoot, sid)
        for mid in root.ranges.ids:
            if mid in seen:
                continue
            seen.add(mid)
            rng = ctx.objects.read(ManifestRange, mid)
            for j in np.flatnonzero(np.isin(_digest_column(rng), column)).tolist():
                if rng.kind[j] != RefKind.VIRTUAL:
                    held.add(rng.digest[j].tobytes())
    return held


def _affected(
    ctx: RepoContext,
    plan: Plan,
    wanted: set[bytes],
    selected: dict[str, np.ndarray],
    roots: dict[str, SnapshotRoot],
    home: dict[str, str],
    progress: Progress,
) -> None:
    """Every reference, in any version, to the bytes of `wanted`: what to remove, and
    what outside the selection (or at a branch head) holds them too."""
    objects = ctx.objects
    assert plan.objects is not None and plan.spans is not None
    assert plan.heads is not None and plan.outside is not None
    if not wanted:
        return
    wanted_col = np.array(sorted(wanted), dtype="S32")
    hit: dict[str, set[str]] = {}  # range id -> arrays with purged bytes in it
    spans: set[Span] = set()
    namers: dict[str, KeyNamer] = {}
    for n, mid in enumerate(sorted(home)):
        rng = objects.read(ManifestRange, mid)
        at = np.flatnonzero(np.isin(_digest_column(rng), wanted_col))
        if progress is not None:
            progress("checking", n + 1, len(home))
        if not len(at):
            continue
        mask = selected.get(mid)
        sid = home[mid]
        namer = namers.get(sid) or namers.setdefault(sid, KeyNamer(roots[sid].meta))
        for j in at.tolist():
            ref = rng.ref_at(j)
            chosen = mask is not None and bool(mask[j])
            if ref.kind == RefKind.VIRTUAL:
                continue  # (a virtual digest names a range of a file, never bytes)
            if ref.kind == RefKind.INLINE:  # kept (inside the manifest), wherever it is
                plan.kept_inline += chosen
                continue
            node = namer.node_of(bytes(rng.keys[j]).decode())
            hit.setdefault(mid, set()).add(node)
            if not chosen:
                plan.outside[node] = plan.outside.get(node, 0) + 1
            plan.chunks += 1
            if ref.kind == RefKind.OBJECT:
                plan.objects[ref.digest] = ref.length
            else:
                assert ref.location is not None
                spans.add((ref.location, ref.offset, ref.length, ref.digest))
    plan.spans = sorted(spans)
    for name, cid in ctx.refs.list(BRANCH).items():
        rec = objects.read_commit(cid)
        root = roots.get(rec.snapshot) or objects.read(SnapshotRoot, rec.snapshot)
        held = sorted({p for mid in root.ranges.ids for p in hit.get(mid, ())})
        if held:
            plan.heads[name] = held


# applying -------------------------------------------------------------------------------


def _in_batches(
    state: GcState, items: list, work: Callable[[list], None], label: str, progress: Progress
) -> None:
    """Run `work` over `items` in batches, inside sweep epochs: a new one begins when the
    current one nears its deadline (or a writer past it ended it). A heartbeat renews each
    epoch's lease in the background, as a collector's sweep does: a slow batch keeps it."""
    if not items:
        return
    phase = state.begin_sweep()
    beat = Heartbeat(state, phase)
    try:
        for i in range(0, len(items), BATCH):
            if not state.may_delete(phase):
                beat.stop()
                state.end_sweep(phase)
                phase = state.begin_sweep()
                beat = Heartbeat(state, phase)
            state.refresh()
            work(items[i : i + BATCH])
            crashpoints.reached("purge_after_batch")
            if progress is not None:
                progress(label, min(i + BATCH, len(items)), len(items))
    finally:
        beat.stop()
        state.end_sweep(phase)


def _retire_objects(
    ctx: RepoContext, purge_id: str, digests: list[bytes], existing: bool = False
) -> None:
    """Replace each chunk object by a tombstone (one already retired keeps its own) and
    drop its block table; with `existing`, only objects that are there (the bytes of a
    purged range may also lie in a chunk object of their own no version refers to)."""
    store = ctx.object_store
    mark = tombstone(purge_id)

    def one(d: bytes) -> None:
        key = chunk_object_key(d)
        try:
            head = store.get(key, (0, 64))
        except NotFoundError:
            if existing:
                return
            head = b""
        if tombstone_of(head) is None:
            store.put(key, mark)
        store.delete(table_key(d))

    ctx.objects.map(one, digests)


def _zero_spans(ctx: RepoContext, purge_id: str, spans: list[Span]) -> None:
    """Overwrite each range with zeros, one rewrite per shared object; a content-addressed
    one (a shard stored whole) also gets a trailer, so its size no longer matches its name."""
    store = ctx.object_store
    by_object: dict[str, list[Span]] = {}
    for span in spans:
        by_object.setdefault(span[0], []).append(span)

    def one(location: str) -> None:
        try:
            data = bytearray(store.get(location))
        except NotFoundError:
            return
        for _, offset, length, _ in by_object[location]:
            data[offset : offset + length] = bytes(length)
        if location.startswith("chunks/") and not has_trailer(data):
            data += trailer(purge_id)
        store.put(location, bytes(data))

    ctx.objects.map(one, sorted(by_object))


def apply_record(
    ctx: RepoContext,
    record: PurgeRecord,
    digests: list[bytes],
    spans: list[Span],
    progress: Progress = None,
    state: GcState | None = None,
) -> PurgeRecord:
    """Remove what `record` lists from this repository's storage (under the collector's
    lock, in sweep epochs), then mark it done. Every step can be repeated. `state` holds
    the lock already (the caller releases it); otherwise it is taken and released here."""
    held = state
    if state is None:
        state = GcState(ctx)
        state.acquire()
    try:
        _in_batches(
            state,
            digests,
            lambda batch: _retire_objects(ctx, record.id, batch),
            "removing",
            progress,
        )
        _in_batches(  # in object order: a batch rewrites each of its objects once
            state,
            sorted(spans),
            lambda batch: _zero_spans(ctx, record.id, batch),
            "zeroing",
            progress,
        )
        _in_batches(
            state,
            sorted({s[3] for s in spans}),
            lambda batch: _retire_objects(ctx, record.id, batch, existing=True),
            "removing",
            progress,
        )
        done = replace(record, state=DONE, finished=ctx.clock())
        PurgeRecords(ctx.meta, ctx.refs.partition).save(done)
    finally:
        if held is None:
            state.release()
    ctx.objects.forget_tables()
    ctx.purges.forget()
    return done


def finish_pending(ctx: RepoContext, progress: Progress = None) -> list[PurgeRecord]:
    """Finish every purge a crash stopped half-way; returns them."""
    records = PurgeRecords(ctx.meta, ctx.refs.partition)
    out = []
    for rec in records.list():
        if rec.state == PENDING:
            out.append(apply_record(ctx, rec, records.digests(rec), records.spans(rec), progress))
    return out


def _redact(ctx: RepoContext, commits: set[str], purge_id: str) -> list[str]:
    """Redact the messages of `commits` where their ids do not cover them: the session
    records that made them and the pull requests that merged them."""
    text = REDACTED.format(purge_id)
    out = []
    for rec in list(ctx.records.scan()):
        if rec.commit in commits and (rec.message, rec.author) != (text, text):
            ctx.records.update(rec.id, lambda r: replace(r, message=text, author=text))
            out.append(f"session {rec.id}")
    pulls = PullRequests(ctx.meta, ctx.refs.partition)
    for pr in pulls.list(None):
        if pr.merge_commit in commits:

            def scrub(p: PullRecord) -> PullRecord:
                return replace(
                    p,
                    title=text,
                    description=text,
                    comments=tuple(replace(c, text=text) for c in p.comments),
                    reviews=tuple(replace(r, text=text) for r in p.reviews),
                )

            pulls.update(pr.id, scrub)
            out.append(f"pull request #{pr.id}")
    return out


def purge(
    ctx: RepoContext,
    paths: Sequence[str],
    *,
    reason: str,
    by: str,
    region: Region | str | None = None,
    force: bool = False,
    keep_unremovable: bool = False,
    keep_heads: bool = False,
    messages: Iterable[str] = (),
    dry_run: bool = False,
    progress: Progress = None,
) -> PurgeRecord:
    """Purge `paths` (or `region` of the one path) from every version; see the module."""
    paths = _check_paths(paths)
    for what, value in (("reason", reason), ("by", by)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidInputError(f"a purge needs a non-empty {what} (a string)")
    if isinstance(region, str):
        region = parse_region(region)
    if region is not None:
        region = _check_region(region)
        if len(paths) != 1:
            raise InvalidInputError("a region purges part of one array: give exactly one path")
    from zarrlake.vc.refexpr import resolve_ref

    commits = {resolve_ref(ctx.refs, ctx.objects, m) for m in messages}
    if not paths and not commits:
        raise InvalidInputError("nothing to purge: give array paths, or commits to redact")
    if not dry_run:
        finish_pending(ctx, progress)
    plan = (
        plan_purge(ctx, paths, region, progress, keep_heads)
        if paths
        else Plan((), None, objects={}, spans=[], heads={}, outside={})
    )
    unremovable = plan.kept_inline + plan.kept_virtual
    if unremovable and not keep_unremovable:
        raise InvalidInputError(
            f"{plan.kept_inline} chunk(s) of at most 64 bytes are kept inside manifests, which "
            f"commit ids cover, and {plan.kept_virtual} virtual chunk(s) live in files outside "
            "the repository: a purge cannot remove either. Pass keep_unremovable=True "
            "(--keep-unremovable) to purge the rest; the record counts what was kept"
        )
    forced = plan.forced()
    if forced and not force:
        raise ZarrLakeError(
            "this purge removes bytes still needed: "
            + "; ".join(forced)
            + ". Reads of them at every version would raise PurgedError. Write those "
            "chunks anew (or delete them) on the branch first, or pass force=True (--force)"
        )
    record = PurgeRecord(
        id=new_id(),
        reason=reason.strip(),
        by=by.strip(),
        at=ctx.clock(),
        paths=tuple(paths),
        region=None if region is None else show_region(region),
        state="planned" if dry_run else PENDING,
        chunks=plan.chunks,
        objects=len(plan.objects or {}),
        ranges=len(plan.spans or []),
        bytes=plan.bytes,
        digests=len(plan.objects or {}) + len({s[3] for s in plan.spans or []}),
        commits=plan.commits,
        kept_inline=plan.kept_inline,
        kept_virtual=plan.kept_virtual,
        kept_at_heads=plan.kept_at_heads,
        forced=forced,
    )
    if dry_run:
        return record
    records = PurgeRecords(ctx.meta, ctx.refs.partition)
    digests = sorted(plan.objects or {})
    state = GcState(ctx)
    state.acquire()  # first: a collector running now refuses the purge before it is recorded
    try:
        record = records.save(record, digests, plan.spans or [])
        ctx.purges.forget()  # writes of this process check reused objects from now on
        redacted = _redact(ctx, commits, record.id) if commits else []
        if redacted:
            record = records.save(replace(record, redacted=tuple(redacted)))
        return apply_record(ctx, record, digests, plan.spans or [], progress, state)
    finally:
        state.release()


def _check_paths(paths: object) -> list[str]:
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list | tuple):
        raise InvalidInputError(f"paths must be array paths (strings), not {paths!r}")
    out = []
    for p in paths:
        if not isinstance(p, str) or not p.strip("/"):
            raise InvalidInputError(
                f"an array path is a non-empty string, not {p!r}"
                "; give array paths such as 'weather/t2m'"
            )
        out.append(p.strip("/"))
    return sorted(set(out))


# proving --------------------------------------------------------------------------------


def prove(ctx: RepoContext, against: RepoContext | None = None) -> list[Problem]:
    """The problems that stop the purges from being proven (empty: proven): a record not
    finished; a chunk object named by a purged digest (of an object or of a range) that
    holds anything but a tombstone, or a block table of one; a purged range that still
    holds its bytes. With `against` (the
    repository this one was cloned from), also every purge record of it this copy lacks."""
    records = PurgeRecords(ctx.meta, ctx.refs.partition)
    store = ctx.object_store
    problems: list[Problem] = []
    mine = records.list()
    for rec in mine:
        if rec.state != DONE:
            problems.append(
                Problem(
                    f"purge/{rec.id}",
                    "unfinished",
                    "stopped half-way: `zarrlake purge --resume` finishes it",
                )
            )

        def check_object(d: bytes, rec: PurgeRecord = rec) -> Problem | None:
            key = chunk_object_key(d)
            try:
                head = store.get(key, (0, 64))
            except NotFoundError:
                head = None
            if head is not None and tombstone_of(head) is None:
                return Problem(key, "purged", f"still holds bytes ({rec.describe()})")
            if store.exists(table_key(d)):
                return Problem(table_key(d), "purged", f"block table kept ({rec.describe()})")
            return None

        def check_span(span: Span, rec: PurgeRecord = rec) -> Problem | None:
            location, offset, length, d = span
            try:
                data = store.get(location, (offset, offset + length))
            except NotFoundError:
                return None
            if len(data) == length and digest(ctx.hash, data) == d:
                return Problem(
                    f"{location}[{offset}:{offset + length}]",
                    "purged",
                    f"still holds the bytes ({rec.describe()})",
                )
            return None

        spans = records.spans(rec)
        addresses = set(records.digests(rec)) | {s[3] for s in spans}  # (their own objects)
        found = ctx.objects.map(check_object, sorted(addresses))
        found += ctx.objects.map(check_span, spans)
        problems += [p for p in found if p is not None]
    if against is not None:
        have = {r.id for r in mine}
        for rec in PurgeRecords(against.meta, against.refs.partition).list():
            if rec.id not in have:
                problems.append(
                    Problem(
                        f"purge/{rec.id}",
                        "missing",
                        f"{rec.describe()} of {against.spec.location} is not in this copy: "
                        "`zarrlake pull` brings it",
                    )
                )
    return problems


def carry_records(source: RepoContext, dest: RepoContext) -> list[str]:
    """Copy the purge records of `source` that `dest` lacks, marked pending there (a pull
    does this before it copies any object, so a copy never holds a tombstone without its
    record; `finish_pending` then applies them to the copy's storage: a copy made before a
    purge loses the bytes as the source did). Returns the ids of the records copied."""
    theirs = PurgeRecords(source.meta, source.refs.partition)
    have = {r.id for r in PurgeRecords(dest.meta, dest.refs.partition).list()}
    copied = []
    for rec in theirs.list():
        if rec.id in have:
            continue
        rows = theirs.raw(rec)
        head = rows[-1]  # the record itself, last: found only with all its batches
        pending = replace(PurgeRecord.decode(head[1]), state=PENDING, finished=None)
        for i in range(0, len(rows) - 1, 16):
            dest.meta.set_many(dest.refs.partition, rows[i : min(i + 16, len(rows) - 1)])
        dest.meta.set_many(dest.refs.partition, [(head[0], pending.encode())])
        copied.append(rec.id)
    if copied:
        dest.purges.forget()
    return copied
