"""Moving a repository between metastores (SQLite, PostgreSQL, its own bucket): copy its refs,
session records, garbage-collection records, staged records and upload records, check the
copy key by key, then record the new metastore's kind in the repository's config, so the
repository opens with the new one from then on (and refuses the old one, whose copy stays
as it was).

Finished sessions (committed, abandoned, expired) are copied as they are. Open sessions are
copied along: first sealed in the old metastore (a worker still writing through it then
fails loudly instead of committing into the retired copy), then copied open, with what they
staged and uploaded; they go on in the new metastore (join them by id). No collector runs
on the old metastore during the copy (the copy holds its lock). A session in the middle of a
commit, or a running garbage collector, makes the copy refuse: wait for them, run it again.

A target that holds an older copy of the repository (it used that metastore before) is
refused unless `replace` is given: its records are then dropped and replaced.
"""

from __future__ import annotations

import contextlib
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
from zarrlake.session_records import SessionRecord, Status
from zarrlake.storage.base import ObjectStore
from zarrlake.vc.gc_protocol import LOCK, GcState, uploads_partition

MOVED_LEASE = 100 * 365 * 86400.0
"""Seconds of the lease under which open sessions copied along stay sealed in the old copy."""
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


def _pages(
    meta: MetaStore, partition: str, skip: frozenset[bytes]
) -> Iterator[list[tuple[bytes, bytes]]]:
    batch: list[tuple[bytes, bytes]] = []
    for key, value, _ in meta.scan(partition):
        if key in skip:
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
) -> int:
    """Copy one partition (values in `rewrite` replacing the source's, keys in `skip` left
    out), over whatever the target held in it (a copy stopped half-way, or an older one
    being replaced)."""
    target.drop_partition(partition)
    n = 0
    for batch in _pages(source, partition, skip):
        target.set_many(partition, [(k, rewrite.get(k, v)) for k, v in batch])
        n += len(batch)
    return n


def _verify(
    source: MetaStore,
    target: MetaStore,
    partition: str,
    rewrite: dict[bytes, bytes],
    skip: frozenset[bytes],
) -> None:
    theirs = target.scan(partition)
    for key, value, _ in source.scan(partition):
        if key in skip:
            continue
        got = next(theirs, None)
        if got is None or got[0] != key or got[1] != rewrite.get(key, value):
            raise CorruptionError(
                f"the copy of {partition}/{key!r} in {target.url} differs from the original; "
                "the repository still uses its old metastore"
                "; copy again"
            )
    extra = next(theirs, None)
    if extra is not None:
        raise CorruptionError(
            f"the copy of {partition} in {target.url} has extra key {extra[0]!r}"
            "; the repository still uses its old metastore; copy again"
        )


def _check_no_gc(ctx: RepoContext) -> None:
    """Raise while a garbage collector holds its lock (the copy is made offline)."""
    if ctx.meta.get(ctx.partition("gc"), LOCK) is not None:
        raise ZarrLakeError(
            "a garbage collector holds its lock (or died holding it: `zarrlake gc` takes it "
            "over): the metastore is copied offline"
            "; wait for gc to finish, then copy again"
        )


def _sessions(ctx: RepoContext) -> tuple[list[str], list[SessionRecord]]:
    """(every session's id, the open ones). A committer whose lease ran out is recovered
    first; one still committing makes the copy refuse, naming it."""
    from zarrlake.txn.commit import load

    now = ctx.clock()
    ids, opened, committing = [], [], []
    for rec in ctx.records.scan():
        if rec.status == Status.COMMITTING:
            rec, _ = load(ctx, rec.id)
        ids.append(rec.id)
        if rec.status == Status.COMMITTING:
            committing.append(rec.id)
        elif rec.status == Status.OPEN and rec.expires_at > now:
            opened.append(rec)
    if committing:
        raise ZarrLakeError(
            f"{len(committing)} session(s) are being committed ({', '.join(committing)}): "
            "run the copy again once their commits finish (a committer that died is "
            "recovered when its lease runs out)"
        )
    return ids, opened


def _close(ctx: RepoContext, opened: list[SessionRecord]) -> dict[str, tuple[bytes, int]]:
    """Close the open sessions in the old metastore, so a worker still writing through it
    fails instead of staging or committing into the old copy. They are marked committing
    there, under a lease that never runs out (MOVED_LEASE): a collector that still ran on
    the old copy would keep what they staged and uploaded, which the new copy needs.
    Returns, by session id, its record as it was and the version of the closed one."""
    closed: dict[str, tuple[bytes, int]] = {}
    try:
        for rec in opened:
            key = rec.id.encode()
            while True:
                got = ctx.meta.get(ctx.records.partition_of(rec.id), key)
                assert got is not None
                now = SessionRecord.decode(got[0])
                if now.status != Status.OPEN or now.expires_at <= ctx.clock():
                    if now.status == Status.COMMITTING:
                        raise ZarrLakeError(
                            f"session {rec.id} began committing during the copy: run the "
                            "copy again once its commit finishes"
                        )
                    break  # finished meanwhile: copied as it is
                closing = replace(now, status=Status.COMMITTING, lease=ctx.clock() + MOVED_LEASE)
                try:
                    closed[rec.id] = (got[0], ctx.records.swap(closing, got[1]))
                    break
                except CASFailedError:
                    continue  # it changed (a worker extended it): look again
    except BaseException:
        _reopen(ctx, closed)
        raise
    return closed


def _reopen(ctx: RepoContext, closed: dict[str, tuple[bytes, int]]) -> None:
    """Put closed sessions back as they were in the old metastore (the copy failed)."""
    for sid, (original, version) in closed.items():
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
    closed: dict[str, tuple[bytes, int]] = {}
    collector, locked = GcState(ctx), False
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
        collector.acquire()  # no collector starts on the old copy while sessions move
        locked = True
        sessions, opened = _sessions(ctx)
        closed = _close(ctx, opened)
        if held:
            _replace_target(ctx, target)
        parts = [ctx.stage_partition(sid) for sid in sessions]
        parts += [uploads_partition(ctx, sid) for sid in sessions]
        with ThreadPoolExecutor(8) as pool:  # which sessions still keep staged records
            kept = list(pool.map(lambda p: any(ctx.meta.scan(p, limit=1)), parts))
        parts = [p for p, k in zip(parts, kept, strict=True) if k]
        sessions_partitions = ctx.records.partitions
        reopened = {sid.encode(): original for sid, (original, _) in closed.items()}
        counts = {}
        # Refs last: a copy that stops half-way holds no refs, so it can be run again.
        gc = ctx.partition("gc")
        for partition in [*sessions_partitions, gc, *parts, refs]:
            rewrite = reopened if partition in sessions_partitions else {}
            skip = frozenset([LOCK]) if partition == gc else frozenset()  # the copy's own
            counts[partition] = _copy(ctx.meta, target, partition, rewrite, skip)
            _verify(ctx.meta, target, partition, rewrite, skip)
        if switch:
            _switch(ctx.object_store, kind_of(to))
        elif closed:
            _reopen(ctx, closed)  # the repository keeps using the old metastore
    except BaseException:
        _reopen(ctx, closed)
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
        moved_sessions=tuple(closed) if switch else (),
        replaced=held,
    )
