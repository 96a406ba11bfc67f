"""Moving a repository between metastores (SQLite, PostgreSQL, its own bucket): copy its refs,
session records, garbage-collection records, staged records and upload records, check the
copy key by key, then record the new metastore's kind in the repository's config, so the
repository opens with the new one from then on (and refuses the old one, whose copy stays
as it was).

The copy is safe while processes that opened the repository earlier still write through
the old metastore. It first fences the old one: a `moved` marker beside the refs
(`vc/refs.py`), which every ref write there checks in the same atomic step, and session
creation and garbage collection read, so nothing changes a ref there afterwards, a branch
swap of a commit still running included. Then it closes every open or committing session
there (aborted, "moved"): a worker still writing through the old metastore is refused at
its next flush or commit, never acknowledged. Only then does it read what it copies:
whatever landed in the old metastore before the fence is in the copy. Open sessions go on
in the new metastore (join them by id); one whose commit was under way is copied committed
if its commit landed before the fence, and open otherwise. A running garbage collector
makes the copy refuse: wait for it, run it again.

A copy stopped half-way leaves the old metastore fenced and the config unchanged: run it
again (it goes on), or with `switch=False` to stay on the old metastore (which lifts the
fence). A target that holds an older copy of the repository (it used that metastore
before) is refused unless `replace` is given: its records are then dropped and replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

from zarrlake._util.deprecation import deprecated_alias
from zarrlake.connection import CONFIG_KEY, RepoContext
from zarrlake.errors import (
    AlreadyExistsError,
    CASFailedError,
    CorruptionError,
    InvalidInputError,
    ZarrLakeError,
)
from zarrlake.metastore.base import MetaStore
from zarrlake.metastore.choice import BUCKET, kind_of, open_for
from zarrlake.session_records import PENDING, SessionRecord, Status
from zarrlake.storage.base import ObjectStore
from zarrlake.vc.gc_protocol import LOCK, GcState, uploads_partition
from zarrlake.vc.refs import MOVED

BATCH = 1000
"""Keys written per set_many (one transaction; on the bucket, one head swap)."""


@dataclass(frozen=True)
class CopyReport:
    """What `copy_metastore` copied and checked."""

    source: str
    target: str
    refs: int
    sessions: int
    gc_records: int
    staged_records: int
    partitions: int
    switched: bool
    """Whether the repository's config now names the target's kind."""
    seconds: float
    moved_sessions: tuple[str, ...] = ()
    """Open sessions copied along (closed in the old metastore, open in the new one)."""
    replaced: bool = False
    """Whether an older copy of the repository in the target was dropped first."""

    def to_json(self) -> dict:
        """The report as a plain dict, for `--json` output."""
        return asdict(self)

    to_dict = deprecated_alias("to_json")


def _in_flight(value: bytes) -> bool:
    """Whether a session record is one being created (its base not named yet): after the
    fence its creation fails (it reads the fence), so it is neither copied nor compared."""
    return SessionRecord.decode(value).base == PENDING


def _pages(
    meta: MetaStore, partition: str, skip: frozenset[bytes], sessions: bool = False
) -> Iterator[list[tuple[bytes, bytes]]]:
    batch: list[tuple[bytes, bytes]] = []
    for key, value, _ in meta.scan(partition):
        if key in skip or (sessions and _in_flight(value)):
            continue
        batch.append((key, value))
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _copy(
    source: MetaStore,
    target: MetaStore,
    partition: str,
    rewrite: dict[bytes, bytes],
    skip: frozenset[bytes],
    sessions: bool = False,
) -> tuple[int, bytes]:
    """Copy one partition (values in `rewrite` replacing the source's, keys in `skip` left
    out, and `sessions` records being created), over whatever the target held in it (a
    copy stopped half-way, or an older one being replaced). Returns how many keys it
    wrote and a digest of them, which `_verify` checks the target against: the source may
    change after it was read, by writes the fence makes fail (a flush staging its last
    record before it finds its session closed), which the copy need not hold."""
    target.drop_partition(partition)
    n, digest = 0, hashlib.blake2b()
    for batch in _pages(source, partition, skip, sessions):
        items = [(k, rewrite.get(k, v)) for k, v in batch]
        target.set_many(partition, items)
        for k, v in items:
            digest.update(b"%d:%s%d:%s" % (len(k), k, len(v), v))
        n += len(batch)
    return n, digest.digest()


def _verify(target: MetaStore, partition: str, written: tuple[int, bytes]) -> None:
    """Check that the target's partition holds exactly what `_copy` wrote there."""
    n, digest = 0, hashlib.blake2b()
    for k, v, _ in target.scan(partition):
        digest.update(b"%d:%s%d:%s" % (len(k), k, len(v), v))
        n += 1
    if (n, digest.digest()) != written:
        raise CorruptionError(
            f"the copy of {partition} in {target.url} differs from the original as it was read "
            f"({n} keys read back, {written[0]} written); the repository still uses its old "
            "metastore; copy again"
        )


def _check_no_gc(ctx: RepoContext) -> None:
    """Raise while a garbage collector holds its lock (the copy is made offline)."""
    if ctx.meta.get(ctx.partition("gc"), LOCK) is not None:
        raise ZarrLakeError(
            "a garbage collector holds its lock (or died holding it: `zarrlake gc` takes it "
            "over): the metastore is copied offline"
            "; wait for gc to finish, then copy again"
        )


def _fence(ctx: RepoContext, kind: str) -> None:
    """Write the `moved` marker into the old metastore (kept if a copy stopped half-way
    wrote it already): from now on no ref changes there (see the module docstring)."""
    with contextlib.suppress(CASFailedError):
        ctx.meta.write_if(ctx.refs.partition, [(MOVED, kind.encode())], {MOVED: None})


def _unfence(ctx: RepoContext) -> None:
    """Lift the fence: the repository keeps using the old metastore."""
    ctx.meta.set_many(ctx.refs.partition, [(MOVED, None)])


def _close(ctx: RepoContext, kind: str) -> tuple[list[str], dict[str, tuple[bytes, int, bytes]]]:
    """Close, in the old (fenced) metastore, every session that may still change there:
    open ones, those being created, and those being committed. Returns every session's id
    and, by id, (its record as it was, the version of the closed one, the record the copy
    gets): open as it was; a commit under way committed if it landed before the fence
    (nothing lands after it) and open otherwise; one being created is dropped (its
    creation fails, since it reads the fence)."""
    from zarrlake.txn.commit import landed

    ids: list[str] = []
    closed: dict[str, tuple[bytes, int, bytes]] = {}
    try:
        for rec in ctx.records.scan():
            ids.append(rec.id)
            key = rec.id.encode()
            while True:
                got = ctx.meta.get(ctx.records.partition_of(rec.id), key)
                assert got is not None
                now = SessionRecord.decode(got[0])
                if now.status == Status.COMMITTING:
                    cid = landed(ctx, now)  # read errors: the copy fails, nothing changed
                    if cid is not None:
                        moved = replace(now, status=Status.COMMITTED, commit=cid, lease=None)
                    else:
                        moved = replace(now, status=Status.OPEN, lease=None, seal=None, attempts=())
                elif now.status == Status.OPEN and now.expires_at > ctx.clock():
                    moved = now
                else:
                    break  # finished: copied as it is
                gone = replace(  # no seal: a committer's late finish leaves it alone
                    now,
                    status=Status.ABORTED,
                    lease=None,
                    seal=None,
                    attempts=(),
                    note=f"the repository moved to another metastore ({kind}): join the "
                    "session again there",
                )
                try:
                    version = ctx.records.swap(gone, got[1])
                except CASFailedError:
                    continue  # it changed (a worker extended it): look again
                copy = b"" if now.base == PENDING else moved.encode()
                closed[rec.id] = (got[0], version, copy)
                break
    except BaseException:
        _reopen(ctx, closed)
        raise
    return ids, closed


def _reopen(ctx: RepoContext, closed: dict[str, tuple[bytes, int, bytes]]) -> None:
    """Put closed sessions back as they were in the old metastore (the copy failed)."""
    for sid, (original, version, _) in closed.items():
        with contextlib.suppress(CASFailedError):
            ctx.meta.set_if(ctx.records.partition_of(sid), sid.encode(), original, version)


def _replace_target(ctx: RepoContext, target: MetaStore) -> None:
    """Drop an older copy of the repository from the target: refs first (a replace that
    stops half-way leaves a target the copy treats as empty), then what its sessions
    staged and uploaded, then its session and gc records."""
    target.drop_partition(ctx.partition("refs"))
    sessions = ctx.records.partitions
    old = [SessionRecord.decode(v).id for p in sessions for _, v, _ in target.scan(p)]
    for sid in old:
        target.drop_partition(ctx.stage_partition(sid))
        target.drop_partition(uploads_partition(ctx, sid))
    for partition in sessions:
        target.drop_partition(partition)
    target.drop_partition(ctx.partition("gc"))


def _switch(store: ObjectStore, kind: str) -> None:
    """Record `kind` in the config, refusing if the config changed meanwhile."""
    try:
        data, tag = store.get_tagged(CONFIG_KEY)
    except ZarrLakeError:  # a local directory: no conditional updates, one machine
        data, tag = store.get(CONFIG_KEY), None
    config = json.loads(data)
    config["metastore"] = kind
    new = json.dumps(config).encode()
    if tag is None:
        store.put(CONFIG_KEY, new)
    else:
        store.put_if(CONFIG_KEY, new, tag)


def open_target(ctx: RepoContext, to: str) -> MetaStore:
    """The metastore `to` names for this repository ("bucket": the one in its storage)."""
    if not isinstance(to, str) or not to:
        raise InvalidInputError(f"target metastore must be a URL or 'bucket', not {to!r}")
    if to == BUCKET and ctx.spec.is_local:
        raise InvalidInputError(
            "a repository in a local directory cannot keep its metastore in a bucket (no "
            "conditional writes there): copy its objects to s3:// first, then open it there"
        )
    if to == ctx.spec.metastore:
        raise InvalidInputError(f"the repository already uses {to}; give another metastore URL")
    return open_for(ctx.spec.location, dict(ctx.spec.storage_options), to)


def copy_metastore(
    ctx: RepoContext, to: str, switch: bool = True, replace_old: bool = False
) -> CopyReport:
    """Copy the repository's metastore records to `to`, verify them, and (if `switch`)
    make the repository use `to` from now on; `replace_old` drops an older copy of the
    repository the target holds. See the module docstring."""
    began = time.monotonic()
    target = open_target(ctx, to)
    closed: dict[str, tuple[bytes, int, bytes]] = {}
    collector, locked, fenced = GcState(ctx), False, False
    try:
        refs = ctx.partition("refs")
        held = any(target.scan(refs, limit=1))
        if held and not replace_old:
            raise AlreadyExistsError(
                f"{to} already holds refs of repository {ctx.repo_id}: an older copy, from "
                "when the repository used that metastore. Pass --replace "
                "(copy_metastore(..., replace=True)) to drop that copy and replace it"
            )
        _check_no_gc(ctx)
        collector.acquire(moving=True)  # no collector starts on the old copy while it moves
        locked = True
        _fence(ctx, kind_of(to))
        fenced = True
        sessions, closed = _close(ctx, kind_of(to))
        if held:
            _replace_target(ctx, target)
        parts = [ctx.stage_partition(sid) for sid in sessions]
        parts += [uploads_partition(ctx, sid) for sid in sessions]
        with ThreadPoolExecutor(8) as pool:  # which sessions still keep staged records
            kept = list(pool.map(lambda p: any(ctx.meta.scan(p, limit=1)), parts))
        parts = [p for p, k in zip(parts, kept, strict=True) if k]
        sessions_partitions = ctx.records.partitions
        rewrite = {sid.encode(): copy for sid, (_, _, copy) in closed.items() if copy}
        dropped = frozenset(sid.encode() for sid, (_, _, copy) in closed.items() if not copy)
        counts = {}
        # Refs last: a copy that stops half-way holds no refs, so it can be run again.
        gc = ctx.partition("gc")
        for partition in [*sessions_partitions, gc, *parts, refs]:
            moved = partition in sessions_partitions
            skip = {gc: frozenset([LOCK]), refs: frozenset([MOVED])}.get(partition, frozenset())
            skip = skip | dropped if moved else skip  # the copy's own, and creations it stopped
            written = _copy(ctx.meta, target, partition, rewrite if moved else {}, skip, moved)
            _verify(target, partition, written)
            counts[partition] = written[0]
        if switch:
            _switch(ctx.object_store, kind_of(to))
        else:
            _reopen(ctx, closed)  # the repository keeps using the old metastore
            _unfence(ctx)
    except BaseException:
        _reopen(ctx, closed)
        if fenced:
            _unfence(ctx)
        raise
    finally:
        if locked:
            collector.release()
        target.close()
    return CopyReport(
        source=kind_of(ctx.spec.metastore),
        target=kind_of(to),
        refs=counts[refs],
        sessions=sum(counts[p] for p in sessions_partitions),
        gc_records=counts[gc],
        staged_records=sum(counts[p] for p in parts),
        partitions=len(counts),
        switched=switch,
        seconds=time.monotonic() - began,
        moved_sessions=tuple(sid for sid, (_, _, c) in closed.items() if c) if switch else (),
        replaced=held,
    )
